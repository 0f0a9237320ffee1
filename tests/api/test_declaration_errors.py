"""Every declaration error of a graph file is one line on stderr and exit code 2, for every command that loads one.

The table below holds one bad declaration per error branch of each declaration class (jobs, sources, field
types, patterns, retry policies, checks, schedules, reactions, publishing, the graph itself, the file). Each
runs through the CLI in-process (`partbuild.api.cli.main` inside click's CliRunner isolation), under a line
tracer: the test then asserts the table reached every `raise` of those constructors and every error `return`
of their `*_problem` helpers, so a new branch without a row here fails it. One case runs as a real process.
"""

from __future__ import annotations

import ast
import datetime as dt
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

import pytest
from click.testing import CliRunner

from partbuild.api.cli import main
from partbuild.orchestrator import checks, code_versions, declarations, graph, publish, reactions, schedules
from partbuild.orchestrator.checks import CheckDeclarationError
from partbuild.orchestrator.declarations import DeclarationError
from partbuild.orchestrator.graph import GraphError, GraphFileError, load_graph
from partbuild.orchestrator.publish import PublishDeclarationError
from partbuild.orchestrator.reactions import ReactionError
from partbuild.orchestrator.schedules import ScheduleError
from partbuild.state.database import Database

# ----------------------------------------------------------------- the table

PRELUDE = """\
import datetime as dt
import math

from partbuild.orchestrator.checks import (
    Check,
    CheckOutcome,
    no_nulls,
    row_count_at_least,
    row_count_within_ratio_of_inputs,
    row_count_within_ratio_of_previous,
    unique,
)
from partbuild.orchestrator.connectors.in_memory import InMemoryConnector
from partbuild.orchestrator.graph import Graph, Job, PartitionPattern, RetryPolicy, SourceDataset, register_field_type
from partbuild.orchestrator.publish import Publish
from partbuild.orchestrator.reactions import Reaction, on_source_arrival, on_upstream_change
from partbuild.orchestrator.schedules import CatchUp, Schedule
from partbuild.orchestrator.sources.discovery import Discovery

DAILY = ["daily/{date:date}"]
RAW = "raw/{date:date}"
SECOND = dt.timedelta(seconds=1)
EVERY_MINUTE = "* * * * *"
KEYS = "d={d:int}"


def run(ctx):
    pass


def want(tick):
    return []


def fine(context):
    return CheckOutcome(True)


def locate(partition):
    return None


"""
BODY_LINE = PRELUDE.count("\n") + 1
FAR = dt.date.today().year + 3  # a year field this far ahead: its next time is more than a year away


@dataclass(frozen=True)
class Case:
    name: str
    body: str
    expect: tuple[str, ...]


def _case(name: str, body: str, *expect: str) -> Case:
    return Case(name, body, expect)


def _job(name: str, settings: str, *expect: str) -> Case:
    """A job `daily` with these extra settings: the line must name the job."""
    return Case(name, f'graph = Graph([Job("daily", DAILY, run, {settings})])', ("job 'daily'", *expect))


def _check(name: str, check: str, *expect: str) -> Case:
    """A check declared in job `daily`'s checks: the line must name the job."""
    return _job(name, f"checks=[{check}]", *expect)


def _schedule(name: str, settings: str, *expect: str) -> Case:
    body = f'graph = Graph([], schedules=[Schedule("nightly", want, {settings})])'
    return Case(name, body, ("schedule 'nightly'", *expect))


PATTERNS = [
    _case("field type name", 'register_field_type("Week", "x", str, str)', "field type name 'Week'"),
    _case("field type regex", 'register_field_type("wk", 5, str, str)', "the regex must be a str, not 5"),
    _case("field type parse", 'register_field_type("wk", "x", "parse", str)', "parse must be a function"),
    _case("field type slash", 'register_field_type("wk", "a/b", str, str)', "must not match '/'"),
    _case("field type regex broken", 'register_field_type("wk", "[a", str, str)', "does not compile"),
    _case("pattern not a str", 'graph = Graph([Job("daily", [PartitionPattern(5)], run)])', "pattern 5 must be a str"),
    _case("unknown field type", 'graph = Graph([Job("daily", ["d/{x:float}"], run)])', "job 'daily'", "'float'"),
    _case("field twice", 'graph = Graph([Job("daily", ["d/{a}/{a}"], run)])', "job 'daily'", "appears twice"),
    _case("unbalanced braces", 'graph = Graph([Job("daily", ["d/{a"], run)])', "job 'daily'", "unbalanced braces"),
]

