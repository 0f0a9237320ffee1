"""Time from a group worker's SIGKILL to every bucket owned again by live members.

Target: at most member timeout + 2 s (here 4 + 2 = 6 s), for every kill.

A group of 4 `partbuild run --group` workers (`--member-timeout 4`, so a heartbeat
and a leader tick every second; `--buckets 32`) builds the sleep graph
(`bench/graphs/sleep.py`: runs of 1 s, no Spark, 4 slots per worker shared by the
group) while wants keep coming through the API, so runs are in flight at each kill.
Then, one kill at a time:

1. wait until the group is balanced over its 4 live workers (and the victim has a
   run in flight, when one of its runs can be caught within a few seconds);
2. SIGKILL the victim's process group (the Python worker, and its Spark JVM if it
   started one, as the death of a machine or container would); the kill time is
   the wall clock right after `killpg` returns;
3. follow the folded log: **owned** is the first event after which every bucket has
   an owner and the victim is no longer a member (the epoch without it: the leader
   takes the dead member's buckets); **balanced** the first after which, moreover,
   the members' loads are within one bucket (shares to the survivors picked up).
   Times are the events' envelope `timestamp_ms` (the writer's wall clock, same
   machine) minus the kill time;
4. start a new worker, so the next kill finds 4 again.

Victims alternate between a non-leader and the leader (whose lock the server drops
as its connection dies; the next member to try it leads, then reaps the dead
leader's row once it is older than the timeout). Reported apart, median and max.
The victim's last heartbeat, read from its row right after the kill, splits each
figure into the wait for its row to expire (last heartbeat + timeout - kill, between
timeout - 1 s and timeout: the heartbeat period is timeout / 4) and the detection
that follows: the leader's next tick reaps the row (its log line, read from the
workers' outputs) and appends the epoch in the same tick, unless the append loses
a race with another writer (`expected_head`), when it is retried a tick later.

    .venv/bin/python bench/group_failover.py [--backend postgres|sqlite] [--kills 4] [--leader-kills 3]
                                             [--member-timeout 4] [--workers 4] [--buckets 32] [--keep DIR]
                                             [--count-conflicts]
"""

from __future__ import annotations

import argparse
import itertools
import math
import re
import statistics
import time
from dataclasses import dataclass

from _common import machine
from _groupkit import (
    GROUP,
    LOG_TIME,
    RunsInFlight,
    Tail,
    Workers,
    api_server,
    conflicts,
    fresh_log,
    is_balanced,
    kill_group,
    log_time_ms,
    now_ms,
    pid_of,
    successful_wants,
    task_of,
    want_each,
    workdir,
)
from graphs.sleep import SLEEP

from partbuild.api.client import HttpClient
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState

MARGIN_S = 2.0  # the target: member timeout + 2 s
SETTLE_S = 2.0  # after a (re)start, before the next kill
# A leader's log line: the reap precedes the epoch in one tick.
REAPED = re.compile(rf"^{LOG_TIME} INFO partbuild\.group: group \S+: reaped dead members (.*)$", re.M)


@dataclass
class Kill:
    """One kill and what the log shows after it."""

    role: str  # "member" or "leader"
    victim: str  # task id
    buckets: int  # it owned at the kill
    runs_in_flight: int
    expiry_s: float  # its row is dead from then on (last heartbeat + timeout - kill)
    owned_s: float = float("nan")
    reaped_s: float = float("nan")  # the leader's "reaped dead members" line (its log, ms resolution)
    balanced_s: float = float("nan")
    new_leader: str = ""


class AfterKill:
    """A watch: the first event with every bucket owned without the victim, then the first balanced one."""

    def __init__(self, victim: str) -> None:
        self.victim = victim
        self.owned_ms: int | None = None
        self.balanced_ms: int | None = None
        self.leader = ""

    def __call__(self, seq: int, event: pb.Event, state: BuildState) -> None:
        group = state.groups.get(GROUP)
        if group is None or self.victim in group.members or len(group.owners) != group.bucket_total:
            return
        if self.owned_ms is None:
            self.owned_ms, self.leader = event.timestamp_ms, group.leader
        loads = [len(group.owned_by(task)) for task in group.members]
        if self.balanced_ms is None and max(loads) - min(loads) <= 1:
            self.balanced_ms = event.timestamp_ms


