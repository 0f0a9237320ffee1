"""Bucket scopes in the fold: which bucket a sharded decision was made under, layouts, round-robin progress.

`BucketRunStart` records a sharded worker starting on a bucket; for round-robin
workers the state keeps the last one per namespace (`BuildState.bucket_runs`).
A `JobRunBuffer` carrying a scope is accepted only if every instance it builds
is in that bucket.

Worker groups (state/fold/group.py) own their namespace: a static scope in it
is rejected, and so is a layout changing its bucket count.

Layouts: the first accepted scoped event of a namespace fixes its bucket_total
(`BuildState.bucket_layouts`). Buckets of two different totals overlap, so a
scoped event under another total is rejected: a worker started with an
overlapping bucket builds nothing. Only an explicit `BucketLayout` (an operator
re-sharding) changes the total; workers still on the old one are then rejected.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.group import namespace_group
from partbuild.state.fold.records import Instance
from partbuild.state.fold.validation import id_problem, short
from partbuild.state.rules.bucketing import MAX_BUCKETS, bucket

if TYPE_CHECKING:
    from partbuild.state.fold.build_state import BuildState


def split_problem(namespace: str, bucket_total: int) -> str | None:
    """What is wrong with a namespace and its number of buckets, or None."""
    problem = id_problem("bucket namespace", namespace)
    if problem:
        return problem
    if not 1 <= bucket_total <= MAX_BUCKETS:
        return f"bucket_total {bucket_total} is not between 1 and {MAX_BUCKETS}"
    return None


def scope_problem(scope: pb.BucketScope) -> str | None:
    """What is wrong with a bucket scope, or None."""
    problem = split_problem(scope.namespace, scope.bucket_total)
    if problem:
        return problem
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


def layout_problem(state: BuildState, scope: pb.BucketScope) -> str | None:
    """Why a scope disagrees with its namespace's layout, or None (also when the namespace has none yet)."""
    layout = state.bucket_layouts.get(scope.namespace)
    if layout is None or layout[0] == scope.bucket_total:
        return None
    total, since = layout
    return (
        f"bucket {scope.bucket_id}/{scope.bucket_total} overlaps other buckets: namespace {scope.namespace!r} "
        f"is split into {total} buckets (since seq {since}); re-shard with "
        f"`partbuild reshard --total {scope.bucket_total}`"
    )


def group_problem(state: BuildState, namespace: str) -> str | None:
    """Why a static bucket of `namespace` is refused: a worker group owns its buckets. Or None."""
    group = namespace_group(state, namespace)
    if group is None:
        return None
    return (
        f"namespace {namespace!r} is shared by worker group {short(group.name)} (since seq {group.created_seq}): "
        "its buckets are owned through the group, not by a static bucket"
    )


def scoped_problem(state: BuildState, scope: pb.BucketScope) -> str | None:
    """What is wrong with a decision's scope, in itself, against the namespace's layout or its group, or None."""
    return scope_problem(scope) or layout_problem(state, scope) or group_problem(state, scope.namespace)


def fix_layout(state: BuildState, seq: int, scope: pb.BucketScope) -> None:
    """The first accepted scoped event of a namespace fixes its bucket_total."""
    if scope.namespace not in state.bucket_layouts:
        state.bucket_layouts[scope.namespace] = (scope.bucket_total, seq)


# ----------------------------------------------------------------- BucketRunStart


def check_bucket_run_start(
    state: BuildState, seq: int, msg: pb.BucketRunStart, event: pb.Event
) -> str | pb.BucketRunStart:
    """A valid scope that agrees with the namespace's layout; the plan is the message."""
    if not msg.HasField("bucket"):
        return "bucket run start names no bucket"
    return scoped_problem(state, msg.bucket) or msg


def apply_bucket_run_start(state: BuildState, seq: int, msg: pb.BucketRunStart, event: pb.Event) -> None:
    scope = msg.bucket
    fix_layout(state, seq, scope)
    if not msg.static_bucket:  # the round-robin rotation follows round-robin starts only
        state.bucket_runs[scope.namespace] = scope.bucket_id


# ----------------------------------------------------------------- BucketLayout


def check_bucket_layout(state: BuildState, seq: int, msg: pb.BucketLayout, event: pb.Event) -> str | pb.BucketLayout:
    """A valid namespace and total; the plan is the message."""
    problem = split_problem(msg.namespace, msg.bucket_total)
    if problem:
        return problem
    group = namespace_group(state, msg.namespace)
    if group is not None and group.bucket_total != msg.bucket_total:
        return (
            f"namespace {msg.namespace!r} is split into {group.bucket_total} buckets by worker group "
            f"{short(group.name)}, fixed for the group's life"
        )
    return msg


def apply_bucket_layout(state: BuildState, seq: int, msg: pb.BucketLayout, event: pb.Event) -> None:
    state.bucket_layouts[msg.namespace] = (msg.bucket_total, seq)
