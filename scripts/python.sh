#!/usr/bin/env bash
# The Python package's tests (scripts/test.sh runs them): builds the wheel (scripts/python-wheel.sh), installs it with
# pip into a fresh virtual environment with the suite's requirements, then runs the pytest suite
# (codemode-python/tests) and mypy's stubtest against the installed package.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
scripts/python-wheel.sh
# A fresh environment: the wheel and the suite's own requirements, nothing from the source tree.
rm -rf target/py-test
python3 -m venv target/py-test
target/py-test/bin/pip install --quiet --disable-pip-version-check target/wheels/codemode-*.whl \
  -r codemode-python/tests/requirements.txt
target/py-test/bin/pytest -q -p no:cacheprovider codemode-python/tests
# stubtest imports the installed package and compares it with its stubs; it runs outside the repository so that no
# folder named codemode (the facade's) shadows the package.
(cd target/py-test && bin/python -m mypy.stubtest codemode --allowlist "$root/codemode-python/stubtest-allowlist.txt")
