"""Wants: validated creates (one or a batch, all or none), cancels, and reads with where each ref stands."""

from __future__ import annotations

import re
import uuid as uuidlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from itertools import islice
from typing import Any

from partbuild.api.errors import Conflict, InvalidInput, NotFound, TooLarge
from partbuild.api.models.common import CancelRequest, PageOut, WrittenOut
from partbuild.api.models.wants import (
    MAX_BATCH_REFS,
    MAX_WANT_FAILURES,
    MAX_WANT_RUNS,
    RefStatusOut,
    ValidatedOut,
    WantBatchCreatedOut,
    WantBatchRequest,
    WantCreatedOut,
    WantDetailOut,
    WantFailureOut,
    WantOut,
    WantRequest,
    WantStateName,
    WantTreeOut,
    made_by_problem,
)
from partbuild.api.service.as_of import as_of_suffix, by, page_at
from partbuild.api.service.base import ServiceBase, cancel_reason, check_limit, state_name
from partbuild.api.surface import ANONYMOUS
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import TERMINAL_WANT_STATES, Instance, InstanceState, Want, WantState
from partbuild.state.fold.view import StateView
from partbuild.state.log.events import envelope, manual
from partbuild.state.store.records import REF, RUN, WANT
from partbuild.state.store.stored import prefetched, read_ahead

MAX_TREE_NODES = 1_000
WAITING_DEPTH = 4
# How far back a ref's instances are followed for the one it had at a seq, and how many upstream hops a
# failure is followed: both bound a read; a real chain is a few long.
MAX_HISTORY_STEPS = 100
MAX_UPSTREAM_HOPS = 32
_FAILED_INSTANCE = (InstanceState.FAILED, InstanceState.UPSTREAM_FAILED)
_FAILED_WANT = (WantState.FAILED, WantState.UPSTREAM_FAILED)
# The note the fold gives an instance whose input failed (state/fold/transitions.py `upstream_failed`).
_UPSTREAM_NOTE = re.compile(r"^upstream (.+) failed$")


