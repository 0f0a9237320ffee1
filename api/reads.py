"""The service's reads: answers from the live state (or a past one), as response models.

Every read takes `min_seq` (catch up to at least that seq first: read-your-writes,
also across processes) and, where it makes sense, `as_of_seq` (the answer as it
was right after that event). Paged lists return an opaque-looking `next_cursor`
that only a page of the same list gave out; any other cursor is a 404, like an
unknown id (whether a well-formed cursor names an item depends on the state).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from itertools import islice, takewhile
from typing import Any

from partbuild.api import models as m
from partbuild.api.convert import event_out, instance_out, job_run_out, lineage_out, want_detail_out, want_out
from partbuild.api.errors import Conflict, InvalidInput, NotFound
from partbuild.api.group_view import group_out, summary_out
from partbuild.api.source_view import sources_out
from partbuild.api.surface import Direction
from partbuild.orchestrator.graph import Graph
from partbuild.state.database import Database
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import InstanceState, JobRunState, WantState
from partbuild.state.log.audit import AuditInputError, audit
from partbuild.state.log.events import Clock
from partbuild.state.log.live import LiveState, SeqAfterHead
from partbuild.state.log.store import EventLog, parse_event
from partbuild.state.rules.listing import ListingIndex
from partbuild.state.rules.queries import lineage, ref_history


class Reads:
    """Queries over the live state (mixed into `Service`)."""

    log: EventLog
    db: Database
    graph: Graph | None
    live: LiveState
    listing: ListingIndex
    clock: Clock

    @contextmanager
    def _reading(self, min_seq: int | None = None, as_of_seq: int | None = None) -> Iterator[BuildState]:
        """The state to answer from: caught up to `min_seq`, or as it was right after `as_of_seq`."""
        try:
            self.live.read_at_least(min_seq)
            # The past we are asked about may be our future: another process may have appended since.
            self.live.read_at_least(as_of_seq, "as_of_seq")
        except SeqAfterHead as exc:
            raise Conflict(str(exc)) from None  # a valid seq the log has not reached (yet)
        if as_of_seq is not None and as_of_seq < 0:
            raise InvalidInput("as_of_seq must not be negative")
        with self.live.read() as state:
            # Decided under the lock: the live state cannot move past `as_of_seq` before it is read.
            if as_of_seq is None or as_of_seq == state.head_seq:
                yield state
                return
        yield self.live.as_of(as_of_seq)  # a past state never changes: read without the lock

    def reading(self, as_of_seq: int | None = None) -> AbstractContextManager[BuildState]:
        """The state as of `as_of_seq` (None: now), for views of their own (the web pages); the lock as above."""
        return self._reading(None, as_of_seq)

    # ----------------------------------------------------------------- buckets

    def bucket_layouts(self, as_of_seq: int | None = None, min_seq: int | None = None) -> list[m.BucketLayout]:
        with self._reading(min_seq, as_of_seq) as state:
            return [
                m.BucketLayout(
                    namespace=namespace,
                    bucket_total=total,
                    since_seq=since,
                    last_round_robin_bucket=state.bucket_runs.get(namespace),
                )
                for namespace, (total, since) in sorted(state.bucket_layouts.items())
            ]

    # ----------------------------------------------------------------- worker groups

    def groups(self, as_of_seq: int | None = None, min_seq: int | None = None) -> list[m.GroupSummary]:
        with self._reading(min_seq, as_of_seq) as state:
            return [summary_out(state.groups[name]) for name in sorted(state.groups)]

    def group(
        self,
        name: str,
        member_timeout_s: float = 10,
        as_of_seq: int | None = None,
        min_seq: int | None = None,
    ) -> m.Group:
        """The group's ownership as of a seq (the fold's), its heartbeat rows as of now (the table's)."""
        if not 0 < member_timeout_s <= m.MAX_MEMBER_TIMEOUT_S:
            raise InvalidInput(f"member_timeout_s must be > 0 and at most {m.MAX_MEMBER_TIMEOUT_S}")
        with self._reading(min_seq, as_of_seq) as state:
            found = state.groups.get(name)
            seq = state.head_seq
        if found is None:
            suffix = f" as of seq {as_of_seq}" if as_of_seq is not None else ""
            raise NotFound(f"no worker group {name!r}{suffix}")
        rows = self.db.members.members(name)
        return group_out(found, seq, rows, self.clock(), member_timeout_s)

    # ----------------------------------------------------------------- source datasets

    def sources(self, as_of_seq: int | None = None, min_seq: int | None = None) -> list[m.Source]:
        """The served graph's source datasets and every source the log has scans of, by name."""
        declared = self.graph.sources if self.graph is not None else {}
        with self._reading(min_seq, as_of_seq) as state:
            return sources_out(declared, state.sources)

    # ----------------------------------------------------------------- wants

    def want(self, want_id: str, min_seq: int | None = None) -> m.WantDetail:
        with self._reading(min_seq) as state:
            want = state.wants.get(want_id)
            if want is None:
                raise NotFound(f"no want {want_id!r}")
            return want_detail_out(state, want, self.clock())

    def wants(
        self,
        state_filter: m.WantStateName | None = None,
        ref: str | None = None,
        root: str | None = None,
        cursor: str | None = None,
        limit: int = 100,
        min_seq: int | None = None,
    ) -> m.Page[m.Want]:
        _check_limit(limit)
        after = self._seq_cursor(cursor, self.listing.wants.has_seq)
        with self._reading(min_seq) as state:
            if ref is not None:
                ids: Iterator[str] = (i for i in state.wants_by_ref.get(ref, ()) if state.wants[i].created_seq > after)
            else:
                ids = iter(self.listing.wants.after(after))
            wanted = WantState[state_filter.upper()] if state_filter else None
            matching = (
                want
                for want in map(state.wants.__getitem__, ids)
                if (wanted is None or want.state == wanted) and (root is None or want.root_want_id == root)
            )
            now = self.clock()
            items = [want_out(want, now) for want in islice(matching, limit)]
        return _page(items, limit, lambda w: str(w.created_seq))

    # ----------------------------------------------------------------- partitions and instances

    def partitions(
        self,
        prefix: str = "",
        state_filter: m.InstanceStateName | None = None,
        cursor: str | None = None,
        limit: int = 100,
        min_seq: int | None = None,
    ) -> m.Page[m.Instance]:
        """Canonical instances ordered by ref, optionally under a prefix and in one state."""
        _check_limit(limit)
        if cursor is not None:
            self._known_ref_cursor(cursor)
        with self._reading(min_seq) as state:
            wanted = InstanceState[state_filter.upper()] if state_filter else None
            under_prefix = takewhile(lambda ref: ref.startswith(prefix), self.listing.refs_from(prefix, cursor))
            instances = (state.instances[state.canonical[ref]] for ref in under_prefix)
            matching = (instance for instance in instances if wanted is None or instance.state == wanted)
            items = [instance_out(instance) for instance in islice(matching, limit)]
        return _page(items, limit, lambda i: i.ref)

    def canonical(self, ref: str, as_of_seq: int | None = None, min_seq: int | None = None) -> m.Instance:
        with self._reading(min_seq, as_of_seq) as state:
            instance = state.canonical_instance(ref)
            if instance is None:
                suffix = f" as of seq {as_of_seq}" if as_of_seq is not None else ""
                raise NotFound(f"partition {ref!r} has no instance{suffix}")
            return instance_out(instance)

    def history(self, ref: str, as_of_seq: int | None = None, min_seq: int | None = None) -> list[m.Instance]:
        with self._reading(min_seq, as_of_seq) as state:
            found = ref_history(state, ref)
            if not found:
                raise NotFound(f"partition {ref!r} has no instance")
            return [instance_out(instance) for instance in found]

    def instance(self, uuid: str, as_of_seq: int | None = None, min_seq: int | None = None) -> m.Instance:
        with self._reading(min_seq, as_of_seq) as state:
            instance = state.instances.get(uuid)
            if instance is None:
                raise NotFound(f"no partition instance {uuid!r}")
            return instance_out(instance)

    def lineage(
        self,
        uuid: str,
        direction: Direction = "both",
        depth: int = 1,
        as_of_seq: int | None = None,
        min_seq: int | None = None,
    ) -> m.Lineage:
        if direction not in ("upstream", "downstream", "both"):
            raise InvalidInput("direction must be upstream, downstream or both")
        if not 0 <= depth <= m.MAX_LINEAGE_DEPTH:
            raise InvalidInput(f"depth must be between 0 and {m.MAX_LINEAGE_DEPTH}")
        with self._reading(min_seq, as_of_seq) as state:
            if uuid not in state.instances:
                raise NotFound(f"no partition instance {uuid!r}")
            return lineage_out(lineage(state, uuid, direction=direction, depth=depth), state.head_seq)

    # ----------------------------------------------------------------- job runs, events, audit, health

    def job_run(self, job_run_id: str, min_seq: int | None = None) -> m.JobRun:
        with self._reading(min_seq) as state:
            run = state.job_runs.get(job_run_id)
            if run is None:
                raise NotFound(f"no job run {job_run_id!r}")
            return job_run_out(state, run)

    def job_runs(
        self,
        state_filter: m.JobRunStateName | None = None,
        job: str | None = None,
        cursor: str | None = None,
        limit: int = 100,
        min_seq: int | None = None,
    ) -> m.Page[m.JobRun]:
        _check_limit(limit)
        after = self._seq_cursor(cursor, self.listing.runs.has_seq)
        with self._reading(min_seq) as state:
            wanted = JobRunState[state_filter.upper()] if state_filter else None
            runs = map(state.job_runs.__getitem__, self.listing.runs.after(after))
            matching = (
                run for run in runs if (wanted is None or run.state == wanted) and (job is None or run.job_label == job)
            )
            items = [job_run_out(state, run) for run in islice(matching, limit)]
        return _page(items, limit, lambda r: str(r.created_seq))

    def events(self, after_seq: int = 0, limit: int = 100) -> m.Page[m.StoredEvent]:
        if after_seq < 0 or not 1 <= limit <= m.MAX_PAGE:
            raise InvalidInput(f"after_seq must be >= 0 and limit between 1 and {m.MAX_PAGE}")
        items = [
            m.StoredEvent(
                seq=row.seq,
                event_id=row.event_id,
                event_type=row.event_type,
                recorded_at_ms=row.recorded_at_ms,
                event=event_out(parse_event(row.payload)),
            )
            for row in self.log.read(after_seq, limit)
        ]
        return _page(items, limit, lambda e: str(e.seq))

    def audit(self, rejected_limit: int = 100, as_of_seq: int | None = None, verify: bool = False) -> m.Audit:
        """Replay the log (to `as_of_seq`), optionally verifying against a full replay from seq 0."""
        try:
            report = audit(self.log, self.log.snapshots, as_of=as_of_seq, verify=verify, rejected_limit=rejected_limit)
        except AuditInputError as exc:  # a seq after the log head
            raise Conflict(str(exc).replace("--as-of", "as_of_seq")) from None
        rejected = [m.Rejected(seq=r.seq, event_type=r.event_type, reason=r.reason) for r in report.rejected]
        fields = {name: getattr(report, name) for name in m.Audit.model_fields if name != "rejected"}
        return m.Audit(rejected=rejected, **fields)

    def health(self) -> m.Health:
        return m.Health(status="ok", head_seq=self.log.head(), state_seq=self.live.head_seq)

    # ----------------------------------------------------------------- cursors

    def _seq_cursor(self, cursor: str | None, issued: Callable[[int], bool]) -> int:
        """The seq a wants or job-runs cursor names; NotFound unless a page of that list could have given it."""
        if cursor is None:
            return 0
        # "²".isdigit() is true, and int() refuses it; "007" is no cursor a page gives; a seq has <= 16 digits.
        if len(cursor) <= 16 and cursor.isascii() and cursor.isdigit() and cursor == str(int(cursor)):
            seq = int(cursor)
            if seq > self.live.head_seq:
                self.live.catch_up()  # another API process may have served the page it came from
            if issued(seq):
                return seq
        raise _unknown_cursor(cursor)

    def _known_ref_cursor(self, cursor: str) -> None:
        """A partitions cursor names a ref listed on an earlier page (refs never disappear); else NotFound."""
        for attempt in range(2):
            if attempt:
                self.live.catch_up()  # another API process may have served the page it came from
            with self.live.read() as state:
                if cursor in state.canonical:
                    return
        raise _unknown_cursor(cursor)


def _unknown_cursor(cursor: str) -> NotFound:
    return NotFound(f"cursor {cursor[:80]!r} is not one this API returned")


def _check_limit(limit: int) -> None:
    if not 1 <= limit <= m.MAX_PAGE:
        raise InvalidInput(f"limit must be between 1 and {m.MAX_PAGE}, got {limit}")


def _page(items: list[Any], limit: int, key: Callable[[Any], str]) -> m.Page[Any]:
    return m.Page(items=items, next_cursor=key(items[-1]) if len(items) == limit else None)
