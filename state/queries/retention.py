"""Retention, the state side: what an `InstanceRetention` event would drop, and where "N days ago" is in the log.

`InstanceRetention{drop_superseded_before_seq: C}` drops every superseded
(non-canonical) instance that stopped being canonical before C: it keeps N days
of history, so a read as of any seq from C - 1 on finds the instance canonical
then, however long ago it was created. (Events written before issue 23 say
`drop_superseded_created_before_seq` and drop by creation seq; the fold still
replays them so, and no writer sets that field any more.) Writers (the
orchestrator's `--retain-days N`, `partbuild retention [--dry-run]`) compute C
with `cutoff_seq_before(log, now_ms - N days)` and preview the effect with
`retention_candidates(state, C)`; the fold stays the only judge.

What retention never drops: canonical instances (so never an instance an active
job run builds, nor a waiting one: both are canonical). What it may drop that a
later event still names: an instance a running job read as an input, if it was
superseded (tainted, or replaced by a new version of source data) while the job
ran and before the cutoff; that job's JobRunSuccess is then rejected ("input
instance ... is unknown") and the run is retried after its heartbeat timeout.
`cutoff_sparing_active_runs` lowers a cutoff so that this cannot happen;
whether to use it is the writer's choice (it changes what one event drops,
never how the fold replays old logs).
"""

from __future__ import annotations

from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.instances import split_superseded
from partbuild.state.fold.records import Instance
from partbuild.state.log.store import EventLog


def retention_candidates(state: BuildState, cutoff_seq: int) -> list[Instance]:
    """Exactly the instances `InstanceRetention(drop_superseded_before_seq=cutoff_seq)` would drop if applied
    now, in the fold's order.

    Empty for a cutoff the fold would reject (not positive). The fold's own
    selection, so the preview and the event cannot disagree.
    """
    if cutoff_seq <= 0:
        return []
    dropped, _ = split_superseded(state, cutoff_seq)
    return dropped


def cutoff_seq_before(log: EventLog, before_ms: int) -> int:
    """The first seq whose stored `recorded_at_ms` is >= `before_ms`; `log.head() + 1` if there is none.

    As the cutoff of `InstanceRetention`, "superseded before the cutoff" then means
    "superseded by an event recorded before `before_ms`": with `before_ms` = now - N
    days, instances that stopped being canonical more than N days ago. The result is always >= 1, a
    valid cutoff: 1 (an empty log, or every event recorded at or after
    `before_ms`) drops nothing; head + 1 (every event older) makes every
    superseded instance a candidate.

    Binary search over seqs (gapless, 1..head) with one point read each:
    O(log n) reads through the log's public API. `recorded_at_ms` is the
    appender's wall clock, taken just before its append transaction: it is
    non-decreasing in practice, but concurrent writers (or writers on hosts
    with skewed clocks) can record slightly out of order. The search then still
    ends at a seq between events recorded just before and just after
    `before_ms`, so a skew of a few seconds moves the cutoff by the events of
    those seconds, nothing more.
    """
    lo, hi = 1, log.head() + 1  # the answer is in [lo, hi]; hi: none recorded at or after before_ms
    while lo < hi:
        mid = (lo + hi) // 2
        if _recorded_at_ms(log, mid) >= before_ms:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _recorded_at_ms(log: EventLog, seq: int) -> int:
    """The `recorded_at_ms` of the event at `seq` (1 <= seq <= head: committed, seqs are gapless)."""
    rows = log.read(after_seq=seq - 1, limit=1)
    if not rows or rows[0].seq != seq:
        raise LookupError(f"the log has no event at seq {seq}, although its head is past it")
    return rows[0].recorded_at_ms


def cutoff_sparing_active_runs(state: BuildState, cutoff_seq: int) -> int:
    """`cutoff_seq`, lowered if needed so that no instance a queued or running job may have read is dropped.

    A job run reads the canonical Live instances of its inputs after it was
    buffered; one of those superseded since then (after the oldest active run's
    buffer event) may still be named by that run's JobRunSuccess. The result
    keeps every such instance: it is at most one past the oldest active run's
    buffer seq, and lowered only where that changes what is dropped.
    """
    if not state.active_run_ids:
        return cutoff_seq
    oldest_run = state.job_runs[next(iter(state.active_run_ids))]  # the index is in buffer order
    spared = oldest_run.created_seq + 1  # instances superseded from here on stay
    if cutoff_seq <= spared:
        return cutoff_seq
    candidates = retention_candidates(state, cutoff_seq)
    return spared if candidates and candidates[-1].superseded_seq >= spared else cutoff_seq