RETRIES = [
    _job("retry attempts zero", "retry=RetryPolicy(max_attempts=0)", "max_attempts must be an int of at least 1"),
    _job("retry attempts text", 'retry=RetryPolicy(max_attempts="3")', "max_attempts", "not '3'"),
    _job("retry backoff negative", "retry=RetryPolicy(backoff_ms=-1)", "backoff_ms must be an int of at least 0"),
    _job("retry max backoff float", "retry=RetryPolicy(max_backoff_ms=1.5)", "max_backoff_ms", "not 1.5"),
    _job("retry multiplier bool", "retry=RetryPolicy(multiplier=True)", "multiplier must be a number, not True"),
    _job("retry multiplier nan", "retry=RetryPolicy(multiplier=math.nan)", "multiplier must be finite", "nan"),
    _job("retry multiplier below 1", "retry=RetryPolicy(multiplier=0.5)", "multiplier must be finite and at least 1"),
]

JOBS = [
    _case("job label empty", 'graph = Graph([Job("", DAILY, run)])', "job label '' must be a non-empty str"),
    _case("job label slash", 'graph = Graph([Job("a/b", DAILY, run)])', "job label 'a/b'", "no slash"),
    _case("job label not a str", "graph = Graph([Job(5, DAILY, run)])", "job label 5"),
    _case("outputs a str", 'graph = Graph([Job("daily", "daily/{date:date}", run)])', "job 'daily'", "outputs must be"),
    _case("output not a pattern", 'graph = Graph([Job("daily", [5], run)])', "job 'daily'", "an output must be"),
    _case("no outputs", 'graph = Graph([Job("daily", [], run)])', "job 'daily'", "declares no output patterns"),
    _case("run not callable", 'graph = Graph([Job("daily", DAILY, "run")])', "job 'daily'", "run must be a function"),
    _case("run without code", 'graph = Graph([Job("daily", DAILY, print)])', "job 'daily'", "declare code_version"),
    _job("inputs not callable", 'inputs=["raw/x"]', "inputs must be a function"),
    _job("batch size text", 'batch_size="10"', "batch_size must be an int of at least 1, not '10'"),
    _job("batch size zero", "batch_size=0", "batch_size must be an int of at least 1, not 0"),
    _job("max concurrency bool", "max_concurrency=True", "max_concurrency must be an int", "not True"),
    _job("retry not a policy", "retry=3", "retry must be a RetryPolicy, not 3"),
    _job("checks not a list", "checks=row_count_at_least(1)", "checks must be a list or tuple"),
    _job("reactions not a list", "reactions=on_upstream_change()", "reactions must be a list or tuple"),
    _job("uses spark text", 'uses_spark="yes"', "uses_spark must be True or False, not 'yes'"),
    _job("reaction not a reaction", 'reactions=["on_upstream_change"]', "reactions must be made by"),
    _job("reaction twice", "reactions=[on_upstream_change(), on_upstream_change()]", "declared twice"),
    _job("check not a check", "checks=[fine]", "checks must be Check objects"),
    _job("checks share a name", "checks=[row_count_at_least(1), row_count_at_least(1)]", "two checks share a name"),
    _job("stale policy", 'stale_policy="keep"', "stale_policy is 'serve' or 'withdraw', not 'keep'"),
    _job("batch bytes zero", "batch_bytes=0", "batch_bytes must be None or an int of at least 1"),
    _job("code version empty", 'code_version=""', "code_version must be a non-empty str"),
    _job("code version unprintable", 'code_version="v\\n1"', "code_version must be printable text"),
    _job("publish not a table", "publish=5", "publish must be a Publish, a table name or None, not int"),
    _job("publish table name", 'publish=Publish("a b")', "publish table 'a b' must be [db.]table"),
    _job("publish format", 'publish=Publish("t", "delta")', "publish format 'delta' must be one of parquet, orc"),
    _case(
        "publish two outputs",
        'graph = Graph([Job("daily", ["a/{n}", "b/{n}"], run, publish="t")])',
        "job 'daily'",
        "exactly one output pattern",
    ),
    _case("publish no field", 'graph = Graph([Job("daily", ["d/all"], run, publish="t")])', "no field to partition"),
    _case("publish case", 'graph = Graph([Job("daily", ["d/{a}/{A}"], run, publish="t")])', "differ only in case"),
]

