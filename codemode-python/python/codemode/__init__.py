"""Code mode for Python agents: a model-written JavaScript program calls your Python functions as async globals.

The program runs in codemode's confined worker process (Boa, under ``RLIMIT_AS``, Landlock and seccomp), never in
this interpreter. ``CodeMode(tools=[fn, ...])`` builds the engine; ``await cm.exec(code, title=...)`` runs a
program and returns :class:`Completed`, :class:`Waiting` or :class:`Failed`; ``await cm.wait(run_id)`` resumes a
waiting run; ``cm.abort(run_id)`` ends one. Async tools run on the caller's event loop, sync tools on a thread pool,
and the GIL is released while the engine works.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import dataclasses
import inspect
import json
import os
import pathlib
import threading
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar, Literal, TypeAlias, Union

from . import _native, _schema
from ._native import UNTRUSTED_WARNING, EngineError
from ._schema import Tool, tool

# The engine's threads must be out of Python before the interpreter finalizes: one entering then aborts the process.
atexit.register(_native.shutdown)

__all__ = [
    "UNTRUSTED_WARNING",
    "ApprovalRequest",
    "CodeMode",
    "Completed",
    "Decision",
    "EngineError",
    "Failed",
    "Result",
    "Tool",
    "ToolError",
    "Waiting",
    "model_text",
    "tool",
]

Decision: TypeAlias = Literal["approve", "approve_for_run", "deny", "defer"]
"""An approver's answer: run the call; run it and every later call of the tool in the run; refuse it (the program
gets a catchable error); or park the run with the approval pending, to be answered by a later ``wait``."""

_LIMIT_KEYS = {
    "timeout_ms": "timeoutMs",
    "memory_limit_bytes": "memoryLimitBytes",
    "max_output_bytes": "maxOutputBytes",
    "max_snapshot_bytes": "maxSnapshotBytes",
    "max_pending_tool_calls": "maxPendingToolCalls",
    "snapshot_ttl_seconds": "snapshotTtlSeconds",
    "search_default_limit": "searchDefaultLimit",
    "max_search_limit": "maxSearchLimit",
    "max_wait_ms": "maxWaitMs",
}


class ToolError(Exception):
    """Raise it in a tool to fail the call with a code of your choice; the program catches it as an ``Error``
    with ``err.code`` and ``err.message``. Any other exception fails the call with code ``tool_error`` and the
    exception's type and message."""

    def __init__(self, message: str, *, code: str = "tool_error") -> None:
        super().__init__(message)
        self.message = message
        self.code = code


@dataclasses.dataclass(frozen=True)
class ApprovalRequest:
    """A call the policy asks about, as the approver sees it."""

    tool: str
    """The tool's name."""
    path: str
    """The callable path the program used (``send_email``, ``MCP.fs.write_file``)."""
    preview: str
    """The arguments as JSON text, redacted and capped."""
    title: str | None
    """The program's title."""
    run_id: str
    """The run the call belongs to."""
    call_id: str
    """The call's id (the key of ``wait``'s ``answers``)."""


def _snake(key: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in key)


@dataclasses.dataclass(frozen=True)
class Completed:
    """The program finished: ``value`` is what it returned."""

    status: ClassVar[Literal["completed"]] = "completed"
    value: Any
    output: list[dict[str, Any]]
    warnings: list[str]
    mutation_free: bool
    completed_writes: int
    failed_writes: int
    uncertain_writes: int
    writes: list[dict[str, Any]]
    calls: dict[str, int]
    telemetry: dict[str, Any]
    raw: dict[str, Any] = dataclasses.field(repr=False)
    """The result as the engine's JSON (camelCase), as a model would be shown it."""


@dataclasses.dataclass(frozen=True)
class Waiting:
    """The program parked (tool calls still pending near the deadline, ``yield_control()``, an approval deferred):
    resume it with ``wait(run_id)``."""

    status: ClassVar[Literal["waiting"]] = "waiting"
    run_id: str
    reason: str
    pending_tool_calls: list[dict[str, Any]]
    pending_approvals: list[dict[str, Any]]
    replay_safe: bool
    output: list[dict[str, Any]]
    warnings: list[str]
    telemetry: dict[str, Any]
    raw: dict[str, Any] = dataclasses.field(repr=False)
    """The result as the engine's JSON (camelCase)."""

    @property
    def value(self) -> None:
        """A waiting run has no value yet."""
        return None


