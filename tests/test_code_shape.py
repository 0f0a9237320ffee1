"""The shape rules of the code base, checked: small modules, short functions, one declared API surface."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from partbuild.api.client import HttpClient
from partbuild.api.service import Service
from partbuild.api.surface import OPERATIONS, Client

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ["state", "orchestrator", "api", "examples", "migrations"]
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 60


def _sources() -> list[Path]:
    return sorted(
        path for folder in PRODUCT for path in (ROOT / folder).rglob("*.py") if not path.name.endswith("_pb2.py")
    )


def test_no_module_over_800_lines() -> None:
    sizes = {str(path.relative_to(ROOT)): len(path.read_text().splitlines()) for path in _sources()}
    long = {name: lines for name, lines in sizes.items() if lines > MAX_MODULE_LINES}
    assert long == {}


def test_no_function_over_60_lines() -> None:
    long = {}
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = lines
    assert long == {}


def test_dependencies_point_one_way() -> None:
    """state imports neither orchestrator nor api; orchestrator does not import api."""
    forbidden = {"state": ("partbuild.orchestrator", "partbuild.api"), "orchestrator": ("partbuild.api",)}
    found = []
    for folder, names in forbidden.items():
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(names):
                    found.append(f"{path.relative_to(ROOT)} imports {node.module}")
    assert found == []


@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_the_service_implements_each_declared_operation_with_its_signature(name: str) -> None:
    """The in-process back end answers exactly the declared calls: same parameters, same defaults."""
    declared = inspect.signature(getattr(Client, name))
    implemented = inspect.signature(getattr(Service, name))
    assert [(p.name, p.default) for p in implemented.parameters.values()] == [
        (p.name, p.default) for p in declared.parameters.values()
    ]
    derived = inspect.signature(getattr(HttpClient, name))
    assert list(derived.parameters) == list(declared.parameters)