class WantsService(ServiceBase):
    """Creates, cancels and reads wants."""

    def create_want(self, request: WantRequest, user: str = ANONYMOUS) -> WantCreatedOut:
        return self.create_wants(WantBatchRequest.model_construct(wants=[request]), user).wants[0]

    def create_wants(self, request: WantBatchRequest, user: str = ANONYMOUS) -> WantBatchCreatedOut:
        """Record wants in one append: all or none."""
        requests = request.wants
        ids = [want.want_id or f"want-{uuidlib.uuid4().hex}" for want in requests]
        source = manual(user)

        def build(state: BuildState) -> list[pb.Event]:
            self._check_wants(state, requests)
            now = self.clock()
            return [
                envelope(_want_create(want, want_id), source=source, timestamp_ms=now)
                for want, want_id in zip(requests, ids, strict=True)
            ]

        first, last = self._write(build)
        with self.live.read() as state:
            created = [
                WantCreatedOut(want_id=want_id, seq=first + offset, state=state_name(state.wants[want_id].state))
                for offset, want_id in enumerate(ids)
            ]
        return WantBatchCreatedOut(first_seq=first, last_seq=last, wants=created)

    def validate_wants(self, request: WantBatchRequest) -> ValidatedOut:
        """Check wants as `create_wants` would, without recording anything."""
        self.reads.catch_up()
        with self.reads.read() as state:
            return self._check_wants(state, request.wants)

    def _check_wants(self, state: StateView, requests: list[WantRequest]) -> ValidatedOut:
        total = sum(len(request.refs) for request in requests)
        if total > MAX_BATCH_REFS:
            raise TooLarge(f"the batch names {total} refs; at most {MAX_BATCH_REFS} per request")
        given = [request.want_id for request in requests if request.want_id]
        for want_id in given:
            if want_id in state.wants:
                raise Conflict(f"want {want_id!r} already exists")
        if len(set(given)) != len(given):
            raise Conflict(f"want ids given more than once: {sorted(_duplicates(given))[:3]}")
        for request in requests:
            if len(set(request.refs)) != len(request.refs):
                raise InvalidInput(f"a want lists a ref more than once: {sorted(_duplicates(request.refs))[:3]}")
            for ref in request.refs:
                self._producer(ref)
        return ValidatedOut(wants=len(requests), refs=total)

    def wants(
        self,
        state_filter: WantStateName | None = None,
        ref: str | None = None,
        root: str | None = None,
        made_by: str | None = None,
        cursor: str | None = None,
        limit: int = 100,
        as_of_seq: int | None = None,
        min_seq: int | None = None,
    ) -> PageOut[WantOut]:
        """Wants oldest first (those created by `as_of_seq`, in their states then), filtered."""
        check_limit(limit)
        maker = made_by_filter(made_by)
        order = self.listing.wants
        after = self._seq_cursor(cursor, lambda seq: order.has_seq(seq) and by(seq, as_of_seq))
        with self._reading(min_seq, as_of_seq) as state:
            if ref is not None:
                named = prefetched(state, WANT, state.wants_by_ref.get(ref, ()))
                ids: Iterable[str] = (i for i in named if state.wants[i].created_seq > after)
            else:  # the index may hold wants created since
                ids = prefetched(state, WANT, order.between(after, state.head_seq))
            wanted = WantState[state_filter.upper()] if state_filter else None
            causes = state.want_causes
            matching = (
                want
                for want in map(state.wants.__getitem__, ids)
                if (wanted is None or want.state == wanted)
                and (root is None or want.root_want_id == root)
                and (maker is None or maker(want, causes))
            )
            now = self._now(state, as_of_seq)
            items = [want_out(want, now, causes) for want in islice(matching, limit)]
            seq = state.head_seq
        return page_at(items, limit, lambda w: str(w.created_seq), seq)

    def want(self, want_id: str, as_of_seq: int | None = None, min_seq: int | None = None) -> WantDetailOut:
        """A want, where its refs stand and its derivative wants, as of `as_of_seq`."""
        with self._reading(min_seq, as_of_seq) as state:
            want = state.wants.get(want_id)
            if want is None:
                raise NotFound(f"no want {want_id!r}" + as_of_suffix(as_of_seq))
            return want_detail_out(state, want, self._now(state, as_of_seq))

    def _now(self, state: StateView, as_of_seq: int | None) -> int:
        """The time SLAs are judged at: now, or as of a seq the clock of the log then."""
        return self.clock() if as_of_seq is None else state.clock_ms

    def cancel_want(self, want_id: str, request: CancelRequest | None = None, user: str = ANONYMOUS) -> WrittenOut:
        def build(state: BuildState) -> list[pb.Event]:
            want = state.wants.get(want_id)
            if want is None:
                raise NotFound(f"no want {want_id!r}")
            if want.state in TERMINAL_WANT_STATES:
                raise Conflict(f"want {want_id!r} is already {state_name(want.state)}")
            return [self._event(pb.WantCancel(want_id=want_id, reason=cancel_reason(request)), user)]

        return WrittenOut(seq=self._write(build)[0])


def _want_create(request: WantRequest, want_id: str) -> pb.WantCreate:
    return pb.WantCreate(
        want_id=want_id,
        partition_refs=request.refs,
        data_timestamp_ms=request.data_timestamp_ms or 0,
        ttl_seconds=request.ttl_seconds,
        sla_seconds=request.sla_seconds,
        comment=request.comment,
    )


def _duplicates(values: list[str]) -> set[str]:
    return {value for value, count in Counter(values).items() if count > 1}


# ----------------------------------------------------------------- who made a want

# A tick's want id: schedule:NAME:[manual:]TIME (state/fold/schedules.py `tick_want_id`).
_TICK_WANT_ID = re.compile(r"^schedule:(.+?):(?:manual:)?[0-9]{4}-[0-9]{2}-[0-9]{2}T")
Maker = Callable[[Want, Mapping[str, str]], bool]


