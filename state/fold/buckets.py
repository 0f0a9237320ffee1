"""Bucket scopes in the fold: which bucket a sharded decision was made under, and round-robin progress.

`BucketRunStart` records the bucket a round-robin worker starts; the state keeps
the last one per namespace (`BuildState.bucket_runs`). A `JobRunBuffer` carrying
a scope is accepted only if every instance it builds is in that bucket.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.bucketing import bucket
from partbuild.state.fold.validation import id_problem, short
from partbuild.state.model import Instance

if TYPE_CHECKING:
    from partbuild.state.build_state import BuildState

MAX_BUCKETS = 2**31  # a bucket number fits a signed 32-bit integer, as in Spark


def scope_problem(scope: pb.BucketScope) -> str | None:
    """What is wrong with a bucket scope, or None."""
    problem = id_problem("bucket namespace", scope.namespace)
    if problem:
        return problem
    if not 1 <= scope.bucket_total <= MAX_BUCKETS:
        return f"bucket_total {scope.bucket_total} is not between 1 and {MAX_BUCKETS}"
    if not 1 <= scope.bucket_id <= scope.bucket_total:
        return f"bucket_id {scope.bucket_id} is not between 1 and bucket_total {scope.bucket_total}"
    return None


def outsider(scope: pb.BucketScope, instances: list[Instance]) -> str | None:
    """Why an instance is not in the scope's bucket (the first one found), or None."""
    namespace, total, wanted = scope.namespace, scope.bucket_total, scope.bucket_id
    for instance in instances:
        found = bucket(namespace, instance.ref, total)
        if found != wanted:
            return (
                f"instance {instance.uuid} of {short(instance.ref)} is in bucket {found} of {total}, "
                f"not in bucket {wanted} this run was decided under"
            )
    return None


BucketRunPlan = tuple[str, int]  # (namespace, bucket id)


def check_bucket_run_start(state: BuildState, seq: int, msg: pb.BucketRunStart, event: pb.Event) -> str | BucketRunPlan:
    """A valid scope; the plan is (namespace, bucket id)."""
    if not msg.HasField("bucket"):
        return "bucket run start names no bucket"
    problem = scope_problem(msg.bucket)
    if problem:
        return problem
    return msg.bucket.namespace, msg.bucket.bucket_id


def apply_bucket_run_start(state: BuildState, seq: int, plan: BucketRunPlan, event: pb.Event) -> None:
    namespace, bucket_id = plan
    state.bucket_runs[namespace] = bucket_id
