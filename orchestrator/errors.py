"""What broke, in one line: `root_cause(exc)` names the innermost cause of an exception and its message.

A Spark failure reaches Python as `Py4JJavaError: An error occurred while calling o125224.parquet.`:
what failed (`[FAILED_READ_FILE.CANNOT_READ_FILE_FOOTER]`, the file) is in the Java throwable it
carries and in that throwable's causes. A failed partition's note and a run's error message are read
in tables and lists, so they get one bounded line: the innermost cause's class and the first
meaningful line of its message, and the Spark error condition the chain names when the cause's own
message does not.

Kinds of exceptions, each read without the JVM stack trace:
- py4j's `Py4JJavaError`: its `java_exception` and that throwable's `getCause()` chain, to the innermost.
- pyspark's captured exceptions (`AnalysisException` and the other `CapturedException`s): the Java
  throwable they wrap, as above, else their own error condition and message.
- pyspark's other exceptions (`PySparkException`, Spark Connect's): the error condition and message.
- Python's own: `__cause__` / `__context__` to the innermost, `Type: first line`.

Neither pyspark nor py4j is imported here: an exception of theirs can only exist once they are, so
their classes are looked up in `sys.modules` (a state-only process never loads them). Every call into
the JVM is guarded: it may be gone (the session stopped), and the answer falls back to Python's text.
"""

from __future__ import annotations

import re
import sys
import warnings
from typing import Any

MAX_ROOT_CAUSE = 500
# A Java cause chain (or a Python one) deeper than this is cut: the bound keeps a cycle from looping.
MAX_CHAIN = 32
_ELLIPSIS = "..."
# Spark's error messages start with their condition: "[FAILED_READ_FILE.CANNOT_READ_FILE_FOOTER] ...".
_CONDITION = re.compile(r"^\[([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)\]")
_TRACEBACK = "Traceback (most recent call last):"
# Lines that only introduce what follows: py4j's call, a JVM stack trace, a Python worker's traceback.
_INTRODUCTIONS = (
    "An error occurred while calling",
    "JVM stacktrace:",
    "An exception was thrown from the Python worker",
    _TRACEBACK,
)
_CLASS_PREFIXES = re.compile(r"^(?:[\w.$]+: )*")
_FRAME = re.compile(r"^(?:at [\w.$<>/]+\(|\.\.\. \d+ more$)")  # "at org.Foo.bar(Foo.java:1)", "... 9 more"


def root_cause(exc: BaseException, limit: int = MAX_ROOT_CAUSE) -> str:
    """One line (at most `limit` characters) naming the innermost cause of `exc` and its message."""
    inner = _innermost(exc)
    text = None
    try:
        if _is_py4j_error(inner):
            text = _java_root(getattr(inner, "java_exception", None))
        elif _is_pyspark_error(inner):
            text = _pyspark_root(inner)
    except Exception:  # never let the explanation of an error raise one of its own
        text = None
    return _bounded(text or _python_root(inner), limit)


def first_line(text: str | None) -> str:
    """The first meaningful line of a message: its first non-blank one that does more than introduce what
    follows (py4j's "An error occurred while calling ...", "JVM stacktrace:"), else its first; of a Python
    traceback, the exception it ends with (its last line not indented)."""
    if not text:
        return ""
    raw = [line.rstrip() for line in str(text).splitlines() if line.strip()]
    if not raw:
        return ""
    # A Python worker's error in Spark: "[PYTHON_EXCEPTION] ... worker: Traceback (most recent call last):".
    start = next((index for index, line in enumerate(raw) if _TRACEBACK in line), None)
    if start is not None:
        raised = [line for line in raw[start + 1 :] if not line[0].isspace()]  # frames and code are indented
        if raised:
            return raised[-1]
    lines = [line.strip() for line in raw]
    # py4j's text goes on with ": org.apache.spark.SparkException: [CONDITION] ...": the leading ": " is noise.
    meaningful = (line.removeprefix(": ") for line in lines if not _introduces(line))
    return next(meaningful, lines[0])


def _introduces(line: str) -> bool:
    """Whether `line` (after any "Class: " prefixes) only introduces what follows, or is a stack frame."""
    return _CLASS_PREFIXES.sub("", line).startswith(_INTRODUCTIONS) or _FRAME.match(line) is not None


