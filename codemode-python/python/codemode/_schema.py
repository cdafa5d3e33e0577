"""Python functions as codemode tools: the input schema from their type hints, the call from a JSON object.

With pydantic installed, a function's parameters go through ``pydantic.TypeAdapter(fn)``: its JSON Schema is the
tool's input schema and its validator converts the program's arguments (models, dates, coercions) before the call.
Without pydantic, a documented subset of hints is translated by hand (see ``schema_of``) and the engine's own JSON
Schema check is the only validation; the function gets the JSON values as they are.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import json
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

try:  # pydantic is optional: it gives richer schemas, validation and result conversion.
    import pydantic
    import pydantic_core
except ImportError:  # pragma: no cover - exercised by the no-pydantic test in a subprocess
    pydantic = None  # type: ignore[assignment]
    pydantic_core = None  # type: ignore[assignment]

__all__ = ["Tool", "tool"]



class _Validated:
    """Calls a function through its pydantic TypeAdapter, which validates and converts the arguments first."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        assert pydantic is not None
        self.adapter: Any = pydantic.TypeAdapter(fn)  # type: ignore[arg-type]  # a callable: its arguments

    def schema(self) -> dict[str, Any]:
        return dict(self.adapter.json_schema())

    def call(self, args: dict[str, Any]) -> Any:
        assert pydantic_core is not None
        return self.adapter.validate_python(pydantic_core.ArgsKwargs((), args))


@dataclasses.dataclass(frozen=True)
class Tool:
    """A Python function offered to programs as an async global (build one with :func:`tool`).

    ``read_only`` marks a tool that changes nothing (policy ``writes`` rules skip it); ``replay_safe`` one that may
    run in a ``restartSafe`` cell; ``sequential`` one whose calls never overlap other calls of the run.
    """

    fn: Callable[..., Any]
    name: str
    description: str
    parameters: dict[str, Any]
    read_only: bool = False
    replay_safe: bool = False
    sequential: bool = False
    # pydantic's validate-and-call of the function, when pydantic is installed.
    _validated: _Validated | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def is_async(self) -> bool:
        """Whether the function is a coroutine function (awaited on the caller's event loop)."""
        return inspect.iscoroutinefunction(self.fn)

    def definition(self) -> dict[str, Any]:
        """The engine's tool definition (camelCase JSON, as ``ToolDefinition`` deserializes it)."""
        definition: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
            "replaySafe": self.replay_safe,
        }
        if self.read_only:
            definition["effect"] = "read"
        if self.sequential:
            definition["executionMode"] = "sequential"
        return definition

    def invoke(self, args: dict[str, Any]) -> Any:
        """Calls the function with the program's arguments (a coroutine for an async function)."""
        if self._validated is not None:
            return self._validated.call(args)
        return self.fn(**args)


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    replay_safe: bool = False,
    sequential: bool = False,
) -> Any:
    """Makes ``fn`` a :class:`Tool`; usable bare (``tool(fn)``) or as a decorator (``@tool(read_only=True)``).

    The input schema comes from the type hints, the description from the docstring unless given.

    Raises:
        TypeError: a parameter is positional-only or variadic, or (without pydantic) a hint outside the subset.
    """

    def make(f: Callable[..., Any]) -> Tool:
        return _make_tool(f, name, description, read_only, replay_safe, sequential)

    if fn is None:
        return make
    return make(fn)


def _make_tool(
    fn: Callable[..., Any],
    name: str | None,
    description: str | None,
    read_only: bool,
    replay_safe: bool,
    sequential: bool,
) -> Tool:
    if not callable(fn):
        raise TypeError(f"a tool is a function, not {type(fn).__name__}")
    signature = inspect.signature(fn)
    for parameter in signature.parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD, parameter.POSITIONAL_ONLY):
            raise TypeError(
                f"tool {fn.__name__}: parameter {parameter.name} must be a named parameter (programs call a tool with "
                "one object of named arguments)"
            )
    validated = _Validated(fn) if pydantic is not None else None
    parameters = validated.schema() if validated is not None else schema_of(fn)
    return Tool(
        fn=fn,
        name=name or str(getattr(fn, "__name__", "tool")),
        description=description if description is not None else inspect.getdoc(fn) or "",
        parameters=parameters,
        read_only=read_only,
        replay_safe=replay_safe,
        sequential=sequential,
        _validated=validated,
    )


