"""A job's code version: declared (`Job(code_version="v2")`) or derived from the code its run function runs.

The version a job run was buffered with is recorded in its `JobRunBuffer` (the fold
keeps it on the `JobRun`); an instance reaches it through `built_by`. Staleness is a
read of that fact against the graph served now (`state/queries/staleness.py`).

The derived version is a blake3 hash of the run function's source as Python parses it
(`ast.dump`), and of what it reaches in the user's own files: the functions and classes
it calls or names, transitively (through attribute chains like `helpers.clean`, nested
functions, lambdas, closures, default values and imports inside functions), and the
module-level constants they use (numbers, text, bytes, enum members, dates, and tuples,
lists, sets, dicts and dataclasses of them; another object counts by its type only).
The user's files are those under the graph file's directory (`graph_files`, set by
`load_graph`; else under the run function's own file's directory), but for the standard
library, installed packages (site-packages) and partbuild itself, which never count.

A change of code, names, constants, default values or docstrings there changes it;
comments, blank lines, line breaks and moving code within its file do not, nor does where
the files are (two copies of a project in two directories derive the same versions), nor
does a function the job never reaches, nor anything outside the user's files (libraries,
the job's inputs function, its checks, the Spark configuration). Declare `code_version`
when those matter, or to change the version on purpose. What the run function reaches only
at run time (`getattr(module, name)`, a method called on `self` or on an argument) is not
seen. A run function reaching nothing of the user's keeps the version its own source
alone gave before helpers counted. Without a source to read (a function defined in a REPL,
a builtin), a function is hashed from its code object's bytecode, constants and names,
which a new Python release may change too.

Nothing hashed depends on the process: no addresses, ids or paths, and sets and dicts are
hashed in sorted order (a str's hash changes with PYTHONHASHSEED). What a function names
is read once per function object (`_ANALYSED`); the values those names hold are read on
each derivation (a module's globals may be rebound).
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import datetime as dt
import decimal
import dis
import enum
import fractions
import functools
import importlib.machinery
import importlib.util
import inspect
import sys
import sysconfig
import textwrap
import weakref
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from pathlib import Path
from types import CodeType, FunctionType, MethodType, ModuleType
from typing import Any

import blake3

from partbuild.state.fold.validation import MAX_ID_LENGTH

DERIVED_PREFIX = "src:"  # derived versions say so: "src:3f2a..." is never one a person typed
MAX_REACHED = 2_000  # functions and classes one derivation follows at most: a bound on time for a pathological graph
MAX_CONSTANT_DEPTH = 6  # nested containers hashed this deep (and self-containing ones stop here)
MAX_DEPTH = 64  # calls followed this deep (a structural bound, so the same wherever the graph is loaded from)

# (where, name, attributes): where is "global" (the function's globals), "free" (its closure) or "module" (an
# absolute module name an import inside the function named); then the attributes read from it, in order.
Ref = tuple[str, str, tuple[str, ...]]

_MISSING = object()
_BASE_OPS = frozenset({"LOAD_GLOBAL", "LOAD_NAME", "LOAD_FROM_DICT_OR_GLOBALS"})
_DEREF_OPS = frozenset({"LOAD_DEREF", "LOAD_CLASSDEREF", "LOAD_FROM_DICT_OR_DEREF"})
_LOCAL_OPS = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_DEREF"})
_ATTR_OPS = frozenset({"LOAD_ATTR", "LOAD_METHOD"})
_SKIPPED_OPS = frozenset({"EXTENDED_ARG", "NOP", "CACHE"})  # never break an attribute chain
_SCALARS = (type(None), bool, int, float, complex, str, bytes)
_DATES = (dt.date, dt.time, dt.timedelta, decimal.Decimal, fractions.Fraction)  # (datetime is a date)

_graph_root: ContextVar[Path | None] = ContextVar("partbuild_graph_root", default=None)
_ANALYSED: weakref.WeakKeyDictionary[Any, tuple[bytes | None, tuple[Ref, ...]]] = weakref.WeakKeyDictionary()
_CLASS_TEXT: weakref.WeakKeyDictionary[type, bytes] = weakref.WeakKeyDictionary()
_PARTBUILD_DIR = Path(__file__).resolve().parent.parent
_LIBRARY_DIRS = tuple(
    {
        Path(path).resolve()
        for key, path in sysconfig.get_paths().items()
        if key in ("stdlib", "platstdlib", "purelib", "platlib")
    }
)


def code_version_problem(version: object) -> str | None:
    """Why a declared code version is not one (not a non-empty str of at most 256 characters), or None."""
    if not isinstance(version, str) or not version or len(version) > MAX_ID_LENGTH:
        return f"code_version must be a non-empty str of at most {MAX_ID_LENGTH} characters, not {version!r}"
    if not version.isprintable():
        return "code_version must be printable text"
    return None


@contextlib.contextmanager
def graph_files(path: str | Path) -> Iterator[None]:
    """While the graph file at `path` is loaded, the user's files are those under its directory (see the module)."""
    token = _graph_root.set(Path(path).resolve().parent)
    try:
        yield
    finally:
        _graph_root.reset(token)


