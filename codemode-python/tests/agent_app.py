"""The pydantic-ai application of the deferred-approval tests, importable by the test and runnable as the second
process: an Agent over a FunctionModel (offline, scripted) with a CodeModeToolset whose policy asks about writes.

``python agent_app.py STATE_DIR COUNTER_DIR HISTORY_FILE TOOL_CALL_ID`` continues the stored run with the
exec call approved and prints the agent's output.
"""

from __future__ import annotations

import asyncio
import pathlib
import sys
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults

import codemode
from codemode.pydantic_ai import CodeModeToolset

PROGRAM = "const data = await read_data({}); const r = await send({ text: data }); return `${r} (${data})`;"


def _bump(counters: pathlib.Path, name: str) -> int:
    path = counters / name
    n = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(n))
    return n


def toolset(state_dir: pathlib.Path, counters: pathlib.Path) -> CodeModeToolset:
    def read_data() -> str:
        """Reads the data to send."""
        return f"data#{_bump(counters, 'read_data')}"

    def send(text: str) -> str:
        """Sends a text to the team (a write: asks for approval)."""
        return f"sent#{_bump(counters, 'send')}"

    return CodeModeToolset(
        [codemode.tool(read_data, read_only=True), send],
        policy={"default": "allow", "writes": "ask"},
        state_dir=state_dir,
    )


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Calls exec once with PROGRAM, then answers with what the tool returned."""
    returns = [p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
    if not returns:
        return ModelResponse(parts=[ToolCallPart("exec", {"title": "Send the data", "code": PROGRAM}, "call-1")])
    content: Any = returns[-1].content
    value = content.get("value") if isinstance(content, dict) else content
    return ModelResponse(parts=[TextPart(f"done: {value}")])


def agent(tools: CodeModeToolset) -> Agent[None, str | DeferredToolRequests]:
    return Agent(FunctionModel(model), output_type=[str, DeferredToolRequests], toolsets=[tools])


async def resume(state_dir: pathlib.Path, counters: pathlib.Path, history: pathlib.Path, call_id: str) -> None:
    messages = ModelMessagesTypeAdapter.validate_json(history.read_bytes())
    result = await agent(toolset(state_dir, counters)).run(
        message_history=messages, deferred_tool_results=DeferredToolResults(approvals={call_id: True})
    )
    print(result.output)


if __name__ == "__main__":
    state, counters, history, call_id = sys.argv[1:5]
    asyncio.run(resume(pathlib.Path(state), pathlib.Path(counters), pathlib.Path(history), call_id))
