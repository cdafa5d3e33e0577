"""Fixtures of the codemode Python suite: engines built from the installed wheel (its own worker binary), closed
after each test, and the workspace's adversarial corpus."""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import codemode

# The adversarial corpus the Rust suite runs (codemode/tests/corpus), shared rather than copied.
CORPUS = pathlib.Path(__file__).resolve().parents[2] / "codemode" / "tests" / "corpus"


@pytest.fixture
def make() -> Iterator[Callable[..., codemode.CodeMode]]:
    """Builds engines (``make(tools, **options)``) and closes them when the test ends."""
    built: list[codemode.CodeMode] = []

    def build(tools: Any = (), **options: Any) -> codemode.CodeMode:
        engine = codemode.CodeMode(tools, **options)
        built.append(engine)
        return engine

    yield build
    for engine in built:
        engine.close()