def derived_code_version(function: Callable[..., Any]) -> str | None:
    """The version derived from `function` and what it reaches (see the module), or None: neither source nor code."""
    function = _unwrapped(function)
    own = _own_text(function)
    if own is None:
        return None
    reach = _Reach(_graph_root.get() or _file_root(function))
    reach.follow(getattr(function, "__func__", function), own=False)  # (a bound method: its function)
    if not reach.parts:  # the version its source alone gave before helpers counted: no job's becomes stale by it
        return DERIVED_PREFIX + blake3.blake3(own).hexdigest()[:16]
    hasher = blake3.blake3(own)
    for part in reach.parts:  # length-prefixed: two parts can never read as one
        hasher.update(len(part).to_bytes(8, "big"))
        hasher.update(part)
    return DERIVED_PREFIX + hasher.hexdigest()[:16]


def _unwrapped(function: Callable[..., Any]) -> Callable[..., Any]:
    """The function that runs: through partials and wrappers; an object with __call__: its class's method."""
    while isinstance(function, functools.partial):
        function = function.func
    function = inspect.unwrap(function)
    if not inspect.isroutine(function) and callable(function):
        function = type(function).__call__
    return function


def _own_text(function: Callable[..., Any]) -> bytes | None:
    """Its source as Python parses it, or its code object's bytes; None when it has neither."""
    try:
        source = textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError):
        code = getattr(function, "__code__", None)
        return _code_bytes(code) if isinstance(code, CodeType) else None
    try:
        return ast.dump(ast.parse(source)).encode()
    except SyntaxError:  # a lambda's line is not always a statement of its own: the text itself, then
        return source.encode()


def _code_bytes(code: CodeType) -> bytes:
    """Bytecode, names and constants, nested functions' code in place (a code object's repr has its address)."""
    chunks = [code.co_code, repr(code.co_names).encode()]
    for constant in code.co_consts:
        chunks.append(_code_bytes(constant) if isinstance(constant, CodeType) else repr(constant).encode())
    return b"".join(chunks)


def _file_root(function: Callable[..., Any]) -> Path | None:
    """Without a graph file being loaded: the directory of the function's own file (None: it has no file)."""
    code = getattr(function, "__code__", None)
    if not isinstance(code, CodeType) or code.co_filename.startswith("<"):
        return None
    path = Path(code.co_filename)
    return path.resolve().parent if path.is_file() else None


@functools.lru_cache(maxsize=8192)
def _users(root: Path, filename: str) -> bool:
    """Whether `filename` is one of the user's files under `root` (see the module)."""
    if not filename or filename.startswith("<"):
        return False
    path = Path(filename).resolve()
    if not path.is_relative_to(root) or {"site-packages", "dist-packages"} & set(path.parts):
        return False
    if any(path.is_relative_to(library) for library in _LIBRARY_DIRS):
        return False
    # partbuild's own code never counts; a graph inside partbuild's tree (its examples) counts for itself.
    return not path.is_relative_to(_PARTBUILD_DIR) or (root != _PARTBUILD_DIR and root.is_relative_to(_PARTBUILD_DIR))


def _module_file(module: ModuleType) -> str:
    file = getattr(module, "__file__", None)
    if file:
        return str(file)
    paths = list(getattr(module, "__path__", []) or [])  # a namespace package: its first directory
    return str(paths[0]) if paths else ""


