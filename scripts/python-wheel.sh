#!/usr/bin/env bash
# Builds the `codemode` Python wheel into target/wheels with maturin: the PyO3 module from codemode-python plus the
# `codemode-worker` binary inside the package (a Python extension cannot re-execute itself as the worker).
# CODEMODE_PY_PROFILE=release (default: dev, which reuses the workspace's debug build, dependencies at opt-level 2).
# Then: `pip install target/wheels/codemode-*.whl`.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${CODEMODE_PY_PROFILE:-dev}
out=$([ "$profile" = dev ] && echo debug || echo "$profile")
# maturin, in a build environment kept between runs.
if [ ! -x target/py-build/bin/maturin ]; then
  python3 -m venv target/py-build
  target/py-build/bin/pip install --quiet --disable-pip-version-check -r codemode-python/build-requirements.txt
fi
# The worker goes into the package folder (git-ignored), whence maturin's `include` takes it into the wheel.
# CODEMODE_PY_WORKER names one already built (scripts/test.sh passes the workspace build's); otherwise it is built.
worker=${CODEMODE_PY_WORKER:-}
if [ -z "$worker" ]; then
  cargo build --profile "$profile" -p codemode-worker --features patched-boa --bin codemode-worker
  worker="target/$out/codemode-worker"
fi
install -m 755 "$worker" codemode-python/python/codemode/codemode-worker
rm -rf target/wheels
target/py-build/bin/maturin build --quiet --profile "$profile" -m codemode-python/Cargo.toml -i python3 \
  -o target/wheels
ls target/wheels/codemode-*.whl
