"""The ScheduleTick events of a step: which schedules are due, and the want each tick makes.

The loop calls `schedule_ticks` on every step with the state under its read lock. It is
O(schedules this worker owns): a schedule whose next time has not come costs one
comparison (`Ticker.next_due_ms`, also what the loop sleeps towards). In a sharded set or
a worker group, a schedule belongs to the owner of the bucket of `schedule:<name>`; should
two workers tick it anyway (ownership changing hands), the fold keeps the first tick of
each time (state/fold/schedules.py).

The want function runs here, in the orchestrator. What it returns is checked against the
graph (refs some job or source produces); if it raises or returns a ref nobody produces,
the tick is still recorded, with the error and no want, so an operator sees why the data
did not come rather than a schedule silently stuck retrying.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from partbuild.orchestrator.graph import Graph, GraphError
from partbuild.orchestrator.schedules import DueTick, Schedule, due_ticks, tick_time
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.schedules import ScheduleRow, tick_want_id
from partbuild.state.log.events import envelope

logger = logging.getLogger("partbuild")

MAX_ERROR_CHARS = 1000
FIRST_RETRY_MS = 1_000  # a schedule whose evaluation raised is tried again after this, doubling
MAX_RETRY_MS = 300_000
MAX_REFS_PER_TICK = 100_000


def schedule_owner_key(name: str) -> str:
    """The key whose bucket owns a schedule in a sharded set or a worker group."""
    return f"schedule:{name}"


def tick_event(schedule: Schedule, graph: Graph, due: DueTick, now_ms: int, source: pb.EventSource) -> pb.Event:
    """The ScheduleTick for `due`: with the want of the schedule's function, or the error that kept it from one."""
    tick = pb.ScheduleTick(schedule=schedule.name, tick_ms=due.tick_ms, kind=due.kind, missed=due.missed)
    if due.kind != pb.TICK_KIND_SKIPPED:
        refs, error = _wanted_refs(schedule, graph, due.tick_ms)
        if error:
            tick.error = error[:MAX_ERROR_CHARS]
            logger.warning("schedule %s at %s: %s", schedule.name, due.tick_ms, tick.error)
        elif refs:
            tick.want.CopyFrom(
                pb.WantCreate(
                    want_id=tick_want_id(schedule.name, due.tick_ms, due.kind),
                    partition_refs=refs,
                    ttl_seconds=_seconds(schedule.ttl),
                    sla_seconds=_seconds(schedule.sla),
                    comment=schedule.comment,
                    data_timestamp_ms=due.tick_ms,
                )
            )
    return envelope(tick, source=source, timestamp_ms=now_ms)


def _wanted_refs(schedule: Schedule, graph: Graph, tick_ms: int) -> tuple[list[str], str]:
    try:
        returned = schedule.want(tick_time(schedule, tick_ms))
        refs = list(dict.fromkeys(returned))  # in order, each once
    except Exception as exc:  # the user's function: recorded with the tick, never a crash of the loop
        return [], f"want function raised {type(exc).__name__}: {exc}"
    if len(refs) > MAX_REFS_PER_TICK:
        return [], f"want function returned {len(refs)} refs, more than {MAX_REFS_PER_TICK}"
    for ref in refs:
        if not isinstance(ref, str):
            return [], f"want function returned {ref!r}, not a partition ref"
        try:
            graph.resolve(ref)
        except GraphError as exc:
            return [], f"want function returned {ref!r}: {exc}"
    return refs, ""


def _seconds(delta: object) -> int:
    return int(delta.total_seconds()) if delta is not None else 0  # type: ignore[attr-defined]


@dataclass
class Ticker:
    """This orchestrator's view of the graph's schedules: when it first saw each, when the next is due."""

    graph: Graph
    clock: Callable[[], int]
    first_seen_ms: dict[str, int] = field(default_factory=dict)
    next_due_ms: int | None = None  # the earliest time a schedule this worker owns ticks next

    seen_head: int = -1  # the state's head at the last evaluation
    # name -> (when it is tried again, the backoff that got there): schedules whose evaluation raised
    failing: dict[str, tuple[int, int]] = field(default_factory=dict)

    def due(
        self, state: BuildState, now_ms: int, owns: Callable[[str], bool], source: pb.EventSource
    ) -> list[pb.Event]:
        """The ticks due at `now_ms` for the schedules this worker owns, oldest first per schedule."""
        if not self.graph.schedules:
            return []
        if state.head_seq == self.seen_head and self.next_due_ms is not None and now_ms < self.next_due_ms:
            return []  # nothing folded (no pause, resume or tick) and no time come: the idle step's case
        self.seen_head = state.head_seq
        events: list[pb.Event] = []
        next_due: int | None = None
        for name, schedule in self.graph.schedules.items():
            if not owns(schedule_owner_key(name)):
                continue
            retry = self.failing.get(name)
            if retry is not None and now_ms < retry[0]:
                upcoming: int | None = retry[0]  # failed lately: tried again after its backoff
            else:
                try:
                    upcoming = self._evaluate(state, schedule, now_ms, source, events)
                    self.failing.pop(name, None)
                except Exception:  # one schedule's failure stops neither the others nor the loop
                    backoff = min(retry[1] * 2, MAX_RETRY_MS) if retry is not None else FIRST_RETRY_MS
                    logger.exception("schedule %s could not be evaluated: tried again in %d ms", name, backoff)
                    self.failing[name] = (now_ms + backoff, backoff)
                    upcoming = now_ms + backoff
            if upcoming is not None:
                next_due = upcoming if next_due is None else min(next_due, upcoming)
        self.next_due_ms = next_due
        return events

    def _evaluate(
        self, state: BuildState, schedule: Schedule, now_ms: int, source: pb.EventSource, events: list[pb.Event]
    ) -> int | None:
        """Add the schedule's due ticks to `events`; its next time (None: a cron whose year field passed)."""
        row = state.schedules.get(schedule.name) or ScheduleRow()
        first_seen = self.first_seen_ms.setdefault(schedule.name, now_ms)
        ticks = []
        if not row.paused:
            ticks = [
                tick_event(schedule, self.graph, due, now_ms, source)
                for due in due_ticks(schedule, row.last_tick_ms, first_seen, now_ms)
            ]
        upcoming = schedule.next_after(max(now_ms, row.last_tick_ms))
        events += ticks  # only once all were made: a schedule that failed half-way ticks nothing
        return upcoming
