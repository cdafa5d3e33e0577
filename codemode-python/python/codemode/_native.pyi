"""Stubs of ``codemode._native``, the PyO3 binding over the codemode facade (``codemode-python/src/lib.rs``)."""

from collections.abc import Callable
from typing import Any, final

__all__ = ["UNTRUSTED_WARNING", "Completion", "Decide", "Engine", "EngineError", "Run", "model_text", "shutdown"]

UNTRUSTED_WARNING: str

class EngineError(RuntimeError):
    """The engine could not be built (no worker, a worker that fails its hello, a state directory that cannot be
    opened)."""

def model_text(result_json: str) -> str:
    """The text a model reads of a result: its JSON, wrapped as external untrusted content when its program read
    what an MCP server sent."""

def shutdown() -> None:
    """Stops the engine's threads entering Python and waits for those inside; registered with ``atexit``."""

@final
class Completion:
    def ok(self, json: str) -> None: ...
    def error(self, code: str, message: str) -> None: ...

@final
class Decide:
    def __call__(self, decision: str) -> None: ...

@final
class Run:
    def cancel(self) -> None: ...

@final
class Engine:
    def __new__(
        cls,
        *,
        tools: str,
        host: Callable[[str, str, str, str, Completion], Any],
        worker: str | None = None,
        limits: str | None = None,
        policy: str | None = None,
        approver: Callable[[str, Decide], Any] | None = None,
        state_dir: str | None = None,
        confinement: str | None = None,
        warm_workers: int | None = None,
        replay_on_resume: bool = False,
        mcp_servers: str | None = None,
    ) -> Engine: ...
    def close(self) -> None: ...
    def exec(self, input: str, done: Callable[[str], None], idempotency_key: str | None = None) -> Run: ...
    def wait(self, input: str, done: Callable[[str], None], answers: str | None = None) -> Run: ...
    def abort(self, run_id: str) -> str: ...
    def surface(self) -> str: ...
    def stats(self) -> str: ...