def _analysed(function: FunctionType) -> tuple[bytes | None, tuple[Ref, ...]]:
    """Its own text and what its code names, once per function object."""
    found = _ANALYSED.get(function)
    if found is None:
        package = function.__globals__.get("__package__") or None
        refs = _refs(function.__code__, package, nested=False)
        found = _ANALYSED[function] = (_own_text(function), tuple(refs))
    return found


def _refs(code: CodeType, package: str | None, *, nested: bool) -> dict[Ref, None]:
    """What `code` and the code nested in it name: globals, its free variables, imports; each with its attributes.

    Read from the bytecode in order: a name loaded, then the attributes loaded right after it (`a.b.c`). A local
    name bound by an import in the function is followed as that module. A nested function's free variables are
    its enclosing function's locals, unknown before it runs: only the outermost function's closure is read.
    """
    found: dict[Ref, None] = {}
    imports = _Imports(package)
    current: Ref | None = None
    ops = [ins for ins in dis.get_instructions(code) if ins.opname not in _SKIPPED_OPS]
    for index, ins in enumerate(ops):
        op, name = ins.opname, ins.argval
        if op in _ATTR_OPS and current is not None:
            current = (current[0], current[1], (*current[2], str(name)))
            continue
        if current is not None:
            found[current], current = None, None
        if op in _LOCAL_OPS and name in imports.bound:
            current = imports.bound[name]
        elif op in _BASE_OPS:
            current = ("global", str(name), ())
        elif op in _DEREF_OPS and not nested and name in code.co_freevars:
            current = ("free", str(name), ())
        elif (named := imports.step(ops, index)) is not None:
            found[named] = None
    if current is not None:
        found[current] = None
    for constant in code.co_consts:
        if isinstance(constant, CodeType):
            found.update(_refs(constant, package, nested=True))
    return found


class _Imports:
    """The imports inside a function's code: what each names, and the local names they bind."""

    def __init__(self, package: str | None) -> None:
        self.package = package
        self.bound: dict[str, Ref] = {}  # local name -> the module (or what from it) an import bound to it
        self._chain: Ref | None = None  # what the import being read gives
        self._module: Ref | None = None  # the module its IMPORT_NAME gives

    def step(self, ops: list[dis.Instruction], index: int) -> Ref | None:
        """Read an import instruction; what it names (IMPORT_FROM), or None."""
        op, name = ops[index].opname, str(ops[index].argval)
        before = [ins.opname for ins in ops[max(0, index - 3) : index] if ins.opname not in ("SWAP", "POP_TOP")]
        if op == "IMPORT_NAME" and index >= 2:
            # `import a.b` gives (and binds) `a`; `from a.b import c` gives `a.b`, whose `c` is read next.
            level, fromlist = ops[index - 2].argval, ops[index - 1].argval
            absolute = _absolute(name, level, self.package)
            top = absolute if fromlist is not None or absolute is None else absolute.split(".")[0]
            self._module = self._chain = ("module", top, ()) if top is not None else None
        elif op == "IMPORT_FROM" and self._module is not None:
            chained = before and before[-1] == "IMPORT_FROM" and self._chain is not None  # `import a.b.c as d`
            base = self._chain if chained else self._module
            assert base is not None
            self._chain = (base[0], base[1], (*base[2], name))
            return self._chain
        elif op.startswith("STORE_") and self._chain is not None and before and before[-1].startswith("IMPORT_"):
            self.bound[name] = self._chain
        return None


def _absolute(name: str, level: object, package: str | None) -> str | None:
    """The absolute name of the module an import names (None: relative, with no package to resolve it in)."""
    if not isinstance(level, int) or level <= 0:
        return name
    try:
        return importlib.util.resolve_name("." * level + name, package)
    except (ImportError, ValueError):
        return None


def _class_text(cls: type) -> bytes:
    """A class's source as Python parses it (its qualified name when it has none: its methods are followed)."""
    found = _CLASS_TEXT.get(cls)
    if found is None:
        try:
            found = ast.dump(ast.parse(textwrap.dedent(inspect.getsource(cls)))).encode()
        except (OSError, TypeError, SyntaxError):
            found = f"class {cls.__qualname__}".encode()
        _CLASS_TEXT[cls] = found
    return found