SOURCES = [
    _case("source name empty", 'graph = Graph([], [SourceDataset("", RAW, locate)])', "source name is empty"),
    _case("source name not a str", "graph = Graph([], [SourceDataset(5, RAW, locate)])", "source name must be a str"),
    _case("source pattern", 'graph = Graph([], [SourceDataset("raw", 5, locate)])', "source 'raw'", "pattern must be"),
    _case("source locate", 'graph = Graph([], [SourceDataset("raw", RAW, "/data")])', "locate must be a function"),
    _case(
        "source discovery type",
        'graph = Graph([], [SourceDataset("raw", RAW, discovery="s3://x")])',
        "source 'raw'",
        "discovery must be a Discovery",
    ),
    _case("source finds nothing", 'graph = Graph([], [SourceDataset("raw", RAW)])', "needs a locate function"),
    _case(
        "source discovery keys",
        'graph = Graph([], [SourceDataset("raw", RAW, discovery=Discovery(InMemoryConnector([]), "/d", keys=KEYS))])',
        "source 'raw'",
        "with the same types",
    ),
    _case(
        "discovery connector",
        'graph = Graph([], [SourceDataset("raw", RAW, discovery=Discovery("s3", "/d"))])',
        "source 'raw'",
        "TypeError: Discovery.connector must be a Connector",
    ),
]

GRAPHS = [
    _case("schedules not schedules", 'graph = Graph([], schedules=["nightly"])', "schedules must be Schedule objects"),
    _case(
        "two schedules",
        'graph = Graph([], schedules=[Schedule("s", want, cron=EVERY_MINUTE), Schedule("s", want, every=SECOND)])',
        "two schedules are named 's'",
    ),
    _case("jobs not jobs", 'graph = Graph(["daily"])', "jobs must be Job objects, not 'daily'"),
    _case("two jobs", 'graph = Graph([Job("a", ["a/{n}"], run), Job("a", ["b/{n}"], run)])', "two jobs are labelled"),
    _case("sources not sources", 'graph = Graph([], ["raw"])', "sources must be SourceDataset objects"),
    _case(
        "two sources",
        'graph = Graph([], [SourceDataset("s", "a/{n}", locate), SourceDataset("s", "b/{n}", locate)])',
        "two source datasets are named 's'",
    ),
    _case(
        "one table twice",
        'graph = Graph([Job("a", ["a/{n}"], run, publish="t"), Job("b", ["b/{n}"], run, publish="T")])',
        "jobs 'a' and 'b' both publish table 'T'",
    ),
    _case(
        "source arrival not invertible",
        'graph = Graph([Job("weekly", ["w/{week}"], run, reactions=[on_source_arrival()])], '
        '[SourceDataset("raw", RAW, locate)])',
        "job 'weekly'",
        "on_source_arrival needs affected=",
    ),
    _case(
        "two producers",
        'graph = Graph([Job("a", ["x/{n}"], run), Job("b", ["x/{m}"], run)])',
        "job 'b' and job 'a' both produce 'x/{m}'",
    ),
]

