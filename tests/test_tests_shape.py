"""The shape rules of the tests themselves, checked: small modules, kits imported by name and listed for
ruff, no test module importing another, and every marker a test module uses registered."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
KITS = TESTS / "kits"
MAX_MODULE_LINES = 800


def _python_files() -> list[Path]:
    return sorted(path for path in TESTS.rglob("*.py") if "data" not in path.relative_to(TESTS).parts)


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def _pyproject() -> dict:  # type: ignore[type-arg]
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_no_test_module_or_kit_over_800_lines() -> None:
    sizes = {_name(path): len(path.read_text().splitlines()) for path in _python_files()}
    assert {name: lines for name, lines in sizes.items() if lines > MAX_MODULE_LINES} == {}


def test_test_modules_import_kits_never_each_other_nor_conftest() -> None:
    """A helper two modules share lives in tests/kits/ and is imported by its module name."""
    found = {}
    for path in _python_files():
        for module in sorted(_imported_modules(path)):
            top = module.split(".")[0]
            if top.startswith("test_") or top in ("conftest", "tests"):
                found[_name(path)] = module
    assert found == {}


def test_helpers_live_in_the_kits_folder() -> None:
    """Beside the test modules only conftest.py; every kit is a plain module, importable by its name."""
    loose = [_name(path) for path in TESTS.glob("*.py") if not path.name.startswith("test_")]
    assert loose == ["tests/conftest.py"]
    assert [_name(path) for path in KITS.glob("test_*.py")] == []
    assert not (KITS / "__init__.py").exists()


def test_ruff_sorts_every_kit_as_a_local_module() -> None:
    known = _pyproject()["tool"]["ruff"]["lint"]["isort"]["known-local-folder"]
    assert known == sorted(path.stem for path in KITS.glob("*.py"))


def test_pytest_finds_the_kits_and_registers_every_marker_the_tests_use() -> None:
    options = _pyproject()["tool"]["pytest"]["ini_options"]
    assert options["pythonpath"] == [".", "tests/kits"]
    assert "--strict-markers" in options["addopts"] and "--import-mode=importlib" in options["addopts"]
    registered = {line.split(":")[0] for line in options["markers"]}
    assert registered == {"process", "spark", "browser", "postgres"}
    used: set[str] = set()
    for path in _python_files():
        for node in ast.walk(ast.parse(path.read_text())):
            chain = node
            if isinstance(chain, ast.Attribute) and isinstance(chain.value, ast.Attribute):
                inner = chain.value
                if isinstance(inner.value, ast.Name) and inner.value.id == "pytest" and inner.attr == "mark":
                    used.add(chain.attr)
    builtin = {"parametrize", "skip", "skipif", "xfail", "usefixtures", "filterwarnings"}
    assert used - builtin <= registered