@dataclasses.dataclass(frozen=True)
class Failed:
    """The program failed: ``code`` is one of the closed set (``aborted``, ``invalid_input``,
    ``runtime_unavailable``, ``timeout``, ``output_limit_exceeded``, ``snapshot_limit_exceeded``,
    ``internal_error``), ``error_kind`` the finer cause, ``error`` the message for the model."""

    status: ClassVar[Literal["failed"]] = "failed"
    error: str
    code: str
    error_kind: str
    failure_phase: str
    bridge_dispatch_started: bool
    output: list[dict[str, Any]]
    warnings: list[str]
    mutation_free: bool
    completed_writes: int
    failed_writes: int
    uncertain_writes: int
    writes: list[dict[str, Any]]
    calls: dict[str, int]
    telemetry: dict[str, Any]
    raw: dict[str, Any] = dataclasses.field(repr=False)
    """The result as the engine's JSON (camelCase)."""

    @property
    def value(self) -> None:
        """A failed run has no value."""
        return None


Result = Union[Completed, Waiting, Failed]
"""What ``exec`` and ``wait`` return; ``result.status`` tells which."""

_DEFAULTS: dict[str, Any] = {
    "output": [],
    "warnings": [],
    "mutation_free": True,
    "completed_writes": 0,
    "failed_writes": 0,
    "uncertain_writes": 0,
    "writes": [],
    "calls": {},
    "pending_tool_calls": [],
    "pending_approvals": [],
    "telemetry": {},
}


def model_text(result: Result) -> str:
    """The text a model should read of ``result``: its compact JSON, wrapped between
    ``<<<EXTERNAL_UNTRUSTED_CONTENT id="…">>>`` markers (after a security notice, with marker look-alikes in it
    neutralized and cut to 20,000 characters) when its program read content an MCP server sent. ``result.raw``
    stays the raw JSON."""
    return _native.model_text(json.dumps(result.raw, separators=(",", ":"), ensure_ascii=False))


def _result(text: str) -> Result:
    data = json.loads(text)
    cls: type[Completed] | type[Waiting] | type[Failed] = {
        "completed": Completed,
        "waiting": Waiting,
        "failed": Failed,
    }[data["status"]]
    snake = {_snake(k): v for k, v in data.items()}
    names = [f.name for f in dataclasses.fields(cls) if f.name != "raw"]
    values = {n: snake.get(n, _DEFAULTS.get(n)) for n in names}
    return cls(**values, raw=data)  # type: ignore[arg-type]


def _worker_path(worker: str | os.PathLike[str] | None) -> str | None:
    """The worker binary: the argument, else ``$CODEMODE_WORKER``, else the one shipped in this package."""
    if worker is not None:
        return os.fspath(worker)
    if os.environ.get("CODEMODE_WORKER"):
        return None  # the engine reads the variable itself
    shipped = pathlib.Path(__file__).with_name("codemode-worker")
    return str(shipped) if shipped.is_file() else None


def _error_of(error: BaseException) -> tuple[str, str]:
    if isinstance(error, ToolError):
        return error.code, error.message
    if _schema.validation_error(error):
        return "invalid_input", str(error)
    return "tool_error", f"{type(error).__name__}: {error}"


class _Loops:
    """The event loops of the ``exec``/``wait`` calls in flight: async tools and approvers run on the latest."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active: dict[asyncio.AbstractEventLoop, int] = {}

    def enter(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            self._active[loop] = self._active.pop(loop, 0) + 1  # re-inserted: the latest is last

    def leave(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            left = self._active.get(loop, 1) - 1
            if left <= 0:
                self._active.pop(loop, None)
            else:
                self._active[loop] = left

    def pick(self) -> asyncio.AbstractEventLoop | None:
        with self._lock:
            for loop in reversed(list(self._active)):
                if not loop.is_closed():
                    return loop
        return None


class _AsyncCall:
    """One async tool call (or approval) on an event loop; ``cancel`` may come from any thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, make: Callable[[], Awaitable[None]]) -> None:
        self._loop = loop
        self._make = make
        self._task: asyncio.Future[None] | None = None
        self._cancelled = False

    def start(self) -> None:
        if not self._cancelled:
            self._task = asyncio.ensure_future(self._make())

    def _cancel(self) -> None:
        self._cancelled = True
        if self._task is not None:
            self._task.cancel()

    def cancel(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._cancel)
        except RuntimeError:  # the loop is closed: the call ended with it
            pass