def made_by(want: Want, causes: Mapping[str, str]) -> str:
    """Who made `want`, as KIND:NAME (`MADE_BY_KINDS`; KIND alone if the log names no one).

    Automation's wants have a cause (`want_causes`, set by their tick or firing with the want) and an id the
    fold checked: schedule:NAME:TIME, reaction:JOB:KIND:DIGEST. A derivative want names its parent; any
    other want, its event's source (manual:USER is a person's, by token name or user header).
    """
    want_id = want.want_id
    if want_id in causes:
        tick = _TICK_WANT_ID.match(want_id)
        if tick is not None:
            return f"schedule:{tick.group(1)}"
        if want_id.startswith("reaction:"):
            return "reaction:" + want_id.removeprefix("reaction:").rsplit(":", 2)[0]
    if want.parent_want_id is not None:
        return f"derived:{want.parent_want_id}"
    kind, _, name = want.source.partition(":")
    kind, name = ("user", name) if kind == "manual" else ("system", name if kind == "system" else want.source)
    return f"{kind}:{name}" if name else kind


def made_by_filter(value: str | None) -> Maker | None:
    """The test of the `made_by` filter `value` (KIND or KIND:NAME); None without one; InvalidInput if malformed."""
    if value is None:
        return None
    problem = made_by_problem(value)
    if problem:
        raise InvalidInput(problem)
    if ":" in value:
        return lambda want, causes: made_by(want, causes) == value
    prefix = f"{value}:"
    return lambda want, causes: (maker := made_by(want, causes)) == value or maker.startswith(prefix)


# ----------------------------------------------------------------- records -> models


def want_out(want: Want, now_ms: int, causes: Mapping[str, str]) -> WantOut:
    deadline = want.sla_deadline_ms
    return WantOut(
        want_id=want.want_id,
        refs=list(want.refs),
        state=state_name(want.state),
        created_seq=want.created_seq,
        updated_seq=want.updated_seq,
        created_ms=want.created_ms,
        data_timestamp_ms=want.data_timestamp_ms,
        ttl_seconds=want.ttl_seconds,
        sla_seconds=want.sla_seconds,
        expires_at_ms=want.expires_at_ms,
        sla_deadline_ms=deadline,
        sla_breached=deadline is not None and want.state != WantState.SUCCESSFUL and now_ms > deadline,
        comment=want.comment,
        source=want.source,
        made_by=made_by(want, causes),
        parent_want_id=want.parent_want_id,
        root_want_id=want.root_want_id,
        children=list(want.children or ()),
        satisfied_by=list(want.satisfied_by),
        cancel_reason=want.cancel_reason,
    )


def want_detail_out(state: StateView, want: Want, now_ms: int) -> WantDetailOut:
    """A want with where each of its refs stands and its derivative-want tree, as of the state's seq."""
    read_ahead(state, REF, want.refs)  # a replica's rows: the refs and their canonical instances, in one go
    return WantDetailOut(
        **want_out(want, now_ms, state.want_causes).model_dump(),
        refs_status=[_ref_status(state, ref, WAITING_DEPTH, set()) for ref in want.refs],
        tree=_tree(state, want, [MAX_TREE_NODES]),
        **_progress(state, want),
        cause=state.want_causes.get(want.want_id),
        failures=_failures(state, want),
        as_of_seq=state.head_seq,
    )


def _progress(state: StateView, want: Want) -> dict[str, Any]:
    """Where a want's refs stand, counted by their canonical instances' states, and the runs that build them.

    O(refs): one canonical lookup each (a backfill of a year is 365), runs taken newest first up to MAX_WANT_RUNS.
    """
    counts: Counter[str] = Counter()
    runs: dict[str, int] = {}
    instances = [state.canonical_instance(ref) for ref in want.refs]
    read_ahead(state, RUN, [run_id for instance in instances if instance is not None for run_id in instance.attempts])
    for instance in instances:
        counts[state_name(instance.state) if instance is not None else "none"] += 1
        for run_id in instance.attempts if instance is not None else ():
            runs[run_id] = state.job_runs[run_id].created_seq
    newest = sorted(runs, key=runs.__getitem__, reverse=True)[:MAX_WANT_RUNS]
    return {"progress": dict(sorted(counts.items())), "runs": newest}


