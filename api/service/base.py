"""What every resource's service shares: the database, the live state, the guarded append, consistent reads.

A write is all or nothing: its `build` validates against the newest state
(raising the domain errors of `partbuild.api.errors`) and returns the events,
and the append is guarded by the head the check saw. When another process
appended in between, the write catches up and checks again, so it never records
an event the fold would reject.

Every read takes `min_seq` (catch up to at least that seq first: read-your-writes,
also across processes) and, where it makes sense, `as_of_seq` (the answer as it
was right after that event). Paged lists return a `next_cursor` that only a page
of the same list gave out; any other cursor is a 404, like an unknown id.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from google.protobuf.message import Message
from prometheus_client import CollectorRegistry

from partbuild.api.errors import Conflict, Gone, InvalidInput, NotFoldedYet, NotFound
from partbuild.api.metrics import Metrics
from partbuild.api.models.common import MAX_PAGE, CancelRequest
from partbuild.orchestrator.graph import Graph, GraphError, Job
from partbuild.orchestrator.supervisor import Health
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.cold import ReadBackFailed
from partbuild.state.fold.past import HistoryDropped, PastState
from partbuild.state.fold.records import InstanceState, JobRunState, WantState
from partbuild.state.fold.view import StateReads, StateView
from partbuild.state.log.events import Clock, envelope, manual, wall_clock_ms
from partbuild.state.log.live import LiveState, SeqAfterHead
from partbuild.state.log.store import AppendConflict, WriteLockLost
from partbuild.state.queries.listing import Listing, ListingIndex
from partbuild.state.queries.staleness import StaleIndex
from partbuild.state.store.listing import StoredListing, StoredStaleIndex
from partbuild.state.store.reader import ReadReplica, StoreReader

logger = logging.getLogger("partbuild.api")

MAX_WRITE_ATTEMPTS = 20

Build = Callable[[BuildState], list[pb.Event]]


class ServiceBase:
    """The handles and helpers every resource's service class derives from (`Service` composes those classes)."""

    def __init__(
        self,
        db: Database,
        *,
        graph: Graph | None = None,
        live: LiveState | None = None,
        clock: Clock = wall_clock_ms,
        on_append: Callable[[], None] | None = None,
        progress: Callable[[int], None] | None = None,
        snapshot_every: int = 0,
        health: Callable[[], Health] | None = None,
        replica: bool = False,
        past_from_store: bool = True,
    ) -> None:
        """Serve `db`; with `live`, read that shared state (its owner checkpoints it) instead of loading one.

        `health`: the health of the orchestrator running in this process (`up`), if one does. `replica`: fold
        nothing, answer reads from the state store (state/store/reader.py) and refuse writes (`ReadReplica`).
        `past_from_store`: a folding server's grids as of a seq, and those filtered by a check, come from the
        state store once it has the seq (`_store_twin`); False: from memory always (what they are compared with).
        """
        self.db = db
        self.orchestrator_health = health
        self.log = log = db.log
        self.graph = graph
        self.clock = clock
        self.on_append = on_append or (lambda: None)
        self._written = 0  # the last seq this service appended (read-your-writes for a working set's reads)
        self._owns_live = live is None
        self._write_lock = threading.Lock()  # in-process writers take turns
        # The served graph's code version of each job: instances built by another are stale.
        self.code_versions: dict[str, str | None] = (
            {label: job.code_version for label, job in graph.jobs.items()} if graph is not None else {}
        )
        self._live: LiveState | None = None
        self._past_from_store = past_from_store
        self.reads: StateReads
        self.listing: Listing
        self.stale_index: StaleIndex
        if replica:
            self._serve_the_store(db)
            return
        self._live = live if live is not None else LiveState(log, snapshot_every=snapshot_every, progress=progress)
        if self._live.working is not None:  # it holds its working set: reads are the store's, writes checked here
            self._serve_the_store(db)
            return
        self.reads = self._live
        self.metrics = Metrics(self._live, db)
        self.listing = index = ListingIndex()
        self.stale_index = stale = StaleIndex()
        with self._live.read() as state:
            index.update(state)
            stale.update(state)

        def folded(state: BuildState, _count: int, seconds: float) -> None:
            self.metrics.catch_up_seconds.observe(seconds)
            index.update(state)
            stale.update(state)

        self._live.on_fold(folded)

    def _serve_the_store(self, db: Database) -> None:
        """A read replica's reads: the state store's, its listings and stale index from the store's index."""
        reader = StoreReader(db.log, db.changes)
        engine = db.changes.records.engine
        self.reads = reader
        self.metrics = Metrics(self._live, db, store=reader)
        self.listing = StoredListing(engine, lambda: reader.head_seq)
        self.stale_index = StoredStaleIndex()

    @property
    def live(self) -> LiveState:
        """The live state this service folds and writes against; a read replica has none (`ReadReplica`)."""
        if self._live is None:
            raise ReadReplica()
        return self._live

    @property
    def state(self) -> BuildState:
        """The live state (unlocked: for counts and tests)."""
        return self.live.state

    @property
    def registry(self) -> CollectorRegistry:
        return self.metrics.registry

    def refresh(self) -> int:
        """Fold whatever was appended since the last refresh (a replica: look at the store's watermark)."""
        folded = self._live.catch_up() if self._live is not None and self.reads is not self._live else 0
        return self.reads.catch_up() or folded

    def reads_caught_up(self) -> None:
        """Wait until the reads have what this process folded (a working set's come from the store, which its
        projector brings up within a pass): a page shown after a form's write shows the write."""
        if self._live is not None and self.reads is not self._live:
            self.reads.read_at_least(self._live.head_seq)

    def start_tailing(self, interval_s: float = 0.05) -> None:
        """Keep the state current in the background (other processes append too)."""
        self.reads.start_tailing(interval_s)
        if self._live is not None and self.reads is not self._live:  # a working set: the store's and its own
            self._live.start_tailing(interval_s)

    def stop(self) -> None:
        """Stop tailing and checkpoint a live state of its own (a shared one is its owner's)."""
        if self.reads is not self._live:
            self.reads.stop_tailing()
        if self._live is not None and self._owns_live:
            self._live.close()
        elif self._live is not None:
            self._live.stop_tailing()

    # ----------------------------------------------------------------- writes

    def _write(self, build: Build) -> tuple[int, int]:
        """Append what `build` makes of the newest state, only if nobody appended in between.

        In-process writers take turns, so they never conflict with each other.
        """
        with self._write_lock:
            for _ in range(MAX_WRITE_ATTEMPTS):
                self.live.catch_up()
                with self.live.read() as state:
                    events = build(state)
                    head = state.head_seq
                started = time.perf_counter()
                try:
                    result = self.log.append(events, expected_head=head)
                except (AppendConflict, WriteLockLost):  # nothing was written: build again on the newer state
                    continue
                self.metrics.append_seconds.observe(time.perf_counter() - started)
                self._written = max(self._written, result.last_seq)
                try:
                    self.live.catch_up()
                except ReadBackFailed as exc:  # written: the fold decides once it reads its records back
                    logger.warning("seqs %d-%d written, not folded yet: %s", result.first_seq, result.last_seq, exc)
                    self.on_append()
                    raise NotFoldedYet(
                        f"written at seq {result.last_seq}, but not folded yet (the state store could not be read): "
                        f"read it back with min_seq={result.last_seq}"
                    ) from None
                self.on_append()
                with self.live.read() as state:
                    reason = state.rejection_between(result.first_seq, result.last_seq)
                if reason is not None:  # a check missing above: say so rather than pretend success
                    raise Conflict(reason)
                return result.first_seq, result.last_seq
        raise Conflict(f"other writers kept appending during {MAX_WRITE_ATTEMPTS} attempts; try again")

    def _event(self, payload: Message, user: str) -> pb.Event:
        return envelope(payload, source=manual(user), timestamp_ms=self.clock())

    def _checked(self, payload: Message, user: str) -> Build:
        """A write of one event the fold must accept: its reason, if it would not, is the answer (409)."""

        def build(state: BuildState) -> list[pb.Event]:
            event = self._event(payload, user)
            reason = state.problem(event)
            if reason is not None:
                raise Conflict(reason)
            return [event]

        return build

    def _producer(self, ref: str) -> Job | None:
        """The job that builds `ref` (None for source data or without a graph); InvalidInput if none can."""
        if self.graph is None:
            return None
        try:
            producer = self.graph.resolve(ref).producer
        except GraphError as exc:
            raise InvalidInput(str(exc)) from None
        return producer if isinstance(producer, Job) else None

    # ----------------------------------------------------------------- reads

    def _store_twin(self, seq: int) -> Any:
        """A read replica of this server's own database (a `Service` of the same class) once its state store has
        reached `seq`, else None (and always None on a replica). A grid as of a seq, or one filtered by a check,
        then comes from the store's cells and the checks kept with them, where a folding server looks each ref
        up in its memory: the two answer alike (tests/api/test_read_replica.py), the store in a time that does
        not grow with the refs looked up. The store is `serve`'s and `up`'s projector's (about a second behind
        the head); a read it has not reached is answered from memory, never waited for."""
        if self._live is None or not self._past_from_store:
            return None
        twin = self.__dict__.get("_twin")
        if twin is None or twin.graph is not self.graph:
            twin = self.__dict__["_twin"] = type(self)(self.db, graph=self.graph, clock=self.clock, replica=True)
        twin.reads.catch_up()
        return twin if twin.reads.head_seq >= seq else None

    @contextmanager
    def _reading(self, min_seq: int | None = None, as_of_seq: int | None = None) -> Iterator[StateView]:
        """The state to answer from: caught up to `min_seq`, or as it was right after `as_of_seq`.

        The past is read from the live state's histories (state/fold/past.py: the same reads), under
        the read lock; a read that needs what retention dropped is a 410.
        """
        if as_of_seq is not None and as_of_seq < 0:
            raise InvalidInput("as_of_seq must not be negative")
        if self.reads is not self._live and self._written:  # a working set's reads come from the store
            min_seq = max(min_seq or 0, self._written)  # they see what it wrote, as a whole state's do
        try:
            self.reads.read_at_least(min_seq)
            if as_of_seq is None:
                with self.reads.read() as state:
                    yield state
                return
            # The past we are asked about may be our future: another process may have appended since.
            with self.reads.read_as_of(as_of_seq) as past:
                if isinstance(past, PastState):  # counts from the store once it has them: no scan
                    past.counts_reader = self.db.changes.counts
                yield past
        except SeqAfterHead as exc:
            raise Conflict(str(exc)) from None  # a valid seq the log has not reached (yet)
        except HistoryDropped as exc:
            raise Gone(str(exc)) from None

    def reading(self, as_of_seq: int | None = None) -> AbstractContextManager[StateView]:
        """The state as of `as_of_seq` (None: now), for views of their own (the web pages); the lock as above."""
        return self._reading(None, as_of_seq)

    def _seq_cursor(self, cursor: str | None, issued: Callable[[int], bool]) -> int:
        """The seq a wants or job-runs cursor names; NotFound unless a page of that list could have given it."""
        if cursor is None:
            return 0
        # "²".isdigit() is true, and int() refuses it; "007" is no cursor a page gives; a seq has <= 16 digits.
        if len(cursor) <= 16 and cursor.isascii() and cursor.isdigit() and cursor == str(int(cursor)):
            seq = int(cursor)
            if seq > self.reads.head_seq:
                self.reads.catch_up()  # another API process may have served the page it came from
            if issued(seq):
                return seq
        raise unknown_cursor(cursor)


def state_name(state: InstanceState | WantState | JobRunState) -> Any:
    """An enum state as the API spells it: "upstream_building"."""
    return state.name.lower()


def cancel_reason(request: CancelRequest | None) -> str:
    return request.reason if request is not None else ""


def unknown_cursor(cursor: str) -> NotFound:
    return NotFound(f"cursor {cursor[:80]!r} is not one this API returned")


def check_limit(limit: int) -> None:
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidInput(f"limit must be between 1 and {MAX_PAGE}, got {limit}")