CHECKS = [
    _check("check name empty", 'Check("", fine)', "check name '' must be 1 to 256 characters"),
    _check("check fn not callable", 'Check("c", "fine")', "check 'c': fn must be callable"),
    _check("check fn missing", 'Check("c")', "TypeError:", "missing 1 required positional argument: 'fn'"),
    _check("check blocking text", 'Check("c", fine, blocking="yes")', "blocking must be True or False"),
    _check("check aggregation", 'Check("c", fine, aggregation="sum")', "aggregation must be made by Check.aggregate"),
    _check("aggregate columns", 'Check.aggregate("c", {"rows": 1}, fine)', "columns and evaluate must be callable"),
    _check("aggregate row counts", 'Check.aggregate("c", dict, fine, row_counts=5)', "row_counts must be a function"),
    _check("row count negative", "row_count_at_least(-1)", "row_count_at_least needs an int of at least 0, not -1"),
    _check("row count text", 'row_count_at_least("10")', "row_count_at_least needs an int", "not '10'"),
    _check("row count bool", "row_count_at_least(True)", "row_count_at_least needs an int", "not True"),
    _check("row count name", "row_count_at_least(1, name=7)", "check name 7"),
    _check("no nulls without column", "no_nulls()", "no_nulls needs one or more column names"),
    _check("unique bad column", 'unique("id", 7)', "unique needs one or more column names"),
    _check("ratio low above high", "row_count_within_ratio_of_inputs(2, 1)", "needs 0 <= low <= high", "not 2, 1"),
    _check("ratio nan", "row_count_within_ratio_of_inputs(math.nan, 1)", "low must be finite", "nan"),
    _check("ratio infinity", "row_count_within_ratio_of_previous(0.5, math.inf)", "high must be finite", "inf"),
    _check("ratio negative", "row_count_within_ratio_of_previous(-1, 1)", "low must be finite and at least 0"),
    _check("ratio text", 'row_count_within_ratio_of_inputs("0.5", 2)', "low must be a number, not '0.5'"),
]

SCHEDULES = [
    _case("schedule name", 'graph = Graph([], schedules=[Schedule("a/b", want, cron=EVERY_MINUTE)])', "'a/b'"),
    _case(
        "schedule want",
        'graph = Graph([], schedules=[Schedule("nightly", "daily/x", cron=EVERY_MINUTE)])',
        "schedule 'nightly'",
        "want must be a function",
    ),
    _schedule("neither cron nor interval", "", "give a cron expression or an interval"),
    _schedule("cron and interval", "cron=EVERY_MINUTE, every=SECOND", "give a cron expression or an interval"),
    _schedule("cron out of range", 'cron="61 * * * *"', "'61 * * * *' is not a cron expression"),
    _schedule("cron words", 'cron="every day at noon"', "is not a cron expression"),
    _schedule("cron empty", 'cron=""', "'' is not a cron expression"),
    _schedule("cron not a str", "cron=5", "5 is not a cron expression"),
    _schedule("interval zero", "every=dt.timedelta(0)", "an interval is a timedelta of at least one second"),
    _schedule("interval negative", "every=-SECOND", "an interval is a timedelta of at least one second"),
    _schedule("interval a number", "every=60", "an interval is a timedelta of at least one second"),
    _schedule("unknown time zone", 'cron=EVERY_MINUTE, timezone="Mars/Olympus"', "unknown time zone 'Mars/Olympus'"),
    _schedule("time zone not a str", "cron=EVERY_MINUTE, timezone=1", "timezone must be a str, not 1"),
    _schedule("ttl negative", "cron=EVERY_MINUTE, ttl=-SECOND", "ttl must be a timedelta of at least 0:00:01"),
    _schedule("sla text", 'cron=EVERY_MINUTE, sla="1h"', "sla must be a timedelta", "not '1h'"),
    _schedule("comment not a str", "cron=EVERY_MINUTE, comment=None", "comment must be a str, not None"),
    _schedule("window zero", "every=SECOND, catch_up_window=dt.timedelta(0)", "catch_up_window must be a timedelta"),
    _schedule("grace negative", "every=SECOND, grace=-SECOND", "grace must be a timedelta of at least 0:00:00"),
    _schedule("catch up text", 'cron=EVERY_MINUTE, catch_up="all"', "catch_up is a CatchUp, not 'all'"),
    _schedule("february 30th", 'cron="0 0 30 2 *"', "cron '0 0 30 2 *' never fires"),
    _schedule("april 31st", 'cron="0 0 31 4 *"', "never fires"),
    _schedule("a year gone", 'cron="0 0 1 1 * 0 2001"', "never fires"),
    _schedule(
        "a year far ahead", f'cron="0 0 1 1 * 0 {FAR}"', f"next fires at {FAR}-01-01T00:00:00+00:00", "year away"
    ),
]

