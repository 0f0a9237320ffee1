"""A leader's new epoch that loses the race for the log head is appended again at once, not a tick later.

On a busy log another writer often appends between the leader's read and its append (found by
bench/group_failover.py: each lost race cost a failover one more second). Here the other writer is
real: a live state whose first catch-ups are each followed by another writer's append, on a real log.
"""

from __future__ import annotations

from partbuild.orchestrator.group.steps import GroupConfig
from partbuild.orchestrator.group.worker import EPOCH_ATTEMPTS, GroupWorker
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.log.events import envelope, system
from partbuild.state.log.live import LiveState
from partbuild.state.log.store import EventLog

TASK = "host:1:aaaaaaaa"


class RacedLiveState(LiveState):
    """A live state after each of whose first `races` catch-ups another writer appends an event."""

    def __init__(self, log: EventLog, races: int) -> None:
        super().__init__(log)
        self.races = races
        self.lost = 0

    def catch_up(self) -> int:
        seq = super().catch_up()
        if self.lost < self.races:
            self.lost += 1
            self.log.append([envelope(pb.ClockTick(), source=system("other-writer"))])
        return seq


def epoch_after_races(database: Database, races: int) -> tuple[int, int]:
    """(epochs in the log, races lost) after one attempt of a fresh leader to start its group's first epoch."""
    event_log = database.log
    live = RacedLiveState(event_log, races)
    worker = GroupWorker(database, live, GroupConfig("g", buckets=4, member_timeout_s=4.0), TASK)
    worker._start_epoch([TASK])
    epochs = sum(1 for stored in event_log.read(0, 1_000) if stored.event_type == "group_epoch")
    return epochs, live.lost


def test_an_epoch_that_lost_races_is_appended_in_the_same_tick(database: Database) -> None:
    epochs, lost = epoch_after_races(database, races=3)
    assert (epochs, lost) == (1, 3)
    state = LiveState(database.log)
    state.catch_up()
    group = state.state.groups["g"]
    assert (group.leader, group.members, len(group.owners)) == (TASK, (TASK,), 4)
    assert state.state.rejections == []


def test_a_leader_that_always_loses_gives_up_until_its_next_tick(database: Database) -> None:
    epochs, lost = epoch_after_races(database, races=EPOCH_ATTEMPTS + 5)
    assert (epochs, lost) == (0, EPOCH_ATTEMPTS)  # bounded: the heartbeat must not wait on a busy log
