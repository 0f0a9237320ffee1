"""What every declaration of a graph shares: the error it raises, strict value rules, and the one line a
graph file's failure becomes.

Every declaration class refuses a bad setting at construction with a subclass of `DeclarationError`
(`GraphError`, `CheckDeclarationError`, `ScheduleError`, `ReactionError`, `PublishDeclarationError`), its
message one sentence naming the declaration and the setting. The rules are strict: `"10"` is not an int,
`True` is not an int either, NaN and infinity are no numbers, a duration is a `timedelta`.

`load_graph` runs the user's graph file; whatever it raises (a declaration error, a `TypeError` of a
constructor called wrongly, any error of the user's own code) becomes one line from `graph_file_error`:
the file and line, the job, source or schedule whose declaration (`Job("daily", ...)`) encloses the failing
call when the file spells its name, and the message. The traceback stays the exception's cause.
"""

from __future__ import annotations

import ast
import datetime as dt
import linecache
import math
import sysconfig
import traceback
from collections.abc import Sequence
from pathlib import Path

MAX_MESSAGE = 1_000  # a message quoting a huge value is cut: one line stays one readable line

# The calls whose first argument (or `label=`/`name=`) names what a failing call inside them declares.
_DECLARING = {"Job": ("job", "label"), "SourceDataset": ("source", "name"), "Schedule": ("schedule", "name")}
_PACKAGE = Path(__file__).resolve().parent.parent
_LIBRARY_ROOTS = tuple(
    str(root)
    for root in (
        *(_PACKAGE / part for part in ("orchestrator", "state", "api", "proto")),
        *(Path(sysconfig.get_paths()[name]).resolve() for name in ("stdlib", "purelib", "platlib")),
    )
)


class DeclarationError(ValueError):
    """A declaration of the graph that cannot be made; the message names it and the setting, in one line."""


# ----------------------------------------------------------------- strict values (None: fine, else why not)


def int_problem(value: object, what: str, minimum: int) -> str | None:
    """Why `value` is not an int of at least `minimum` (a bool or a str of digits is not one), or None."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        return f"{what} must be an int of at least {minimum}, not {value!r}"
    return None


def number_problem(value: object, what: str, minimum: float) -> str | None:
    """Why `value` is not a finite number (int or float, not a bool) of at least `minimum`, or None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{what} must be a number, not {value!r}"
    if not math.isfinite(value) or value < minimum:
        return f"{what} must be finite and at least {minimum}, not {value!r}"
    return None


def duration_problem(value: object, what: str, minimum: dt.timedelta, *, optional: bool = False) -> str | None:
    """Why `value` is not a timedelta of at least `minimum` (or None when `optional`), or None."""
    if value is None and optional:
        return None
    if not isinstance(value, dt.timedelta) or value < minimum:
        return f"{what} must be a timedelta of at least {minimum}{' or None' if optional else ''}, not {value!r}"
    return None


def callable_problem(value: object, what: str, *, optional: bool = False) -> str | None:
    """Why `value` is not a function (or None when `optional`), or None."""
    if (value is None and optional) or callable(value):
        return None
    return f"{what} must be a function{' or None' if optional else ''}, not {value!r}"


def bool_problem(value: object, what: str) -> str | None:
    """Why `value` is not True or False (1, "yes" and a numpy bool are not), or None."""
    if isinstance(value, bool):
        return None
    return f"{what} must be True or False, not {value!r}"


def text_problem(value: object, what: str) -> str | None:
    """Why `value` is not a str, or None."""
    if isinstance(value, str):
        return None
    return f"{what} must be a str, not {value!r}"


def sequence_problem(value: object, what: str) -> str | None:
    """Why `value` is not a sequence such as a list or tuple (a str would be read as its characters), or None."""
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return None
    return f"{what} must be a list or tuple, not {value!r}"


# ----------------------------------------------------------------- a graph file's failure, in one line


def graph_file_error(path: Path, exc: BaseException) -> str:
    """One line for what executing the graph file at `path` raised: where, whose declaration, what.

    A declaration error says its message; any other exception its class too (`TypeError: ...`).
    """
    where, owner = f"graph file {path}", None
    if isinstance(exc, SyntaxError) and exc.lineno is not None:
        where += f", line {exc.lineno}"
        said = f"SyntaxError: {exc.msg}"
    else:
        frame = _user_frame(exc)
        if frame is not None and frame.lineno is not None:
            same = Path(frame.filename).resolve() == path.resolve()
            where += f", line {frame.lineno}" if same else f" ({frame.filename}, line {frame.lineno})"
            owner = _declaring_call(frame)
        said = str(exc) if isinstance(exc, DeclarationError) else f"{type(exc).__name__}: {exc}"
    if owner is not None and owner not in said:
        said = f"{owner}: {said}"
    line = " ".join(part.strip() for part in f"{where}: {said}".splitlines() if part.strip())
    return line if len(line) <= MAX_MESSAGE else line[: MAX_MESSAGE - 3] + "..."


def _user_frame(exc: BaseException) -> traceback.FrameSummary | None:
    """The deepest frame of the traceback in the user's code (not partbuild's, Python's or a library's)."""
    found = None
    for frame in traceback.extract_tb(exc.__traceback__):
        name = frame.filename
        if not name.startswith("<") and not str(Path(name).resolve()).startswith(_LIBRARY_ROOTS):
            found = frame
    return found


def _declaring_call(frame: traceback.FrameSummary) -> str | None:
    """`job 'daily'` when the failing call sits inside `Job("daily", ...)` in the file's source, else None."""
    try:
        tree = ast.parse("".join(linecache.getlines(frame.filename)))
    except (SyntaxError, ValueError):
        return None
    at = (frame.lineno or 0, frame.colno or 0)
    best: tuple[tuple[int, int], str] | None = None
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or (kind := _declared_kind(node)) is None:
            continue
        start, end = (node.lineno, node.col_offset), (node.end_lineno or node.lineno, node.end_col_offset or 0)
        name = _declared_name(node, kind[1])
        if start <= at < end and name is not None and (best is None or start > best[0]):
            best = (start, f"{kind[0]} {name!r}")  # the innermost declaration around the call wins
    return best[1] if best else None


def _declared_kind(node: ast.Call) -> tuple[str, str] | None:
    func = node.func
    called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    return _DECLARING.get(called) if called is not None else None


def _declared_name(node: ast.Call, keyword: str) -> str | None:
    """The declaration's name when the source spells it as a string literal."""
    given = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == keyword), None)
    return given.value if isinstance(given, ast.Constant) and isinstance(given.value, str) else None