class Feed:
    """Keeps wants coming: a new batch of fresh refs whenever fewer than `low` are active."""

    def __init__(self, client: HttpClient, batch: int) -> None:
        self.client = client
        self.batch = batch
        self.numbers = itertools.count()

    def top_up(self, state: BuildState) -> None:
        if len(state.wants) - successful_wants(state) < self.batch // 2:
            want_each(self.client, [SLEEP.format(n=next(self.numbers)) for _ in range(self.batch)])


def run(args: argparse.Namespace) -> list[Kill]:
    """Form the group, then kill one worker at a time (alternating roles), restarting one after each kill."""
    plan = kill_plan(args.kills, args.leader_kills)
    slots = 4 * args.workers
    env = {
        "PARTBUILD_SLEEP_PARTITIONS": "1000000",
        "PARTBUILD_SLEEP_CONCURRENCY": str(slots),
    }
    kills: list[Kill] = []
    names = itertools.count(1)
    with (
        workdir(args.keep, f"failover-{args.backend}-{time.time_ns()}") as tmp,
        fresh_log(args.backend, tmp) as db,
        api_server(db, tmp) as api,
        Workers(
            db,
            tmp,
            buckets=args.buckets,
            member_timeout_s=args.member_timeout,
            env=env,
            # A dead worker's runs are failed as stale and retried soon, as in tests/kits/w1kit.py.
            heartbeat_interval_s=0.3,
            heartbeat_timeout_s=3,
            count_conflicts=args.count_conflicts,
        ) as workers,
        Tail(db) as tail,
    ):
        runs = RunsInFlight()
        tail.watches.append(runs)
        feed = Feed(api.client, batch=slots * 15)
        live = [f"w{next(names)}" for _ in range(args.workers)]
        for name in live:
            workers.start(name)
        for number, role in enumerate(plan, 1):
            pids = [workers.started[name].pid for name in live]
            waited = tail.wait("balanced", lambda _s, pids=pids: is_balanced(tail.group(), pids), workers, live)
            time.sleep(SETTLE_S)
            feed.top_up(tail.poll())
            victim_name = choose_victim(tail, workers, live, role, runs)
            group = tail.group()
            assert group is not None
            victim = task_of(group, workers.started[victim_name].pid)
            assert victim is not None
            watch = AfterKill(victim)
            tail.watches.append(watch)
            kill_group(workers.started[victim_name].process)
            killed_ms = now_ms()
            workers.started[victim_name].process.wait(30)
            # Its last heartbeat: the row cannot be reaped before it is `timeout` old, seconds from now.
            last_beat = next(m.last_heartbeat_ms for m in tail.db.members.members(GROUP) if m.task_id == victim)
            kill = Kill(
                role,
                victim,
                buckets=len(group.owned_by(victim)),
                runs_in_flight=runs.in_flight[victim],
                expiry_s=(last_beat + args.member_timeout * 1000 - killed_ms) / 1000,
            )
            live.remove(victim_name)
            tail.wait("balanced without the victim", lambda _s, w=watch: w.balanced_ms is not None, workers, live)
            tail.watches.remove(watch)
            assert watch.owned_ms is not None and watch.balanced_ms is not None
            kill.owned_s = (watch.owned_ms - killed_ms) / 1000
            kill.balanced_s = (watch.balanced_ms - killed_ms) / 1000
            kill.new_leader = watch.leader
            kill.reaped_s = (reaped_ms(workers, victim) - killed_ms) / 1000
            kills.append(kill)
            lost = ""
            if args.count_conflicts:
                epochs = conflicts(list(workers.started.values()), killed_ms, watch.owned_ms)["group_epoch"]
                lost = f"; epoch appends that lost a race: {epochs}"
            print(
                f"  kill {number} ({role}, {pid_of(victim)}, {kill.buckets} buckets, {kill.runs_in_flight} runs in "
                f"flight; group balanced {waited:.1f} s before): every bucket owned after {kill.owned_s:.2f} s, "
                f"balanced after {kill.balanced_s:.2f} s; its row expired {kill.expiry_s:.2f} s after the kill, "
                f"so detection took {kill.owned_s - kill.expiry_s:.2f} s (reaped at {kill.reaped_s:.2f} s, the epoch "
                f"{kill.owned_s - kill.reaped_s:.2f} s later); leader "
                f"{'unchanged' if watch.leader == group.leader else 'now ' + str(pid_of(watch.leader))}{lost}",
                flush=True,
            )
            if number < len(plan):
                live.append(f"w{next(names)}")
                workers.start(live[-1])
        state = tail.poll()
        print(
            f"  {successful_wants(state):,} of {len(state.wants):,} wants successful, "
            f"{runs.failures} runs failed (a dead worker's, as stale), {len(state.rejections)} events rejected",
            flush=True,
        )
        if args.count_conflicts:
            found = conflicts(list(workers.started.values()))
            print(f"  appends that lost a race, by what they carried: {dict(found.most_common())}", flush=True)
        workers.stop(live)
    return kills


