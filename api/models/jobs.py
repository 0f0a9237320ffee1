"""Jobs and source datasets of the served graph (or, without one, of the log): partition counts by state, the
pattern-level graph with what the graph declares of each job (checks, reactions) and its schedules."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

NodeKind = Literal["job", "source"]


class PartitionsSummaryOut(BaseModel):
    """How many of a job's (or source's) known partitions are in each state, as of a seq."""

    name: str
    kind: NodeKind
    patterns: list[str] = Field(description="The partition patterns it produces (empty: no graph is served).")
    total: int = Field(description="Refs of its patterns with a canonical instance as of `as_of_seq`.")
    counts: dict[str, int] = Field(
        description="Refs by their canonical instance's state; `warning`: Live, its latest checks warned or errored; "
        "`tainted`: Missing in place of a tainted instance (not rebuilt yet)."
    )
    stale: int | None = Field(
        default=None,
        description="A job's Live instances built by another code version than the served graph's (null: a source, "
        "or no graph is served).",
    )
    note: str | None = Field(
        default=None,
        description="Set when no graph is served: its partitions are then what the log's runs of it built (a job), "
        "or what they read that no run built (a source, named after the refs' path).",
    )
    as_of_seq: int


class GraphEdgeOut(BaseModel):
    """A job reads partitions another job or source produces."""

    input: str = Field(description="The producer read from (a job's label or a source's name).")
    output: str = Field(description="The job that reads them.")
    declared: bool = Field(
        default=False,
        description="Found from the served graph alone: its inputs function asked about sample partitions of it.",
    )
    in_log: bool = Field(
        default=False,
        description="Found from the log: its inputs asked about a partition the log knows (with a graph), or a run "
        "of it read the producer's data (without one).",
    )


class DeclaredCheckOut(BaseModel):
    """A quality check a job declares on its outputs."""

    job: str
    name: str
    blocking: bool = Field(description="A failure keeps the instance from going Live.")
    retryable: bool = Field(description="A blocking failure is retried under the job's retry policy.")


class DeclaredReactionOut(BaseModel):
    """What makes a job want its partitions again without anyone asking."""

    job: str
    kind: str = Field(description="on_upstream_change, on_source_arrival or on_code_change.")
    debounce_ms: int = Field(description="How long its causes must be quiet before it fires.")


class GraphScheduleOut(BaseModel):
    """A schedule of the graph (its want function is not asked: which jobs it wants shows only once it ticked)."""

    name: str
    declared: bool = Field(description="The served graph declares it (false: only the log knows it).")
    when: str | None = Field(description='When it ticks: "cron 30 2 * * * UTC", "every 0:05:00" (declared ones).')
    paused: bool = Field(description="Paused as of the seq.")
    ticks: int = Field(description="Ticks the log holds as of the seq.")
    last_want_jobs: list[str] = Field(
        description="The jobs and sources producing what its last tick's want named (empty: no tick wanted yet)."
    )


class JobGraphOut(BaseModel):
    """The graph's jobs and sources, their pattern-level dependencies, partition counts and declarations."""

    as_of_seq: int
    graph_served: bool = Field(
        default=True, description="False: no graph is served; the jobs, sources and edges are what the log knows."
    )
    nodes: list[PartitionsSummaryOut]
    edges: list[GraphEdgeOut] = Field(
        description="Declared ones (each job's inputs asked about sample partitions of it) merged with those found "
        "in the log (asked about its first known partition; without a graph, what its runs read)."
    )
    checks: list[DeclaredCheckOut] = Field(default_factory=list, description="Each job's checks, in graph order.")
    reactions: list[DeclaredReactionOut] = Field(default_factory=list, description="Each job's reactions.")
    schedules: list[GraphScheduleOut] = Field(
        default_factory=list, description="The served graph's schedules and those only the log knows, by name."
    )
