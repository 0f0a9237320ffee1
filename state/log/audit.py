"""Audit by replay: what `partbuild replay` and the HTTP audit endpoint report."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from partbuild.state.fold.build_state import BuildState
from partbuild.state.log.digest import state_digest
from partbuild.state.log.replay import Progress, load_state, replay_into, save_snapshot
from partbuild.state.log.store import EventLog, SnapshotStore


class AuditInputError(ValueError):
    """The audit was asked for something the log cannot answer (e.g. a seq after its head)."""


@dataclass(frozen=True)
class RejectedEvent:
    seq: int
    event_type: str
    reason: str


@dataclass
class AuditReport:
    """What a replay found: where the log ends, the state's digest and what it holds."""

    head_seq: int  # the log's head when the audit ran
    state_seq: int  # the seq the state was replayed to (head, or --as-of)
    digest: str
    counts: dict[str, dict[str, int]]
    rejected_total: int
    rejected: list[RejectedEvent]
    snapshot_seq: int  # seq of the snapshot the state was loaded from; 0 = full replay
    replayed_events: int
    seconds: float
    verified: bool | None = None  # None: not asked; True/False: outcome of --verify
    problems: list[str] = field(default_factory=list)
    snapshot_saved_at: int | None = None

    @property
    def events_per_second(self) -> float:
        return self.replayed_events / self.seconds if self.seconds > 0 else 0.0


def audit(
    log: EventLog,
    snapshots: SnapshotStore,
    *,
    as_of: int | None = None,
    verify: bool = False,
    save: bool = False,
    rejected_limit: int = 20,
    progress: Progress | None = None,
) -> AuditReport:
    """Replay the log (from the newest usable snapshot) and report; optionally verify and snapshot.

    Verification replays the whole log from seq 0 without snapshots and checks
    that the seqs are gapless and that both states have the same digest.
    """
    head = log.head()
    if as_of is not None and as_of > head:
        raise AuditInputError(f"--as-of {as_of} is after the log head {head}")
    target = head if as_of is None else as_of

    started = time.perf_counter()
    state, report = load_state(log, snapshots, upto_seq=target, progress=progress)
    seconds = time.perf_counter() - started
    digest = state_digest(state)

    result = AuditReport(
        head_seq=head,
        state_seq=state.head_seq,
        digest=digest,
        counts=state.counts(),
        rejected_total=len(state.rejections),
        rejected=[RejectedEvent(r.seq, r.event_type, r.reason) for r in state.rejections[:rejected_limit]],
        snapshot_seq=report.snapshot_seq,
        replayed_events=report.replayed,
        seconds=seconds,
    )
    if verify:
        result.problems = _verify(log, state, digest, target, progress)
        result.verified = not result.problems
    if save:
        result.snapshot_saved_at = save_snapshot(state, snapshots)
    return result


def _verify(log: EventLog, loaded: BuildState, digest: str, target: int, progress: Progress | None) -> list[str]:
    problems = []
    fresh = BuildState()
    replayed = replay_into(fresh, log, upto_seq=target, progress=progress)
    # seq is gapless from 1: a full replay to `target` must have seen exactly `target` events.
    if replayed != target:
        problems.append(f"log has gaps: {replayed} events up to seq {target}")
    if fresh.head_seq != loaded.head_seq:
        problems.append(f"full replay ended at seq {fresh.head_seq}, snapshot load at {loaded.head_seq}")
    fresh_digest = state_digest(fresh)
    if fresh_digest != digest:
        problems.append(f"digest differs: full replay {fresh_digest}, snapshot + tail {digest}")
    return problems
