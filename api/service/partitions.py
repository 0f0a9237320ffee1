"""Partitions and their instances: taint, observe, canonical instances, history, lineage, retention."""

from __future__ import annotations

import uuid as uuids
from collections.abc import Iterator, Mapping
from itertools import islice, takewhile

from partbuild.api.errors import Conflict, InvalidInput, NotFound
from partbuild.api.models.common import PageOut, WrittenOut
from partbuild.api.models.partitions import (
    MAX_LINEAGE_DEPTH,
    CheckResultName,
    CheckResultOut,
    ChecksRequestedOut,
    ChecksRequestOut,
    ChecksRunRequest,
    InstanceOut,
    InstanceStateName,
    LineageEdgeOut,
    LineageNodeOut,
    LineageOut,
    ObserveRequest,
    RetentionReportOut,
    RetentionRequest,
    SourceVersionRequest,
    StaleOut,
    SuccessorOut,
    TaintRequest,
)
from partbuild.api.service.as_of import as_of_suffix, page_at
from partbuild.api.service.base import ServiceBase, check_limit, state_name, unknown_cursor
from partbuild.api.service.wants import Maker
from partbuild.api.service.wants import made_by_filter as made_by_filter_of
from partbuild.api.surface import ANONYMOUS
from partbuild.api.surface.partitions import Direction
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.checks import CheckEntry, latest_checks, worst_latest
from partbuild.state.fold.rechecks import CheckRequest, requests_of
from partbuild.state.fold.records import Instance, InstanceState
from partbuild.state.fold.view import StateView
from partbuild.state.queries.lineage import Lineage, lineage, ref_history
from partbuild.state.queries.retention import cutoff_seq_before, cutoff_sparing_active_runs, retention_candidates
from partbuild.state.queries.staleness import built_version, is_stale
from partbuild.state.queries.wanted import is_unwanted
from partbuild.state.rules.check_results import check_result_name
from partbuild.state.store.records import REF
from partbuild.state.store.stored import prefetched

DAY_MS = 86_400_000
RETENTION_LISTED = 1_000