def _constant_text(value: Any, depth: int = 0, objects: list[Any] | None = None) -> str | None:
    """A constant's stable text (sets and dicts sorted), or None for an object that is none of these.

    The objects inside a tuple, list or dict constant (a tuple of helper functions, say) are named by their type
    in the text and appended to `objects`, in the text's order, to be followed (a set's are not: their order
    among themselves is the hash's).
    """
    kind = type(value)
    if kind in _SCALARS:
        return repr(value)
    if isinstance(value, enum.Enum):
        return f"{kind.__qualname__}.{value.name}"
    if isinstance(value, _DATES):
        return f"{kind.__qualname__}:{value.isoformat() if hasattr(value, 'isoformat') else value}"
    if depth >= MAX_CONSTANT_DEPTH:
        return f"{kind.__qualname__}:..."
    if isinstance(value, (tuple, list)):
        items = [_item_text(item, depth, objects) for item in value]
    elif isinstance(value, (set, frozenset)):
        items = sorted(_item_text(item, depth, None) for item in value)
    elif isinstance(value, dict):
        pairs = []
        for key, item in value.items():
            inside: list[Any] | None = [] if objects is not None else None
            pairs.append((_item_text(key, depth, inside), _item_text(item, depth, inside), inside))
        pairs.sort(key=lambda pair: pair[:2])
        items = [f"{key}: {item}" for key, item, _ in pairs]
        if objects is not None:
            for *_, inside in pairs:
                objects.extend(inside or ())
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        items = [f"{f.name}={_item_text(getattr(value, f.name, None), depth, objects)}" for f in fields]
    else:
        return None
    return f"{kind.__qualname__}({', '.join(items)})"


def _item_text(item: Any, depth: int, objects: list[Any] | None) -> str:
    """An item of a constant: its text, or its type's name (the object itself goes to `objects`)."""
    text = _constant_text(item, depth + 1, objects)
    if text is None:
        if objects is not None:
            objects.append(item)
        return f"<{type(item).__qualname__}>"
    return text


def _spec_file(spec: importlib.machinery.ModuleSpec | None) -> str:
    """Where a module found would be loaded from: its file, or a namespace package's first directory."""
    if spec is None:
        return ""
    if spec.origin and spec.has_location:
        return spec.origin
    return next(iter(spec.submodule_search_locations or []), "")


def _class_file(cls: type) -> str:
    """The file a class was defined in: its module's, else its first method's ('' when neither is known)."""
    module = sys.modules.get(cls.__module__)
    if module is not None and _module_file(module):
        return _module_file(module)
    methods = (member for member in vars(cls).values() if isinstance(member, FunctionType))
    return next((method.__code__.co_filename for method in methods), "")


