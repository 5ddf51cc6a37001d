"""Every core module has a sorted, complete __all__, and the core stays pure (DESIGN.md §6)."""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
from pathlib import Path

import pytest

import boxmq.core

CORE = Path(boxmq.core.__file__).parent
MODULES = sorted(f"boxmq.core.{path.stem}" for path in CORE.glob("*.py") if path.stem != "__init__")
ALLOWED = {"boxmq.core", "boxmq.model", "boxmq.errors"}
FORBIDDEN = {"asyncio", "threading", "os", "time", "socket", "subprocess", "pathlib"}


@pytest.mark.parametrize("name", ["boxmq.core", *MODULES])
def test_all_is_sorted_and_complete(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert exported == sorted(exported, key=lambda n: (not n[0].isupper(), n))
    public = {
        attr
        for attr, value in vars(module).items()
        if not attr.startswith("_")
        and (inspect.isclass(value) or inspect.isfunction(value))
        and value.__module__ == name
    }
    assert public <= set(exported)
    for attr in exported:
        assert hasattr(module, attr)


def test_the_package_re_exports_the_engine_api() -> None:
    assert {"QueueEngine", "Ready", "Effect", "check_holder", "Dispatch"} <= set(boxmq.core.__all__)


@pytest.mark.parametrize("path", sorted(CORE.glob("*.py")), ids=lambda p: p.name)
def test_core_imports_only_the_stdlib_model_and_errors(path: Path) -> None:
    tree = ast.parse(path.read_text())
    first = tree.body[1 if ast.get_docstring(tree) else 0]
    assert isinstance(first, ast.ImportFrom)
    assert first.module == "__future__"
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names = [node.module]
        for module in names:
            top = module.split(".")[0]
            if top == "boxmq":
                assert any(module == a or module.startswith(a + ".") for a in ALLOWED), module
            else:
                assert top in sys.stdlib_module_names, module
                assert top not in FORBIDDEN, module
