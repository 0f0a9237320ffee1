"""What changed between two seqs: instances created, state changes, canonical pointers moved, read from the
live state's histories (state/fold/history.py) with the same rules the reads of the past use
(state/fold/past.py), so a change listed at seq N is exactly a difference between the states as of N-1 and N.

A change at seq N from `from_state` to `to_state` means: as of N-1 the record was in `from_state` (None: it
did not exist yet) and as of N in `to_state`. Several moves of one record within one event are one change
(its state before the event to its state after it), and a move that ends where it began (an observed
instance learning its version: Live to Live) is none. Instances that retention dropped are gone with their
histories: their changes are not listed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.history import HEARTBEAT, entries, run_entries
from partbuild.state.fold.past import instance_state_at, want_state_at
from partbuild.state.fold.records import Instance, InstanceState, JobRun, JobRunState, Want, WantState

# The kinds of change, in the order changes at one seq are listed.
INSTANCE_CREATED = "instance_created"
INSTANCE_STATE = "instance_state"
WANT_STATE = "want_state"
JOB_RUN_STATE = "job_run_state"
CANONICAL_MOVED = "canonical_moved"
KINDS = (INSTANCE_CREATED, INSTANCE_STATE, WANT_STATE, JOB_RUN_STATE, CANONICAL_MOVED)
_KIND_ORDER = {kind: index for index, kind in enumerate(KINDS)}

State = InstanceState | WantState | JobRunState


@dataclass(frozen=True, slots=True)
class Change:
    """One change at `seq`. `id`: the instance's UUID, the want's or job run's id, or the ref whose canonical
    pointer moved. A want or job run created is a state change from None; an instance created is its own
    kind (to the state it was created in) and moves its ref's canonical pointer (from_uuid None: the ref's
    first instance)."""

    seq: int
    kind: str
    id: str
    ref: str | None = None
    from_state: State | None = None
    to_state: State | None = None
    from_uuid: str | None = None
    to_uuid: str | None = None

    @property
    def key(self) -> tuple[int, int, str]:
        """Where it sorts: by seq, then kind (in KINDS' order), then id."""
        return self.seq, _KIND_ORDER[self.kind], self.id


def changes_between(state: BuildState, first: int, last: int) -> list[Change]:
    """Every change in (`first`, `last`] (0 <= first < last <= head), sorted by `Change.key`.

    O(records): it scans every instance, want and job run (skipping at once those unchanged since `first`),
    and walks the few changes of each record changed since.
    """
    if not 0 <= first <= last <= state.head_seq:
        raise ValueError(f"need 0 <= first <= last <= head ({state.head_seq}), got {first} and {last}")
    found: list[Change] = []
    for instance in state.instances.values():
        if instance.created_seq > last:
            break  # creation order: all later ones too
        if instance.updated_seq > first:
            found.extend(_instance_changes(state, instance, first, last))
    for want in state.wants.values():
        if want.created_seq > last:
            break
        if want.updated_seq > first:
            found.extend(_want_changes(want, first, last))
    for run in state.job_runs.values():
        if run.created_seq > last:
            break
        if run.updated_seq > first:
            found.extend(_run_changes(run, first, last))
    found.sort(key=_key)
    return found


def _key(change: Change) -> tuple[int, int, str]:
    return change.key


def _instance_changes(state: BuildState, instance: Instance, first: int, last: int) -> Iterator[Change]:
    """Its creation (with the canonical move) and state changes in (first, last]."""
    runs = state.job_runs
    seqs = {instance.created_seq, instance.updated_seq}
    seqs.update(at for at, _ in entries(state.instance_histories.get(instance.uuid, 0)))
    seqs.update(runs[run_id].created_seq for run_id in instance.attempts)  # Building: implied by its attempts
    uuid, ref = instance.uuid, instance.ref
    before = instance_state_at(state, instance, first)[0] if instance.created_seq <= first else None
    for seq in sorted(at for at in seqs if first < at <= last):
        now = instance_state_at(state, instance, seq)[0]
        if seq == instance.created_seq:
            yield Change(seq, INSTANCE_CREATED, uuid, ref, None, now)
            # Every new instance becomes its ref's canonical one (state/fold/transitions.py new_canonical).
            yield Change(seq, CANONICAL_MOVED, ref, ref, from_uuid=instance.previous_uuid, to_uuid=uuid)
        elif now != before:
            yield Change(seq, INSTANCE_STATE, uuid, ref, before, now)
        before = now


def _want_changes(want: Want, first: int, last: int) -> Iterator[Change]:
    seqs = {want.created_seq, want.updated_seq}
    seqs.update(at for at, _ in entries(want.history))
    before = want_state_at(want, first)[0] if want.created_seq <= first else None
    for seq in sorted(at for at in seqs if first < at <= last):
        now = want_state_at(want, seq)[0]
        if now != before:
            yield Change(seq, WANT_STATE, want.want_id, None, before, now)
        before = now


def run_state_at(run: JobRun, seq: int) -> JobRunState:
    """A job run's state as of `seq` (at or after its creation): past.run_at's, without copying the run."""
    if run.updated_seq <= seq:
        return run.state
    for at, kind, _ in run_entries(run.history):
        if at <= seq and kind != HEARTBEAT:
            return JobRunState(kind)
    return JobRunState.QUEUED


def _run_changes(run: JobRun, first: int, last: int) -> Iterator[Change]:
    seqs = {run.created_seq, run.updated_seq}
    seqs.update(at for at, kind, _ in run_entries(run.history) if kind != HEARTBEAT)
    before = run_state_at(run, first) if run.created_seq <= first else None
    for seq in sorted(at for at in seqs if first < at <= last):
        now = run_state_at(run, seq)
        if now != before:
            yield Change(seq, JOB_RUN_STATE, run.job_run_id, None, before, now)
        before = now