def _ref_status(state: StateView, ref: str, depth: int, seen: set[str]) -> RefStatusOut:
    """Where `ref` stands and, while it waits, where the refs it waits for stand (to `depth`)."""
    instance = state.canonical_instance(ref)
    if instance is None:
        return RefStatusOut(ref=ref, instance_uuid=None, state=None)
    status = RefStatusOut(ref=ref, instance_uuid=instance.uuid, state=state_name(instance.state))
    if instance.waiting_on and depth > 0 and ref not in seen:
        seen.add(ref)
        status.waiting_on = [_ref_status(state, upstream, depth - 1, seen) for upstream in instance.waiting_on]
    return status


def _tree(state: StateView, want: Want, budget: list[int]) -> WantTreeOut:
    """The want and its derivative wants, at most MAX_TREE_NODES nodes in all."""
    budget[0] -= 1
    children = []
    for child_id in want.children or ():
        if budget[0] <= 0:
            break
        children.append(_tree(state, state.wants[child_id], budget))
    return WantTreeOut(want_id=want.want_id, state=state_name(want.state), refs=list(want.refs), children=children)


# ----------------------------------------------------------------- why a want failed


def _failures(state: StateView, want: Want) -> list[WantFailureOut]:
    """The partitions that failed a failed (or upstream_failed) want, at most MAX_WANT_FAILURES.

    A want fails at the seq one of its refs' canonical instances fails (then it is retired): those
    instances, the ones its refs had then. Each upstream_failed one is followed through its note
    ("upstream X failed") to the instance X had when it failed, down to the partition that really
    failed. Only records at or before the failure are read, and failed instances never change state,
    so the answer as of any later seq is the same (as of a seq, `state` is the past one).
    """
    if want.state not in _FAILED_WANT:
        return []
    found: dict[str, WantFailureOut] = {}
    for ref in want.refs:
        if len(found) >= MAX_WANT_FAILURES:
            break
        instance = _instance_at(state, ref, want.updated_seq)
        if instance is None or instance.state not in _FAILED_INSTANCE or instance.updated_seq > want.updated_seq:
            continue
        failed = _really_failed(state, instance)
        if failed.uuid not in found:
            found[failed.uuid] = _failure_out(state, failed, None if failed is instance else ref)
    return list(found.values())


def _instance_at(state: StateView, ref: str, seq: int) -> Instance | None:
    """The instance `ref` had at `seq` (the newest created by then); None if there was none, or retention
    dropped it."""
    uuid = state.canonical.get(ref)
    for _ in range(MAX_HISTORY_STEPS):
        instance = state.instances.get(uuid) if uuid is not None else None
        if instance is None or instance.created_seq <= seq:
            return instance
        uuid = instance.previous_uuid
    return None


def _really_failed(state: StateView, instance: Instance) -> Instance:
    """The instance whose failure `instance` followed: itself if it failed, else the upstream one its note
    names, as that ref was when `instance` failed (the same seq: a failure fails its waiters at once)."""
    seen = {instance.uuid}
    for _ in range(MAX_UPSTREAM_HOPS):
        match = _UPSTREAM_NOTE.match(instance.note or "") if instance.state == InstanceState.UPSTREAM_FAILED else None
        upstream = _instance_at(state, match.group(1), instance.updated_seq) if match else None
        if upstream is None or upstream.uuid in seen or upstream.state not in _FAILED_INSTANCE:
            break
        seen.add(upstream.uuid)
        instance = upstream
    return instance


def _failure_out(state: StateView, instance: Instance, via: str | None) -> WantFailureOut:
    return WantFailureOut(
        ref=instance.ref,
        instance_uuid=instance.uuid,
        state=state_name(instance.state),
        reason=instance.note,
        check=_failed_check(state, instance),
        via=via,
    )


def _failed_check(state: StateView, instance: Instance) -> str | None:
    """The first check that kept `instance` from going Live (errored, or a failed blocking one) among the
    results the outcome that failed it recorded (at its last change), if it recorded any."""
    for seq, rows in reversed(state.check_results.get(instance.uuid, ())):
        if seq != instance.updated_seq:
            continue
        for row in rows:  # (name, passed, blocking, errored, ...): a row may end with its duration
            if row[3] or (row[2] and not row[1]):
                return row[0]
    return None
