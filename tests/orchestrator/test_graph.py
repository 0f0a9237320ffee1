"""Graph declarations: partition patterns and their typed fields, jobs, how a graph refuses patterns that
could claim one ref twice, graph files, and retry policies."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from partbuild.examples.clicks.isoweek import IsoWeek  # registers the isoweek field type
from partbuild.orchestrator.context import JobContext
from partbuild.orchestrator.graph import (
    Graph,
    GraphError,
    Job,
    PartitionPattern,
    RetryPolicy,
    SourceDataset,
    load_graph,
)


def noop(_: JobContext) -> None:
    """A job body: these tests never run it."""


# ----------------------------------------------------------------- patterns that could claim one ref twice


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("x/{a}", "x/{a}"),
        ("x/{a}", "x/{b}"),
        ("x/{n:int}", "x/{m:int}"),
    ],
)
def test_same_shaped_patterns_are_rejected_at_graph_construction(first: str, second: str) -> None:
    with pytest.raises(GraphError, match="both produce"):
        Graph([Job("a", [first], noop), Job("b", [second], noop)])
    with pytest.raises(GraphError, match="both produce"):
        Graph([Job("a", [first], noop)], [SourceDataset("s", second, locate=lambda p: None)])


def test_overlapping_patterns_of_different_types_fail_when_a_ref_fits_both() -> None:
    graph = Graph([Job("a", ["x/{a}"], noop), Job("b", ["x/{n:int}"], noop)])
    assert graph.resolve("x/abc").producer.label == "a"  # type: ignore[union-attr]
    with pytest.raises(GraphError, match="claimed by job 'a' and job 'b'"):
        graph.resolve("x/1")


def test_disjoint_patterns_of_the_same_shape_may_coexist() -> None:
    graph = Graph([Job("d", ["clicks/{day:date}"], noop), Job("w", ["clicks/{week:isoweek}"], noop)])
    assert graph.resolve("clicks/2026-01-05").producer.label == "d"  # type: ignore[union-attr]
    assert graph.resolve("clicks/2026-W02").producer.label == "w"  # type: ignore[union-attr]


def test_duplicate_labels_and_names_are_rejected() -> None:
    with pytest.raises(GraphError, match="two jobs are labelled 'a'"):
        Graph([Job("a", ["x/{n}"], noop), Job("a", ["y/{n}"], noop)])
    with pytest.raises(GraphError, match="two source datasets are named 's'"):
        Graph([], [SourceDataset("s", "x/{n}", lambda p: None), SourceDataset("s", "y/{n}", lambda p: None)])


# ----------------------------------------------------------------- patterns, jobs, graph files, retry policies


def test_pattern_typed_fields() -> None:
    pattern = PartitionPattern("agg/{site}/d={day:date}/w={week:isoweek}/n={n:int}")
    assert pattern.prefix == "agg/"
    assert pattern.match("agg/eu-1/d=2026-01-05/w=2026-W02/n=-3") == {
        "site": "eu-1",
        "day": dt.date(2026, 1, 5),
        "week": IsoWeek(2026, 2),
        "n": -3,
    }
    assert pattern.match("agg/eu/1/d=2026-01-05/w=2026-W02/n=3") is None  # str has no slash
    assert pattern.match("agg/eu/d=2026-1-05/w=2026-W02/n=3") is None
    assert pattern.match("agg/eu/d=2026-01-05/w=2026-W02/n=x") is None
    assert pattern.match("agg/eu/d=2026-01-05/w=2026-W02/n=3/extra") is None  # full match only


@pytest.mark.parametrize(
    "ref",
    ["d=2026-02-30/w=2026-W02", "d=2026-13-01/w=2026-W02", "d=2026-01-05/w=2026-W54", "d=2026-01-05/w=2025-W53"],
)
def test_shaped_but_invalid_values_do_not_match(ref: str) -> None:
    assert PartitionPattern("d={day:date}/w={week:isoweek}").match(ref) is None


def test_pattern_format_round_trips() -> None:
    pattern = PartitionPattern("x.y/{site}/d={day:date}/w={week:isoweek}/n={n:int}")
    ref = "x.y/eu/d=2026-01-05/w=2026-W53/n=-12"
    fields = pattern.match(ref)
    assert fields is not None
    assert pattern.format(**fields) == ref
    assert pattern.format(site="us", day=dt.date(2026, 3, 1), week=IsoWeek(2026, 9), n=7) == (
        "x.y/us/d=2026-03-01/w=2026-W09/n=7"
    )
    assert pattern.match("xzy/eu/d=2026-01-05/w=2026-W53/n=1") is None  # literal dots are escaped
    with pytest.raises(GraphError, match=r"needs \['n'\]"):
        pattern.format(site="us", day=dt.date(2026, 3, 1), week=IsoWeek(2026, 9))


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("x/{a:float}", "unknown field type 'float'"),
        ("x/{a}/{a:int}", "field 'a' appears twice"),
        ("x/{a", "unbalanced braces"),
        ("x/a}", "unbalanced braces"),
    ],
)
def test_bad_patterns_are_graph_errors(template: str, message: str) -> None:
    with pytest.raises(GraphError, match=message):
        PartitionPattern(template)


def test_isoweek() -> None:
    week = IsoWeek.parse("2026-W02")
    assert str(week) == "2026-W02" and week.monday() == dt.date(2026, 1, 5)
    assert week.days()[-1] == dt.date(2026, 1, 11) and len(week.days()) == 7
    assert IsoWeek.of(dt.date(2027, 1, 1)) == IsoWeek(2026, 53)
    with pytest.raises(ValueError):
        IsoWeek.parse("2025-W53")


@pytest.mark.parametrize(
    ("template", "ref", "value"),
    [
        ("m/{m:month}", "m/2026-01", dt.date(2026, 1, 1)),
        ("m/{m:month}", "m/0999-12", dt.date(999, 12, 1)),
        ("y/{y:year}", "y/2026", 2026),
        ("y/{y:year}", "y/0999", 999),
        ("h/{h:hour}", "h/2026-01-05T13", dt.datetime(2026, 1, 5, 13)),
        ("h/{h:hour}", "h/2026-01-05T00", dt.datetime(2026, 1, 5, 0)),
    ],
)
def test_month_year_and_hour_fields_parse_and_format_back(template: str, ref: str, value: Any) -> None:
    pattern = PartitionPattern(template)
    field = template.split("{")[1].split(":")[0]
    assert pattern.match(ref) == {field: value}
    assert pattern.format(**{field: value}) == ref


@pytest.mark.parametrize(
    ("template", "ref"),
    [
        ("m/{m:month}", "m/2026-13"),
        ("m/{m:month}", "m/2026-00"),
        ("m/{m:month}", "m/2026-1"),
        ("m/{m:month}", "m/2026-01-05"),
        ("y/{y:year}", "y/26"),
        ("y/{y:year}", "y/20260"),
        ("h/{h:hour}", "h/2026-01-05T24"),
        ("h/{h:hour}", "h/2026-01-05T1"),
        ("h/{h:hour}", "h/2026-01-05 13"),
        ("h/{h:hour}", "h/2026-02-30T01"),
    ],
)
def test_month_year_and_hour_fields_refuse_other_text(template: str, ref: str) -> None:
    assert PartitionPattern(template).match(ref) is None


def test_a_month_formats_any_day_of_it_and_sits_beside_dates_and_years() -> None:
    assert PartitionPattern("m/{m:month}").format(m=dt.date(2026, 2, 17)) == "m/2026-02"
    graph = Graph([Job("d", ["x/{d:date}"], noop), Job("m", ["x/{m:month}"], noop), Job("y", ["x/{y:year}"], noop)])
    assert [graph.resolve(ref).producer.label for ref in ("x/2026-01-05", "x/2026-01", "x/2026")] == [  # type: ignore[union-attr]
        "d",
        "m",
        "y",
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"label": "a/b"}, "no slash"),
        ({"label": ""}, "non-empty"),
        ({"outputs": []}, "declares no output patterns"),
        ({"batch_size": 0}, "at least 1"),
        ({"max_concurrency": 0}, "at least 1"),
    ],
)
def test_bad_jobs_are_graph_errors(kwargs: dict[str, Any], message: str) -> None:
    fields: dict[str, Any] = {"label": "j", "outputs": ["x/{n}"], "run": noop, **kwargs}
    with pytest.raises(GraphError, match=message):
        Job(**fields)


GRAPH_FILE = """
from partbuild.orchestrator.graph import Graph, Job