def _bounded(text: str, limit: int) -> str:
    """`text` on one line (every run of whitespace a space), cut to `limit` characters with "..."."""
    line = " ".join(text.split())
    if len(line) <= limit:
        return line
    return line[: max(0, limit - len(_ELLIPSIS))] + _ELLIPSIS


# ----------------------------------------------------------------- Python's own


def _innermost(exc: BaseException) -> BaseException:
    """The end of `__cause__` (or, unless suppressed, `__context__`), bounded and safe against cycles."""
    seen = {id(exc)}
    for _ in range(MAX_CHAIN):
        inner = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
        if inner is None or id(inner) in seen:
            break
        seen.add(id(inner))
        exc = inner
    return exc


def _python_root(exc: BaseException) -> str:
    """`Type: first line`, or `Type` for an empty message (str() itself may fail: a dead JVM's error)."""
    try:
        message = first_line(str(exc))
    except Exception:
        try:
            message = first_line(str(exc.args[0])) if exc.args else ""
        except Exception:
            message = ""
    name = type(exc).__name__
    return f"{name}: {message}" if message else name


# ----------------------------------------------------------------- py4j and pyspark


def _is_py4j_error(exc: BaseException) -> bool:
    protocol = sys.modules.get("py4j.protocol")
    return protocol is not None and isinstance(exc, protocol.Py4JJavaError)


def _is_pyspark_error(exc: BaseException) -> bool:
    base = sys.modules.get("pyspark.errors.exceptions.base")
    return base is not None and isinstance(exc, base.PySparkException)


def _java_root(throwable: Any) -> str | None:
    """`[CONDITION] Class: message` of the innermost throwable of a Java cause chain; None if the JVM
    cannot answer. The condition is the innermost one the chain names, when the cause's message lacks it."""
    chain: list[tuple[str, str]] = []  # (simple class name, first meaningful line of the message)
    conditions: list[str] = []
    for _ in range(MAX_CHAIN):
        if throwable is None:
            break
        name = _java_call(throwable, lambda t: t.getClass().getName())
        if name is None:
            break
        message = str(_java_call(throwable, lambda t: t.getMessage()) or "")
        chain.append((str(name).rsplit(".", 1)[-1], first_line(message)))
        if match := _CONDITION.match(message.lstrip()):  # the message's start: its first line may be cut
            conditions.append(match.group(1))
        throwable = _java_call(throwable, lambda t: t.getCause())
    if not chain:
        return None
    name, message = chain[-1]
    if not message:  # a bare NullPointerException says little: say where it surfaced
        outer = next(((n, m) for n, m in reversed(chain) if m), None)
        message = f"(from {outer[0]}: {outer[1]})" if outer else ""
    text = f"{name}: {message}" if message else name
    if conditions and f"[{conditions[-1]}]" not in text:
        text = f"[{conditions[-1]}] {text}"
    return text


def _java_call(throwable: Any, call: Any) -> Any:
    """`call(throwable)` through py4j, or None when it fails (the JVM gone, the gateway closed)."""
    try:
        return call(throwable)
    except Exception:
        return None


def _pyspark_root(exc: BaseException) -> str | None:
    """A pyspark exception: the Java throwable a captured one wraps, else `Type: [CONDITION] message`."""
    origin = getattr(exc, "_origin", None)  # CapturedException: the Java throwable it was made from
    if origin is not None:
        found = _java_root(origin)
        if found:
            return found
    condition = _condition(exc)
    # A captured exception's own text (`_desc`) needs no JVM; getMessage() of the others is plain Python.
    desc = getattr(exc, "_desc", None)
    message = first_line(desc if desc is not None else _java_call(exc, lambda e: e.getMessage()))
    if not message:  # nothing pyspark's getters could say: Python's text says what it can
        return None
    if condition and f"[{condition}]" not in message:
        message = f"[{condition}] {message}"
    return f"{type(exc).__name__}: {message}"


def _condition(exc: BaseException) -> str | None:
    """Its error condition (`getCondition`, Spark 4; `getErrorClass`, 3.4), or None."""
    for method in ("getCondition", "getErrorClass"):
        if not hasattr(exc, method):
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # getErrorClass is deprecated in Spark 4
            value = _java_call(exc, lambda e, name=method: getattr(e, name)())
        if value:
            return str(value)
    return None
