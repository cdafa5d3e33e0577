"""codemode beside pydantic-monty, both called as Python users call them, in one process and one run.

Rows: a trivial program; a program making 10 sequential calls of a Python function; 32 concurrent execs from one
event loop (each the 10-call program). Per exec: p50 and p99 latency; throughput (execs per second over the row's
wall time); resident memory of this process and of its worker processes after the row. codemode: ``await
cm.exec(code)`` on one ``CodeMode``; Monty: ``async with pool.checkout() as s: await s.feed_run(code, ...)`` on one
``AsyncMonty`` pool (its only mode: every run goes to a worker subprocess). Both with their default pool settings.

Run: ``python bench.py [--rounds N]`` in a venv with the codemode wheel and pydantic-monty installed; prints a
Markdown table (figures in ms) and, with ``--json``, the raw figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import codemode
import pydantic_monty


def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


JS_TRIVIAL = "return 1 + 1"
JS_TEN = "let s = 0; for (let i = 0; i < 10; i++) s = await add({a: s, b: i}); return s;"
PY_TRIVIAL = "1 + 1"
PY_TEN = "s = 0\nfor i in range(10):\n    s = add(s, i)\ns"


def rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            out.append(child)
            stack.append(child)
    return out


def memory() -> tuple[float, float, int]:
    """(this process's RSS in MiB, its descendants' RSS in MiB, how many descendants)."""
    kids = descendants(os.getpid())
    return rss_kib(os.getpid()) / 1024, sum(rss_kib(k) for k in kids) / 1024, len(kids)


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def sequential(one: Callable[[], Awaitable[Any]], n: int) -> tuple[list[float], float]:
    for _ in range(max(20, n // 20)):  # warm-up
        await one()
    samples = []
    start = time.perf_counter()
    for _ in range(n):
        t = time.perf_counter()
        await one()
        samples.append((time.perf_counter() - t) * 1000)
    return samples, time.perf_counter() - start


async def concurrent(one: Callable[[], Awaitable[Any]], rounds: int, width: int = 32) -> tuple[list[float], float]:
    async def timed() -> float:
        t = time.perf_counter()
        await one()
        return (time.perf_counter() - t) * 1000

    await asyncio.gather(*(timed() for _ in range(width)))  # warm-up: grows the pools
    samples: list[float] = []
    start = time.perf_counter()
    for _ in range(rounds):
        samples += await asyncio.gather(*(timed() for _ in range(width)))
    return samples, time.perf_counter() - start


async def main(rounds: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []

    def record(engine: str, row: str, samples: list[float], wall: float) -> None:
        host, workers, count = memory()
        rows.append({
            "engine": engine, "row": row, "n": len(samples), "p50_ms": statistics.median(samples),
            "p99_ms": pct(samples, 0.99), "per_s": len(samples) / wall, "host_mib": host, "workers_mib": workers,
            "workers": count,
        })

    cm = codemode.CodeMode([add])

    async def ours(code: str) -> None:
        result = await cm.exec(code, title="bench")
        assert result.status == "completed", result

    record("codemode", "trivial", *await sequential(lambda: ours(JS_TRIVIAL), rounds))
    record("codemode", "10 calls", *await sequential(lambda: ours(JS_TEN), rounds))
    record("codemode", "32 concurrent", *await concurrent(lambda: ours(JS_TEN), max(1, rounds // 32)))
    cm.close()
    del cm

    async with pydantic_monty.AsyncMonty() as pool:

        async def monty(code: str) -> None:
            async with pool.checkout() as session:
                value = await session.feed_run(code, external_lookup={"add": add})
            assert value in (2, 45), value

        record("pydantic-monty", "trivial", *await sequential(lambda: monty(PY_TRIVIAL), rounds))
        record("pydantic-monty", "10 calls", *await sequential(lambda: monty(PY_TEN), rounds))
        record("pydantic-monty", "32 concurrent", *await concurrent(lambda: monty(PY_TEN), max(1, rounds // 32)))
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1000, help="execs per sequential row (concurrent: rounds/32 x 32)")
    parser.add_argument("--json", action="store_true", help="print the raw figures as JSON too")
    args = parser.parse_args()
    rows = asyncio.run(main(args.rounds))
    print("| row | engine | p50 ms | p99 ms | execs/s | host RSS MiB | workers RSS MiB (n) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['row']} | `{r['engine']}` | {r['p50_ms']:.3f} | {r['p99_ms']:.3f} | {r['per_s']:.0f} | "
              f"{r['host_mib']:.0f} | {r['workers_mib']:.0f} ({r['workers']}) |")
    if args.json:
        print(json.dumps(rows, indent=1))
    sys.stdout.flush()
    # pydantic-monty 1.4's pool aborts the interpreter at exit on this machine (SIGABRT after the run): leave at once.
    os._exit(0)
