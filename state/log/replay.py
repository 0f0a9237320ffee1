"""Rebuilding BuildState from the log: full replay, snapshot + tail, state as of a seq."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.log.collector import collector_paused
from partbuild.state.log.snapshot import SnapshotError, decode_state, encode_state, snapshot_format
from partbuild.state.log.store import EventLog, SnapshotStore

logger = logging.getLogger("partbuild.snapshots")

Progress = Callable[[int], None]
PROGRESS_EVERY = 20_000
# Long-running processes snapshot when they start or stop this many events past the newest snapshot.
DEFAULT_SNAPSHOT_EVERY = 50_000
SNAPSHOTS_KEPT = 3


@dataclass(frozen=True)
class LoadReport:
    """How a state was obtained: from which snapshot seq (0: none) and how many events replayed."""

    snapshot_seq: int
    replayed: int
    ignored_snapshots: int


def replay_into(
    state: BuildState,
    log: EventLog,
    *,
    upto_seq: int | None = None,
    progress: Progress | None = None,
) -> int:
    """Fold the events after `state.head_seq` (up to `upto_seq`) into `state`; return how many."""
    # Parsed here and applied directly, page by page: one call and one generator step less per event
    # than `apply_payload` over `iter_payloads`, on the path every start-up and audit takes.
    apply = state.apply
    count = reported = 0
    with collector_paused():
        for page in log.iter_payload_pages(after_seq=state.head_seq, upto_seq=upto_seq):
            # One message reused for a page: parsing into it saves an allocation per event, and a fresh one each
            # page bounds its arena (upb keeps every parse's bytes there until the message goes: about 440 bytes
            # an event, 5.4 GB over the 12M events of a 10M-instance log with one message for the whole replay).
            scratch = pb.Event()
            parse = scratch.ParseFromString
            for seq, payload in page:
                try:
                    parse(payload)
                except DecodeError:  # a rejection, which apply_payload records
                    state.apply_payload(seq, payload, scratch)
                    continue
                apply(seq, scratch)
            count += len(page)
            if progress is not None and count - reported >= PROGRESS_EVERY:
                progress(state.head_seq)
                reported = count
    if progress is not None:
        progress(state.head_seq)
    return count


def fold_page(state: BuildState, page: Sequence[tuple[int, bytes]]) -> None:
    """Fold one page of stored events into `state`, parsed into a message of the page's own (its arena keeps
    every parse until it goes: see `replay_into`)."""
    scratch = pb.Event()
    with collector_paused():
        apply_payload = state.apply_payload
        for seq, payload in page:
            apply_payload(seq, payload, scratch)


def load_state(
    log: EventLog,
    snapshots: SnapshotStore | None = None,
    *,
    upto_seq: int | None = None,
    progress: Progress | None = None,
) -> tuple[BuildState, LoadReport]:
    """The state as of `upto_seq` (default: head), from the newest usable snapshot plus the tail.

    A snapshot written by other code (other format) is never returned by the
    store; one that fails to decode is skipped and an older one tried, down to a
    full replay from seq 0.
    """
    ignored = 0
    state: BuildState | None = None
    snapshot_seq = 0
    if snapshots is not None:
        ceiling = upto_seq
        while True:
            found = snapshots.latest(snapshot_format(), max_seq=ceiling)
            if found is None:
                break
            seq, payload = found
            try:
                state = decode_state(payload)
                snapshot_seq = seq
                break
            except SnapshotError:
                ignored += 1
                if seq <= 1:
                    break
                ceiling = seq - 1
    if state is None:
        state = BuildState()
    replayed = replay_into(state, log, upto_seq=upto_seq, progress=progress)
    return state, LoadReport(snapshot_seq=snapshot_seq, replayed=replayed, ignored_snapshots=ignored)


def state_as_of(log: EventLog, snapshots: SnapshotStore | None, seq: int) -> BuildState:
    """BuildState exactly as it was after the event at `seq` was applied."""
    if seq < 0:
        raise ValueError("seq must not be negative")
    state, _ = load_state(log, snapshots, upto_seq=seq)
    return state


def save_snapshot(state: BuildState, snapshots: SnapshotStore) -> int:
    """Store a snapshot of `state` at its head seq; returns that seq."""
    snapshots.save(state.head_seq, snapshot_format(), encode_state(state))
    return state.head_seq


def checkpoint(state: BuildState, snapshots: SnapshotStore, every_events: int) -> int | None:
    """Snapshot `state` if it is at least `every_events` past the newest usable snapshot.

    Called by long-running processes after loading and when they stop, so the
    next start replays only a short tail. Returns the seq saved, or None. Keeps
    the newest `SNAPSHOTS_KEPT` snapshots: older ones only cost space.
    """
    if every_events <= 0 or state.head_seq == 0:
        return None
    try:
        newest = snapshots.latest_seq(snapshot_format()) or 0
        if state.head_seq - newest < every_events:
            return None
        saved = save_snapshot(state, snapshots)
        snapshots.prune(keep=SNAPSHOTS_KEPT)
    except Exception:  # a snapshot is only a cache: failing to write one must not stop the process
        logger.exception("could not save a snapshot at seq %d", state.head_seq)
        return None
    logger.info("saved a snapshot at seq %d: the next start replays from there", saved)
    return saved
