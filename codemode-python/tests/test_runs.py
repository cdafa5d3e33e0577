"""Runs: deadlines, cancellation, hostile programs, approvals, and a parked run resumed by another process."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import subprocess
import sys

import pytest

import codemode

from conftest import CORPUS

HERE = pathlib.Path(__file__).resolve().parent


async def test_a_tool_that_never_returns_parks_at_the_deadline_and_abort_cancels_it(make):
    cancelled = asyncio.Event()

    async def hang() -> None:
        """Never returns."""
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    cm = make([hang], limits={"timeout_ms": 2000})
    result = await cm.exec("return await hang({})", title="Hang")
    assert isinstance(result, codemode.Waiting)
    assert result.reason == "pending_tools" and len(result.pending_tool_calls) == 1
    aborted = cm.abort(result.run_id)
    assert aborted.status == "failed" and aborted.code == "aborted"
    await cancelled.wait()
    after = await cm.wait(result.run_id)
    assert after.status == "failed" and after.code == "invalid_input"


async def test_cancelling_the_awaiting_task_aborts_the_run(make):
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def slow() -> str:
        """Takes forever."""
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    cm = make([slow])
    task = asyncio.create_task(cm.exec("return await slow({})", title="Slow"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await cancelled.wait()
    assert cm.stats()["parkedRuns"] == 0
    assert (await cm.exec("return 1 + 1", title="After")).value == 2


# Memory and loop bombs of the corpus that need no tool of the Rust harness.
HOSTILE = [
    CORPUS / f"{name}.js"
    for name in (
        "memory-string-doubling",
        "memory-string-repeat",
        "memory-arraybuffer-over-limit",
        "memory-closures",
        "memory-in-callback",
        "loop-top-level-while",
        "loop-top-level-for",
        "loop-in-sort-comparator",
        "loop-do-while",
    )
]


@pytest.mark.parametrize("program", HOSTILE, ids=[p.stem for p in HOSTILE])
async def test_hostile_programs_leave_the_interpreter_healthy(make, program):
    expected = program.read_text().splitlines()[0].removeprefix("// expect: failed:")
    # Loops end at the deadline (short here); memory bombs at the memory limit, long before the default deadline.
    cm = make([], limits={"timeout_ms": 1000 if expected == "timeout" else 30000})
    result = await cm.exec(program.read_text(), title=program.stem)
    assert isinstance(result, codemode.Failed), result
    assert result.error_kind == expected
    # The engine and this interpreter carry on: the next cell runs, and Python still allocates and computes.
    assert (await cm.exec("return [1, 2, 3].map(x => x * 2)", title="Next")).value == [2, 4, 6]
    assert sum(range(100_000)) == 4_999_950_000


def test_the_hostile_programs_are_in_the_corpus():
    assert all(p.is_file() for p in HOSTILE)


async def test_approvals_approve_deny_for_run_and_defer(make):
    calls: list[str] = []
    asked: list[codemode.ApprovalRequest] = []

    def send(to: str) -> str:
        """Sends a message (a write)."""
        calls.append(f"send:{to}")
        return f"sent to {to}"

    def remove(name: str) -> str:
        """Deletes a file (a write)."""
        calls.append(f"remove:{name}")
        return "deleted"

    def publish(text: str) -> str:
        """Publishes a post (a write)."""
        calls.append(f"publish:{text}")
        return "published"

    def approver(request: codemode.ApprovalRequest) -> codemode.Decision:
        asked.append(request)
        return {"send": "approve_for_run", "remove": "deny", "publish": "defer"}[request.tool]

    cm = make(
        [send, remove, codemode.tool(publish)],
        policy={"default": "allow", "writes": "ask"},
        approver=approver,
    )
    code = """
    const a = await send({ to: 'ann' });
    const b = await send({ to: 'bob' });
    let d;
    try { d = await remove({ name: 'x' }); } catch (err) { d = err.code; }
    const p = await publish({ text: 'hi' });
    return [a, b, d, p];
    """
    result = await cm.exec(code, title="Writes")
    assert isinstance(result, codemode.Waiting), result
    [pending] = result.pending_approvals
    assert pending["tool"] == "publish"
    assert [r.tool for r in asked] == ["send", "remove", "publish"]
    assert asked[0].title == "Writes" and json.loads(asked[0].preview) == {"to": "ann"}
    assert calls == ["send:ann", "send:bob"]

    done = await cm.wait(result.run_id, answers={pending["callId"]: "approve"})
    assert done.status == "completed"
    assert done.value == ["sent to ann", "sent to bob", "denied", "published"]
    assert calls == ["send:ann", "send:bob", "publish:hi"]


async def test_an_async_approver(make):
    async def approver(request: codemode.ApprovalRequest) -> codemode.Decision:
        await asyncio.sleep(0)
        return "deny"

    def write() -> str:
        """Writes."""
        return "written"

    cm = make([write], policy={"writes": "ask"}, approver=approver)
    result = await cm.exec("try { return await write({}); } catch (err) { return err.code; }", title="Deny")
    assert result.value == "denied"


async def test_a_parked_run_resumes_in_another_process(make, tmp_path):
    counter = tmp_path / "count.txt"
    state = tmp_path / "state"
    os.environ["CODEMODE_TEST_COUNTER"] = str(counter)
    sys.path.insert(0, str(HERE))
    try:
        import resume_app
    finally:
        sys.path.remove(str(HERE))
    cm = make([resume_app.count], state_dir=state)
    result = await cm.exec(resume_app.PROGRAM, title="Two halves")
    assert isinstance(result, codemode.Waiting) and result.reason == "yield"
    assert counter.read_text() == "1"
    cm.close()
    del cm

    child = subprocess.run(
        [sys.executable, str(HERE / "resume_app.py"), str(state), result.run_id],
        env={**os.environ, "CODEMODE_TEST_COUNTER": str(counter)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr
    resumed = json.loads(child.stdout)
    assert resumed["status"] == "completed"
    assert resumed["value"] == [1, 2]
    # The first call was answered from the journal: the counter saw two calls in all, one per process.
    assert counter.read_text() == "2"
