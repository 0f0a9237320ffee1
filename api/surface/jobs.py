"""Jobs and source datasets of the served graph (without one, of the log): partition counts by state and the
pattern-level graph with each job's declared checks and reactions, and the graph's schedules."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Protocol

from partbuild.api.surface.common import AsOfSeq, MinSeq, Path, operation
from partbuild.state.ops.roles import Role

if TYPE_CHECKING:  # its models load when an operation's types are first needed (`Operation`)
    from partbuild.api.models.jobs import JobGraphOut, PartitionsSummaryOut

TAG = "jobs"
NamePath = Annotated[
    str,
    Path(description="A job's label or a source dataset's name (a job first); without a graph, as the log names it."),
]


class JobsApi(Protocol):
    @operation(
        "GET",
        "/jobs/{name}/partitions/summary",
        "How many of a job's (or source's) known partitions are in each state",
        role=Role.READER,
    )
    def partitions_summary(
        self, name: NamePath, as_of_seq: AsOfSeq = None, min_seq: MinSeq = None
    ) -> PartitionsSummaryOut: ...

    @operation(
        "GET",
        "/graph",
        "The job graph: jobs, sources, declared and logged dependencies, counts, checks, reactions, schedules",
        role=Role.READER,
    )
    def job_graph(self, as_of_seq: AsOfSeq = None, min_seq: MinSeq = None) -> JobGraphOut: ...
