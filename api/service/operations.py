"""Operations: health, counts by state (waiting instances no active want needs apart), bucket layouts, and
re-sharding a bucketing namespace."""

from __future__ import annotations

from partbuild.api.errors import Conflict
from partbuild.api.models.common import WrittenOut
from partbuild.api.models.operations import (
    BucketLayoutOut,
    CountsOut,
    HealthOut,
    OrchestratorHealthOut,
    ReshardRequest,
    WaitingOut,
)
from partbuild.api.service.base import ServiceBase
from partbuild.api.surface import ANONYMOUS
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.view import StateView
from partbuild.state.queries.wanted import waiting_counts


class OperationsService(ServiceBase):
    """How far the served state is; how refs are split into buckets."""

    def health(self) -> HealthOut:
        probe = self.orchestrator_health
        orchestrator = None
        if probe is not None:
            now = probe()
            orchestrator = OrchestratorHealthOut(status=now.status, failures=now.failures, last_error=now.last_error)
        degraded = orchestrator is not None and orchestrator.status == "restarting"
        return HealthOut(
            status="degraded" if degraded else "ok",
            head_seq=self.log.head(),
            state_seq=self.reads.head_seq,
            orchestrator=orchestrator,
        )

    def counts(self, as_of_seq: int | None = None, min_seq: int | None = None) -> CountsOut:
        with self._reading(min_seq, as_of_seq) as state:
            return counts_out(state)

    def bucket_layouts(self, as_of_seq: int | None = None, min_seq: int | None = None) -> list[BucketLayoutOut]:
        with self._reading(min_seq, as_of_seq) as state:
            return [
                BucketLayoutOut(
                    namespace=namespace,
                    bucket_total=total,
                    since_seq=since,
                    last_round_robin_bucket=state.bucket_runs.get(namespace),
                )
                for namespace, (total, since) in sorted(state.bucket_layouts.items())
            ]

    def reshard(self, request: ReshardRequest, user: str = ANONYMOUS) -> WrittenOut:
        """Split a namespace into `bucket_total` buckets: workers still on another total are rejected."""

        def build(state: BuildState) -> list[pb.Event]:
            layout = state.bucket_layouts.get(request.namespace)
            if layout is not None and layout[0] == request.bucket_total:
                raise Conflict(
                    f"namespace {request.namespace!r} is already split into {request.bucket_total} buckets "
                    f"(since seq {layout[1]})"
                )
            return [self._event(pb.BucketLayout(namespace=request.namespace, bucket_total=request.bucket_total), user)]

        return WrittenOut(seq=self._write(build)[0])


def counts_out(state: StateView) -> CountsOut:
    """Counts by state, and per waiting instance state how many an active want needs (state/queries/wanted.py).

    Of the live state: O(states + active refs). As of a seq: a scan of the records, as `PastState.counts`.
    """
    counts = state.counts()
    waiting = {
        name: WaitingOut(total=count.total, wanted=count.wanted, unwanted=count.unwanted)
        for name, count in waiting_counts(state, counts["instances"]).items()
    }
    return CountsOut(seq=state.head_seq, waiting=waiting, **counts)
