"""Derived code versions see what a job's run function reaches in the graph's own files (orchestrator/code_versions.py).

Each test writes a small project (a graph file, sometimes a sibling module it imports) into its own directory and
loads it with `load_graph`, as `partbuild` does; the modules it imported are dropped from `sys.modules` after
each load, so two projects with a `helpers.py` never share one. A helper's body, a constant it uses, a class it
instantiates, a function in a sibling module: a change of any of them moves the job's version (and so its Live
partitions become stale); where the project is, a comment, and code the job never reaches do not.
"""

from __future__ import annotations

import ast
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import blake3
import pytest

from partbuild.orchestrator.code_versions import DERIVED_PREFIX, derived_code_version
from partbuild.orchestrator.decide import decide
from partbuild.orchestrator.graph import Graph, Job, SourceDataset, load_graph
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.queries.staleness import is_stale

from foldkit import Story

HEADER = """
from partbuild.orchestrator.graph import Graph, Job
"""
FOOTER = """
graph = Graph([Job("daily", ["daily/{n:int}"], run, code_version=globals().get("CODE_VERSION"))])
"""
GRAPH = """
LIMIT = 3

def clean(rows):
    return [row.strip() for row in rows][:LIMIT]

def unrelated(rows):
    return rows

def run(ctx):
    clean(ctx.rows)
"""

Loader = Callable[..., Graph]


@pytest.fixture
def project(tmp_path: Path) -> Loader:
    """Write a project's files into a directory of their own and load its graph file; the job's graph."""
    counter = iter(range(1_000))

    def load(graph: str, /, **modules: str) -> Graph:
        directory = tmp_path / f"project{next(counter)}"
        directory.mkdir()
        for name, text in {"graph": HEADER + textwrap.dedent(graph) + FOOTER, **modules}.items():
            path = directory / f"{name}.py"  # ("lib/text": a module of a package)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text))
        modules_before, path_before = set(sys.modules), list(sys.path)
        sys.path.insert(0, str(directory))  # the graph imports its siblings by name, as a project's code does
        try:
            return load_graph(directory / "graph.py")
        finally:
            sys.path[:] = path_before  # (a graph file may have added to it too)
            for name in set(sys.modules) - modules_before:
                del sys.modules[name]

    return load


def version(graph: Graph) -> str:
    job = graph.jobs["daily"]
    assert job.code_version is not None and job.code_version.startswith(DERIVED_PREFIX)
    return job.code_version


def test_a_helpers_body_or_a_constant_it_uses_moves_the_version_and_the_same_files_elsewhere_do_not(
    project: Loader,
) -> None:
    base = version(project(GRAPH))
    assert version(project(GRAPH)) == base  # the same files in another directory
    assert version(project(GRAPH.replace("row.strip()", "row.lower()"))) != base  # the helper's body
    assert version(project(GRAPH.replace("LIMIT = 3", "LIMIT = 4"))) != base  # a constant the helper uses
    assert version(project(GRAPH.replace("return rows", "return rows[1:]"))) == base  # a function run never reaches
    commented = GRAPH.replace("def clean(rows):", "# keeps three\ndef clean(rows):  # why\n\n")
    assert version(project(commented)) == base  # comments and blank lines


def test_a_helper_in_a_sibling_module_counts_whichever_way_it_is_imported(project: Loader) -> None:
    helpers = "SEP = ','\n\ndef split(line):\n    return line.split(SEP)\n\ndef other(line):\n    return line\n"
    graphs = {
        "module": "import helpers\n\ndef run(ctx):\n    helpers.split(ctx.line)\n",
        "name": "from helpers import split\n\ndef run(ctx):\n    split(ctx.line)\n",
        "inside": "def run(ctx):\n    from helpers import split\n    split(ctx.line)\n",
        "local module": "def run(ctx):\n    import helpers\n    return helpers.split(ctx.line)\n",
    }
    for how, graph in graphs.items():
        base = version(project(graph, helpers=helpers))
        assert version(project(graph, helpers=helpers)) == base, how
        assert version(project(graph, helpers=helpers.replace("split(SEP)", "split(SEP, 1)"))) != base, how
        assert version(project(graph, helpers=helpers.replace("','", "';'"))) != base, how
        assert version(project(graph, helpers=helpers.replace("return line\n", "return line * 2\n"))) == base, how


def test_a_package_of_the_project_counts_through_attribute_chains(project: Loader) -> None:
    """`lib.text.split(...)`: the chain goes through the user's package to its function."""
    graph = "import lib.text\n\ndef run(ctx):\n    lib.text.split(ctx.line)\n"
    base_files = {"lib/__init__": "", "lib/text": "def split(line):\n    return line.split()\n"}

    def load(text: str) -> str:
        return version(project(graph, **{**base_files, "lib/text": text}))

    assert load(base_files["lib/text"]) == load(base_files["lib/text"])
    assert load(base_files["lib/text"]) != load("def split(line):\n    return line.split(',')\n")


