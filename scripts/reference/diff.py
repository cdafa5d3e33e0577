"""codemode's side of the differential run (scripts/reference/diff.sh): runs each case of cases.json through the
Python package's engine, with the host tools diff.mjs gives the reference (ping, echo, fail), and prints one JSON
line per case with the fields the comparison reads: status, value, code, reason, error."""

import asyncio
import json
import pathlib
import sys

import codemode
from codemode import Tool

OBJECT = {"type": "object", "properties": {}, "additionalProperties": True}


def ping() -> dict:
    return {"ok": True}


def echo(**arguments: object) -> dict:
    return arguments


def fail() -> None:
    raise RuntimeError("boom")


TOOLS = [
    Tool(fn=ping, name="ping", description="Return {ok: true}.", parameters=OBJECT),
    Tool(fn=echo, name="echo", description="Return its arguments.", parameters=OBJECT),
    Tool(fn=fail, name="fail", description="Always fail.", parameters=OBJECT),
]


def shape(result: codemode.Result) -> dict:
    raw = result.raw
    return {k: raw.get(k) for k in ("status", "value", "code", "reason", "error") if raw.get(k) is not None}


async def main() -> None:
    cases = json.loads((pathlib.Path(__file__).parent / "cases.json").read_text())
    print(json.dumps({"side": "codemode", "python": sys.version.split()[0]}), flush=True)
    with codemode.CodeMode(TOOLS) as engine:
        for case in cases:
            if "wait" in case:
                result = await engine.wait(case["wait"])
            else:
                result = await engine.exec(case["code"])
                if case.get("then") == "wait" and result.status == "waiting":
                    result = await engine.wait(result.run_id)
            print(json.dumps({"name": case["name"], **shape(result)}), flush=True)


asyncio.run(main())
