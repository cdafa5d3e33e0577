#!/usr/bin/env bash
# Builds the fuzz targets on the stable toolchain (no cargo-fuzz needed) and runs a short smoke campaign of each.
# RUNS (default 2000) sets the libFuzzer runs; SANITIZER=address adds ASan (slower to build; needs RUSTC_BOOTSTRAP).
# Coverage instrumentation uses the same LLVM flags cargo-fuzz passes; RUSTC_BOOTSTRAP=1 admits its -Z options.
set -euo pipefail
cd "$(dirname "$0")"
export RUSTC_BOOTSTRAP=1
flags="--cfg fuzzing -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4"
flags+=" -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table"
flags+=" -Cllvm-args=-sanitizer-coverage-trace-compares -Cdebug-assertions -Coverflow-checks"
if [ "${SANITIZER:-}" = "address" ]; then
  flags+=" -Zsanitizer=address"
fi
export RUSTFLAGS="$flags"
# The host runs these checks on tokio worker threads (2 MiB stacks): fuzz with no more, so a parser recursing past
# the depth guard is a finding here, not a crash in production.
ulimit -s 2048
# An explicit --target keeps RUSTFLAGS off build scripts and proc macros, as cargo-fuzz does.
host="$(rustc -vV | sed -n 's/^host: //p')"
cargo build --release --target "$host" --bin exec_input
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
./target/"$host"/release/exec_input -runs="${RUNS:-2000}" -max_len=8192 -timeout=10 -rss_limit_mb=4096 \
  -print_final_stats=1 "$work" seeds/exec_input
