#!/usr/bin/env bash
# The test command: installs the npm packages the tests drive (real MCP servers, the QuickJS comparison) and the MCP
# Python SDK's client (into target/py), then runs every test of the workspace (unit, integration, snapshot,
# property, tidy) with cargo, against a throwaway PostgreSQL (scripts/pg.sh), then the Python package's wheel and
# suite (scripts/python.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step's start and the seconds since this script began.
step() { printf '== %s (+%ss) %s\n' "$(date -u +%T)" "$SECONDS" "$*"; }
step packages
npm ci --prefix mcp-servers --no-audit --no-fund --loglevel=error
if [ -f codemode-worker/benches/node/package-lock.json ]; then
  npm ci --prefix codemode-worker/benches/node --no-audit --no-fund --loglevel=error
fi
# The MCP Python SDK's client, which the gateway tests drive besides rmcp's (pinned in the requirements file).
if [ ! -x target/py/bin/python ]; then
  python3 -m venv target/py
fi
target/py/bin/pip install --quiet --disable-pip-version-check -r codemode-cli/tests/py/requirements.txt
# valgrind, whose callgrind counts the host's instructions for the gate .ci/run runs after this script
# (`cargo xtask perf`), from the package manager when missing.
if ! command -v valgrind >/dev/null; then
  sudo=$([ "$(id -u)" = 0 ] || echo sudo)
  $sudo apt-get install -y --no-install-recommends valgrind || { $sudo apt-get update && $sudo apt-get install -y --no-install-recommends valgrind; }
fi
# Debian's chromium, which the console's browser tests drive through Playwright (as its executable_path,
# /usr/bin/chromium: Playwright's own browser download is never run), from the package manager when missing.
if [ ! -x /usr/bin/chromium ]; then
  sudo=$([ "$(id -u)" = 0 ] || echo sudo)
  $sudo apt-get install -y --no-install-recommends chromium || { $sudo apt-get update && $sudo apt-get install -y --no-install-recommends chromium; }
fi
# Every test target and the binaries the tests run, in two commands. codemode-worker's own tests enable its test-only
# features (`engine-api`, `confine-probe`) through a dev-dependency on itself: in `cargo test --workspace` every crate
# above it would get them, and maturin's build of the Python package (which never has them) would compile all of
# those again. So codemode-worker is tested on its own (which also builds the `codemode-worker` binary the other tests
# run), and the rest of the workspace without it, in the features every other build uses.
step build the tests
cargo test -p codemode-worker --no-run
cargo test --workspace --exclude codemode-worker --no-run
# The embedding examples (outside the workspace) are built here, before the tests, so that their tests only run
# them and the corpus's time limits never compete with a compiler. In target/debug, with the workspace's hakari crate
# patched in for crates.io's empty one: every third-party crate then has the tests' features and versions (`cargo
# xtask tidy` checks the examples' lock files), so only the example and the workspace's own crates compile.
hack="patch.crates-io.workspace-hack.path=\"$PWD/workspace-hack\""
step build the examples
for example in embed embed-gateway; do
  # examples/embed builds against crates.io's Boa, which the workspace's own build never downloads.
  cargo fetch --config "$hack" --manifest-path "examples/$example/Cargo.toml"
  CARGO_TARGET_DIR="$PWD/target" cargo build --offline --config "$hack" --manifest-path "examples/$example/Cargo.toml"
done
# A throwaway PostgreSQL for the fleet tests (codemode-store-pg, the gateway's --store), stopped when this script
# ends; a server named by $CODEMODE_TEST_PG_URL is used instead when set.
if [ -z "${CODEMODE_TEST_PG_URL:-}" ]; then
  # shellcheck source=scripts/pg.sh
  source scripts/pg.sh
  pg_start
  trap pg_stop EXIT
fi
# A stdio gateway keeps its runs and store/load values in $XDG_STATE_HOME/codemode by default: the tests' gateways
# keep theirs in a throwaway folder, not the user's.
export XDG_STATE_HOME="$PWD/target/test-state"
rm -rf "$XDG_STATE_HOME"
step the tests
failed=0
cargo test -p codemode-worker --no-fail-fast || failed=1
cargo test --workspace --exclude codemode-worker --no-fail-fast || failed=1
[ "$failed" = 0 ] || { echo "tests failed" >&2; exit 1; }
# The Python package (codemode-python): its wheel with the worker just built, installed into a fresh virtual
# environment, then its pytest suite and stubtest.
step the Python package
CODEMODE_PY_WORKER=target/debug/codemode-worker scripts/python.sh
# The build against crates.io's Boa (no `[patch.crates-io]`, no `patched-boa`): the worker's suite on it, then the
# other suites again with its worker.
step "the build against crates.io's Boa"
scripts/vanilla.sh