class PartitionsService(ServiceBase):
    """Reads of partitions and instances; taints, observations and retention."""

    def partitions(
        self,
        prefix: str = "",
        state_filter: InstanceStateName | None = None,
        stale_filter: bool = False,
        unwanted_filter: bool = False,
        check_filter: str | None = None,
        check_result_filter: CheckResultName | None = None,
        error_filter: str | None = None,
        made_by_filter: str | None = None,
        cursor: str | None = None,
        limit: int = 100,
        as_of_seq: int | None = None,
        min_seq: int | None = None,
    ) -> PageOut[InstanceOut]:
        """Canonical instances ordered by ref (of the refs that had one by `as_of_seq`), under a prefix, in a state
        (and stale: built by another code version than the served graph's; unwanted: waiting, and no active want
        names the ref)."""
        check_limit(limit)
        if stale_filter and self.graph is None:
            raise Conflict("this API serves no graph: it knows no job's current code version to call anything stale")
        if cursor is not None and as_of_seq is None:
            self._known_ref_cursor(cursor)
        with self._reading(min_seq, as_of_seq) as state:
            if as_of_seq is None:  # the index holds what the live state holds
                refs: Iterator[str] = self.listing.refs_from(prefix, cursor)
            else:
                if cursor is not None and cursor not in state.canonical:
                    raise unknown_cursor(cursor)  # a ref that came later: no page of this list gave it
                refs = self.listing.refs_as_of(state.head_seq, prefix, cursor)
            under_prefix = prefetched(state, REF, takewhile(lambda ref: ref.startswith(prefix), refs))
            # As of a seq, the index may offer a ref that came later: the state then has no instance of it.
            instances = (state.canonical_instance(ref) for ref in under_prefix)
            wanted = InstanceState[state_filter.upper()] if state_filter else None
            matching = (i for i in instances if i is not None and (wanted is None or i.state == wanted))
            if stale_filter:
                matching = (i for i in matching if is_stale(state, i, self.code_versions))
            if unwanted_filter:
                matching = (i for i in matching if is_unwanted(state, i))
            if check_filter is not None or check_result_filter is not None:
                results = state.check_results
                matching = (i for i in matching if checked(results, i.uuid, check_filter, check_result_filter))
            if error_filter is not None:
                text = error_filter.casefold()
                matching = (i for i in matching if text in (i.note or "").casefold())
            if (maker := made_by_filter_of(made_by_filter)) is not None:
                matching = (i for i in matching if wanted_by(state, i.ref, maker))
            items = [self.instance_answer(state, instance) for instance in islice(matching, limit)]
            seq = state.head_seq
        return page_at(items, limit, lambda i: i.ref, seq)

    def canonical(self, ref: str, as_of_seq: int | None = None, min_seq: int | None = None) -> InstanceOut:
        """What readers get for `ref`: its Live instance (a stale one while its successor is built, failed or
        blocked: with the successor's state), else its canonical instance, whatever its state."""
        with self._reading(min_seq, as_of_seq) as state:
            instance = state.served_instance(ref) or state.canonical_instance(ref)
            if instance is None:
                raise NotFound(f"partition {ref!r} has no instance{as_of_suffix(as_of_seq)}")
            return self.instance_answer(state, instance)

    def history(self, ref: str, as_of_seq: int | None = None, min_seq: int | None = None) -> list[InstanceOut]:
        with self._reading(min_seq, as_of_seq) as state:
            found = ref_history(state, ref)
            if not found:
                raise NotFound(f"partition {ref!r} has no instance")
            return [self.instance_answer(state, instance) for instance in found]

    def taint(self, request: TaintRequest, user: str = ANONYMOUS) -> WrittenOut:
        def build(state: BuildState) -> list[pb.Event]:
            # The instance readers get: a stale one still serving is withdrawn as any Live one is.
            instance = state.served_instance(request.ref) or state.canonical_instance(request.ref)
            if instance is None:
                raise NotFound(f"partition {request.ref!r} has no instance")
            if instance.state != InstanceState.LIVE:
                raise Conflict(
                    f"partition {request.ref!r} is {state_name(instance.state)}; only a Live partition can be tainted"
                )
            taint = pb.PartitionTaint(
                partition_ref=request.ref, reason=request.reason, only_this_ref=request.only_this_ref
            )
            return [self._event(taint, user)]

        return WrittenOut(seq=self._write(build)[0])

    def observe(self, request: ObserveRequest, user: str = ANONYMOUS) -> WrittenOut:
        job = self._producer(request.ref)
        if job is not None:
            raise InvalidInput(f"{request.ref!r} is built by job {job.label!r}; only source partitions are observed")
        observed = pb.PartitionObserved(
            partition_ref=request.ref,
            location=request.location,
            row_count=request.row_count,
            bytes=request.bytes,
            metadata=request.metadata,
            version=request.version.value if request.version else "",
            version_strong=request.version.strong if request.version else False,
            judge_gone_by_version=request.version is not None,  # (a rule of versions)
        )
        # The fold's own rules decide the rest: being built, already Live with this version...
        return WrittenOut(seq=self._write(self._checked(observed, user))[0])

    def instance(self, uuid: str, as_of_seq: int | None = None, min_seq: int | None = None) -> InstanceOut:
        with self._reading(min_seq, as_of_seq) as state:
            instance = state.instances.get(uuid)
            if instance is None:
                raise NotFound(f"no partition instance {uuid!r}")
            return self.instance_answer(state, instance, requests=True)

    def request_checks(
        self, uuid: str, request: ChecksRunRequest | None = None, user: str = ANONYMOUS
    ) -> ChecksRequestedOut:
        """Ask an orchestrator to run the instance's job's current checks on it again (answered in the log)."""
        request_id = uuids.uuid4().hex

        def build(state: BuildState) -> list[pb.Event]:
            instance = state.instances.get(uuid)
            if instance is None:
                raise NotFound(f"no partition instance {uuid!r}")
            refusal = recheck_refusal(instance, source=self._source_by_graph(instance.ref))
            if refusal is not None:
                raise Conflict(refusal)
            job = self._producer(instance.ref)
            if job is not None and not job.checks:
                raise Conflict(f"job {job.label!r} declares no checks")
            comment = request.comment if request is not None else ""
            payload = pb.ChecksRequest(request_id=request_id, instance_uuid=uuid, comment=comment)
            event = self._event(payload, user)
            reason = state.problem(event)  # the fold's own rules: Live, no request of it pending
            if reason is not None:
                raise Conflict(reason)
            return [event]

        seq = self._write(build)[0]
        return ChecksRequestedOut(
            seq=seq, request_id=request_id, instance_uuid=uuid, link=f"/api/v1/instances/{uuid}?min_seq={seq}"
        )

    def _source_by_graph(self, ref: str) -> bool:
        """Whether the served graph names `ref` a source dataset's (False without a graph, or if it names nothing)."""
        try:
            return self.graph is not None and self._producer(ref) is None
        except InvalidInput:
            return False

    def lineage(
        self,
        uuid: str,
        direction: Direction = "both",
        depth: int = 1,
        as_of_seq: int | None = None,
        min_seq: int | None = None,
    ) -> LineageOut:
        if direction not in ("upstream", "downstream", "both"):
            raise InvalidInput("direction must be upstream, downstream or both")
        if not 0 <= depth <= MAX_LINEAGE_DEPTH:
            raise InvalidInput(f"depth must be between 0 and {MAX_LINEAGE_DEPTH}")
        with self._reading(min_seq, as_of_seq) as state:
            if uuid not in state.instances:
                raise NotFound(f"no partition instance {uuid!r}")
            graph = lineage(state, uuid, direction=direction, depth=depth)
            return lineage_out(graph, state.head_seq, state.check_results)

    def retention(self, request: RetentionRequest, user: str = ANONYMOUS) -> RetentionReportOut:
        """Drop instances superseded more than `retain_days` ago (or only say which)."""
        cutoff = cutoff_seq_before(self.log, self.clock() - request.retain_days * DAY_MS)
        with self.live.read() as state:
            # Spare what a queued or running job may still name as an input: its success would be rejected.
            cutoff = cutoff_sparing_active_runs(state, cutoff)
            doomed = [instance.uuid for instance in retention_candidates(state, cutoff)]
        listed = doomed[:RETENTION_LISTED]
        report = RetentionReportOut(
            cutoff_seq=cutoff, dropped=len(doomed), instances=listed, seq=None, dry_run=request.dry_run
        )
        if request.dry_run or not doomed:
            return report

        def build(state: BuildState) -> list[pb.Event]:
            event = pb.InstanceRetention(drop_superseded_before_seq=cutoff)
            return [self._event(event, user)]

        report.seq = self._write(build)[0]
        return report

    def stale(self, job: str, limit: int = 100, as_of_seq: int | None = None, min_seq: int | None = None) -> StaleOut:
        """Job `job`'s Live instances built by a code version other than the served graph's, oldest partitions last."""
        check_limit(limit)
        current = self.code_versions.get(job)
        if self.graph is None:
            raise Conflict("this API serves no graph: it knows no job's current code version")
        if job not in self.graph.jobs or current is None:
            raise NotFound(f"the served graph has no job {job!r}")
        with self._reading(min_seq, as_of_seq) as state:
            now = as_of_seq is None
            found = self.stale_index.stale(state, job, current, limit, now=now)
            return StaleOut(
                job=job,
                code_version=current,
                stale_count=self.stale_index.count(state, job, current, now=now),
                instances=[self.instance_answer(state, instance) for instance in found],
                as_of_seq=state.head_seq,
            )

    def instance_answer(self, state: StateView, instance: Instance, *, requests: bool = False) -> InstanceOut:
        """`instance_out` with its checks, its code version, whether it is stale (replaced by a successor being
        built, or by the served graph's code version) and whether readers get it."""
        answer = instance_out(
            instance,
            state.check_results,
            state.check_requests if requests else None,
            code_version=built_version(state, instance),
            stale=is_stale(state, instance, self.code_versions),
        )
        if instance.state != InstanceState.LIVE:
            return answer
        served = state.served_instance(instance.ref)
        answer.serving = served is not None and served.uuid == instance.uuid
        if answer.serving and instance.superseded_seq:
            successor = state.canonical_instance(instance.ref)
            assert successor is not None  # a stale instance serves only while a successor is canonical
            answer.stale = True
            answer.successor = SuccessorOut(
                uuid=successor.uuid,
                state=state_name(successor.state),
                note=successor.note,
                waiting_on=list(successor.waiting_on or ()),
            )
        return answer

    def _known_ref_cursor(self, cursor: str) -> None:
        """A partitions cursor names a ref listed on an earlier page (refs never disappear); else NotFound."""
        for attempt in range(2):
            if attempt:
                self.reads.catch_up()  # another API process may have served the page it came from
            with self.reads.read() as state:
                if cursor in state.canonical:
                    return
        raise unknown_cursor(cursor)


