"""The pydantic-ai toolset, offline: FunctionModel and TestModel drive an Agent through exec and wait, and a write
the policy asks about ends the run with DeferredToolRequests that a second process continues."""

from __future__ import annotations

import pathlib
import subprocess
import sys

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.tools import DeferredToolRequests

from codemode.pydantic_ai import CodeModeToolset

import agent_app

HERE = pathlib.Path(__file__).resolve().parent


def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


async def test_the_agent_sees_exec_and_wait_with_the_exec_description():
    toolset = CodeModeToolset([add])
    seen: dict[str, str] = {}

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.update({t.name: t.description or "" for t in info.function_tools})
        returns = [p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
        if not returns:
            return ModelResponse(parts=[ToolCallPart("exec", {"title": "Add", "code": "return await add({a: 2, b: 3})"})])
        return ModelResponse(parts=[TextPart(f"sum {returns[-1].content['value']}")])

    result = await Agent(FunctionModel(model), toolsets=[toolset]).run("add 2 and 3")
    assert result.output == "sum 5"
    assert set(seen) == {"exec", "wait"}
    exec_spec = next(s for s in toolset.codemode.surface() if s["name"] == "exec")
    assert seen["exec"] == exec_spec["description"]
    toolset.codemode.close()


async def test_test_model_calls_the_tools_with_schema_valid_arguments():
    toolset = CodeModeToolset([add])
    result = await Agent(TestModel(call_tools=["exec"]), toolsets=[toolset]).run("go")
    # TestModel makes up arguments from the schema: the engine answers them (a completed or failed result) and the
    # run ends normally.
    assert '"exec"' in result.output
    toolset.codemode.close()


async def test_deferred_approval_is_continued_by_another_process(tmp_path):
    state, counters, history = tmp_path / "state", tmp_path / "counters", tmp_path / "history.json"
    counters.mkdir()
    tools = agent_app.toolset(state, counters)
    result = await agent_app.agent(tools).run("send the data")
    requests = result.output
    assert isinstance(requests, DeferredToolRequests)
    [call] = requests.approvals
    assert call.tool_name == "exec"
    meta = requests.metadata[call.tool_call_id]
    assert [a["tool"] for a in meta["approvals"]] == ["send"]
    assert (counters / "read_data").read_text() == "1"
    assert not (counters / "send").exists()
    history.write_bytes(result.all_messages_json())
    tools.codemode.close()

    child = subprocess.run(
        [sys.executable, str(HERE / "agent_app.py"), str(state), str(counters), str(history), call.tool_call_id],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "done: sent#1 (data#1)"
    # The read ran once, in the first process: the resumed program got its result from the journal.
    assert (counters / "read_data").read_text() == "1"
    assert (counters / "send").read_text() == "1"


async def test_the_toolset_offers_mcp_servers_beside_python_functions():
    everything = HERE.parent.parent / "mcp-servers/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
    toolset = CodeModeToolset([add], mcp_servers={"everything": {"command": "node", "args": [str(everything), "stdio"]}})
    code = 'const e = await MCP.everything.echo({ message: "hi" }); return [await add({a: 1, b: 2}), e.content[0].text]'

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
        if not returns:
            return ModelResponse(parts=[ToolCallPart("exec", {"title": "Both", "code": code})])
        return ModelResponse(parts=[TextPart(returns[-1].content)])

    # The model reads a result that read MCP content as text between external-content markers.
    result = await Agent(FunctionModel(model), toolsets=[toolset]).run("add and echo")
    assert result.output.startswith("SECURITY NOTICE"), result.output
    assert '<<<EXTERNAL_UNTRUSTED_CONTENT id="' in result.output
    assert '"value":[3,"Echo: hi"]' in result.output
    toolset.codemode.close()
