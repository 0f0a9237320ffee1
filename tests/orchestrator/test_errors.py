"""`root_cause`: one bounded line naming the innermost cause of an exception, without Spark.

Python's own chains, messages of many lines or none, the bound; py4j's Java chains through a stand-in
for the JVM's throwables (alive, and gone); pyspark's exceptions through a stand-in class. What a real
Spark failure reads as: tests/e2e/test_errors_spark.py.
"""

from __future__ import annotations

import ast
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from partbuild.orchestrator import errors
from partbuild.orchestrator.errors import MAX_ROOT_CAUSE, first_line, root_cause

STACK = "\n".join(f"\tat org.apache.Foo.bar(Foo.java:{n})" for n in range(30))


def _raised(make: Any) -> BaseException:
    try:
        make()
    except BaseException as exc:
        return exc
    raise AssertionError("nothing raised")


def test_a_plain_exception_is_its_type_and_first_line() -> None:
    assert root_cause(ValueError("bad value")) == "ValueError: bad value"
    assert root_cause(KeyError("k")) == "KeyError: 'k'"


def test_the_innermost_cause_of_an_explicit_chain_is_named() -> None:
    def fail() -> None:
        try:
            raise OSError("disk full")
        except OSError as exc:
            raise RuntimeError("job failed") from exc

    assert root_cause(_raised(fail)) == "OSError: disk full"


def test_an_implicit_context_is_followed_but_not_a_suppressed_one() -> None:
    def implicit() -> None:
        try:
            {}["missing"]
        except KeyError:
            raise RuntimeError("lookup failed")  # noqa: B904 (the implicit context is the point)

    def suppressed() -> None:
        try:
            {}["missing"]
        except KeyError:
            raise RuntimeError("lookup failed") from None

    assert root_cause(_raised(implicit)) == "KeyError: 'missing'"
    assert root_cause(_raised(suppressed)) == "RuntimeError: lookup failed"


def test_a_cycle_in_the_chain_ends() -> None:
    first, second = ValueError("one"), ValueError("two")
    first.__cause__, second.__cause__ = second, first
    assert root_cause(first) in ("ValueError: one", "ValueError: two")


def test_a_message_of_many_lines_gives_its_first_meaningful_line() -> None:
    assert root_cause(RuntimeError(f"\n\n  write failed: /data/x  \n{STACK}")) == "RuntimeError: write failed: /data/x"


def test_an_empty_message_gives_the_type_alone() -> None:
    assert root_cause(RuntimeError()) == "RuntimeError"
    assert root_cause(RuntimeError("  \n  ")) == "RuntimeError"


def test_the_line_is_bounded_and_cut_with_an_ellipsis() -> None:
    line = root_cause(ValueError("x" * 5_000))
    assert len(line) == MAX_ROOT_CAUSE and line.endswith("...") and line.startswith("ValueError: xxx")
    assert root_cause(ValueError("x" * 100), limit=20) == "ValueError: xxxxx..."


def test_control_characters_never_break_the_line() -> None:
    line = root_cause(ValueError("a\tb\rc"))
    assert line == "ValueError: a b" and "\n" not in line


def test_str_that_raises_falls_back_to_the_arguments() -> None:
    class Broken(Exception):
        def __str__(self) -> str:
            raise ConnectionError("the JVM is gone")

    assert root_cause(Broken("An error occurred while calling o1.parquet.\n")) == (
        "Broken: An error occurred while calling o1.parquet."
    )


def test_first_line_of_a_python_traceback_is_the_exception_it_ends_with() -> None:
    message = (
        "[PYTHON_EXCEPTION] An exception was thrown from the Python worker: Traceback (most recent call last):\n"
        '  File "worker.py", line 1, in udf\n    raise ValueError("boom")\n    ^^^^^\nValueError: boom\n'
        " SQLSTATE: 38000"
    )
    assert first_line(message) == "ValueError: boom"
    assert first_line("\nJVM stacktrace:\norg.Foo") == "org.Foo"
    assert first_line("Py4JJavaError: An error occurred while calling o1.parquet.\n: x.Y: why\n") == "x.Y: why"
    assert first_line(f"An error occurred while calling o1.parquet.\n{STACK}") == (
        "An error occurred while calling o1.parquet."
    )
    assert first_line(None) == first_line("") == ""


# ----------------------------------------------------------------- py4j's Java chains, without a JVM


class FakeThrowable:
    """What py4j hands over for a Java throwable: getClass().getName(), getMessage(), getCause()."""

    _target_id = "o1"

    def __init__(self, name: str, message: str | None, cause: FakeThrowable | None = None, *, dead: bool = False):
        self.name, self.message, self.cause, self.dead = name, message, cause, dead

    def _alive(self) -> None:
        if self.dead:
            raise ConnectionRefusedError("py4j: the gateway is closed")

    def getClass(self) -> Any:
        self._alive()
        return types.SimpleNamespace(getName=lambda: self.name)

    def getMessage(self) -> str | None:
        self._alive()
        return self.message

    def getCause(self) -> FakeThrowable | None:
        self._alive()
        return self.cause


def _py4j_error(throwable: FakeThrowable) -> BaseException:
    from py4j.protocol import Py4JJavaError  # pure Python: no JVM starts

    class Detached(Py4JJavaError):
        def __str__(self) -> str:  # the real one asks the JVM for the throwable's text and stack trace
            throwable._alive()
            return f"{self.errmsg}: {throwable.name}: {throwable.message}\n{STACK}"

    return Detached("An error occurred while calling o125224.parquet.\n", throwable)