# ----------------------------------------------------------------- why checks cannot run again

_ONLY_LIVE = "only a Live instance's checks run again"
_NOT_BUILT = {
    InstanceState.MISSING: "wanted, no job run has started it",
    InstanceState.BUILDING: "a job run is building it",
    InstanceState.UPSTREAM_BUILDING: "it waits for its inputs",
    InstanceState.UP_FOR_RETRY: "its job run failed and it waits to be retried",
}
_NOT_LIVE = {
    InstanceState.FAILED: "failed: its job run failed for good, so nothing was built to check",
    InstanceState.UPSTREAM_FAILED: "upstream_failed: an input failed for good, so it was never built",
    InstanceState.CANCELED: "canceled: its job run was canceled before it was built, and a fresh instance replaced it",
}
_OBSERVED = (InstanceState.LIVE, InstanceState.TAINTED, InstanceState.GONE)  # what observed data can be


def recheck_refusal(instance: Instance, *, source: bool = False) -> str | None:
    """Why the checks of `instance` cannot run again, in words (None: as far as the instance goes, they can).

    Source data first (no job's checks ever apply to it: observed, so Live, tainted or gone with no job run
    that built it, or a ref the served graph gives a source); then a job's instance not built yet, one that
    failed, was canceled, or was tainted (its data withdrawn).
    """
    what = f"instance {instance.uuid} of {instance.ref!r}"
    state = instance.state
    if source or (instance.built_by is None and state in _OBSERVED):
        gone = " that a completed scan no longer finds (gone)" if state == InstanceState.GONE else ""
        return f"{what} is source data{gone}: no job's checks apply to it"
    if state in _NOT_BUILT:
        return f"{what} is not built yet ({state_name(state)}: {_NOT_BUILT[state]}); {_ONLY_LIVE}"
    if state in _NOT_LIVE:
        return f"{what} is {_NOT_LIVE[state]}; {_ONLY_LIVE}"
    if state == InstanceState.TAINTED:
        note = f": {instance.note[:200]}" if instance.note else ""
        return f"{what} is tainted (its data was withdrawn{note}); {_ONLY_LIVE}"
    return None