def reaped_ms(workers: Workers, victim: str) -> float:
    """When a leader logged that it reaped `victim` (the workers' log lines are local time, ms); NaN if none did."""
    for worker in workers.started.values():
        for stamp, tasks in REAPED.findall(worker.output.read_text(errors="replace")):
            if victim in tasks.split(", "):
                return log_time_ms(stamp)
    return math.nan


def kill_plan(members: int, leaders: int) -> list[str]:
    """Roles of the victims in order: a member, then the leader, alternating while both last."""
    plan: list[str] = []
    while members or leaders:
        if members:
            plan.append("member")
            members -= 1
        if leaders:
            plan.append("leader")
            leaders -= 1
    return plan


def choose_victim(tail: Tail, workers: Workers, live: list[str], role: str, runs: RunsInFlight) -> str:
    """The leader, or a non-leader; preferably one with a run in flight (waits up to 5 s for one).

    Among non-leaders with runs in flight, the one with the fewest: `max_concurrency` is shared by
    the group, and a victim holding most slots would leave them held by its dead runs until they
    are failed as stale, a quiet log during the failover; the survivors should be the busy ones.
    """
    deadline = time.monotonic() + 5
    while True:
        group = tail.group()
        assert group is not None
        tasks = {name: task_of(group, workers.started[name].pid) for name in live}
        candidates = [name for name in live if (tasks[name] == group.leader) == (role == "leader")]
        busy = sorted(
            (name for name in candidates if runs.in_flight[tasks[name] or ""] > 0),
            key=lambda name: runs.in_flight[tasks[name] or ""],
        )
        if busy or time.monotonic() > deadline:
            return (busy or candidates)[0]
        time.sleep(0.1)
        tail.poll()


def report(kills: list[Kill], role: str, target: float, backend: str) -> None:
    found = [kill for kill in kills if kill.role == role]
    if not found:
        return
    owned = [kill.owned_s for kill in found]
    balanced = [kill.balanced_s for kill in found]
    detection = [kill.owned_s - kill.expiry_s for kill in found]
    appending = [kill.owned_s - kill.reaped_s for kill in found]
    verdict = "PASS" if max(owned) <= target else "MISS"
    print(
        f"failover ({backend}, {role} killed, {len(found)} kills): every bucket owned again after median "
        f"{statistics.median(owned):.2f} s, max {max(owned):.2f} s (target <= {target:g} s): {verdict}; "
        f"balanced within one bucket after median {statistics.median(balanced):.2f} s, max {max(balanced):.2f} s; "
        f"detection after the row expired: median {statistics.median(detection):.2f} s, max {max(detection):.2f} s, "
        f"of which from the reap to the epoch's append: median {statistics.median(appending):.2f} s, "
        f"max {max(appending):.2f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--member-timeout", type=float, default=4.0)
    parser.add_argument("--buckets", type=int, default=32)
    parser.add_argument("--kills", type=int, default=4, help="kills of a non-leader")
    parser.add_argument("--leader-kills", type=int, default=3)
    parser.add_argument("--keep", metavar="DIR", help="keep each log and the processes' outputs under DIR")
    parser.add_argument(
        "--count-conflicts", action="store_true", help="count appends that lose a race (bench/diag/sitecustomize.py)"
    )
    args = parser.parse_args()
    print(f"machine: {machine()}")
    print(
        f"{args.backend}: {args.workers} workers, member timeout {args.member_timeout:g} s, {args.buckets} buckets, "
        f"sleep runs of 1 s, {4 * args.workers} slots",
        flush=True,
    )
    kills = run(args)
    print(f"machine: {machine()}")
    target = args.member_timeout + MARGIN_S
    for role in ("member", "leader"):
        report(kills, role, target, args.backend)


if __name__ == "__main__":
    main()