def test_a_java_chain_names_its_innermost_throwable_and_the_spark_condition() -> None:
    inner = FakeThrowable("java.lang.RuntimeException", "file:/d/part-0.parquet is not a Parquet file.\nmore")
    middle = FakeThrowable(
        "org.apache.spark.SparkException",
        "[FAILED_READ_FILE.CANNOT_READ_FILE_FOOTER] Encountered error while reading file file:/d/part-0.parquet.\n"
        + STACK,
        inner,
    )
    outer = FakeThrowable("org.apache.spark.SparkException", "Job aborted due to stage failure", middle)
    assert root_cause(_py4j_error(outer)) == (
        "[FAILED_READ_FILE.CANNOT_READ_FILE_FOOTER] RuntimeException: file:/d/part-0.parquet is not a Parquet file."
    )


def test_a_python_worker_error_gives_the_exception_its_traceback_ends_with() -> None:
    worker = FakeThrowable(
        "org.apache.spark.api.python.PythonException",
        "[PYTHON_EXCEPTION] An exception was thrown from the Python worker: Traceback (most recent call last):\n"
        '  File "worker.py", line 1, in udf\n    raise ValueError("boom")\nValueError: boom\n SQLSTATE: 38000',
    )
    job = FakeThrowable("org.apache.spark.SparkException", "Job aborted due to stage failure", worker)
    assert root_cause(_py4j_error(job)) == "[PYTHON_EXCEPTION] PythonException: ValueError: boom"


def test_a_java_cause_without_a_message_says_where_it_surfaced() -> None:
    chain = FakeThrowable("org.apache.spark.SparkException", "Task failed", FakeThrowable("java.lang.NPE", None))
    assert root_cause(_py4j_error(chain)) == "NPE: (from SparkException: Task failed)"


def test_a_condition_the_message_already_names_is_not_repeated() -> None:
    only = FakeThrowable("org.apache.spark.sql.AnalysisException", "[PATH_NOT_FOUND] Path does not exist: /x.")
    assert root_cause(_py4j_error(only)) == "AnalysisException: [PATH_NOT_FOUND] Path does not exist: /x."


def test_a_dead_jvm_falls_back_to_python_text() -> None:
    line = root_cause(_py4j_error(FakeThrowable("x.Y", "never read", dead=True)))
    assert line == "Detached: An error occurred while calling o125224.parquet."


def test_a_chain_the_jvm_cannot_walk_falls_back_to_the_text_after_py4js_preamble() -> None:
    class Unwalkable(FakeThrowable):
        def getClass(self) -> Any:
            raise ConnectionResetError("py4j: answer lost")

    line = root_cause(_py4j_error(Unwalkable("org.apache.spark.SparkException", "[X.Y] it broke\nmore")))
    assert line == "Detached: org.apache.spark.SparkException: [X.Y] it broke"


def test_a_py4j_error_wrapped_by_the_job_is_still_read_through() -> None:
    error = _py4j_error(FakeThrowable("java.io.IOException", "No space left on device"))
    wrapper = RuntimeError("write failed")
    wrapper.__cause__ = error
    assert root_cause(wrapper) == "IOException: No space left on device"


# ----------------------------------------------------------------- pyspark's exceptions, through a stand-in


class FakePySparkException(Exception):
    """The part of pyspark's PySparkException root_cause reads: getCondition() and getMessage()."""

    def __init__(self, condition: str | None, message: str) -> None:
        super().__init__(message)
        self.condition, self.message = condition, message

    def getCondition(self) -> str | None:
        return self.condition

    def getMessage(self) -> str:
        return self.message + "\n\nJVM stacktrace:\n" + STACK


class AnalysisException(FakePySparkException):
    pass


@pytest.fixture
def fake_pyspark(monkeypatch: pytest.MonkeyPatch) -> None:
    base = types.SimpleNamespace(PySparkException=FakePySparkException)
    monkeypatch.setitem(sys.modules, "pyspark.errors.exceptions.base", base)


@pytest.mark.usefixtures("fake_pyspark")
def test_a_pyspark_exception_gives_its_condition_and_message_without_the_stack() -> None:
    exc = AnalysisException("TABLE_OR_VIEW_NOT_FOUND", "The table `t` cannot be found.\nVerify the spelling.")
    assert root_cause(exc) == "AnalysisException: [TABLE_OR_VIEW_NOT_FOUND] The table `t` cannot be found."
    named = AnalysisException("PATH_NOT_FOUND", "[PATH_NOT_FOUND] Path does not exist: /x.")
    assert root_cause(named) == "AnalysisException: [PATH_NOT_FOUND] Path does not exist: /x."
    assert root_cause(AnalysisException(None, "no condition")) == "AnalysisException: no condition"


@pytest.mark.usefixtures("fake_pyspark")
def test_a_pyspark_exception_whose_getters_fail_falls_back_to_python_text() -> None:
    class Broken(FakePySparkException):
        def getCondition(self) -> str | None:
            raise AssertionError("SparkContext._gateway is None")

        def getMessage(self) -> str:
            raise AssertionError("SparkContext._gateway is None")

    assert root_cause(Broken("X", "what str() says\nmore")) == "Broken: what str() says"


def test_the_module_imports_neither_pyspark_nor_py4j() -> None:
    """A state-only process explains its errors without loading Spark's Python side."""
    tree = ast.parse(Path(errors.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not {name for name in imported if name.split(".")[0] in ("pyspark", "py4j")}
