"""Bulk actions: one action on a selection of partitions, in one request and one append.

A selection is refs listed, or every ref under a prefix, narrowed by the canonical instance's state or
staleness (the same filters as `GET /partitions`), read on the newest state. The action applies to the
partitions it can: `want` to all, `retry` to the failed (failed or upstream_failed: a want of them, so
each gets a fresh instance), `taint` and `recheck` to the Live (the instance readers get: a stale one
still serving counts). `want` and `retry` make one want naming every ref; `taint` one `PartitionTaint`
and `recheck` one `ChecksRequest` per partition, all in one append. More than `MAX_BULK_REFS` selected
is refused (413) with nothing recorded; `dry_run` answers the counts and records nothing, which is what
the web UI asks before it confirms.
"""

from __future__ import annotations

import uuid as uuids
from itertools import takewhile
from typing import TypedDict

from partbuild.api.errors import Conflict, InvalidInput, TooLarge
from partbuild.api.models.bulk import (
    MAX_BULK_REFS,
    SAMPLE,
    BulkOut,
    BulkRequest,
    BulkSelection,
    PrefixSelectionRequest,
    RefsSelectionRequest,
)
from partbuild.api.service.base import ServiceBase
from partbuild.api.surface import ANONYMOUS
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import Instance, InstanceState
from partbuild.state.fold.view import StateView
from partbuild.state.queries.staleness import is_stale

_FAILED = frozenset({InstanceState.FAILED, InstanceState.UPSTREAM_FAILED})


class _Found(TypedDict, total=False):
    """What the write's build function found: how many refs the selection holds, those the action applies to."""

    selected: int
    targets: list[str]


class BulkService(ServiceBase):
    """Bulk actions on a selection of partitions."""

    def bulk(self, request: BulkRequest, user: str = ANONYMOUS) -> BulkOut:
        """Act on every partition of the selection the action applies to, in one append (or say what it would)."""
        selection = request.selection
        if isinstance(selection, PrefixSelectionRequest) and selection.stale and self.graph is None:
            raise Conflict("this API serves no graph: it knows no job's current code version to call anything stale")
        want_id = request.want_id or f"bulk-{uuids.uuid4().hex}"
        found: _Found = {}

        def build(state: BuildState) -> list[pb.Event]:
            selected = self._selected(state, selection)
            targets = [ref for ref, instance in selected if self._applies(request.action, state, instance)]
            if request.action == "taint":  # a taint cascades: one of a target built from another would be refused
                targets = _not_downstream_of_each_other(state, targets)
            found["selected"], found["targets"] = len(selected), targets
            if request.dry_run or not targets:
                raise _NothingToWrite
            return self._events(state, request, targets, want_id, user)

        written = False
        first = last = 0
        try:
            if request.dry_run:
                self.live.catch_up()
                with self.live.read() as state:
                    build(state)
            else:
                first, last = self._write(build)
                written = True
        except _NothingToWrite:
            pass
        targets = found["targets"]
        return BulkOut(
            action=request.action,
            selected=found["selected"],
            acted_on=len(targets),
            refs=targets[:SAMPLE],
            dry_run=request.dry_run,
            first_seq=first if written else None,
            last_seq=last if written else None,
            want_id=want_id if written and request.action in ("want", "retry") else None,
        )

    def _selected(self, state: StateView, selection: BulkSelection) -> list[tuple[str, Instance | None]]:
        """(ref, the instance readers get or the canonical one) for each ref the selection names, by ref."""
        if isinstance(selection, RefsSelectionRequest):
            if len(selection.refs) > MAX_BULK_REFS:
                raise TooLarge(f"the selection names {len(selection.refs):,} refs; at most {MAX_BULK_REFS:,}")
            if len(set(selection.refs)) != len(selection.refs):
                raise InvalidInput("the selection lists a ref more than once")
            for ref in selection.refs:
                self._producer(ref)  # a ref nothing produces is bad input
            return [
                (ref, state.served_instance(ref) or state.canonical_instance(ref)) for ref in sorted(selection.refs)
            ]
        prefix = selection.ref_prefix
        refs = takewhile(lambda ref: ref.startswith(prefix), self.listing.refs_from(prefix, None))
        wanted = InstanceState[selection.state.upper()] if selection.state else None
        found: list[tuple[str, Instance | None]] = []
        for ref in refs:
            instance = state.served_instance(ref) or state.canonical_instance(ref)
            if wanted is not None and (instance is None or instance.state != wanted):
                continue
            if selection.stale and (instance is None or not is_stale(state, instance, self.code_versions)):
                continue
            found.append((ref, instance))
            if len(found) > MAX_BULK_REFS:
                raise TooLarge(f"the selection names more than {MAX_BULK_REFS:,} partitions; narrow it")
        return found

    def _applies(self, action: str, state: BuildState, instance: Instance | None) -> bool:
        """Whether `action` acts on a partition whose readers' (or canonical) instance is `instance`."""
        if action == "want":
            return True
        if instance is None:
            return False
        if action == "retry":
            return instance.state in _FAILED
        if instance.state != InstanceState.LIVE:
            return False
        if action == "taint":
            return True
        job = self._producer(instance.ref) if instance.built_by is not None else None
        if job is None or not job.checks:
            return False  # source data, or a job with no checks to run again
        request = pb.ChecksRequest(request_id="bulk-probe", instance_uuid=instance.uuid)
        return state.problem(self._event(request, ANONYMOUS)) is None  # e.g. no request of it pending

    def _events(
        self, state: BuildState, request: BulkRequest, refs: list[str], want_id: str, user: str
    ) -> list[pb.Event]:
        """The action's events: one want, or one taint or checks request per partition."""
        if request.action in ("want", "retry"):
            if want_id in state.wants:
                raise Conflict(f"want {want_id!r} already exists")
            want = self._event(pb.WantCreate(want_id=want_id, partition_refs=refs, comment=request.reason), user)
            reason = state.problem(want)
            if reason is not None:
                raise Conflict(reason)
            return [want]
        if request.action == "taint":
            return [self._event(pb.PartitionTaint(partition_ref=ref, reason=request.reason), user) for ref in refs]
        events = []
        for ref in refs:  # `_applies` left out the instances the fold would refuse a request of
            instance = state.served_instance(ref) or state.canonical_instance(ref)
            assert instance is not None  # a Live one: `_applies` said so
            checks = pb.ChecksRequest(request_id=uuids.uuid4().hex, instance_uuid=instance.uuid, comment=request.reason)
            events.append(self._event(checks, user))
        return events


class _NothingToWrite(Exception):
    """A dry run, or a selection the action applies to nowhere: the answer, with nothing appended."""


def _not_downstream_of_each_other(state: StateView, refs: list[str]) -> list[str]:
    """The refs whose served instance was not built, however indirectly, from another one's: tainting those
    taints the rest with them (a taint cascades), and a taint of an instance tainted already is refused."""
    instances = {ref: state.served_instance(ref) or state.canonical_instance(ref) for ref in refs}
    targeted = {instance.uuid for instance in instances.values() if instance is not None}
    kept = []
    for ref in refs:
        instance = instances[ref]
        seen: set[str] = set()
        frontier = list(instance.inputs) if instance is not None else []
        while frontier and not (seen & targeted):
            uuid = frontier.pop()
            if uuid not in seen:
                seen.add(uuid)
                upstream = state.instances.get(uuid)
                frontier.extend(upstream.inputs if upstream is not None else ())
        if not seen & targeted:
            kept.append(ref)
    return kept
