"""Progress, upstream logging and content blocks through the gateway, driven by the MCP Python SDK's client.

Usage: protocol.py CODEMODE_BIN CONFIG MODE CODE
  MODE  "legacy" (initialize handshake; no logging/setLevel, so every message) or "2026-07-28" (sessionless; the
        client opts in to log messages at "debug" on each request)
  CODE  the program to exec
Prints one JSON object: {"result": <CodeModeResult>, "progress": [[progress, total, message], ...],
"logs": [{"level": ..., "logger": ..., "data": ...}, ...], "content": [{"type": ..., "mimeType": ..., "bytes": ...},
...]} (each content block of the exec result as the client parsed it; `bytes` is the length of an image's `data`).
"""

import asyncio
import json
import sys

from mcp import Client, StdioServerParameters


async def main() -> None:
    binary, config, mode, code = sys.argv[1:5]
    progress: list[list] = []
    logs: list[dict] = []

    async def on_progress(value, total, message):
        progress.append([value, total, message])

    async def on_log(params):
        logs.append({"level": params.level, "logger": params.logger, "data": params.data})

    server = StdioServerParameters(command=binary, args=["mcp", "--config", config])
    options = {"log_level": "debug"} if mode != "legacy" else {}
    async with Client(server, mode=mode, logging_callback=on_log, **options) as client:
        result = await client.call_tool("exec", {"title": "python progress", "code": code}, progress_callback=on_progress)
    content = []
    for block in result.content:
        shown = block.model_dump(by_alias=True, exclude_none=True, mode="json")
        content.append({"type": shown.get("type"), "mimeType": shown.get("mimeType"), "bytes": len(shown.get("data", ""))})
    print(json.dumps({"result": result.structured_content, "progress": progress, "logs": logs, "content": content}))


asyncio.run(main())
