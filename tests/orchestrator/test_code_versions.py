"""A job's code version (orchestrator/code_versions.py, `Job.code_version`) and the decisions that record it.

Declared, it is used as given (and checked); absent, it is derived from the run function's source as Python
parses it: comments and formatting leave it, a change of code moves it. Functions without a source fall back
to their code object. Each JobRunBuffer the decider appends carries the job's version. What the run function
reaches in the graph's own files (helpers, classes, constants, sibling modules): test_code_versions_reach.py.
"""

from __future__ import annotations

import functools
import textwrap
from typing import Any

import pytest

from partbuild.orchestrator.code_versions import DERIVED_PREFIX, derived_code_version
from partbuild.orchestrator.context import JobContext
from partbuild.orchestrator.decide import decide
from partbuild.orchestrator.graph import Graph, GraphError, Job, SourceDataset
from partbuild.proto.v1 import events_pb2 as pb

from foldkit import Story


def _function(source: str, name: str = "run", *, path: str | None = None) -> Any:
    """A function defined by `source`, from a real file when `path` is given (inspect reads its source there)."""
    namespace: dict[str, Any] = {}
    text = textwrap.dedent(source)
    exec(compile(text, path or "<string>", "exec"), namespace)
    return namespace[name]


def _from_file(tmp_path: Any, source: str, file: str = "jobs.py") -> Any:
    path = tmp_path / file
    path.write_text(textwrap.dedent(source))
    return _function(path.read_text(), path=str(path))


def test_comments_blank_lines_and_formatting_leave_the_derived_version(tmp_path: Any) -> None:
    plain = _from_file(tmp_path, "def run(ctx):\n    return ctx.rows * 2\n", "a.py")
    commented = _from_file(
        tmp_path, "\n\n# why\ndef run(ctx):  # doubled\n\n    return (ctx.rows *\n            2)  # always\n", "b.py"
    )
    version = derived_code_version(plain)
    assert version is not None and version.startswith(DERIVED_PREFIX)
    assert derived_code_version(commented) == version


def test_a_change_of_code_constants_or_docstring_moves_the_derived_version(tmp_path: Any) -> None:
    base = derived_code_version(_from_file(tmp_path, "def run(ctx):\n    return ctx.rows * 2\n", "a.py"))
    changes = [
        "def run(ctx):\n    return ctx.rows * 3\n",
        "def run(ctx):\n    return ctx.cols * 2\n",
        'def run(ctx):\n    """Doubles."""\n    return ctx.rows * 2\n',
    ]
    versions = {derived_code_version(_from_file(tmp_path, text, f"c{n}.py")) for n, text in enumerate(changes)}
    assert len(versions) == 3 and base not in versions


def test_without_a_source_the_code_object_decides_and_is_stable() -> None:
    first = _function("def run(ctx):\n    return [x for x in ctx]\n")  # "<string>": no source to read
    again = _function("def run(ctx):\n    return [x for x in ctx]\n")
    other = _function("def run(ctx):\n    return [x + 1 for x in ctx]\n")
    version = derived_code_version(first)
    assert version is not None and version.startswith(DERIVED_PREFIX)
    assert derived_code_version(again) == version  # nested code objects hashed by content, not by address
    assert derived_code_version(other) != version
    assert derived_code_version(len) is None  # a builtin: neither source nor code


def test_partials_wrappers_and_callable_objects_are_seen_through() -> None:
    def run(ctx: JobContext, factor: int) -> None:
        del ctx, factor

    @functools.wraps(run)
    def wrapped(*args: Any) -> None:
        run(*args)

    class Runner:
        def __call__(self, ctx: JobContext) -> None:
            del ctx

    version = derived_code_version(run)
    assert derived_code_version(functools.partial(run, factor=2)) == version
    assert derived_code_version(wrapped) == version
    assert derived_code_version(Runner()) == derived_code_version(Runner.__call__)


def noop(ctx: JobContext) -> None:
    """A job body: decisions never run it."""


def test_a_job_declares_its_version_or_derives_one_and_refuses_bad_ones() -> None:
    assert Job("wk", ["wk/{n:int}"], noop, code_version="v2").code_version == "v2"
    assert Job("wk", ["wk/{n:int}"], noop).code_version == derived_code_version(noop)
    for bad in ("", "v" * 257, "v\n2", 2):
        with pytest.raises(GraphError, match="code_version"):
            Job("wk", ["wk/{n:int}"], noop, code_version=bad)  # type: ignore[arg-type]
    with pytest.raises(GraphError, match="declare code_version"):
        Job("wk", ["wk/{n:int}"], len)  # type: ignore[arg-type]
    assert Job("wk", ["wk/{n:int}"], len, code_version="v1").code_version == "v1"  # type: ignore[arg-type]


def test_each_buffered_run_records_its_jobs_code_version_and_the_fold_keeps_it() -> None:
    graph = Graph(
        [
            Job("wk", ["wk/{n:int}"], noop, code_version="v2", inputs=lambda p: [f"raw/{p['n']}"]),
            Job("other", ["other/{n:int}"], noop),
        ],
        [SourceDataset("raw", "raw/{n:int}", locate=lambda p: f"/data/{p}")],
    )
    s = Story()
    s.observe("raw/1")
    s.want("w", "wk/1", "other/1")
    decision = decide(s.state, graph, now_ms=s.clock_ms)
    buffers = [event.job_run_buffer for event in decision.events if event.HasField("job_run_buffer")]
    assert {buffer.job_label: buffer.code_version for buffer in buffers} == {
        "wk": "v2",
        "other": derived_code_version(noop),
    }
    for event in decision.events:
        assert s.state.apply(len(s.events) + 1, event) is None
        s.events.append(event)
    runs = {run.job_label: run.code_version for run in s.state.job_runs.values()}
    assert runs == {"wk": "v2", "other": derived_code_version(noop)}
    assert isinstance(buffers[0], pb.JobRunBuffer)
