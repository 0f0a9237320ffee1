"""Operations: liveness and how far the served state is, counts by state, bucket layouts, re-sharding a bucketing
namespace.

`/metrics` (Prometheus) is served beside these, but is no declared operation: its answer is not JSON.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Protocol

from partbuild.api.models.common import WrittenOut
from partbuild.api.surface.common import ANONYMOUS, AsOfSeq, Body, MinSeq, User, operation
from partbuild.state.ops.roles import Role

if TYPE_CHECKING:  # its models load when an operation's types are first needed (`Operation`)
    from partbuild.api.models.operations import BucketLayoutOut, CountsOut, HealthOut, ReshardRequest

TAG = "operations"


class OperationsApi(Protocol):
    @operation("GET", "/healthz", "Liveness and how far the served state is", versioned=False, role=None)
    def health(self) -> HealthOut: ...

    @operation(
        "GET",
        "/counts",
        "Wants, instances and job runs by state; how many waiting instances no active want needs",
        role=Role.READER,
    )
    def counts(self, as_of_seq: AsOfSeq = None, min_seq: MinSeq = None) -> CountsOut: ...

    @operation(
        "GET", "/buckets", "How each bucketing namespace is split, and where round-robin stands", role=Role.READER
    )
    def bucket_layouts(self, as_of_seq: AsOfSeq = None, min_seq: MinSeq = None) -> list[BucketLayoutOut]: ...

    @operation(
        "POST", "/buckets/layout", "Re-shard: split a bucketing namespace into a new number of buckets", role=Role.ADMIN
    )
    def reshard(self, request: Annotated[ReshardRequest, Body()], user: User = ANONYMOUS) -> WrittenOut: ...
