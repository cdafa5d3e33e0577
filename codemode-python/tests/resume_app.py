"""The second process of the resume test: the same tool, the same state directory; resumes the run named on the
command line and prints its result's JSON."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import sys

import codemode

PROGRAM = "const a = await count({}); await yield_control('halfway'); const b = await count({}); return [a, b];"


def count() -> int:
    """Counts its calls in the file $CODEMODE_TEST_COUNTER and returns the count."""
    path = pathlib.Path(os.environ["CODEMODE_TEST_COUNTER"])
    n = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(n))
    return n


async def main(state: str, run_id: str) -> None:
    cm = codemode.CodeMode([count], state_dir=state)
    result = await cm.wait(run_id)
    print(json.dumps(result.raw))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
