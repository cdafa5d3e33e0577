"""Approvals through the gateway, driven by the MCP Python SDK's client (its elicitation callback plays the person).

Usage: approvals.py CODEMODE_BIN CONFIG MODE ANSWERS CODE
  MODE     "legacy" (initialize handshake: elicitation/create during the call) or "2026-07-28" (sessionless:
           input-required results, answered by the SDK's retry loop)
  ANSWERS  comma-separated answers, in order: approve, approve_for_run, deny, decline, cancel
  CODE     the program to exec
Prints one JSON object: {"result": <CodeModeResult>, "asked": [<question>, ...]}.
"""

import asyncio
import json
import sys

from mcp import Client, StdioServerParameters, types


async def main() -> None:
    binary, config, mode, answers, code = sys.argv[1:6]
    pending = [a for a in answers.split(",") if a]
    asked: list[str] = []

    async def elicit(_context, params: types.ElicitRequestParams):
        asked.append(params.message)
        answer = pending.pop(0) if pending else "cancel"
        if answer in ("decline", "cancel"):
            return types.ElicitResult(action=answer)
        return types.ElicitResult(action="accept", content={"decision": answer})

    server = StdioServerParameters(command=binary, args=["mcp", "--config", config])
    async with Client(server, mode=mode, elicitation_callback=elicit) as client:
        result = await client.call_tool("exec", {"title": "python writes", "code": code})
    print(json.dumps({"result": result.structured_content, "asked": asked}))


asyncio.run(main())
