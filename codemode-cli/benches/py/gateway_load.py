"""Cells per second and latency seen by MCP clients over the gateway's loopback HTTP.

Starts `codemode mcp --http` in front of the npm filesystem server, then for each client count runs that many
closed-loop clients (each sends its next `exec` when the last one answered), every one the MCP Python SDK's own
`Client` with its own HTTP session, all in this process. Each case warms up for one second, then counts for
SECONDS. Prints one line per case and, with --json, one JSON object per case.

Usage: gateway_load.py CODEMODE_BIN [--clients 1,8,32] [--seconds 5] [--code "return 1+1"] [--max-running N] [--json]
(--max-running sets the gateway's `[workers] max_running`, 0 for no limit; without it the gateway's default.)
Needs `npm ci --prefix mcp-servers` (the filesystem server) and the SDK in target/py (scripts/test.sh installs it).
The SDK's client itself takes about 1.7 ms of CPU per cell, on the same cores as the gateway.
"""

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mcp import Client

ROOT = Path(__file__).resolve().parents[3]
FILESYSTEM = ROOT / "mcp-servers/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def wait_ready(url: str, gateway: subprocess.Popen) -> None:
    for _ in range(600):
        if gateway.poll() is not None:
            sys.exit(f"the gateway exited with {gateway.returncode} before serving")
        try:
            async with Client(url, mode="legacy") as client:
                await client.list_tools()
                return
        except Exception:
            await asyncio.sleep(0.05)
    sys.exit("the gateway did not serve within 30 s")


async def one_client(url: str, code: str, until: list[float], samples: list[float], start: asyncio.Event) -> None:
    async with Client(url, mode="legacy") as client:
        await client.call_tool("exec", {"title": "load", "code": code})
        await start.wait()
        while time.perf_counter() < until[0]:
            began = time.perf_counter()
            result = await client.call_tool("exec", {"title": "load", "code": code})
            ended = time.perf_counter()
            if result.is_error:
                raise RuntimeError(f"exec failed: {result.content}")
            if until[1] <= began:
                samples.append(ended - began)


def percentile(sorted_samples: list[float], p: float) -> float:
    index = min(len(sorted_samples) - 1, max(0, round(p / 100 * len(sorted_samples)) - 1))
    return sorted_samples[index]


async def case(url: str, clients: int, seconds: float, code: str) -> dict:
    samples: list[float] = []
    start = asyncio.Event()
    # until[0]: when clients stop sending; until[1]: when the warm-up ends and counting begins.
    until = [float("inf"), float("inf")]
    tasks = [asyncio.create_task(one_client(url, code, until, samples, start)) for _ in range(clients)]
    await asyncio.sleep(0.2)
    now = time.perf_counter()
    until[1] = now + 1.0
    until[0] = until[1] + seconds
    start.set()
    await asyncio.gather(*tasks)
    samples.sort()
    return {
        "clients": clients,
        "cells": len(samples),
        "cells_per_s": len(samples) / seconds,
        "p50_ms": percentile(samples, 50) * 1000,
        "p99_ms": percentile(samples, 99) * 1000,
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--code", default="return 1+1")
    parser.add_argument("--max-running", type=int)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not FILESYSTEM.exists():
        sys.exit(f"{FILESYSTEM} is missing: run `npm ci --prefix mcp-servers` first")
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "gateway.toml"
        config.write_text(
            f'[servers.fs]\ncommand = "node"\nargs = [{json.dumps(str(FILESYSTEM))}, {json.dumps(tmp)}]\n'
            + (f"[workers]\nmax_running = {args.max_running}\n" if args.max_running is not None else "")
        )
        port = free_port()
        url = f"http://127.0.0.1:{port}/mcp"
        gateway = subprocess.Popen(
            [args.binary, "mcp", "--config", str(config), "--http", f"127.0.0.1:{port}"],
            stdin=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL if not os.environ.get("LOAD_GATEWAY_STDERR") else None,
        )
        try:
            await wait_ready(url, gateway)
            for clients in (int(n) for n in args.clients.split(",")):
                result = await case(url, clients, args.seconds, args.code)
                if args.json:
                    print(json.dumps(result), flush=True)
                else:
                    print(
                        f"{clients:>3} clients: {result['cells_per_s']:7.1f} cells/s, "
                        f"p50 {result['p50_ms']:6.2f} ms, p99 {result['p99_ms']:7.2f} ms "
                        f"({result['cells']} cells)",
                        flush=True,
                    )
        finally:
            gateway.terminate()
            gateway.wait()


asyncio.run(main())