def test_classes_objects_tuples_of_steps_closures_and_defaults_are_followed(project: Loader) -> None:
    graph = """
    import dataclasses

    class Cleaner:
        def __call__(self, row):
            return self.fix(row)

        def fix(self, row):
            return row.strip()

    @dataclasses.dataclass(frozen=True)
    class Settings:
        limit: int = 3

    SETTINGS = Settings()
    STEPS = (Cleaner(), str.lower)

    def step_two(row):
        return row

    def run(ctx, pick=step_two):
        for step in STEPS:
            ctx.rows = [pick(step(row)) for row in ctx.rows][: SETTINGS.limit]
    """
    base = version(project(graph))
    assert version(project(graph.replace("row.strip()", "row.rstrip()"))) != base  # a method of a class in a tuple
    assert version(project(graph.replace("Settings()", "Settings(limit=4)"))) != base  # a dataclass constant
    assert version(project(graph.replace("return row\n", "return row * 2\n"))) != base  # a default's body
    assert version(project(graph.replace("str.lower", "str.upper"))) == base  # a library's: not the user's code

    factory = "def make(n):\n    def run(ctx):\n        return ctx.rows[:n]\n    return run\n\nrun = make(3)\n"
    assert version(project(factory)) != version(project(factory.replace("make(3)", "make(4)")))  # a closure's value


def test_recursion_and_cycles_between_modules_terminate_and_are_stable(project: Loader) -> None:
    graph = """
    import helpers

    def walk(node):
        return [walk(child) for child in node] + helpers.back(node)

    def run(ctx):
        walk(ctx.tree)
    """
    helpers = """
    import graph_cycle

    def back(node):
        return graph_cycle.forth(node) if node else back(node[1:])
    """
    graph_cycle = """
    import helpers

    def forth(node):
        return helpers.back(node[1:])
    """
    base = version(project(graph, helpers=helpers, graph_cycle=graph_cycle))
    assert version(project(graph, helpers=helpers, graph_cycle=graph_cycle)) == base
    changed = graph_cycle.replace("node[1:]", "node[2:]")
    assert version(project(graph, helpers=helpers, graph_cycle=changed)) != base  # reached only through the cycle


def test_a_declared_version_wins_and_a_run_reaching_nothing_of_the_users_keeps_its_source_version(
    project: Loader,
) -> None:
    declared = GRAPH + 'CODE_VERSION = "v7"\n'
    assert project(declared).jobs["daily"].code_version == "v7"
    assert project(declared.replace("row.strip()", "row.lower()")).jobs["daily"].code_version == "v7"

    # Libraries and partbuild itself do not count: the version is the hash of the function's own source.
    alone = "import json\n\ndef run(ctx):\n    ctx.record(json.dumps(ctx.rows), row_count=len(ctx.rows))\n"
    source = "def run(ctx):\n    ctx.record(json.dumps(ctx.rows), row_count=len(ctx.rows))\n"
    expected = DERIVED_PREFIX + blake3.blake3(ast.dump(ast.parse(source)).encode()).hexdigest()[:16]
    assert version(project(alone)) == expected


def test_installed_packages_count_for_nothing_even_inside_the_projects_directory(
    project: Loader, tmp_path: Path
) -> None:
    """A virtualenv in the project: its site-packages is a library's, not the user's, and is never imported early."""
    site = ".venv/lib/python3/site-packages"
    graph = f"""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent / "{site}"))
    from tool import shout

    def run(ctx):
        from late.sub import whisper  # a library imported only when the job runs
        return whisper(shout(ctx.line))
    """
    tool = "def shout(line):\n    return line.upper()\n"
    late = "from pathlib import Path\n\n(Path(__file__).parent.parent / 'imported').touch()\n"
    files = {f"{site}/tool": tool, f"{site}/late/__init__": late, f"{site}/late/sub": "def whisper(x):\n    return x\n"}
    base = version(project(graph, **files))
    assert version(project(graph, **{**files, f"{site}/tool": tool.replace("upper", "lower")})) == base
    assert list(tmp_path.glob(f"project*/{site}/tool.py")) and not list(tmp_path.glob(f"project*/{site}/imported"))


def test_sets_and_dicts_are_hashed_in_sorted_order(project: Loader) -> None:
    """Their iteration order is the hash's (PYTHONHASHSEED) or the insertion's: the version depends on neither.

    (Checked across processes with other hash seeds by hand: `PYTHONHASHSEED=1` and `=2` derive the same.)
    """
    graph = "KINDS = {'a', 'b', 'c', 'd'}\nNAMES = {'x': 1, 'y': 2}\n\ndef run(ctx):\n    return KINDS, NAMES\n"
    reordered = graph.replace("'a', 'b', 'c', 'd'", "'d', 'c', 'b', 'a'").replace("'x': 1, 'y': 2", "'y': 2, 'x': 1")
    assert version(project(graph)) == version(project(reordered))
    assert version(project(graph)) != version(project(graph.replace("'y': 2", "'y': 3")))


def test_a_changed_helper_makes_the_jobs_live_partitions_stale(project: Loader) -> None:
    before = project(GRAPH)
    after = project(GRAPH.replace("row.strip()", "row.lower()"))
    raw = SourceDataset("raw", "raw/{n:int}", locate=lambda p: f"/data/{p}")
    job = Job("daily", ["daily/{n:int}"], before.jobs["daily"].run, inputs=lambda p: [f"raw/{p['n']}"])
    served = Graph([job], [raw])
    s = Story()
    s.observe("raw/1")
    s.want("w", "daily/1")
    for event in decide(s.state, served, now_ms=s.clock_ms).events:
        assert s.state.apply(len(s.events) + 1, event) is None
        s.events.append(event)
    (run_id,) = s.state.job_runs
    s.succeed(run_id)
    instance = s.instance("daily/1")
    assert not is_stale(s.state, instance, {"daily": version(before)})
    assert is_stale(s.state, instance, {"daily": version(after)})
    assert derived_code_version(before.jobs["daily"].run) == version(before)  # (outside a load: the file's directory)
    assert isinstance(s.events[-1], pb.Event)
