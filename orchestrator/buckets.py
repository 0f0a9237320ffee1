"""Workers split by bucket: what a worker decides about, and the static bucket of `run --bucket-*`.

`Ownership`/`Scope` are the decider's one filter: `owns(ref)`, `owns_run`,
`batch_key`, and `stamp` (a decision marked with its scope: a bucket or a group
fence). Two implementations: a `StaticBucket` (here) or a worker group's
`GroupOwnership` (`orchestrator.group.ownership`: the buckets a task owns in the
fold's current epoch).

A worker started with a bucket (`--bucket-total N --bucket-id K`, or a bucket
chosen round-robin) owns the refs whose `bucket(namespace, ref, N)` is K
(`state/rules/bucketing.py`: HMAC-MD5, the same everywhere). Its decisions
consider only those refs (`decide(..., ownership=...)`), its `JobRunBuffer`s
carry the bucket, and the fold rejects a run naming a partition of another
bucket (`state/fold/buckets.py`, against the namespace's layout).

A worker records its start (`BucketRunStart`, `start_bucket`). The fold rejects
it, and later any of its job runs, when the namespace is split into another
number of buckets (the buckets would overlap); the worker then stops with the
fold's reason (`BucketRejected`) rather than deciding again and again in vain.
"""

from __future__ import annotations

from typing import Protocol

from google.protobuf.message import Message

from partbuild.orchestrator.identity import ORCHESTRATOR
from partbuild.orchestrator.reactor import ReactionScope
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.buckets import layout_problem
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import JobRun
from partbuild.state.log.events import Clock, envelope
from partbuild.state.log.live import LiveState
from partbuild.state.log.store import EventLog
from partbuild.state.rules.bucketing import DEFAULT_NAMESPACE, BucketingConfig, apply_round_robin_bucketing, bucket


class Scope(Protocol):
    """What a worker decides about at one state, and how its decisions say so.

    The decider's one filter: a `StaticBucket` (one fixed bucket) or a worker
    group's view (`orchestrator.group.ownership`: the buckets this task owns in
    the fold's current epoch).
    """

    run_tag: str  # part of its job run ids: workers deciding on one head make distinct ids

    def owns(self, ref: str) -> bool:
        """Whether this worker decides about `ref`."""
        ...

    def owns_run(self, state: BuildState, run: JobRun) -> bool:
        """Whether a job run's partitions are this worker's (to fail when stale, to wait for when idle)."""
        ...

    def batch_key(self, ref: str) -> int:
        """Refs with different keys never share a job run (a group's runs lie in one bucket)."""
        ...

    def stamp(self, payload: Message) -> None:
        """Mark a decision payload as this worker's (a bucket scope, a group fence), in place."""
        ...

    def reaction_scope(self) -> ReactionScope:
        """The refs its reactions act for, and the scope keys their cursors are noted under."""
        ...


class Ownership(Protocol):
    """A worker's scope as it changes with the log: `at(state)` is the scope at that state."""

    def at(self, state: BuildState) -> Scope:
        """The scope to decide with on `state` (read under the state's lock)."""
        ...


class BucketRejected(Exception):
    """The fold refused this worker's bucket: the namespace is split differently (the reason says how)."""


class StaticBucket:
    """The bucket a worker owns, with each ref's verdict remembered (refs are decided about again and again)."""

    def __init__(self, bucket_id: int, bucket_total: int, namespace: str = DEFAULT_NAMESPACE) -> None:
        if not 1 <= bucket_id <= bucket_total:
            raise ValueError(f"bucket_id {bucket_id} is not between 1 and bucket_total {bucket_total}")
        self.scope = pb.BucketScope(namespace=namespace, bucket_id=bucket_id, bucket_total=bucket_total)
        self._owned: dict[str, bool] = {}

    def owns(self, ref: str) -> bool:
        """Whether `ref` falls in this worker's bucket."""
        owned = self._owned.get(ref)
        if owned is None:
            scope = self.scope
            owned = self._owned[ref] = bucket(scope.namespace, ref, scope.bucket_total) == scope.bucket_id
        return owned

    def owns_run(self, state: BuildState, run: JobRun) -> bool:
        """Whether a job run builds refs of this bucket (a run decided under a bucket lies in one bucket)."""
        return self.owns(state.instances[run.instance_uuids[0]].ref)

    @property
    def run_tag(self) -> str:
        return f"b{self.scope.bucket_id}"

    def batch_key(self, ref: str) -> int:
        return 0  # every ref it decides about is in its one bucket

    def stamp(self, payload: Message) -> None:
        """Job runs carry the bucket: the fold checks every partition is in it."""
        if isinstance(payload, pb.JobRunBuffer):
            payload.bucket.CopyFrom(self.scope)

    def at(self, state: BuildState) -> StaticBucket:
        """A static bucket does not change with the log."""
        return self

    def reaction_scope(self) -> ReactionScope:
        """Its reactions' cursor is its bucket's: one key, under which it examines the refs it owns."""
        scope = self.scope
        key = f"bucket {scope.namespace} {scope.bucket_id}/{scope.bucket_total}"
        return ReactionScope((key,), lambda ref: key, self.owns)

    def check_layout(self, state: BuildState) -> None:
        """Raise `BucketRejected` if the namespace's layout (as of `state`) no longer admits this bucket."""
        problem = layout_problem(state, self.scope)
        if problem:
            raise BucketRejected(problem)

    def __repr__(self) -> str:
        return f"StaticBucket({self.scope.bucket_id}/{self.scope.bucket_total}, namespace={self.scope.namespace!r})"


def start_bucket(config: BucketingConfig, live: LiveState, log: EventLog, clock: Clock) -> StaticBucket | None:
    """The bucket a worker configured with `config` owns for this run (None: one bucket, all refs).

    With round-robin execution the bucket is the one after the last the log records for
    the namespace (`BucketRunStart`, kept by the fold). Every worker with a bucket appends its
    start, so restarts, replays and audits agree on who worked on which bucket, and a
    start the fold rejects (another layout) raises `BucketRejected` with the fold's reason.
    """
    round_robin = config.round_robin_bucket_execution
    if round_robin:
        live.catch_up()
        with live.read() as state:
            last = state.bucket_runs.get(DEFAULT_NAMESPACE)
        config, _ = apply_round_robin_bucketing(config, last)
    elif config.bucket_total == 1:
        return None
    owned = StaticBucket(config.bucket_id, config.bucket_total)
    start = pb.BucketRunStart(bucket=owned.scope, static_bucket=not round_robin)
    appended = log.append([envelope(start, source=ORCHESTRATOR, clock=clock)])
    live.read_at_least(appended.last_seq)
    with live.read() as state:
        rejected = state.rejection_between(appended.first_seq, appended.last_seq)
    if rejected:
        raise BucketRejected(rejected)
    return owned
