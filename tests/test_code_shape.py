"""The shape rules of the code base, checked: small modules, short functions, one declared API surface."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from graphlib import TopologicalSorter
from pathlib import Path

import pytest
from pydantic import BaseModel

from partbuild.api import models
from partbuild.api.client import HttpClient
from partbuild.api.models.common import StrictRequest
from partbuild.api.service import Service
from partbuild.api.service.base import ServiceBase
from partbuild.api.surface import OPERATIONS, RESOURCES, Client

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


# What each part of state/ may import of the others: the pure rules nothing, the fold the rules, the log the
# fold and the database's plumbing (the schema, the dialect seam, engines, migrations), the reads of the state
# all of those, the operational stores the rules, the log and the plumbing, the state store the reads too;
# `database.py` (the handle of one database: the log and the stores) stands above them all.
PLUMBING = {"schema", "db", "engine", "frozen_writer", "migrate"}
STATE_LAYERS = {
    "rules": set(),
    "fold": {"rules"},
    "log": {"rules", "fold", *PLUMBING},
    "queries": {"rules", "fold", "log", *PLUMBING},
    "ops": {"rules", "log", *PLUMBING},
    "store": {"rules", "fold", "log", "queries", *PLUMBING},
    **{module: PLUMBING for module in PLUMBING},
    "database": {"fold", "log", "ops", "store", *PLUMBING},
}


def _state_imports(path: Path) -> set[str]:
    """The state/ folders (or top-level modules) `path` imports, at any depth of its code."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
        found |= {name.split(".")[2] for name in names if name.startswith("partbuild.state.")}
    return found


def test_the_folders_of_state_import_only_those_below_them() -> None:
    """No import circle between the folders of state/: each imports only the folders its layer allows."""
    found = []
    for part, allowed in STATE_LAYERS.items():
        folder = ROOT / "state" / part
        for path in sorted(folder.rglob("*.py")) if folder.is_dir() else [folder.with_suffix(".py")]:
            for imported in sorted(_state_imports(path) - allowed - {part}):
                found.append(f"{path.relative_to(ROOT)} imports partbuild.state.{imported}")
    assert found == []
    parts = {path.stem for path in (ROOT / "state").iterdir() if path.name not in ("__pycache__", "__init__.py")}
    assert parts == set(STATE_LAYERS)  # a new part of state/ says where it stands


def _runtime_imports(path: Path, package: str) -> list[tuple[str, list[str]]]:
    """What `path` imports from `package` when it runs (at any depth of its code, not under TYPE_CHECKING):
    (the module below `package`, dotted; the names imported from it), one pair per `from ... import`."""
    tree = ast.parse(path.read_text())
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for inner in ast.walk(node)
    }
    return [
        (node.module.removeprefix(package).removeprefix("."), [alias.name for alias in node.names])
        for node in ast.walk(tree)
        if id(node) not in typing_only
        and isinstance(node, ast.ImportFrom)
        and node.module is not None
        and (node.module == package or node.module.startswith(f"{package}."))
    ]


def _module_graph(folder: Path, package: str) -> dict[str, set[str]]:
    """Each module of `folder` (dotted; a package by its name) -> the modules of it that it imports. `from a
    import b` depends on the module `a.b` when there is one (not on `a`'s `__init__`), else on `a`."""
    paths = {
        ".".join(path.relative_to(folder).with_suffix("").parts).removesuffix("__init__").rstrip("."): path
        for path in folder.rglob("*.py")
        if "__pycache__" not in path.parts
    }
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        deps = set()
        for module, imported in _runtime_imports(path, package):
            submodules = {f"{module}.{alias}".lstrip(".") for alias in imported} & set(paths)
            deps |= submodules or ({module} & set(paths))
        graph[name] = deps - {name, ""}
    return graph


CIRCLE_FREE = [f"state/{p.name}" for p in sorted((ROOT / "state").iterdir()) if (p / "__init__.py").exists()]


@pytest.mark.parametrize("folder", [*CIRCLE_FREE, "orchestrator", "api"])
def test_the_modules_of_each_folder_import_no_circle(folder: str) -> None:
    """Within a folder too, imports go one way (a circle is a CycleError naming it), lazy imports included."""
    graph = _module_graph(ROOT / folder, "partbuild." + folder.replace("/", "."))
    TopologicalSorter(graph).prepare()


@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_the_service_implements_each_declared_operation_with_its_signature(name: str) -> None:
    """The in-process back end answers exactly the declared calls: same parameters, same defaults.

    Each operation is implemented in its resource's service module (the module of the same name as
    the one that declares it), and the HTTP client derives it from the declaration.
    """
    declared = inspect.signature(getattr(Client, name))
    implemented = inspect.signature(getattr(Service, name))
    assert [(p.name, p.default) for p in implemented.parameters.values()] == [
        (p.name, p.default) for p in declared.parameters.values()
    ]
    assert getattr(Service, name).__module__ == f"partbuild.api.service.{OPERATIONS[name].resource}"
    derived = getattr(HttpClient, name)
    assert list(inspect.signature(derived).parameters) == list(declared.parameters)
    assert derived.__module__ == "partbuild.api.client"


def test_each_resource_has_its_declarations_models_and_service_under_one_name() -> None:
    """`Service` is one class per resource, in the resources' order, each deriving from `ServiceBase` only."""
    names = list(RESOURCES)
    assert [base.__module__ for base in Service.__bases__] == [f"partbuild.api.service.{name}" for name in names]
    assert all(base.__bases__ == (ServiceBase,) for base in Service.__bases__)
    for name in names:
        importlib.import_module(f"partbuild.api.models.{name}")


def test_no_two_resource_services_define_the_same_name() -> None:
    """`Service` composes the resources' classes: a helper named twice would silently shadow the other's."""
    owners: dict[str, list[str]] = {}
    for base in Service.__bases__:
        for name in vars(base):
            if not name.startswith("__"):
                owners.setdefault(name, []).append(base.__name__)
    assert {name: classes for name, classes in owners.items() if len(classes) > 1} == {}


def _api_models() -> list[type[BaseModel]]:
    found = []
    for module in pkgutil.iter_modules(models.__path__):
        loaded = importlib.import_module(f"partbuild.api.models.{module.name}")
        found += [
            value
            for value in vars(loaded).values()
            if isinstance(value, type) and issubclass(value, BaseModel) and value.__module__ == loaded.__name__
        ]
    return found


def test_api_models_say_which_way_they_go() -> None:
    """A request model (strict) ends in `Request`, a response model in `Out`: neither reads as a state record."""
    misnamed = [
        model.__name__
        for model in _api_models()
        if model is not StrictRequest
        and not model.__name__.endswith("Request" if issubclass(model, StrictRequest) else "Out")
    ]
    assert misnamed == []
