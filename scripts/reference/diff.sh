#!/usr/bin/env bash
# The differential run against the reference: each case of scripts/reference/cases.json through OpenClaw 2026.9.6's
# `exec`/`wait` tools (diff.mjs, via run.sh, QuickJS executor unless `--executor node` is given) and through
# codemode's Python package (diff.py, installed from a wheel of this tree into target/py-diff), then a table of the
# cases whose status, code or value differ. Needs what scripts/python.sh and run.sh need; not part of the tests.
# The differences that stay on purpose are README's "Differences from the reference".
set -euo pipefail
cd "$(dirname "$0")/../.."
out=target/reference/diff
mkdir -p "$out"
scripts/reference/run.sh diff "$@" > "$out/openclaw.jsonl"
scripts/python-wheel.sh
if [ ! -x target/py-diff/bin/python ]; then
  python3 -m venv target/py-diff
fi
target/py-diff/bin/pip install --quiet --disable-pip-version-check --force-reinstall --no-deps target/wheels/codemode-*.whl
target/py-diff/bin/python scripts/reference/diff.py > "$out/codemode.jsonl"
python3 - "$out/openclaw.jsonl" "$out/codemode.jsonl" <<'PY'
import json
import sys

def load(path):
    lines = [json.loads(line) for line in open(path)]
    return lines[0], {c["name"]: c for c in lines[1:]}

(ref_info, ref), (ours_info, ours) = load(sys.argv[1]), load(sys.argv[2])
print(f"reference: {ref_info}\ncodemode:  {ours_info}\n")
same = 0
for name, r in ref.items():
    o = ours.get(name, {"status": "missing"})
    keys = ("status", "code", "value") if r.get("status") != "failed" else ("status", "code")
    if all(r.get(k) == o.get(k) for k in keys):
        same += 1
        continue
    cut = lambda c: json.dumps({k: c.get(k) for k in ("status", "code", "reason", "value", "error") if k in c})[:300]
    print(f"## {name}\n  openclaw: {cut(r)}\n  codemode: {cut(o)}")
print(f"\n{same} of {len(ref)} cases match (status, code, and a completed case's value)")
PY
