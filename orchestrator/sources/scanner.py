"""The source scanner: lists the connectors of source datasets in slices and records what it found.

One thread per orchestrator. Each slice asks a source's connector for one page
within budgets (items, and a deadline where the connector honours one), folds the
items into partitions, and appends, in one batch guarded by the log's head:

- a `SourceScanProgress` (the cursor, where the fold checks the slice continues
  the current pass, so a second or stale scanner is rejected),
- a `PartitionObserved` for each complete partition whose version or location is
  new (the fold makes a new instance and taints what was built from the old one;
  a moved weak version counts only once its content differs: `content.py`),
- with `rewant_tainted`, one `WantCreate` of the refs it tainted that a person
  had wanted (and that no active want covers): late data rebuilds what it touched,
- at the end of a key range listed whole, from its start and without an error, in
  this process: a `PartitionGone` for each Live partition of the source there that
  the pass did not find (the fold accepts it only behind that slice's progress).

A pass that settles nothing records nothing: it is quiet (in memory only) until its
first slice with an observation, a gone or an error, which begins the pass in the
log; a quiet pass that ends so leaves the log as it was, so an idle source never
grows it. Once begun in the log, a pass appends when it found partitions, at its
end, after an error, and at least every `checkpoint_every_s` while it lists: a
restarted orchestrator resumes from the recorded cursor, which is the last key of
the last partition handed out, so the partition open at a crash is listed again
from its first item, and nothing is observed twice (unchanged versions are never
appended). A quiet pass interrupted by a restart is simply begun again. A pass is
followed by the next one `rescan_every_s` after it ended (recorded, or quiet in this
process; a restarted process begins one at once), or as soon as someone asks
(`SourceScanRequest`, `partbuild sources scan NAME`): such a pass is recorded from
its start, answering the request in the log.

A pass may be split into key ranges (`Discovery.shards`), fixed by the
slice that begins it and rebalanced from the last pass's split estimates
(`key_ranges.py`); each key range has its own cursor, and in a set of workers
split by bucket or in a worker group, the owner of `source:<name>/<index>` scans range
`index`. A worker owning several key ranges scans them one after another. Only a
recorded pass leaves split estimates, so while the split still moves (a source
growing towards its `shards`, or rebalancing after its bytes moved) each pass is
recorded from its start, begun by the owner of range 0. Once the next split would
be the last one's, passes are quiet again, key ranges or not: each worker, when
`rescan_every_s` has passed, scans the ranges of that split that it owns, in memory.
The first slice to settle something begins the pass in the log: range 0's beginning
(its cursor at its start: the fold wants a pass to begin there) and that slice in one
append. Every worker then takes up its ranges of the pass from the log, from their
starts: a range listed quietly before is listed once more, recorded, and a change
anywhere is observed within the pass. Only slices that settled something are
recorded, so two scanners of one key range cannot keep restarting each other.

Resumption is by key (key-authoritative connectors; the recorded cursor is the
end of a partition, where a page's token would not apply). Item counts are of
items listed: a partition listed again after a restart counts again.

Decisions are not held up: the thread reads the state under the read lock only
while it compares and builds events, and connector calls are bounded.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from partbuild.orchestrator.connectors.errors import EnumerateError
from partbuild.orchestrator.connectors.paging import Budgets, Cursor, KeyRange
from partbuild.orchestrator.connectors.split_estimator import SplitEstimator
from partbuild.orchestrator.connectors.toxic import ItemKey
from partbuild.orchestrator.graph import PartitionPattern, SourceDataset
from partbuild.orchestrator.identity import WORKER_ID
from partbuild.orchestrator.sources.content import ContentCheck, DigestStore, MemoryDigests
from partbuild.orchestrator.sources.discovery import Discovery
from partbuild.orchestrator.sources.key_ranges import next_split_keys
from partbuild.orchestrator.sources.partitions import FoundPartition, PartitionAssembler
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.cold import canonical_instances
from partbuild.state.fold.records import MAX_SCAN_KEY_BYTES, InstanceState, SourceScan
from partbuild.state.log.events import Clock, envelope, system, wall_clock_ms
from partbuild.state.log.live import LiveState
from partbuild.state.log.store import AppendConflict, EventLog
from partbuild.state.queries.lineage import refs_tainted_by, root_wanted
from partbuild.state.store.cold_rows import refs_known
from partbuild.state.store.records import RecordStore

logger = logging.getLogger("partbuild.sources")

SCANNER = system("source-scanner", WORKER_ID)
APPEND_ATTEMPTS = 10  # a lost race for the head is decided again at once, on the newer state
POLL_S = 0.5  # how often an idle scanner looks for a pass someone started, or a moved cursor
MAX_PAGE_BYTES = 1 << 62  # listing is bounded by items and time; bytes are for reads
BACKOFF_S = (1.0, 60.0)  # after errors: doubling from the first, up to the second


def source_scope_key(name: str, index: int) -> str:
    """What a worker with a scope asks it about: the one owner of this key scans key range `index`."""
    return f"source:{name}/{index}"


@dataclass
class _Scan:
    """One source's scan as this process runs it: a key range of a pass in memory, ahead of the log's cursor."""

    source: SourceDataset
    discovery: Discovery
    active: bool = False  # a key range is being scanned here (begun or adopted)
    pass_number: int = 0
    range_index: int = 0  # which of the pass's key ranges (the proto's `shard`)
    key_range: KeyRange = field(default_factory=KeyRange.everything)
    new_pass: bool = False  # the next append begins the pass in the log, with these split keys
    split_keys: list[bytes] = field(default_factory=list)
    cursor: Cursor = field(default_factory=Cursor.initial)  # where the next page starts (with a token)
    logged_key: bytes = b""  # the key range's cursor in the log: the next slice's `after_key`
    expected_seq: int = -1  # the updated_seq (of the key range; of the record for a new pass) we are in step with
    assembler: PartitionAssembler | None = None
    estimator: SplitEstimator = field(default_factory=SplitEstimator)
    items: int = 0  # listed since the last append
    bytes: int = 0
    found: list[FoundPartition] = field(default_factory=list)  # since the last append
    last_append: float = 0.0
    next_due: float = 0.0  # monotonic
    failures: int = 0
    content: ContentCheck | None = None  # with `verify_content`: moved weak versions confirmed by content
    # Gone partitions: the refs this pass found in its key range (complete or not), and whether this
    # process listed the range from its start without an error (only such a pass may say gone).
    present: set[str] = field(default_factory=set)
    covered: bool = False
    passes_ended: int = 0  # passes of this source ended here, recorded or quiet
    last_done_ms: int = 0  # when the last pass ended here (clock ms): a quiet pass is not in the log
    # This new pass is recorded from its first slice: it answers an operator's request (the fold clears the
    # request), or its key ranges differ from the last pass's (its split estimates make the next split).
    recorded: bool = False
    serial: int = 0  # key ranges taken up here: a content check's budget is per key range taken up

    @property
    def name(self) -> str:
        return self.source.name

    def start(self, pass_number: int, range_index: int, start: bytes, end: bytes, key: bytes) -> None:
        """Scan key range `range_index` = [start, end) of pass `pass_number` from after `key` (b"": its start)."""
        keys = PartitionPattern(self.discovery.keys) if self.discovery.keys else self.source.pattern
        marker, stamps = self.discovery.complete_marker, self.content is not None
        self.assembler = PartitionAssembler(keys, self.source.pattern, marker, stamps=stamps)  # type: ignore[arg-type]
        self.assembler.settled_key = key  # everything up to the cursor was accounted for before
        self.estimator = SplitEstimator()
        self.active = True
        self.pass_number = pass_number
        self.range_index = range_index
        self.key_range = KeyRange(ItemKey(start) if start else None, ItemKey(end) if end else None)
        self.new_pass = False
        self.split_keys = []
        self.logged_key = key
        self.cursor = Cursor.after(ItemKey(key)) if key else Cursor.initial()
        self.items = self.bytes = 0
        self.found = []
        self.present = set()
        self.covered = not key
        self.serial += 1

    def begin_pass(self, pass_number: int, split_keys: list[bytes], index: int, *, recorded: bool) -> None:
        """Scan key range `index` of a pass not in the log yet, split at `split_keys`, from its start."""
        bounds = [b"", *split_keys, b""]
        self.start(pass_number, index, bounds[index], bounds[index + 1], b"")
        self.new_pass, self.split_keys, self.recorded = True, split_keys, recorded

    @property
    def pass_key(self) -> tuple[int, int]:
        """What a content check keys its budget by: a fresh one for each key range taken up (quiet passes
        repeat a pass number: a budget spent by one must not hold the next back)."""
        return (self.pass_number, self.serial)

    @property
    def quiet(self) -> bool:
        """The pass is not in the log yet and may end unrecorded: nothing it found so far needs recording.

        A pass an operator asked for is recorded from its first slice (the request is in the log: the pass
        that answers it is too), and so is a pass whose key ranges differ from the last pass's (its split
        estimates, which only a recorded pass leaves, make the next split): once the split settles, an
        idle source's passes are quiet however many key ranges it has. Each worker scans the key ranges
        of a quiet pass that it owns, one after another; the first slice that settles something begins
        the pass in the log, and the other workers take up their ranges from there (`_begin`).
        """
        return self.new_pass and not self.recorded

    @property
    def lead(self) -> int:
        """Slices appended ahead of this range's: a pass first recorded from a range after range 0 begins at
        range 0 (the fold wants a pass to begin there), with range 0's cursor still at its start."""
        return 1 if self.new_pass and self.range_index else 0

    def position(self, record: SourceScan | None) -> int:
        """The log's updated_seq of what this scan continues (-2: the log has moved to another pass)."""
        if self.new_pass:
            return record.updated_seq if record is not None else 0
        if record is None or record.pass_number != self.pass_number or self.range_index >= len(record.ranges):
            return -2
        return record.ranges[self.range_index].updated_seq

    def split_hint(self) -> bytes:
        """Where the bytes listed in this key range split in half, moved to the start of its partition; or b""."""
        assert self.assembler is not None
        hint = self.estimator.split_point()
        if hint is None:
            return b""
        key = self.assembler.partition_start(hint.raw_bytes())
        start = self.key_range.start.raw_bytes() if self.key_range.start is not None else b""
        return key if key > start and ItemKey(key) in self.key_range else b""