class CodeMode:
    """A code mode engine over Python functions.

    Args:
        tools: the functions (sync or ``async def``) programs may call, or :class:`Tool` objects from :func:`tool`.
            A program's ``add({a: 2, b: 3})`` calls ``add(a=2, b=3)``.
        limits: run limits, snake_case or camelCase keys: ``timeout_ms`` (100..60000, default 10000),
            ``memory_limit_bytes`` (default 64 MiB), ``max_output_bytes``, ``max_snapshot_bytes``,
            ``max_pending_tool_calls``, ``snapshot_ttl_seconds``, ``search_default_limit``, ``max_search_limit``,
            ``max_wait_ms``. Out-of-range values are clamped.
        policy: the tool policy, as the gateway's ``[policy]`` table: ``{"default": "allow", "writes": "ask",
            "fallback": "deny", "rules": [{"match": "send_*", "policy": "ask"}]}``.
        approver: decides the calls the policy asks about: ``fn(request) -> "approve" | "approve_for_run" | "deny"
            | "defer"`` (may be ``async``). Without one, ``ask`` gets the policy's ``fallback``: ``"deny"``,
            ``"allow"``, or ``"park"`` (the run parks with reason ``approval`` until a ``wait`` carries the answer).
        state_dir: keeps parked runs on disk, so another process with the same tools resumes them (``wait``).
        worker: the ``codemode-worker`` binary (default: ``$CODEMODE_WORKER``, else the one in this package).
        confinement: ``"required"`` (default: Landlock and seccomp must apply), ``"best_effort"`` or ``"off"``.
        warm_workers: idle workers kept ready (default 2).
        replay_on_resume: drop a parked run's worker, so every ``wait`` resumes by replay.
        max_tool_threads: threads of the pool sync tools run on (default: Python's ``ThreadPoolExecutor``'s).
        mcp_servers: MCP servers whose tools programs call as ``MCP.<server>.<tool>``, as a desktop client's
            ``mcpServers`` holds them and the gateway reads them: ``{"fs": {"command": "npx", "args": [...],
            "env": {...}, "inheritEnv": [...]}, "web": {"url": "https://.../mcp", "headers": {...}}}``. A stdio
            server starts with a clean environment (see the gateway's docs); a server that cannot start is left out
            and named on stderr. The policy's rules match ``<server>.<tool>``.

    Raises:
        EngineError: no worker could be started (the message says what to fix) or ``state_dir`` cannot be opened.
        TypeError: a tool's hints cannot be turned into a schema.
        ValueError: an unknown limit, an invalid policy or an invalid ``mcp_servers`` entry (the message names the
            key and the fix).
    """

    def __init__(
        self,
        tools: Sequence[Callable[..., Any] | Tool] = (),
        *,
        limits: Mapping[str, int] | None = None,
        policy: Mapping[str, Any] | None = None,
        approver: Callable[[ApprovalRequest], Decision | Awaitable[Decision]] | None = None,
        state_dir: str | os.PathLike[str] | None = None,
        worker: str | os.PathLike[str] | None = None,
        confinement: Literal["required", "best_effort", "off"] | None = None,
        warm_workers: int | None = None,
        replay_on_resume: bool = False,
        max_tool_threads: int | None = None,
        mcp_servers: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self._tools: dict[str, Tool] = {}
        for item in tools:
            t = _schema.as_tool(item)
            if t.name in self._tools:
                raise ValueError(f"two tools are named {t.name!r}")
            self._tools[t.name] = t
        self._approver = approver
        self.state_dir: str | None = os.fspath(state_dir) if state_dir is not None else None
        """Where parked runs are kept (``None``: in this process only)."""
        self._loops = _Loops()
        self._threads = concurrent.futures.ThreadPoolExecutor(max_tool_threads, thread_name_prefix="codemode-tool")
        limits_json = None
        if limits is not None:
            unknown = [k for k in limits if k not in _LIMIT_KEYS and k not in _LIMIT_KEYS.values()]
            if unknown:
                raise ValueError(f"unknown limits {unknown}; the limits are {sorted(_LIMIT_KEYS)}")
            limits_json = json.dumps({_LIMIT_KEYS.get(k, k): v for k, v in limits.items()})
        # The engine holds its callbacks through weak references: a strong one would be a cycle through Rust that
        # Python's collector cannot see, and the engine (with its worker processes) would never be freed.
        self._engine: _native.Engine | None = _native.Engine(
            tools=json.dumps([t.definition() for t in self._tools.values()]),
            host=_weak(self, CodeMode._dispatch),
            worker=_worker_path(worker),
            limits=limits_json,
            policy=json.dumps(dict(policy)) if policy is not None else None,
            approver=_weak(self, CodeMode._dispatch_approval) if approver is not None else None,
            state_dir=os.fspath(state_dir) if state_dir is not None else None,
            confinement=confinement,
            warm_workers=warm_workers,
            replay_on_resume=replay_on_resume,
            mcp_servers=json.dumps(dict(mcp_servers)) if mcp_servers is not None else None,
        )

    @property
    def _handle(self) -> _native.Engine:
        if self._engine is None:
            raise EngineError("this CodeMode is closed")
        return self._engine

    def close(self) -> None:
        """Stops the engine: its MCP servers and idle workers end now, the rest as their runs end; later calls raise
        :class:`EngineError`. Dropping the last reference to a CodeMode does the same."""
        if self._engine is not None:
            self._engine.close()
        self._engine = None
        self._threads.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> CodeMode:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def tools(self) -> Mapping[str, Tool]:
        """The tools by name."""
        return dict(self._tools)

    def surface(self) -> list[dict[str, Any]]:
        """The tools a model sees: ``exec`` (whose description lists your tools) and ``wait``, each
        ``{"name", "description", "parameters"}``."""
        return list(json.loads(self._handle.surface()))

    def stats(self) -> dict[str, int]:
        """``{"parkedRuns", "parkedWithWorker", "idleWorkers"}`` of this engine."""
        return dict(json.loads(self._handle.stats()))

    async def exec(
        self,
        code: str,
        *,
        title: str = "Run a program",
        language: Literal["javascript", "typescript"] | None = None,
        restart_safe: bool | None = None,
        await_results: bool | None = None,
        idempotency_key: str | None = None,
    ) -> Result:
        """Runs a program. Cancelling the awaiting task aborts the run (its worker is killed, its tool calls
        cancelled). ``idempotency_key``: an exec with a key already accepted returns that run's result or current
        state instead of running the program again."""
        payload: dict[str, Any] = {"title": title, "code": code}
        if language is not None:
            payload["language"] = language
        if restart_safe is not None:
            payload["restartSafe"] = restart_safe
        if await_results is not None:
            payload["awaitResults"] = await_results
        return await self.exec_input(payload, idempotency_key=idempotency_key)

    async def exec_input(self, payload: Mapping[str, Any], *, idempotency_key: str | None = None) -> Result:
        """``exec`` with exec's input object as a model sends it (``{"title", "code", "restartSafe", ...}``);
        an invalid one is a ``Failed`` result with code ``invalid_input``, as the model would be told."""
        text = json.dumps(dict(payload))
        return await self._call(lambda done: self._handle.exec(text, done, idempotency_key=idempotency_key))

    async def wait(
        self,
        run_id: str,
        *,
        answers: Mapping[str, Decision] | None = None,
        max_wait_ms: int | None = None,
    ) -> Result:
        """Resumes a waiting run. ``answers`` decide its pending approvals, by call id
        (``Waiting.pending_approvals[i]["callId"]``). Cancelling the awaiting task aborts the run."""
        payload: dict[str, Any] = {"runId": run_id}
        if max_wait_ms is not None:
            payload["maxWaitMs"] = max_wait_ms
        answers_json = json.dumps(dict(answers)) if answers else None
        return await self._call(lambda done: self._handle.wait(json.dumps(payload), done, answers=answers_json))

    def abort(self, run_id: str) -> Result:
        """Ends a run: its pending calls are cancelled and a later ``wait`` fails. Returns its final result."""
        return _result(self._handle.abort(run_id))

    def exec_sync(self, code: str, **kwargs: Any) -> Result:
        """``exec`` for synchronous code: runs it on an event loop of its own (in a new thread when this thread
        already runs one). Async tools run on that loop."""
        return _run_sync(lambda: self.exec(code, **kwargs))

    def wait_sync(self, run_id: str, **kwargs: Any) -> Result:
        """``wait`` for synchronous code, as :meth:`exec_sync`."""
        return _run_sync(lambda: self.wait(run_id, **kwargs))

    async def _call(self, start: Callable[[Callable[[str], None]], _native.Run]) -> Result:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[str] = loop.create_future()

        def settle(text: str) -> None:
            if not future.done():
                future.set_result(text)

        def done(text: str) -> None:
            try:
                loop.call_soon_threadsafe(settle, text)
            except RuntimeError:  # the loop closed before the result came
                pass

        self._loops.enter(loop)
        try:
            run = start(done)
            try:
                text = await future
            except asyncio.CancelledError:
                run.cancel()
                raise
        finally:
            self._loops.leave(loop)
        return _result(text)

    def _dispatch(self, name: str, args_text: str, run_id: str, call_id: str, completion: _native.Completion) -> Any:
        """Called by the engine (any thread, GIL held briefly) for each tool call; returns a cancel callable."""
        t = self._tools.get(name)
        if t is None:
            completion.error("tool_error", f"no Python tool is named {name}")
            return None
        args = json.loads(args_text)
        if t.is_async:
            loop = self._loops.pick()
            if loop is None:
                completion.error("tool_error", f"{name} is async and no event loop runs an exec or wait now")
                return None

            async def run_async() -> None:
                try:
                    value = await t.invoke(args)
                    text = _schema.to_json(value)
                except asyncio.CancelledError:
                    completion.error("aborted", f"the call of {name} was cancelled")
                    raise
                except Exception as error:  # every tool failure goes to the program
                    completion.error(*_error_of(error))
                    return
                completion.ok(text)

            call = _AsyncCall(loop, run_async)
            try:
                loop.call_soon_threadsafe(call.start)
            except RuntimeError:
                completion.error("tool_error", f"the event loop of {name} is closed")
                return None
            return call.cancel

        def run_sync() -> None:
            try:
                value = t.invoke(args)
                if inspect.isawaitable(value):  # a sync function that returned an awaitable
                    value = asyncio.run(_awaited(value))
                text = _schema.to_json(value)
            except Exception as error:  # every tool failure goes to the program
                completion.error(*_error_of(error))
                return
            completion.ok(text)

        future = self._threads.submit(run_sync)
        return future.cancel  # a call not started yet never starts; a running thread cannot be interrupted

    def _dispatch_approval(self, request_text: str, decide: _native.Decide) -> Any:
        """Called by the engine for each call the policy asks about; returns a cancel callable."""
        approver = self._approver
        assert approver is not None
        data = json.loads(request_text)
        request = ApprovalRequest(
            tool=data["tool"],
            path=data["path"],
            preview=data["preview"],
            title=data.get("title"),
            run_id=data["runId"],
            call_id=data["callId"],
        )

        def answer(decision: Any) -> None:
            if decision is True:
                decision = "approve"
            elif decision is False:
                decision = "deny"
            try:
                decide(decision)
            except ValueError:
                decide("deny")
                raise

        if inspect.iscoroutinefunction(approver):
            loop = self._loops.pick()
            if loop is None:
                decide("deny")
                return None

            async def run_async() -> None:
                answer(await approver(request))

            call = _AsyncCall(loop, run_async)
            loop.call_soon_threadsafe(call.start)
            return call.cancel

        def run_sync() -> None:
            answer(approver(request))

        return self._threads.submit(run_sync).cancel


def _weak(owner: CodeMode, method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` bound to ``owner`` through a weak reference; once ``owner`` is gone, calls return ``None``
    (and the engine, freed with it, makes none)."""
    ref = weakref.ref(owner)

    def call(*args: Any) -> Any:
        target = ref()
        return None if target is None else method(target, *args)

    return call


async def _awaited(value: Awaitable[Any]) -> Any:
    return await value


def _run_sync(make: Callable[[], Awaitable[Result]]) -> Result:
    async def main() -> Result:
        return await make()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, main()).result()
