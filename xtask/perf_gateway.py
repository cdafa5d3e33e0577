"""The gateway kind of `cargo xtask perf`: one MCP Python SDK client over loopback HTTP, one session, sends CELLS
trivial `exec`s one after another after one untimed, then closes its session.

Usage: perf_gateway.py URL CELLS
"""

import asyncio
import sys

from mcp import Client


async def wait_ready(url: str) -> None:
    # The gateway starts under valgrind: slowly.
    for _ in range(6000):
        try:
            async with Client(url, mode="legacy") as client:
                await client.list_tools()
                return
        except Exception:
            await asyncio.sleep(0.05)
    sys.exit("the gateway did not serve within 5 minutes")


async def main() -> None:
    url, cells = sys.argv[1], int(sys.argv[2])
    await wait_ready(url)
    async with Client(url, mode="legacy") as client:
        for _ in range(cells + 1):
            result = await client.call_tool("exec", {"title": "perf", "code": "return 1 + 1"})
            if result.is_error:
                sys.exit(f"exec failed: {result.content}")


asyncio.run(main())
