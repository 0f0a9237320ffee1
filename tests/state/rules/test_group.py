"""Property tests of the worker-group protocol: random member sets, join orders, deaths and step orders.

A *history* is drawn symbolically: a bucket count, the first members in some
order and a leader, then rounds that either step some members (in a drawn
order) through `share_step`, or change the membership (some members die, new
ones join, a leader is drawn among the members of the new epoch) through
`next_epoch`. The properties:

1. every step `share_step` takes is legal (`step_problem`), every epoch
   `next_epoch` builds is legal (`epoch_problem`), survivors keep exactly their
   buckets (the leader at least its own), and no bucket ever has two owners;
2. once members keep stepping, the protocol settles: every bucket owned, no
   share pending, loads within one bucket;
3. any change `step_problem` accepts (random candidate states, legal or not)
   keeps at most one owner per bucket, moves a bucket to the sender only when
   it was shared to it, and never withdraws or re-addresses a share;
4. through the fold: every such epoch and message is accepted, fenced
   decisions are accepted exactly when their task owns the bucket under the
   current epoch, the fold's owners equal the model's at every step, and the
   checker (`verify`) finds nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.log.group_verify import verify
from partbuild.state.rules.bucketing import bucket
from partbuild.state.rules.group import (
    TaskState,
    epoch_message,
    epoch_problem,
    loads,
    next_epoch,
    owned_sets,
    ownership,
    share_step,
    step_problem,
    task_message,
)

from foldkit import Story
from groupkit import NAMESPACE, as_task

POOL = [f"t{n}" for n in range(12)]
REFS = [f"noop/{n}" for n in range(80)]


@dataclass(frozen=True)
class Steps:
    order: tuple[int, ...]  # indexes into the current members, wrapped


@dataclass(frozen=True)
class Change:
    deaths: tuple[int, ...]  # indexes into the current members, wrapped
    joins: int
    leader: int  # index into the new members, wrapped


Round = Steps | Change

rounds = st.lists(
    st.one_of(
        st.builds(Steps, st.lists(st.integers(0, 11), max_size=12).map(tuple)),
        st.builds(Change, st.lists(st.integers(0, 11), max_size=3).map(tuple), st.integers(0, 3), st.integers(0, 11)),
    ),
    max_size=10,
)
histories = st.tuples(
    st.integers(1, 24),  # bucket_total
    st.permutations(POOL).map(lambda pool: pool[:6]),  # who may join, in join order
    st.integers(1, 4),  # first members
    st.integers(0, 11),  # first leader
    rounds,
)


class Model:
    """The protocol driven by its own pure functions, checking property 1 after every change."""

    def __init__(self, total: int, members: list[str], leader: str) -> None:
        self.total = total
        self.epoch = 1
        self.leader = leader
        self.states = next_epoch(None, members, leader, total)
        self._check_epoch(None)

    @property
    def members(self) -> list[str]:
        return list(self.states)

    def step(self, me: str) -> TaskState | None:
        new = share_step(self.states, me, timestamp_ms=self.epoch)
        if new is not None:
            assert step_problem(self.states, me, new) is None
            self.states = {**self.states, me: new}
            assert ownership(self.states.values())[1] == {}
        return new

    def change(self, members: list[str], leader: str) -> None:
        previous = self.states
        self.epoch += 1
        self.leader = leader
        self.states = next_epoch(previous, members, leader, self.total, timestamp_ms=self.epoch)
        self._check_epoch(previous)

    def _check_epoch(self, previous: Mapping[str, TaskState] | None) -> None:
        assert epoch_problem(previous, self.leader, self.total, self.states) is None
        owners, conflicts = ownership(self.states.values())
        assert conflicts == {} and set(owners) == set(range(1, self.total + 1))
        kept = owned_sets(previous.values()) if previous else {}
        for task, state in self.states.items():
            owned = kept.get(task, frozenset())
            assert state.data >= owned if task == self.leader else state.data == owned

    def settle(self) -> int:
        """Step every member in turn until nobody moves; returns the rounds it took."""
        for rounds_taken in range(4 * self.total + 10):
            if not [task for task in self.members if self.step(task) is not None]:
                return rounds_taken
        raise AssertionError("the share protocol did not settle")


def _apply(model: Model, item: Round, joiners: list[str], on_step: object = None) -> None:
    """Play one drawn round on the model (members die and join in drawn order; never all dead)."""
    members = model.members
    if isinstance(item, Steps):
        for index in item.order:
            me = members[index % len(members)]
            new = model.step(me)
            if new is not None and on_step is not None:
                on_step(me, new)  # type: ignore[operator]
        return
    dead = {members[index % len(members)] for index in item.deaths}
    survivors = [task for task in members if task not in dead]
    joined = [joiners.pop(0) for _ in range(min(item.joins, len(joiners)))]
    new_members = survivors + joined or members[:1]
    model.change(new_members, new_members[item.leader % len(new_members)])


def _settled_properly(model: Model) -> None:
    model.settle()
    owners, conflicts = ownership(model.states.values())
    assert conflicts == {} and set(owners) == set(range(1, model.total + 1))
    assert all(not state.share for state in model.states.values())
    load = loads(model.states).values()
    assert max(load) - min(load) <= 1


@settings(max_examples=300, deadline=None)
@given(histories)
def test_the_protocol_keeps_its_invariants_and_settles_within_one_bucket(history: tuple) -> None:
    total, pool, first, leader, drawn = history
    members, joiners = pool[:first], pool[first:]
    model = Model(total, members, members[leader % len(members)])
    for item in drawn:
        _apply(model, item, joiners)
    event(f"epochs: {model.epoch}")
    _settled_properly(model)


@st.composite
def candidate_steps(draw: st.DrawFn) -> tuple[Model, str, TaskState]:
    """A reachable group state, a member, and a well-formed new state for it: its share step, an edit of that
    step (a bucket toggled, a share added or removed), or anything."""
    total, pool, first, leader, drawn = draw(histories)
    members, joiners = pool[:first], pool[first:]
    model = Model(total, members, members[leader % len(members)])
    for item in drawn:
        _apply(model, item, joiners)
    me = draw(st.sampled_from(model.members))
    base = share_step(model.states, me) or model.states[me]
    data, share = set(base.data), dict(base.share)
    buckets = st.integers(1, total)
    others = [task for task in model.members if task != me]
    how = draw(st.sampled_from(["step", "edit", "anything"]))
    if how == "anything":
        data = draw(st.sets(buckets, max_size=total))
        share = {}
    if how != "step":
        data ^= draw(st.sets(buckets, max_size=2))
        for b in draw(st.sets(buckets, max_size=2)) if others else ():
            share[b] = draw(st.sampled_from(others))
        for b in draw(st.sets(st.sampled_from(sorted(share)), max_size=1)) if share else ():
            del share[b]
    share = {b: target for b, target in share.items() if b in data}  # well formed: shares are held buckets
    return model, me, TaskState(me, 0, frozenset(data), share)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(candidate_steps())
def test_an_accepted_step_never_makes_two_owners_or_takes_an_unshared_bucket(drawn: tuple) -> None:
    model, me, new = drawn
    states = model.states
    problem = step_problem(states, me, new)
    old = states[me]
    event(
        "rejected"
        if problem
        else "accepted, unchanged"
        if new.data == old.data and new.share == old.share
        else "accepted"
    )
    if problem is not None:
        return
    before = ownership(states.values())[0]
    after, conflicts = ownership({**states, me: new}.values())
    assert conflicts == {}
    for b, owner in after.items():
        if owner == me and before.get(b) != me:
            assert any(state.share.get(b) == me for state in states.values())
        if owner != me:
            assert before.get(b) == owner  # nobody else's bucket moved
    for b, target in old.share.items():
        assert new.share.get(b) == target or (b not in new.data and b in states[target].data)


# ----------------------------------------------------------------- through the fold


@st.composite
def fold_histories(draw: st.DrawFn) -> tuple:
    history = draw(histories)
    decisions = draw(st.lists(st.tuples(st.integers(0, 11), st.integers(0, 79), st.booleans()), max_size=12))
    return history, decisions


class FoldDriver:
    """Appends the model's epochs and messages, and fenced decisions, to a strict BuildState."""

    def __init__(self, model: Model) -> None:
        self.story = Story()
        self.story.want("w", *REFS)
        self.model = model
        self.epoch_ids = ["e1"]
        self._epoch(model.leader)

    def _epoch(self, leader: str) -> None:
        previous = self.epoch_ids[-2] if len(self.epoch_ids) > 1 else ""
        msg = epoch_message("g", self.epoch_ids[-1], previous, NAMESPACE, self.model.total, leader,
                            self.model.states, self.story.clock_ms)  # fmt: skip
        self.story.ok(msg, source=as_task(leader))
        self.assert_same_owners()

    def change(self) -> None:
        self.epoch_ids.append(f"e{len(self.epoch_ids) + 1}")
        self._epoch(self.model.leader)

    def sent(self, me: str, new: TaskState) -> None:
        group = self.story.state.groups["g"]
        self.story.ok(task_message(group, new, self.story.clock_ms), source=as_task(me))
        self.assert_same_owners()

    def assert_same_owners(self) -> None:
        assert dict(self.story.state.groups["g"].owners) == ownership(self.model.states.values())[0]

    def decide(self, who: int, ref_index: int, stale: bool) -> None:
        """A fenced run for one Missing ref: accepted exactly when `who` owns its bucket now."""
        ref = REFS[ref_index]
        if self.story.istate(ref).name != "MISSING":
            return
        members = self.model.members
        task = members[who % len(members)]
        epoch_id = self.epoch_ids[-2] if stale and len(self.epoch_ids) > 1 else self.epoch_ids[-1]
        fence = pb.DecisionFence(group="g", epoch_id=epoch_id, task_id=task)
        run = pb.JobRunBuffer(job_run_id=f"r{len(self.story.events)}", job_label="noop",
                              instance_uuids=[self.story.uuid(ref)], fence=fence)  # fmt: skip
        owner = ownership(self.model.states.values())[0].get(bucket(NAMESPACE, ref, self.model.total))
        reason = self.story.apply(run, source=as_task(task))
        event("fenced run " + ("accepted" if reason is None else "rejected"))
        assert (reason is None) == (owner == task and epoch_id == self.epoch_ids[-1]), reason


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fold_histories())
def test_the_fold_accepts_the_protocol_judges_fences_and_the_checker_agrees(drawn: tuple) -> None:
    (total, pool, first, leader, rounds_drawn), decisions = drawn
    members, joiners = pool[:first], pool[first:]
    model = Model(total, members, members[leader % len(members)])
    driver = FoldDriver(model)
    for index, item in enumerate(rounds_drawn):
        _apply(model, item, joiners, on_step=driver.sent)
        if isinstance(item, Change):
            driver.change()
        for who, ref_index, stale in decisions[index::2]:
            driver.decide(who, ref_index, stale)
    while True:  # settle through the fold
        moved = [
            task for task in model.members if (new := model.step(task)) is not None and driver.sent(task, new) is None
        ]
        if not moved:
            break
    for who, ref_index, stale in decisions:
        driver.decide(who, ref_index, stale)
    story = driver.story
    assert all(r.event_type == "job_run_buffer" for r in story.state.rejections)
    assert verify(story.events) == []