def run(ctx):
    pass

{body}
"""


@pytest.mark.parametrize(
    "body",
    [
        "graph = Graph([Job('j', ['x/{n}'], run)])",
        "def graph():\n    return Graph([Job('j', ['x/{n}'], run)])",
    ],
    ids=["instance", "function"],
)
def test_load_graph(tmp_path: Path, body: str) -> None:
    path = tmp_path / "pipeline.py"
    path.write_text(GRAPH_FILE.format(body=body))
    graph = load_graph(path)
    assert isinstance(graph, Graph)
    assert graph.resolve("x/7").producer.label == "j"  # type: ignore[union-attr]
    assert load_graph(str(path)).jobs.keys() == {"j"}


def test_load_graph_errors(tmp_path: Path) -> None:
    with pytest.raises(GraphError, match="no graph file at"):
        load_graph(tmp_path / "absent.py")
    (tmp_path / "dir.py").mkdir()
    with pytest.raises(GraphError, match="no graph file at"):
        load_graph(tmp_path / "dir.py")
    path = tmp_path / "pipeline.py"
    path.write_text(GRAPH_FILE.format(body="other = Graph([Job('j', ['x/{n}'], run)])\nnot_a_graph = 42"))
    with pytest.raises(GraphError, match="defines no Graph named 'graph'"):
        load_graph(path)
    with pytest.raises(GraphError, match="defines no Graph named 'not_a_graph'"):
        load_graph(path, "not_a_graph")
    assert load_graph(path, "other").jobs.keys() == {"j"}
    path.write_text(GRAPH_FILE.format(body="def graph():\n    return 'not a graph'"))
    with pytest.raises(GraphError, match="defines no Graph named 'graph'"):
        load_graph(path)


def test_retry_policy_delay_grows_and_is_capped() -> None:
    policy = RetryPolicy(backoff_ms=1_000, multiplier=2.0, max_backoff_ms=10_000)
    assert [policy.delay_ms(n) for n in range(7)] == [0, 1_000, 2_000, 4_000, 8_000, 10_000, 10_000]
    assert policy.delay_ms(-1) == 0
    assert RetryPolicy(backoff_ms=500, multiplier=1.0).delay_ms(50) == 500
    assert RetryPolicy(backoff_ms=0).delay_ms(5) == 0
    assert RetryPolicy(backoff_ms=1_000, multiplier=1.5, max_backoff_ms=2_000).delay_ms(2) == 1_500


@pytest.mark.parametrize(
    "kwargs",
    [{"max_attempts": 0}, {"backoff_ms": -1}, {"max_backoff_ms": -1}, {"multiplier": 0.5}],
)
def test_retry_policy_validation(kwargs: dict[str, Any]) -> None:
    with pytest.raises(GraphError):
        RetryPolicy(**kwargs)


def test_retry_policy_cap_holds_for_many_failures() -> None:
    assert RetryPolicy(max_attempts=10_000, max_backoff_ms=60_000).delay_ms(2_000) == 60_000


def test_int_fields_have_one_spelling() -> None:
    """`x/007` and `x/7` would otherwise be two refs of one partition."""
    pattern = PartitionPattern("x/{n:int}")
    assert pattern.match("x/7") == {"n": 7} and pattern.match("x/0") == {"n": 0} and pattern.match("x/-3") == {"n": -3}
    for other_spelling in ("x/007", "x/-0", "x/+7"):
        assert pattern.match(other_spelling) is None