class SourceScanner:
    """Scans every source with a `Discovery` in a background thread; see the module docstring."""

    def __init__(
        self,
        log: EventLog,
        live: LiveState,
        sources: list[SourceDataset],
        *,
        owns: Callable[[BuildState, str], bool] = lambda state, key: True,
        on_append: Callable[[], None] = lambda: None,
        clock: Clock = wall_clock_ms,
        checkpoint_every_s: float = 5.0,
        digests: DigestStore | None = None,
        records: RecordStore | None = None,
    ) -> None:
        """`records`: the state store's rows, where a working set's cold refs are found (`_gone`)."""
        self.log = log
        self.records = records
        self.live = live
        self.owns = owns
        self.on_append = on_append
        self.clock = clock
        self.checkpoint_every_s = checkpoint_every_s
        self._scans = [_Scan(source, source.discovery) for source in sources if source.discovery is not None]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        store = digests if digests is not None else MemoryDigests()  # content.py: without a store, in memory
        for scan in self._scans:
            if scan.discovery.verify_content:
                scan.content = ContentCheck(scan.source, store, stop=self._stop.is_set)

    def __bool__(self) -> bool:
        return bool(self._scans)

    def content_check(self, name: str) -> ContentCheck | None:
        """Source `name`'s content confirmation (None: it has none), with its counts of what it read."""
        return next((scan.content for scan in self._scans if scan.name == name), None)

    def start(self) -> None:
        if self._scans and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="partbuild-sources", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop after the slice in progress (its findings are appended or listed again next time)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self.step()
            due = min(scan.next_due for scan in self._scans)
            self._stop.wait(min(POLL_S, max(0.0, due - time.monotonic())))

    def step(self) -> None:
        """One slice of every source that is due (tests and benchmarks call it directly)."""
        if any(scan.next_due <= time.monotonic() for scan in self._scans):
            self.live.catch_up()  # what others appended decides what is ours to scan
        for scan in self._scans:
            if scan.next_due <= time.monotonic() and not self._stop.is_set():
                try:
                    self._slice(scan)
                except Exception as exc:  # a connector's or our bug: keep the others scanning
                    logger.exception("scan of source %s failed", scan.name)
                    self._failed(scan, f"unexpected {type(exc).__name__} while scanning", None)

    # ----------------------------------------------------------------- one slice

    def _slice(self, scan: _Scan) -> None:
        with self.live.read() as state:
            record = state.sources.get(scan.name)
            in_step = scan.active and scan.position(record) == scan.expected_seq
            if in_step and not self.owns(state, source_scope_key(scan.name, scan.range_index)):
                in_step = scan.active = False  # the key range has moved to another worker
            if not in_step and not self._begin(state, scan, record):
                return
        discovery = scan.discovery
        budgets = Budgets(discovery.page_items, MAX_PAGE_BYTES, time.monotonic() + discovery.slice_s)
        try:
            page = discovery.connector.fill_page(scan.key_range, scan.cursor, budgets)
        except EnumerateError as error:
            self._failed(scan, error.message, error)
            return
        assert scan.assembler is not None
        if page is None:
            closed = scan.assembler.finish()
        else:
            for item in page.items:
                scan.estimator.observe(item.key, item.size)
            scan.items += len(page)
            scan.bytes += page.total_size
            closed = scan.assembler.feed(page.items)
            scan.cursor = page.cursor
        scan.present.update(found.ref for found in closed)  # all it listed: the content check may hold some back
        if scan.content is not None and closed:
            closed = scan.content.confirm(self.live, scan.pass_key, closed)
        scan.found += closed
        done = page is None
        # Only progress is recorded: a slice that settled nothing new (a partition longer than a page) would
        # only move the log's position, and a second scanner of the key range would then start over, and so on.
        # A quiet pass (not in the log yet) records nothing until it settles something: an idle source's
        # passes leave the log as it was.
        moved = scan.assembler.settled_key != scan.logged_key
        due = moved and time.monotonic() - scan.last_append >= self.checkpoint_every_s
        recordable = done or scan.found or (not scan.quiet and (due or scan.new_pass))
        pass_key = scan.pass_key  # (a quiet range that ends moves on to the next range in `_append`)
        if recordable and not self._append(scan, done=done):
            return
        if done and scan.content is not None:  # new partitions' digests: after the range's observations
            scan.content.digest_pending(pass_key)
        scan.failures = 0
        scan.next_due = time.monotonic()

    def _begin(self, state: BuildState, scan: _Scan, record: SourceScan | None) -> bool:
        """Take up a key range: one of the log's unfinished pass that we own, or one of the next pass when due."""
        name = scan.name
        if record is not None and record.pass_number and not record.done:
            for index, key_range in enumerate(record.ranges):
                if not key_range.done and self.owns(state, source_scope_key(name, index)):
                    scan.start(record.pass_number, index, key_range.start, key_range.end, key_range.last_key)
                    scan.expected_seq = key_range.updated_seq
                    return True
            return self._idle(scan, POLL_S)
        # The last pass ended when the log or this process says (a quiet pass is only in memory: a restarted
        # process begins one at once); an operator's request makes the next pass due now.
        last_done_ms = max(record.last_pass_done_ms if record else 0, scan.last_done_ms)
        due_ms = last_done_ms + int(scan.discovery.rescan_every_s * 1000) if last_done_ms else 0
        requested = record is not None and record.rescan_requested
        wait_s = 0.0 if requested else (due_ms - self.clock()) / 1000
        if wait_s > 0:
            return self._idle(scan, min(POLL_S, wait_s))
        previous = record.last_pass_ranges if record else []
        split = next_split_keys(previous, scan.discovery.shards)
        recorded = requested or split != [key_range.start for key_range in previous[1:]]
        # A recorded pass is begun by the owner of range 0; a quiet one by each worker at its first range.
        index = 0 if recorded else self._next_owned(state, scan, split, -1)
        if index is None or not self.owns(state, source_scope_key(name, index)):
            return self._idle(scan, POLL_S)
        scan.begin_pass(record.pass_number + 1 if record else 1, split, index, recorded=recorded)
        scan.expected_seq = scan.position(record)
        return True

    def _next_owned(self, state: BuildState, scan: _Scan, split: list[bytes], after: int) -> int | None:
        """The first key range after `after` of a pass split at `split` that this worker owns, or None."""
        ranges = range(after + 1, len(split) + 1)
        return next((index for index in ranges if self.owns(state, source_scope_key(scan.name, index))), None)

    @staticmethod
    def _idle(scan: _Scan, wait_s: float) -> bool:
        scan.active = False
        scan.next_due = time.monotonic() + wait_s
        return False

    def _failed(self, scan: _Scan, message: str, error: EnumerateError | None) -> None:
        """Record the error in the log (with what the slice found before it) and back off."""
        scan.failures += 1
        scan.covered = False  # the pass may have missed items: it cannot say a partition is gone
        delay = min(BACKOFF_S[1], BACKOFF_S[0] * 2 ** min(scan.failures - 1, 16))
        if error is not None and error.retry_after is not None:
            delay = max(delay, error.retry_after)
        if scan.active:
            retryable = error is not None and error.is_retryable
            if not self._append(scan, done=False, error=(message, retryable)):
                return
        if error is None:  # failed half-way through a page: start again from the recorded cursor
            scan.active = False
        scan.next_due = time.monotonic() + delay
        logger.warning("scan of source %s: %s (next try in %.0f s)", scan.name, message, delay)

    # ----------------------------------------------------------------- recording

    def _append(self, scan: _Scan, *, done: bool, error: tuple[str, bool] | None = None) -> bool:
        """Append the slice's progress with its observations, on the newest state; redo on a lost race.

        False when the fold would refuse the progress itself (nothing is appended; the scan waits).
        """
        for _ in range(APPEND_ATTEMPTS):
            with self.live.read() as state:
                if scan.position(state.sources.get(scan.name)) != scan.expected_seq:
                    scan.active = False  # someone moved the cursor: adopt it on the next slice
                    return True
                head = state.head_seq
                events, progress = self._events(state, scan, done, error)
                if scan.quiet and error is None and len(events) == 1 + scan.lead:  # nothing to settle
                    self._settled_quietly(state, scan, done)
                    return True
                refused = state.problem(events[0])
            if refused is not None:  # a bug or a name the fold refuses: never append a rejection in a loop
                logger.error("scan of source %s: the log would refuse its progress: %s", scan.name, refused)
                self._idle(scan, BACKOFF_S[1])
                return False
            try:
                appended = self.log.append(events, expected_head=head)
            except AppendConflict:
                self.live.catch_up()
                continue
            scan.expected_seq = appended.first_seq + scan.lead  # this range's slice (after a pass's beginning)
            scan.logged_key = progress.last_key or scan.logged_key
            scan.new_pass = False
            scan.items = scan.bytes = 0
            scan.found = []
            scan.last_append = time.monotonic()
            scan.active = not done
            self.live.catch_up()  # the next slice must see our record to know it is in step
            if done:
                with self.live.read() as state:
                    record = state.sources.get(scan.name)
                    if record is not None and record.done and record.pass_number == scan.pass_number:
                        scan.passes_ended += 1  # its last key range ended here
                        scan.last_done_ms = record.last_pass_done_ms
            self.on_append()
            return True
        logger.warning(
            "scan of source %s: lost the race for the log %d times; resuming from the log", scan.name, APPEND_ATTEMPTS
        )
        scan.active = False
        return True

    def _settled_quietly(self, state: BuildState, scan: _Scan, done: bool) -> None:
        """A slice of a quiet pass that found nothing new: the log is left as it was.

        At the end of a key range, the pass goes on with the next range this worker owns; after its last,
        the pass has ended here.
        """
        scan.found = []
        if not done:
            return
        following = self._next_owned(state, scan, scan.split_keys, scan.range_index)
        if following is not None:
            scan.begin_pass(scan.pass_number, scan.split_keys, following, recorded=False)
            return
        scan.active = False
        scan.passes_ended += 1
        scan.last_done_ms = self.clock()

    def _events(
        self, state: BuildState, scan: _Scan, done: bool, error: tuple[str, bool] | None
    ) -> tuple[list[pb.Event], pb.SourceScanProgress]:
        now = self.clock()
        assert scan.assembler is not None
        complete = [found for found in scan.found if found.complete]
        events = []
        if scan.lead:  # the pass begins at range 0, listed by nobody yet (its owner takes it up from the log)
            begin = pb.SourceScanProgress(source=scan.name, pass_number=scan.pass_number, split_keys=scan.split_keys)
            events.append(envelope(begin, source=SCANNER, timestamp_ms=now))
        progress = pb.SourceScanProgress(
            source=scan.name,
            pass_number=scan.pass_number,
            shard=scan.range_index,
            split_keys=scan.split_keys if scan.new_pass and not scan.lead else [],
            after_key=b"" if scan.new_pass else scan.logged_key,
            last_key=scan.assembler.settled_key,
            done=done,
            items=scan.items,
            bytes=scan.bytes,
            partitions=len(complete),
            split_hint=scan.split_hint() if done else b"",
        )
        if error is not None:
            progress.error, progress.error_retryable = error
        events.append(envelope(progress, source=SCANNER, timestamp_ms=now))
        observed = [event for found in complete if (event := self._observation(state, scan, found, now)) is not None]
        events += observed
        if done and scan.covered and error is None:
            events += self._gone(state, scan, state.head_seq + 1 + scan.lead, now)
        if scan.discovery.rewant_tainted and observed:
            rewant = self._rewant(state, scan, observed, now)
            if rewant is not None:
                events.append(rewant)
        return events, progress

    def _observation(self, state: BuildState, scan: _Scan, found: FoundPartition, now: int) -> pb.Event | None:
        """A PartitionObserved for `found`, or None when the state already knows this version there."""
        location = scan.discovery.location_of(found.directory)
        current = state.canonical_instance(found.ref)
        known = current is not None and current.state == InstanceState.LIVE and current.location == location
        if known and current.version == (found.version, found.strong):  # type: ignore[union-attr]
            return None
        observed = pb.PartitionObserved(
            partition_ref=found.ref,
            location=location,
            bytes=found.bytes,
            version=found.version,
            version_strong=found.strong,
            judge_gone_by_version=True,  # a day listed while it was rewritten comes back as new data
        )
        observed.metadata["files"] = str(found.items)
        event = envelope(observed, source=SCANNER, timestamp_ms=now)
        problem = state.problem(event)
        if problem is not None:  # e.g. a ref a job run is building: the next pass looks again
            logger.info("not observing %s now: %s", found.ref, problem)
            return None
        return event

    def _gone(self, state: BuildState, scan: _Scan, scan_seq: int, now: int) -> list[pb.Event]:
        """A PartitionGone for each Live partition observed in this key range that the pass did not find.

        `scan_seq` is where the slice ending the range lands (the batch is appended at the head we read).
        """
        base = scan.discovery.location_of("")
        prefix = scan.source.pattern.template.split("{", 1)[0]
        gone = []
        absent = (ref for ref in refs_known(state, self.records, prefix) if ref not in scan.present)
        for ref, instance in canonical_instances(state, absent):  # (a working set's cold ones peeked at, not held)
            location = instance.location
            if instance.state != InstanceState.LIVE or not location or not location.startswith(base):
                continue
            key = (location[len(base) :] + "/").encode()  # where its directory's items begin
            if len(key) > MAX_SCAN_KEY_BYTES or ItemKey(key) not in scan.key_range:  # (a location observed by hand)
                continue
            if scan.source.pattern.match(ref) is None:
                continue
            message = pb.PartitionGone(
                partition_ref=ref,
                location=location,
                source=scan.name,
                pass_number=scan.pass_number,
                shard=scan.range_index,
                scan_seq=scan_seq,
            )
            gone.append(envelope(message, source=SCANNER, timestamp_ms=now))
        if gone:
            logger.info("source %s: %d partition(s) gone", scan.name, len(gone))
        return gone

    def _rewant(self, state: BuildState, scan: _Scan, observed: list[pb.Event], now: int) -> pb.Event | None:
        """One WantCreate of the refs the new data taints that a person wanted and no active want covers."""
        refs: dict[str, None] = {}
        for event in observed:
            for ref in refs_tainted_by(state, event.partition_observed):
                if root_wanted(state, ref) and not any(state.active_wants_for_ref(ref)):
                    refs[ref] = None
        if not refs:
            return None
        changed = len(observed)
        want = pb.WantCreate(
            want_id=f"want-{uuid.uuid4().hex}",
            partition_refs=list(refs),
            comment=f"late data: {changed} partition(s) of source {scan.name} changed; rebuilding what they fed",
        )
        return envelope(want, source=SCANNER, timestamp_ms=now)
