"""Reactions as `/automation` shows them: the served graph's and the log's, with what each owes as of a seq."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from partbuild.api.models.automation import RECENT_PENDING, ReactionOut, ReactionPendingOut
from partbuild.state.fold.reaction_notes import PendingRow, ReactionRow, reaction_key, split_reaction_key
from partbuild.state.fold.reactions import KIND_NAMES

if TYPE_CHECKING:
    from partbuild.orchestrator.graph import Graph
    from partbuild.orchestrator.reactions import Reaction


def reactions_out(
    graph: Graph | None, reactions: Mapping[str, ReactionRow], pending: Mapping[str, Any]
) -> list[ReactionOut]:
    """Every reaction the graph declares or the log knows (its rows, its pending firings), by job then kind.

    `reactions` and `pending`: the state's rows and pending firings (as of a seq, those of then).
    """
    declared: dict[str, Reaction] = {}
    for job in graph.jobs.values() if graph is not None else ():
        for reaction in job.reactions:
            declared[reaction_key(job.label, reaction.kind)] = reaction
    owed: dict[str, list[PendingRow]] = {}
    for row in pending.values():
        owed.setdefault(reaction_key(row.job, row.kind), []).append(row)
    keys = sorted({*declared, *reactions, *owed}, key=split_reaction_key)
    return [_reaction_out(key, declared.get(key), reactions.get(key), owed.get(key, ())) for key in keys]


def _reaction_out(
    key: str, declared: Reaction | None, row: ReactionRow | None, owed: Iterable[PendingRow]
) -> ReactionOut:
    job, kind = split_reaction_key(key)
    row = row or ReactionRow()
    soonest = sorted(owed, key=lambda firing: (firing.due_ms, firing.partition_ref))
    return ReactionOut(
        job=job,
        kind=KIND_NAMES[kind],
        declared=declared is not None,
        debounce_s=declared.debounce.total_seconds() if declared is not None else None,
        fired=row.fired,
        last_fired_seq=row.last_fired_seq or None,
        last_cause_ref=row.last_cause_ref or None,
        last_cause_instance_uuid=row.last_cause_instance_uuid or None,
        last_want_id=row.last_want_id or None,
        pending_total=len(soonest),
        pending=[_pending_out(firing) for firing in soonest[:RECENT_PENDING]],
        failed=row.failed,
        last_error=row.last_error or None,
    )


def _pending_out(firing: PendingRow) -> ReactionPendingOut:
    return ReactionPendingOut(
        partition_ref=firing.partition_ref,
        cause_ref=firing.cause_ref,
        cause_instance_uuid=firing.cause_instance_uuid,
        previous_instance_uuid=firing.previous_instance_uuid or None,
        cause_seq=firing.cause_seq,
        due_ms=firing.due_ms,
        noted_seq=firing.noted_seq,
    )