REACTIONS = [
    _job("reaction kind", "reactions=[Reaction(99)]", "reaction kind 99 is not one of"),
    _job("debounce negative", "reactions=[on_upstream_change(debounce=-SECOND)]", "debounce is a timedelta"),
    _job("debounce a number", "reactions=[on_upstream_change(debounce=5)]", "debounce is a timedelta", "not 5"),
    _job("affected not callable", 'reactions=[on_source_arrival(affected=["raw/x"])]', "affected must be a function"),
]

USER_CODE = [
    _case("user division", "graph = 1 / 0", "ZeroDivisionError: division by zero"),
    _case("user function raises", 'def graph():\n    raise KeyError("region")', "KeyError: 'region'"),
    _case("user syntax error", "graph = Graph([", "SyntaxError:"),
    _case("user import", "import no_such_module_for_graphs", "ModuleNotFoundError: No module named"),
    _case("user multi-line message", 'raise ValueError("one\\ntwo\\n\\nthree")', "ValueError: one two three"),
]

CASES: list[Case] = PATTERNS + RETRIES + JOBS + SOURCES + GRAPHS + CHECKS + SCHEDULES + REACTIONS + USER_CODE


def _write(name: str, text: str) -> Callable[[Path], Path]:
    def make(folder: Path) -> Path:
        path = folder / name
        path.write_text(text)
        return path

    return make


FILE_CASES: list[tuple[Case, Callable[[Path], Path]]] = [
    (Case("no file", "", ("Invalid value for '--graph': no graph file at",)), lambda folder: folder / "absent.py"),
    (Case("not python", "", ("cannot import",)), _write("graph.txt", "graph = None\n")),
    (Case("no graph", "", ("defines no Graph named 'graph'",)), _write("nothing.py", "other = 1\n")),
    (Case("graph not a graph", "", ("defines no Graph",)), _write("text.py", "def graph():\n    return 'g'\n")),
]


# ----------------------------------------------------------------- which lines the table must reach

MODULES: tuple[ModuleType, ...] = (graph, checks, schedules, reactions, publish, declarations, code_versions)
# Whatever these raise is a declaration's error (any exception class).
DECLARING = {
    "graph": {
        "register_field_type",
        "PartitionPattern.__init__",
        "RetryPolicy.__post_init__",
        "Job.__post_init__",
        "SourceDataset.__post_init__",
        "Graph.__init__",
        "Graph._claim",
        "load_graph",
    },
    "checks": {
        "Check.__post_init__",
        "Check.aggregate",
        "row_count_at_least",
        "no_nulls",
        "unique",
        "row_count_within_ratio_of_inputs",
        "row_count_within_ratio_of_previous",
        "_need_ratio",
        "_need_columns",
    },
    "schedules": {"Schedule.__post_init__"},
    "reactions": {"Reaction.__post_init__", "on_upstream_change", "on_source_arrival", "on_code_change"},
    "publish": {"Publish.__post_init__", "as_publish"},
}
ERRORS = {
    "DeclarationError",
    "GraphError",
    "GraphFileError",
    "CheckDeclarationError",
    "ScheduleError",
    "ReactionError",
    "PublishDeclarationError",
}
# Raising a declaration error, but on a ref or values at run time, never while a graph is declared.
RUNTIME = {"graph": {"Graph.resolve", "PartitionPattern.format"}}


@dataclass(frozen=True)
class Site:
    module: str
    function: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.module}.py:{self.line} in {self.function}: {self.text}"


def error_sites(module: ModuleType) -> list[Site]:
    """The module's lines a bad declaration must reach: see the module docstring."""
    name = module.__name__.rsplit(".", 1)[1]
    source = Path(module.__file__ or "").read_text()
    found: list[Site] = []

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.ClassDef):
                visit(child, f"{scope}.{child.name}" if scope else child.name)
                continue
            if _is_site(child, name, scope):
                found.append(Site(name, scope, child.lineno, ast.get_source_segment(source, child) or ""))
            visit(child, scope)

    visit(ast.parse(source), "")
    return found