class _Reach:
    """One derivation's walk from a run function through the user's code, collecting what it hashes in order."""

    def __init__(self, root: Path | None) -> None:
        self.root = root
        self.parts: list[bytes] = []
        self._seen: set[int] = set()  # ids of the functions and classes followed (ids are never hashed)
        self._depth = 0
        self._texts: dict[int, tuple[Any, str | None, list[Any]]] = {}  # constants read in this walk, by id

    def _users(self, filename: str) -> bool:
        return self.root is not None and _users(self.root, filename)

    def _first_visit(self, target: object) -> bool:
        if id(target) in self._seen or len(self._seen) >= MAX_REACHED or self._depth >= MAX_DEPTH:
            return False
        self._seen.add(id(target))
        return True

    @contextlib.contextmanager
    def _deeper(self) -> Iterator[None]:
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1

    def follow(self, function: Any, *, own: bool = True) -> None:
        """A function of the user's: its text (unless its class's or the caller's has it), then what it names."""
        if not isinstance(function, FunctionType) or not self._first_visit(function):
            return
        text, refs = _analysed(function)
        if own and text is not None:
            self.parts.append(b"def " + text)
        with self._deeper():
            for ref in refs:
                self.value(".".join((ref[1], *ref[2])), self._resolve(function, ref))
            for default in (*(function.__defaults__ or ()), *(function.__kwdefaults__ or {}).values()):
                self.value("default", default)

    def follow_class(self, cls: type) -> None:
        """A class of the user's: its source, its bases of the user's, what its methods name."""
        if not self._first_visit(cls):
            return
        self.parts.append(b"class " + _class_text(cls))
        with self._deeper():
            for base in cls.__bases__:
                self.value("base", base)
            for member in cls.__dict__.values():  # in the order of definition
                if isinstance(member, (staticmethod, classmethod)):
                    member = member.__func__
                accessors = (member.fget, member.fset, member.fdel) if isinstance(member, property) else (member,)
                for accessor in accessors:
                    if isinstance(accessor, FunctionType) and self._users(accessor.__code__.co_filename):
                        # A method's text is in the class's source; a function defined elsewhere brings its own.
                        self.follow(accessor, own=not accessor.__qualname__.startswith(f"{cls.__qualname__}."))

    def _resolve(self, function: FunctionType, ref: Ref) -> Any:
        """The value `ref` names for `function` now; through modules only of the user's (else _MISSING)."""
        where, name, attributes = ref
        if where == "global":
            value = function.__globals__.get(name, _MISSING)  # not there: a builtin, or not defined yet
        elif where == "free":
            try:
                value = function.__closure__[function.__code__.co_freevars.index(name)].cell_contents  # type: ignore[index]
            except (TypeError, ValueError, IndexError):  # no closure, or an empty cell
                value = _MISSING
        else:
            value = sys.modules.get(name, _MISSING)
            if value is _MISSING:
                value = self._import(name)
        for attribute in attributes:
            if not isinstance(value, ModuleType):
                break  # an attribute of a class or an object: the whole of it counts
            if not self._users(_module_file(value)):
                return _MISSING  # a library's: its upgrades do not move versions
            value = vars(value).get(attribute, _MISSING)  # (not getattr: a module's __getattr__ may import)
        return value

    def _import(self, name: str) -> Any:
        """A module of the user's that an import inside a function names, not imported yet: imported now (the
        run would import it), so what the function uses of it counts. Anything else is left alone."""
        try:  # the top package first: finding `a.b` imports `a`, which must be the user's too
            specs = [importlib.util.find_spec(name.split(".")[0]), None]
            if _spec_file(specs[0]) and self._users(_spec_file(specs[0])):
                specs[1] = importlib.util.find_spec(name)
        except (ImportError, ValueError):  # (a parent package that cannot be imported)
            return _MISSING
        if not _spec_file(specs[1]) or not self._users(_spec_file(specs[1])):
            return _MISSING
        try:
            return importlib.import_module(name)
        except Exception:  # the user's module fails to import: the run will say so, not the graph's loading
            return _MISSING

    def value(self, label: str, value: Any) -> None:
        """What a name holds: a function or class of the user's is followed, a constant hashed, others skipped."""
        if value is _MISSING or isinstance(value, ModuleType):
            return
        if isinstance(value, functools.partial):
            self.value(label, value.func)
            self.value(label, (value.args, value.keywords))
            return
        if isinstance(value, (staticmethod, classmethod, MethodType)):
            if isinstance(value, MethodType):
                self.value(label, value.__self__)  # a bound method: its object (or class) too
            value = value.__func__
        try:
            wrapped = getattr(value, "__wrapped__", None) if callable(value) else None
        except Exception:  # an object whose __getattr__ refuses: nothing wrapped
            wrapped = None
        if wrapped is not None:  # a decorated helper: what it wraps, and the wrapper if it is the user's
            self.value(label, wrapped)
        if isinstance(value, FunctionType):
            if self._users(value.__code__.co_filename):
                self.follow(value)
        elif isinstance(value, type):
            if self._users(_class_file(value)):
                self.follow_class(value)
        else:
            self._constant(label, value)

    def _constant(self, label: str, value: Any) -> None:
        """A constant's text; an object of a class of the user's: its class and its attributes' texts."""
        text, objects = self._constant_text(value)
        if text is not None:
            self.parts.append(f"{label}={text}".encode())
            for member in objects:  # a tuple of helper functions: each is followed
                self.value(label, member)
        if text is not None and not isinstance(value, enum.Enum):
            return
        kind = type(value)
        self.value(label, kind)  # a class of the user's (an enum member's too) is followed
        state = getattr(value, "__dict__", None) if text is None and self._users(_class_file(kind)) else None
        if isinstance(state, dict):  # an object of the user's class: its attributes, as a constant
            self._constant(label, state)

    def _constant_text(self, value: Any) -> tuple[str | None, list[Any]]:
        """`_constant_text` once per object and walk (a dict many helpers use is read once)."""
        found = self._texts.get(id(value))
        if found is None:  # (the entry keeps the object alive: its id is not reused within the walk)
            objects: list[Any] = []
            found = self._texts[id(value)] = (value, _constant_text(value, 0, objects), objects)
        return found[1], found[2]
