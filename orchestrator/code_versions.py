"""A job's code version: declared (`Job(code_version="v2")`) or derived from its run function's source.

The version a job run was buffered with is recorded in its `JobRunBuffer` (the fold
keeps it on the `JobRun`); an instance reaches it through `built_by`. Staleness is a
read of that fact against the graph served now (`state/rules/staleness.py`).

The derived version is a blake3 hash of the run function's source as Python parses it
(`ast.dump`): a change of its code, names, constants, default values or docstring
changes it; comments, blank lines, line breaks and moving the function within its file
do not, nor does anything outside the function (helpers it calls, libraries, the
job's inputs function, its checks, the Spark configuration). Declare `code_version`
when those matter, or to change the version on purpose. Without a source to read (a
function defined in a REPL, a builtin), it is hashed from the code object's bytecode,
constants and names, which a new Python release may change too.
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
from collections.abc import Callable
from types import CodeType
from typing import Any

import blake3

from partbuild.state.fold.validation import MAX_ID_LENGTH

DERIVED_PREFIX = "src:"  # derived versions say so: "src:3f2a..." is never one a person typed


def code_version_problem(version: object) -> str | None:
    """Why a declared code version is not one (not a non-empty str of at most 256 characters), or None."""
    if not isinstance(version, str) or not version or len(version) > MAX_ID_LENGTH:
        return f"code_version must be a non-empty str of at most {MAX_ID_LENGTH} characters, not {version!r}"
    if not version.isprintable():
        return "code_version must be printable text"
    return None


def derived_code_version(function: Callable[..., Any]) -> str | None:
    """The version derived from `function`'s source (see the module), or None when it has neither source nor code."""
    while isinstance(function, functools.partial):
        function = function.func
    function = inspect.unwrap(function)
    if not inspect.isroutine(function) and callable(function):  # an object with __call__: its class's method
        function = type(function).__call__
    try:
        source = textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError):
        return _from_code(function)
    try:
        text = ast.dump(ast.parse(source))
    except SyntaxError:  # a lambda's line is not always a statement of its own: the text itself, then
        text = source
    return DERIVED_PREFIX + blake3.blake3(text.encode()).hexdigest()[:16]


def _from_code(function: Callable[..., Any]) -> str | None:
    code = getattr(function, "__code__", None)
    if not isinstance(code, CodeType):
        return None
    hasher = blake3.blake3()
    _hash_code(hasher, code)
    return DERIVED_PREFIX + hasher.hexdigest()[:16]


def _hash_code(hasher: blake3.blake3, code: CodeType) -> None:
    """Bytecode, names and constants, nested functions' code in place (a code object's repr has its address)."""
    hasher.update(code.co_code)
    hasher.update(repr(code.co_names).encode())
    for constant in code.co_consts:
        if isinstance(constant, CodeType):
            _hash_code(hasher, constant)
        else:
            hasher.update(repr(constant).encode())