def _is_site(node: ast.AST, module: str, scope: str) -> bool:
    if isinstance(node, ast.Raise) and node.exc is not None:
        call = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        raised = call.id if isinstance(call, ast.Name) else ""
        if scope in DECLARING.get(module, set()):
            return True
        return raised in ERRORS and scope not in RUNTIME.get(module, set())
    if isinstance(node, ast.Return) and scope.rsplit(".", 1)[-1].endswith("_problem"):
        return not (node.value is None or (isinstance(node.value, ast.Constant) and node.value.value is None))
    return False


class LineTracer:
    """The (file, line) pairs executed in the traced modules' frames (sys.settrace, restored on exit)."""

    def __init__(self, modules: tuple[ModuleType, ...]) -> None:
        self.files = {
            str(Path(module.__file__ or "").resolve()): module.__name__.rsplit(".", 1)[1] for module in modules
        }
        self.hit: set[tuple[str, int]] = set()
        self._names: dict[str, str | None] = {}

    def _module_of(self, filename: str) -> str | None:
        if filename not in self._names:
            self._names[filename] = self.files.get(str(Path(filename).resolve()))
        return self._names[filename]

    def _call(self, frame: FrameType, event: str, arg: Any) -> Any:
        return self._line if self._module_of(frame.f_code.co_filename) else None

    def _line(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            self.hit.add((self._module_of(frame.f_code.co_filename) or "", frame.f_lineno))
        return self._line

    @contextmanager
    def tracing(self) -> Iterator[None]:
        previous = sys.gettrace()
        sys.settrace(self._call)
        try:
            yield
        finally:
            sys.settrace(previous)


# ----------------------------------------------------------------- running the CLI


def run_cli(*args: str, debug: str | None = None) -> tuple[int, str, str]:
    """`partbuild ARGS` in-process, through main() as the console script runs it: (exit code, stdout, stderr)."""
    with CliRunner().isolation(env={"PARTBUILD_DEBUG": debug}) as (out, err, _):
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code
        else:  # pragma: no cover (main always exits)
            code = 0
    return int(code or 0), out.getvalue().decode(), err.getvalue().decode()


def graph_file(tmp_path: Path, body: str, name: str = "pipeline.py") -> Path:
    path = tmp_path / name
    path.write_text(PRELUDE + textwrap.dedent(body))
    return path


def one_line_error(code: int, out: str, err: str) -> str:
    """The one error line, asserting exit code 2, nothing on stdout and no traceback."""
    assert (code, out) == (2, ""), (code, out, err)
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("partbuild: error: "), err
    return lines[0].removeprefix("partbuild: error: ")


def _check_case(case: Case, path: Path, db: str) -> str | None:
    """What is wrong with the CLI's answer for `case` (None: one line, exit 2, the expected words)."""
    code, out, err = run_cli("graph", "show", "--db", db, "--graph", str(path))
    try:
        line = one_line_error(code, out, err)
    except AssertionError as exc:
        return f"{case.name}: not one line and exit 2: {exc}"
    missing = [word for word in case.expect if word not in line]
    return f"{case.name}: {missing} not in {line!r}" if missing else None


# ----------------------------------------------------------------- the tests


def test_every_declaration_error_is_one_line_and_exit_2_and_the_table_reaches_every_branch(tmp_path: Path) -> None:
    sites = [site for module in MODULES for site in error_sites(module)]
    assert len(sites) > 60  # the introspection found the branches (not vacuous)
    tracer = LineTracer(MODULES)
    db = f"sqlite:///{tmp_path / 'never-opened.db'}"
    problems = []
    with tracer.tracing():
        for index, case in enumerate(CASES):
            problems.append(_check_case(case, graph_file(tmp_path, case.body, f"case_{index}.py"), db))
        for case, make in FILE_CASES:
            problems.append(_check_case(case, make(tmp_path), db))
    assert [problem for problem in problems if problem] == []
    unreached = [str(site) for site in sites if (site.module, site.line) not in tracer.hit]
    assert unreached == []
    names = [case.name for case in CASES] + [case.name for case, _ in FILE_CASES]
    assert len(set(names)) == len(names)


def test_a_good_file_loads_under_the_same_prelude(tmp_path: Path, sqlite_url: str) -> None:
    """The prelude's helpers are fine themselves: what fails in a case is its own declaration."""
    path = graph_file(
        tmp_path,
        "graph = Graph([Job('daily', DAILY, run, checks=[row_count_at_least(1)])], "
        "schedules=[Schedule('s', want, cron='* * * * * *')])",
    )
    Database.open(sqlite_url, auto_upgrade=True).close()
    code, out, err = run_cli("graph", "show", "--db", sqlite_url, "--graph", str(path), "--json")
    assert code == 0, err
    assert '"daily"' in out


@pytest.mark.parametrize(
    "command",
    [
        ["graph", "show"],
        ["up", "--port", "0"],
        ["serve", "--port", "0"],
        ["run"],
        ["want", "daily/2026-01-01"],
        ["automation", "list"],
    ],
    ids=lambda command: command[0],
)
def test_each_command_that_loads_a_graph_says_one_line(tmp_path: Path, command: list[str]) -> None:
    path = graph_file(tmp_path, "graph = Graph([Job('daily', DAILY, run, checks=[no_nulls()])])")
    code, out, err = run_cli(*command, "--db", f"sqlite:///{tmp_path / 'x.db'}", "--graph", str(path))
    line = one_line_error(code, out, err)
    assert line == f"graph file {path}, line {BODY_LINE}: job 'daily': no_nulls needs one or more column names"
    assert not (tmp_path / "x.db").exists()  # refused before anything was opened


@pytest.mark.parametrize(("flag", "env"), [(["--debug"], None), ([], "1"), ([], "true")])
def test_debug_prints_the_traceback_before_the_line(tmp_path: Path, flag: list[str], env: str | None) -> None:
    path = graph_file(tmp_path, "graph = Graph([Job('daily', DAILY, run, checks=[row_count_at_least(-1)])])")
    code, out, err = run_cli(*flag, "graph", "show", "--db", "sqlite:///x.db", "--graph", str(path), debug=env)
    assert code == 2 and out == ""
    assert err.startswith("Traceback (most recent call last):")
    assert "in row_count_at_least\n" in err and "CheckDeclarationError: row_count_at_least needs" in err
    assert err.splitlines()[-1] == (
        f"partbuild: error: graph file {path}, line {BODY_LINE}: job 'daily': "
        "row_count_at_least needs an int of at least 0, not -1"
    )
    code, _, err = run_cli("graph", "show", "--db", "sqlite:///x.db", "--graph", str(path), debug="0")
    assert code == 2 and len(err.splitlines()) == 1


def test_an_error_in_a_helper_module_names_that_file_and_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "helpers_for_graph.py").write_text(
        "from partbuild.orchestrator.checks import unique\n\n\ndef keys():\n    return unique('id', 7)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    path = graph_file(
        tmp_path, "from helpers_for_graph import keys\ngraph = Graph([Job('d', DAILY, run, checks=[keys()])])"
    )
    line = one_line_error(*run_cli("graph", "show", "--db", "sqlite:///x.db", "--graph", str(path)))
    helper = tmp_path / "helpers_for_graph.py"
    assert line == f"graph file {path} ({helper}, line 5): unique needs one or more column names"


def test_load_graph_keeps_the_files_exception_as_the_cause_of_its_one_line(tmp_path: Path) -> None:
    path = graph_file(tmp_path, "graph = Graph([Job('daily', DAILY, run, checks=[no_nulls()])])")
    with pytest.raises(GraphFileError) as raised:
        load_graph(path)
    assert (
        str(raised.value)
        == f"graph file {path}, line {BODY_LINE}: job 'daily': no_nulls needs one or more column names"
    )
    assert isinstance(raised.value.__cause__, CheckDeclarationError)
    assert isinstance(raised.value, DeclarationError) and isinstance(raised.value, ValueError)
    for error in (GraphError, CheckDeclarationError, ScheduleError, ReactionError, PublishDeclarationError):
        assert issubclass(error, DeclarationError)