# ----------------------------------------------------------------- records -> models


def instance_out(
    instance: Instance,
    check_results: Mapping[str, tuple[CheckEntry, ...]] | None = None,
    check_requests: Mapping[str, CheckRequest] | None = None,
    *,
    code_version: str | None = None,
    stale: bool = False,
) -> InstanceOut:
    """The instance's answer; with `check_results` (the state's), the checks of the last run (or rerun) that
    checked it; with `check_requests`, the requests to run them again."""
    version = instance.version
    latest = latest_checks(check_results.get(instance.uuid, ())) if check_results is not None else None
    return InstanceOut(
        uuid=instance.uuid,
        ref=instance.ref,
        state=state_name(instance.state),
        canonical=not instance.superseded_seq,
        created_seq=instance.created_seq,
        updated_seq=instance.updated_seq,
        superseded_seq=instance.superseded_seq or None,
        previous_uuid=instance.previous_uuid,
        built_by=instance.built_by,
        attempts=list(instance.attempts),
        inputs=list(instance.inputs),
        consumers=list(instance.consumers or ()),
        location=instance.location,
        row_count=instance.row_count,
        byte_count=instance.byte_count,
        metadata=dict(instance.metadata or {}),
        waiting_on=list(instance.waiting_on or ()),
        note=instance.note,
        version=SourceVersionRequest(value=version[0], strong=version[1]) if version else None,
        checks=checks_out(latest) if latest is not None else [],
        checks_requests=[
            ChecksRequestOut(request_id=request_id, requested_seq=requested, answered_seq=answered or None)
            for request_id, (_, requested, answered) in requests_of(check_requests or {}, instance.uuid)
        ],
        code_version=code_version,
        stale=stale,
    )


def checks_out(entry: CheckEntry) -> list[CheckResultOut]:
    seq, rows = entry
    return [
        CheckResultOut(
            name=name,
            result=check_result_name(passed, blocking, errored),
            passed=passed,
            blocking=blocking,
            errored=errored,
            description=description,
            metrics=dict(metrics),
            seq=seq,
            duration_ms=duration[0] if duration else None,
        )
        for name, passed, blocking, errored, description, metrics, *duration in rows
    ]


def wanted_by(state: StateView, ref: str, maker: Maker) -> bool:
    """Whether a want naming `ref` (as of the state's seq) was made by whom `maker` accepts."""
    wants, causes = state.wants, state.want_causes
    return any(maker(wants[want_id], causes) for want_id in state.wants_by_ref.get(ref, ()) if want_id in wants)


def checked(results: Mapping[str, tuple[CheckEntry, ...]], uuid: str, name: str | None, result: str | None) -> bool:
    """Whether the instance's latest checks have a check of that name (any, if None) with that result (any; a
    `CheckResultName`, or nothing matches: a grid's filters are strs, checked apart)."""
    latest = latest_checks(results.get(uuid, ()))
    if latest is None:
        return False
    return any(
        (name is None or row[0] == name) and (result is None or check_result_name(row[1], row[2], row[3]) == result)
        for row in latest[1]
    )


def lineage_out(graph: Lineage, head_seq: int, check_results: Mapping[str, tuple[CheckEntry, ...]]) -> LineageOut:
    """The lineage answer, each node with the worst result of its latest checks (`check_results`: the state's)."""
    nodes = [
        LineageNodeOut(
            uuid=node_uuid,
            ref=node.ref if node else None,
            state=state_name(node.state) if node else None,
            depth=graph.depth_of[node_uuid],
            built_by=node.built_by if node else None,
            check_result=worst_latest(check_results.get(node_uuid, ())),
            superseded=bool(node.superseded_seq) if node else False,
        )
        for node_uuid, node in graph.nodes.items()
    ]
    edges = [LineageEdgeOut(input=a, output=b) for a, b in dict.fromkeys(graph.edges)]
    return LineageOut(root=graph.root, as_of_seq=head_seq, nodes=nodes, edges=edges)
