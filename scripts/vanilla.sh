#!/usr/bin/env bash
# The build against crates.io's Boa, the one an embedder gets without codemode's `[patch.crates-io]` lines and the
# `patched-boa` feature, and the suites that run on it:
# 1. a copy of this tree in target/vanilla/src whose manifests lose exactly that (the two Boa patch lines, the
#    feature in codemode-worker's dev-dependency on itself);
# 2. codemode-worker's suite, built from the copy into this target folder (third-party crates are shared with the
#    tests' build; crates.io's Boa and the copy's crates compile once more), which also builds that worker;
# 3. with that worker as $CODEMODE_WORKER, every other suite of the workspace, built as the test command built it
#    (nothing compiles again): the facade's corpus, codemode-run's transcripts and every suite whose engine starts
#    the worker `WorkerCommand::locate` finds. Run by the test command, with its PostgreSQL.
# target/debug/codemode-worker is the tests' worker again when this script ends.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '== %s (+%ss) vanilla: %s\n' "$(date -u +%T)" "$SECONDS" "$*"; }
root="$PWD"
src="$root/target/vanilla/src"
worker="$root/target/debug/codemode-worker"
step copy the tree without the patches
rm -rf "$src"
mkdir -p "$src"
git ls-files -z --cached --others --exclude-standard -- . ':!mcp-servers' |
  tar --null --files-from=- --ignore-failed-read -cf - | tar -xf - -C "$src"
sed -i '/^boa_string = { path = "vendor\/boa_string" }$/d; /^boa_engine = { path = "vendor\/boa_engine" }$/d' "$src/Cargo.toml"
sed -i 's/features = \["engine-api", "confine-probe", "patched-boa"\]/features = ["engine-api", "confine-probe"]/' \
  "$src/codemode-worker/Cargo.toml"
# The copy's own crates at another version: cargo hashes a workspace crate by its path inside the workspace, so at
# the same version the copy's builds would overwrite the tests' build of every workspace crate in the shared target
# folder (and the next build of this tree would compile them all again).
sed -i 's/^version = "0.1.0"$/version = "0.1.1"/; s/{ version = "0.1.0", path = /{ version = "0.1.1", path = /' \
  "$src/Cargo.toml" "$src/workspace-hack/Cargo.toml"
# Each edit must have happened: a manifest that moved on would otherwise test the patched build twice.
if grep -q '^boa_[a-z]* = { path = "vendor/' "$src/Cargo.toml" || grep -q '"patched-boa"\]' "$src/codemode-worker/Cargo.toml" ||
  grep -q '"0.1.0"' "$src/Cargo.toml" "$src/workspace-hack/Cargo.toml"; then
  echo "scripts/vanilla.sh: the copy's manifests are not as this script expects; update its edits" >&2
  exit 1
fi
# The tests' worker, kept aside: the copy's build writes its own worker to the same path.
if [ -x "$worker" ]; then
  cp "$worker" "$root/target/vanilla/codemode-worker.patched"
fi
restore() {
  if [ -x "$root/target/vanilla/codemode-worker.patched" ]; then
    cp "$root/target/vanilla/codemode-worker.patched" "$worker"
  fi
}
trap restore EXIT
step "build and run codemode-worker's suite on crates.io's Boa"
(cd "$src" && CARGO_TARGET_DIR="$root/target" cargo test -p codemode-worker --no-fail-fast)
cp "$worker" "$root/target/vanilla/codemode-worker"
restore
# The copy's Boa is crates.io's: `cargo tree` names a path for a patched crate.
engine=$(cd "$src" && cargo tree -p codemode-worker -e normal -i boa_engine --prefix none --depth 0)
case "$engine" in
  *"("*) echo "scripts/vanilla.sh: the copy builds $engine, not crates.io's boa_engine" >&2; exit 1 ;;
esac
step "the host suites with that worker ($engine)"
CODEMODE_WORKER="$root/target/vanilla/codemode-worker" cargo test --workspace --exclude codemode-worker --no-fail-fast
step done
