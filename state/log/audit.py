"""Audit by replay: what `partbuild replay` and the HTTP audit endpoint report.

`audit` replays the log (from the newest usable snapshot) to a seq, digests the
state and lists the first rejections (the fold's `Rejection` records); with
`verify` it replays again from seq 0 without snapshots and compares digests
and seqs (unless the state came from seq 0 without one already: the same fold
twice would tell nothing more); with `save` it writes a snapshot. One state is
held at a time: the first is dropped before the second replay begins.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import Rejection
from partbuild.state.log.digest import state_digest
from partbuild.state.log.replay import Progress, load_state, replay_into, save_snapshot
from partbuild.state.log.store import EventLog, SnapshotStore


class AuditInputError(ValueError):
    """The audit was asked for something the log cannot answer (e.g. a seq after its head)."""


@dataclass
class AuditReport:
    """What a replay found: where the log ends, the state's digest and what it holds."""

    head_seq: int  # the log's head when the audit ran
    state_seq: int  # the seq the state was replayed to (head, or --as-of)
    digest: str
    counts: dict[str, dict[str, int]]
    rejected_total: int
    rejected: list[Rejection]  # the first `rejected_limit` of the fold's rejections, in seq order
    snapshot_seq: int  # seq of the snapshot the state was loaded from; 0 = full replay
    replayed_events: int
    seconds: float
    verified: bool | None = None  # None: not asked; True/False: outcome of --verify
    problems: list[str] = field(default_factory=list)
    snapshot_saved_at: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """The report as plain data, fields in order (`replay --json`): a rejection as seq, event_type, reason."""
        return {
            name: [_rejection_dict(r) for r in self.rejected] if name == "rejected" else copy.deepcopy(value)
            for name, value in ((field.name, getattr(self, field.name)) for field in fields(self))
        }

    @classmethod
    def of_state(
        cls,
        state: BuildState,
        head: int,
        digest: str,
        rejected_limit: int,
        snapshot_seq: int,
        replayed: int,
        seconds: float,
    ) -> AuditReport:
        """The report of a replayed `state` (its digest computed by the caller: from memory, or with its rows)."""
        return cls(
            head_seq=head,
            state_seq=state.head_seq,
            digest=digest,
            counts=state.counts(),
            rejected_total=len(state.rejections),
            rejected=state.rejections[:rejected_limit],
            snapshot_seq=snapshot_seq,
            replayed_events=replayed,
            seconds=seconds,
        )

    @property
    def events_per_second(self) -> float:
        return self.replayed_events / self.seconds if self.seconds > 0 else 0.0


def _rejection_dict(rejection: Rejection) -> dict[str, Any]:
    return {"seq": rejection.seq, "event_type": rejection.event_type, "reason": rejection.reason}


def audit(
    log: EventLog,
    snapshots: SnapshotStore,
    *,
    as_of: int | None = None,
    verify: bool = False,
    save: bool = False,
    rejected_limit: int = 20,
    progress: Progress | None = None,
    verify_also: Callable[[BuildState], list[str]] | None = None,
) -> AuditReport:
    """Replay the log (from the newest usable snapshot) and report; optionally verify and snapshot.

    Verification replays the whole log from seq 0 without snapshots and checks
    that the seqs are gapless and that both states have the same digest; then, for an
    audit of the head, `verify_also(state)` (the state store's check, from the layer above).
    """
    head = log.head()
    target = audit_target(head, as_of)

    started = time.perf_counter()
    state, report = load_state(log, snapshots, upto_seq=target, progress=progress)
    seconds = time.perf_counter() - started
    digest = state_digest(state)

    result = AuditReport.of_state(state, head, digest, rejected_limit, report.snapshot_seq, report.replayed, seconds)
    if verify:
        if report.snapshot_seq == 0:  # a full replay from seq 0 already: check it saw every seq
            result.problems = _gaps(report.replayed, target)
        else:
            del state  # (the report keeps what it needs of it): one state in memory at a time
            state, result.problems = _verify(log, result, target, progress)
        if verify_also is not None and target == head:
            result.problems += verify_also(state)
        result.verified = not result.problems
    if save:
        result.snapshot_saved_at = save_snapshot(state, snapshots)
    return result


def audit_target(head: int, as_of: int | None) -> int:
    """The seq an audit replays to: `as_of`, or the head; AuditInputError for a seq after the head."""
    if as_of is not None and as_of > head:
        raise AuditInputError(f"--as-of {as_of} is after the log head {head}")
    return head if as_of is None else as_of


def _gaps(replayed: int, target: int) -> list[str]:
    """seq is gapless from 1: a full replay to `target` must have seen exactly `target` events."""
    return [] if replayed == target else [f"log has gaps: {replayed} events up to seq {target}"]


def _verify(log: EventLog, loaded: AuditReport, target: int, progress: Progress | None) -> tuple[BuildState, list[str]]:
    """Replay from seq 0 without snapshots; the state, and how it differs from the one `loaded` reports."""
    fresh = BuildState()
    problems = _gaps(replay_into(fresh, log, upto_seq=target, progress=progress), target)
    if fresh.head_seq != loaded.state_seq:
        problems.append(f"full replay ended at seq {fresh.head_seq}, snapshot load at {loaded.state_seq}")
    fresh_digest = state_digest(fresh)
    if fresh_digest != loaded.digest:
        problems.append(f"digest differs: full replay {fresh_digest}, snapshot + tail {loaded.digest}")
    return fresh, problems
