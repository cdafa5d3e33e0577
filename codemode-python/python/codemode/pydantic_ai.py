"""A pydantic-ai toolset that gives an ``Agent`` code mode: the ``exec`` and ``wait`` tools over Python functions.

Approvals are deferred the pydantic-ai way: a call the policy asks about parks the program and ends the agent run
with ``DeferredToolRequests`` (the ``exec`` or ``wait`` call in ``approvals``, the inner calls in its metadata).
The application collects the decision, minutes later and in another process if it likes, and continues the run
with ``DeferredToolResults``; the approved call finds the parked program (by its tool call id, an idempotency key,
in ``state_dir``) and resumes it by replay: calls that completed before the park are answered from the journal, not
run again. A denied call leaves the program parked until its TTL; the model is told it was denied.

Needs ``pydantic-ai`` (or ``pydantic-ai-slim``) installed.
"""

from __future__ import annotations

import hashlib
import pathlib
from collections.abc import Callable, Sequence
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.exceptions import ApprovalRequired
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool
from pydantic_core import SchemaValidator, core_schema

from . import UNTRUSTED_WARNING, ApprovalRequest, CodeMode, Decision, Result, Tool, model_text

__all__ = ["CodeModeToolset"]

_ARGS = SchemaValidator(core_schema.dict_schema(core_schema.str_schema(), core_schema.any_schema()))


def _defer(request: ApprovalRequest) -> Decision:
    return "defer"


class CodeModeToolset(AbstractToolset[Any]):
    """The ``exec`` and ``wait`` tools over ``tools``, with the exec description (which indexes the tools) as the
    tool description.

    Args:
        tools: Python functions or :class:`codemode.Tool` objects, as for :class:`codemode.CodeMode`.
        codemode: an engine to use instead of building one from ``tools`` and ``options``.
        id: the toolset's id (needed for durable execution).
        max_retries: retries the model gets when a call's arguments fail validation.
        options: the other arguments of :class:`codemode.CodeMode` (``policy``, ``limits``, ``state_dir``, ...).
            Without an ``approver``, every call the policy asks about is deferred to the application.
    """

    def __init__(
        self,
        tools: Sequence[Callable[..., Any] | Tool] = (),
        *,
        codemode: CodeMode | None = None,
        id: str | None = None,
        max_retries: int = 1,
        **options: Any,
    ) -> None:
        if codemode is None:
            options.setdefault("approver", _defer)
            codemode = CodeMode(tools, **options)
        elif tools or options:
            raise ValueError("pass either an engine (codemode=) or tools and options to build one, not both")
        self.codemode = codemode
        self._id = id
        self._max_retries = max_retries

    @property
    def id(self) -> str | None:
        return self._id

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        tools: dict[str, ToolsetTool[Any]] = {}
        for spec in self.codemode.surface():
            if spec["name"] not in ("exec", "wait"):
                continue
            tools[spec["name"]] = ToolsetTool(
                toolset=self,
                tool_def=ToolDefinition(
                    name=spec["name"],
                    description=spec["description"],
                    parameters_json_schema=spec["parameters"],
                ),
                max_retries=self._max_retries,
                args_validator=_ARGS,
            )
        return tools

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        if name == "exec":
            parked = self._recall(ctx) if ctx.tool_call_approved else None
            if parked is not None:
                # The call continued after its approval, maybe in another process sharing `state_dir`: resuming
                # asks the pending approvals again, they are deferred again, and `_approve` answers them.
                result = await self._approve(await self.codemode.wait(parked))
            else:
                # The tool call id is also the exec's idempotency key: within this process, the same call finds the
                # run it started instead of running the program twice.
                result = await self.codemode.exec_input(tool_args, idempotency_key=ctx.tool_call_id)
                if ctx.tool_call_approved:
                    result = await self._approve(result)
            if result.status == "waiting" and result.pending_approvals and ctx.tool_call_id:
                self._remember(ctx.tool_call_id, result.run_id)
        elif name == "wait":
            run_id = tool_args.get("runId")
            if not isinstance(run_id, str):
                result = await self.codemode.wait("")  # the engine's own invalid_input answer
            else:
                max_wait_ms = tool_args.get("maxWaitMs")
                result = await self.codemode.wait(run_id, max_wait_ms=max_wait_ms)
                if ctx.tool_call_approved:
                    # Resuming asked the pending approvals again and they were deferred again: answer them now.
                    result = await self._approve(result)
        else:
            raise ValueError(f"CodeModeToolset has no tool {name!r}")
        if result.status == "waiting" and result.pending_approvals:
            raise ApprovalRequired(metadata={"runId": result.run_id, "approvals": result.pending_approvals})
        # What an MCP server sent reaches the model between external-content markers; other results as their JSON.
        if UNTRUSTED_WARNING in result.warnings:
            return model_text(result)
        return result.raw

    def _record(self, tool_call_id: str) -> pathlib.Path | None:
        state_dir = self.codemode.state_dir
        if state_dir is None:
            return None
        digest = hashlib.sha256(tool_call_id.encode()).hexdigest()[:32]
        return pathlib.Path(state_dir) / "pydantic-ai" / digest

    def _remember(self, tool_call_id: str, run_id: str) -> None:
        """Records which run an exec call parked, in ``state_dir``, for the process that continues it."""
        record = self._record(tool_call_id)
        if record is not None:
            record.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            record.write_text(run_id)

    def _recall(self, ctx: RunContext[Any]) -> str | None:
        """The run an approved exec call parked: from the deferred results' metadata, else from ``state_dir``."""
        meta = ctx.tool_call_metadata
        if isinstance(meta, dict) and isinstance(meta.get("runId"), str):
            return str(meta["runId"])
        record = self._record(ctx.tool_call_id) if ctx.tool_call_id else None
        if record is not None and record.is_file():
            return record.read_text().strip()
        return None

    async def _approve(self, result: Result) -> Result:
        """Approves the approvals ``result`` shows pending (the ones the application was asked about) and resumes
        the run; approvals it asks for after that are deferred again."""
        if result.status != "waiting" or not result.pending_approvals:
            return result
        answers: dict[str, Decision] = {a["callId"]: "approve" for a in result.pending_approvals}
        return await self.codemode.wait(result.run_id, answers=answers)
