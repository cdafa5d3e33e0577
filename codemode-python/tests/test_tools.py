"""Python functions as tools: sync and async, their schemas and descriptions, errors, sync and concurrent use."""

from __future__ import annotations

import asyncio
import threading
from typing import Literal, Optional, TypedDict

import pydantic
import pytest

import codemode
from codemode import _schema


def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


async def mul(a: int, b: int) -> int:
    """Multiplies two integers."""
    await asyncio.sleep(0)
    return a * b


async def test_sync_and_async_tools(make):
    cm = make([add, mul])
    result = await cm.exec("return [await add({a: 2, b: 3}), await mul({a: 2, b: 4})]", title="Add and multiply")
    assert type(result.status) is str and result.status == "completed"
    assert isinstance(result, codemode.Completed)
    assert result.value == [5, 8]
    assert result.raw["status"] == "completed" and result.raw["value"] == [5, 8]


async def test_async_tools_run_on_the_loop_and_sync_tools_on_threads(make):
    loop = asyncio.get_running_loop()
    loop_thread = threading.get_ident()
    seen: dict[str, int] = {}
    started = asyncio.Event()
    released = threading.Event()

    def blocking() -> str:
        """Waits until a task on the event loop lets it go."""
        seen["sync"] = threading.get_ident()
        loop.call_soon_threadsafe(started.set)
        assert released.wait(timeout=60)
        return "released"

    async def on_loop() -> str:
        """Runs on the caller's event loop."""
        seen["async"] = threading.get_ident()
        return "loop"

    async def release() -> None:
        # The sync tool blocks its own thread only: this task on the loop still runs, and frees it.
        await started.wait()
        released.set()

    cm = make([blocking, on_loop])
    releaser = asyncio.create_task(release())
    result = await cm.exec("return [await blocking({}), await on_loop({})]", title="Threads")
    await releaser
    assert result.value == ["released", "loop"]
    assert seen["async"] == loop_thread
    assert seen["sync"] != loop_thread


async def test_a_raising_tool_is_a_catchable_error_with_code_and_message(make):
    def lookup(key: str) -> str:
        """Looks a key up."""
        if key == "missing":
            raise codemode.ToolError(f"no entry {key}", code="not_found")
        raise ValueError("the store is down")

    cm = make([lookup])
    code = """
    const out = [];
    for (const key of ['missing', 'other']) {
      try { await lookup({ key }); } catch (err) { out.push([err.code, err.message]); }
    }
    return out;
    """
    result = await cm.exec(code, title="Errors")
    assert result.status == "completed"
    assert result.value == [["not_found", "no entry missing"], ["tool_error", "ValueError: the store is down"]]

    uncaught = await cm.exec("return await lookup({ key: 'other' })", title="Uncaught")
    assert isinstance(uncaught, codemode.Failed)
    assert uncaught.code == "internal_error" and uncaught.error_kind == "guest_error"
    assert "the store is down" in uncaught.error


async def test_arguments_are_checked_against_the_hints(make):
    cm = make([add])
    result = await cm.exec(
        "try { await add({ a: 'two', b: 3 }); return 'ran'; } catch (err) { return [err.code, err.message]; }",
        title="Bad arguments",
    )
    assert result.status == "completed"
    code, message = result.value
    assert code in ("invalid_input", "input_contract")
    assert "a" in message


class Point(pydantic.BaseModel):
    x: int
    y: int


async def test_pydantic_models_in_and_out(make):
    def shift(point: Point, dx: int = 1) -> Point:
        """Moves a point right."""
        assert isinstance(point, Point)
        return Point(x=point.x + dx, y=point.y)

    cm = make([shift])
    result = await cm.exec("return await shift({ point: { x: 1, y: 2 }, dx: 10 })", title="Models")
    assert result.value == {"x": 11, "y": 2}


def test_schema_and_description_come_from_hints_and_docstring(make):
    cm = make([add])
    schema = cm.tools["add"].parameters
    assert schema["properties"]["a"]["type"] == "integer"
    assert schema["required"] == ["a", "b"]
    exec_tool = next(t for t in cm.surface() if t["name"] == "exec")
    assert "add" in exec_tool["description"]
    assert cm.tools["add"].description == "Adds two integers."


class Filter(TypedDict):
    field: str
    value: Optional[float]


def test_the_schema_subset_without_pydantic():
    def search(query: str, limit: int = 10, tags: list[str] | None = None, mode: Literal["a", "b"] = "a",
               weights: dict[str, float] | None = None, where: Filter | None = None) -> list[str]:
        return []

    schema = _schema.schema_of(search)
    assert schema["required"] == ["query"]
    props = schema["properties"]
    assert props["query"] == {"type": "string"}
    assert props["limit"] == {"type": "integer", "default": 10}
    assert props["tags"]["anyOf"][0] == {"type": "array", "items": {"type": "string"}}
    assert props["mode"] == {"enum": ["a", "b"], "default": "a"}
    assert props["weights"]["anyOf"][0] == {"type": "object", "additionalProperties": {"type": "number"}}
    assert props["where"]["anyOf"][0]["properties"]["value"] == {"anyOf": [{"type": "number"}, {"type": "null"}]}

    def odd(when: threading.Thread) -> None:
        pass

    with pytest.raises(TypeError, match="parameter when"):
        _schema.schema_of(odd)


def test_exec_sync_runs_sync_and_async_tools(make):
    cm = make([add, mul])
    result = cm.exec_sync("return (await add({a: 1, b: 2})) * (await mul({a: 3, b: 1}))", title="Sync")
    assert result.status == "completed" and result.value == 9


async def test_exec_sync_inside_a_running_loop(make):
    cm = make([mul])
    result = cm.exec_sync("return await mul({a: 6, b: 7})", title="Nested")
    assert result.value == 42


async def test_concurrent_execs_from_one_loop(make):
    cm = make([add, mul])
    results = await asyncio.gather(
        *(cm.exec(f"return await add({{a: {i}, b: await mul({{a: {i}, b: 2}})}})", title=f"Cell {i}") for i in range(32))
    )
    assert [r.value for r in results] == [3 * i for i in range(32)]


def test_tools_need_named_parameters():
    def variadic(*args: int) -> int:
        return 0

    with pytest.raises(TypeError, match="named parameter"):
        codemode.CodeMode([variadic])


def test_unknown_limits_are_refused():
    with pytest.raises(ValueError, match="unknown limits"):
        codemode.CodeMode([add], limits={"timeout": 5})