def as_tool(item: Callable[..., Any] | Tool) -> Tool:
    """A :class:`Tool` for a plain function; a Tool as it is."""
    return item if isinstance(item, Tool) else _make_tool(item, None, None, False, False, False)


def schema_of(fn: Callable[..., Any]) -> dict[str, Any]:
    """The input schema of ``fn`` without pydantic, from the documented subset of hints.

    The subset: ``str``, ``int``, ``float``, ``bool``, ``None``, ``Any`` (or no hint), ``list[X]``/``Sequence[X]``,
    ``tuple[X, ...]``, ``dict[str, X]``/``Mapping[str, X]``, ``X | Y``/``Optional[X]``/``Union``, ``Literal[...]``,
    ``Enum`` subclasses with JSON values, ``TypedDict`` and ``Annotated[X, ...]`` (the first argument). A parameter
    with a default is optional, and its default is in the schema when it is JSON.
    """
    hints = typing.get_type_hints(fn, include_extras=True)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for parameter in inspect.signature(fn).parameters.values():
        where = f"tool {getattr(fn, '__name__', fn)!s}, parameter {parameter.name}"
        schema = _schema(hints.get(parameter.name, Any), where)
        if parameter.default is inspect.Parameter.empty:
            required.append(parameter.name)
        elif _is_json(parameter.default):
            schema = {**schema, "default": parameter.default}
        properties[parameter.name] = schema
    out: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        out["required"] = required
    return out


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _schema(hint: Any, where: str) -> dict[str, Any]:
    if hint is Any or hint is inspect.Parameter.empty:
        return {}
    if hint is None or hint is type(None):
        return {"type": "null"}
    simple = {str: "string", bool: "boolean", int: "integer", float: "number"}
    if hint in simple:
        return {"type": simple[hint]}
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Annotated:
        return _schema(args[0], where)
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin is typing.Union or origin is types.UnionType:
        return {"anyOf": [_schema(a, where) for a in args]}
    if origin in (list, Sequence, set, frozenset) or hint in (list, set, frozenset):
        return {"type": "array", "items": _schema(args[0], where)} if args else {"type": "array"}
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": _schema(args[0], where)}
        return {"type": "array", "prefixItems": [_schema(a, where) for a in args], "items": False}
    if origin in (dict, Mapping) or hint is dict:
        if args and args[0] is not str:
            raise TypeError(f"{where}: a dict's keys must be str (JSON object keys)")
        return {"type": "object", "additionalProperties": _schema(args[1], where)} if args else {"type": "object"}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        values = [member.value for member in hint]
        if all(_is_json(v) for v in values):
            return {"enum": values}
    if isinstance(hint, type) and typing.is_typeddict(hint):
        fields = typing.get_type_hints(hint, include_extras=True)
        required_keys = getattr(hint, "__required_keys__", frozenset(fields))
        typed: dict[str, Any] = {
            "type": "object",
            "properties": {k: _schema(v, f"{where}.{k}") for k, v in fields.items()},
        }
        keys = [k for k in fields if k in required_keys]
        if keys:
            typed["required"] = keys
        return typed
    raise TypeError(
        f"{where}: the hint {hint!r} is outside the subset codemode understands without pydantic; install pydantic "
        "(its TypeAdapter covers models, dataclasses and more) or use str, int, float, bool, None, list, dict, "
        "Literal, Enum, TypedDict or a union of them"
    )


def to_json(value: Any) -> str:
    """A tool's return value as JSON text (pydantic's serializer when installed: models, dataclasses, dates)."""
    if pydantic_core is not None:
        return pydantic_core.to_json(value).decode()
    return json.dumps(value, default=_default)


def _default(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"a tool returned {type(value).__name__}, which is not JSON (return dicts, lists and scalars)")


def validation_error(error: BaseException) -> bool:
    """Whether ``error`` is pydantic's argument validation error (the program passed wrong arguments)."""
    return pydantic_core is not None and isinstance(error, pydantic_core.ValidationError)
