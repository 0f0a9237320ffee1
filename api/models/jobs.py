"""Jobs and source datasets of the served graph: partition counts by state, the pattern-level graph."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

NodeKind = Literal["job", "source"]


class PartitionsSummaryOut(BaseModel):
    """How many of a job's (or source's) known partitions are in each state, as of a seq."""

    name: str
    kind: NodeKind
    patterns: list[str] = Field(description="The partition patterns it produces.")
    total: int = Field(description="Refs of its patterns with a canonical instance as of `as_of_seq`.")
    counts: dict[str, int] = Field(
        description="Refs by their canonical instance's state; `warning`: Live, its latest checks warned or errored; "
        "`tainted`: Missing in place of a tainted instance (not rebuilt yet)."
    )
    as_of_seq: int


class GraphEdgeOut(BaseModel):
    """A job reads partitions another job or source produces."""

    input: str = Field(description="The producer read from (a job's label or a source's name).")
    output: str = Field(description="The job that reads them.")


class JobGraphOut(BaseModel):
    """The served graph's jobs and sources, their pattern-level dependencies and partition counts."""

    as_of_seq: int
    nodes: list[PartitionsSummaryOut]
    edges: list[GraphEdgeOut] = Field(
        description="Found by asking each job's inputs function about one known partition of it (its first ref)."
    )
