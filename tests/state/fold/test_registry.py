"""The event registry is complete: every event type has a row, every class a state holds is listed,
every attribute of a state is declared and every field of every record is covered by the digest.

Each check is a function of the registry (or lists) it judges, so the tests below also run it on a
deliberately broken copy and assert that the failure names what is wrong.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterator, Mapping
from enum import Enum
from functools import cache, partial
from typing import Any

import pytest

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold import registry
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.layout import Records, Section, declared
from partbuild.state.fold.records import Want
from partbuild.state.fold.registry import EventType
from partbuild.state.log.digest import state_digest
from partbuild.state.log.events import from_job_run, manual, system
from partbuild.state.log.snapshot import decode_state, encode_state

from foldkit import Story, subscription
from golden_log import GOLDEN_LOGS, read

PAYLOAD = pb.Event.DESCRIPTOR.oneofs_by_name["payload"]
RUN_PHASES = {"START", "COMPLETE", "FAIL", "ABORT"}
_LEAVES = (type(None), bool, int, float, str, bytes, bytearray)  # bytearray: packed pairs, pickled as bytes

# ----------------------------------------------------------------- the checks


def row_problems(rows: tuple[EventType, ...]) -> list[str]:
    """What is wrong with the rows against `Event.payload`: missing, unknown, out of order, flags the proto denies."""
    members = [field.name for field in PAYLOAD.fields]
    names = [row.name for row in rows]
    problems = [f"Event.payload member {name!r} has no registry row" for name in members if name not in names]
    problems += [f"registry row {name!r} is no Event.payload member" for name in names if name not in members]
    problems += [f"registry row {name!r} is listed twice" for name in sorted({n for n in names if names.count(n) > 1})]
    if not problems and names != members:
        problems.append("registry rows are not in Event.payload order")
    for row in rows:
        if row.name not in members:
            continue
        fields = pb.Event.DESCRIPTOR.fields_by_name[row.name].message_type.fields_by_name
        if row.job_run != ("job_run_id" in fields):
            problems.append(f"registry row {row.name!r}: job_run={row.job_run}, but its message's job_run_id says not")
        if (row.fence_refs is not None) != ("fence" in fields):
            problems.append(f"registry row {row.name!r}: fence_refs disagrees with its message's fence field")
        if row.want_ids is not None and "want_id" not in fields and "want" not in fields:  # `want`: a WantCreate
            problems.append(f"registry row {row.name!r} names wants, but its message has no want_id nor want")
        if row.run_phase is not None and (not row.job_run or row.run_phase not in RUN_PHASES):
            problems.append(f"registry row {row.name!r}: run phase {row.run_phase!r} of a non-run or unknown phase")
    return problems


def reachable(root: object) -> Iterator[object]:
    """Every object reachable from `root` through containers, record slots and dataclass fields, once each."""
    seen: set[int] = set()
    pending = [root]
    while pending:
        item = pending.pop()
        if (isinstance(item, _LEAVES) and not isinstance(item, Enum)) or id(item) in seen:
            continue
        seen.add(id(item))
        yield item
        if isinstance(item, Enum):
            continue
        if isinstance(item, Mapping):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            pending.extend(item)
        else:
            pending.extend(getattr(item, name) for name in _slots(type(item)) if hasattr(item, name))
            pending.extend(vars(item).values() if hasattr(item, "__dict__") else ())


def _slots(cls: type) -> tuple[str, ...]:
    if dataclasses.is_dataclass(cls):
        return tuple(field.name for field in dataclasses.fields(cls))
    return tuple(name for klass in cls.__mro__ for name in getattr(klass, "__slots__", ()))


def class_problems(states: list[BuildState], record_classes: tuple[type, ...]) -> list[str]:
    """Classes the states hold that the record list lacks, and listed classes no state holds (untested)."""
    found = {type(item) for state in states for item in reachable(state)} - {BuildState, dict, list, tuple, set}
    found -= {frozenset}
    problems = [
        f"a state holds {cls.__module__}.{cls.__qualname__}, which RECORD_CLASSES lacks"
        for cls in sorted(found - set(record_classes), key=lambda cls: cls.__qualname__)
    ]
    problems += [
        f"no state of the corpus holds {cls.__qualname__}: its checks cannot run"
        for cls in record_classes
        if cls not in found
    ]
    return problems


def attribute_problems(states: list[BuildState], layout: tuple[Section, ...]) -> list[str]:
    """Attributes of the states that the layout does not declare, and declared ones no state has."""
    names = declared(layout)
    problems = []
    for state in states:
        undeclared = [name for name in state.attributes() if name not in names]
        problems += [f"BuildState attribute {name!r} is not declared in LAYOUT" for name in undeclared]
    problems += [f"LAYOUT declares {name!r}, which BuildState lacks" for name in names if not hasattr(states[0], name)]
    return sorted(set(problems))


def _changed(value: Any) -> Any:
    """A value of the same kind that differs from `value` (and in its repr)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, Enum):
        members = list(type(value))
        return members[(members.index(value) + 1) % len(members)]
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str):
        return value + "~"
    if isinstance(value, bytes):
        return value + b"~"
    if value is None:
        return "~"
    if isinstance(value, list | tuple):
        return type(value)([*value, value[-1]] if value else ["~"])
    if isinstance(value, frozenset):
        return value | {_changed(max(value))} if value else frozenset({1})
    if isinstance(value, Mapping):
        if not value:
            return {"~": "~"}
        key = next(iter(value))
        return {**value, key: _changed(value[key])}
    changed = copy.copy(value)  # a record: its first field changed
    first = _slots(type(value))[0]
    object.__setattr__(changed, first, _changed(getattr(value, first)))
    return changed


def slot_problems(
    states: list[BuildState], record_classes: tuple[type, ...], digest: Callable[[BuildState], str]
) -> list[str]:
    """Record fields whose change leaves the digest as it was (fields a record declares derived excepted)."""
    holders: dict[type, list[tuple[BuildState, object]]] = {}
    for state in sorted(states, key=lambda state: len(state.instances)):  # small states first: cheaper digests
        for item in reachable(state):
            holders.setdefault(type(item), []).append((state, item))
    problems = []
    for cls in record_classes:
        if issubclass(cls, Enum) or cls not in holders:
            continue
        for name in _slots(cls):
            if name in getattr(cls, "digest_leaves_out", ()):
                continue
            # An object where the field holds something: a change then keeps its kind (a list of shards stays one).
            state, item = next(((s, i) for s, i in holders[cls] if getattr(i, name)), holders[cls][0])
            before, old = digest(state), getattr(item, name)
            object.__setattr__(item, name, _changed(old))
            try:
                after = digest(state)
            finally:
                object.__setattr__(item, name, old)
            if after == before:
                problems.append(f"changing {cls.__qualname__}.{name} does not change the digest")
    return problems


# ----------------------------------------------------------------- the corpus


def _rich_story() -> BuildState:
    """Wants with derivative wants, waits, retries, failures, taints, versions and a scan: fields seldom set."""
    s = Story()
    s.observe("raw/a")
    s.ok(
        pb.PartitionObserved(
            partition_ref="raw/b", location="/b", version="v1", version_strong=True, metadata={"k": "v"}
        )
    )
    s.want("w", "mid/a", "mid/b", "top/x", ttl_seconds=3600, sla_seconds=60, comment="story")
    s.build("r-a", "mid/a", [s.uuid("raw/a")])
    s.buffer("r-b", "mid/b")
    s.ok(pb.JobRunHeartbeat(job_run_id="r-b"))
    s.fail("r-b", permanent=False)
    s.buffer("r-x", "top/x")
    s.missing("r-x", "mid/c")
    s.derivative("w-c", "w", "r-x", "mid/c")
    s.want("gone", "other/y")
    s.ok(pb.WantCancel(want_id="gone", reason="not needed"), source=manual("ann"))
    s.ok(pb.PartitionTaint(partition_ref="raw/a", reason="bad data"))
    s.ok(pb.SourceScanProgress(source="raw", pass_number=1, last_key=b"k1", split_keys=[b"m"], error="slow", items=2))
    s.ok(pb.SourceScanRequest(source="raw", reason="again"), source=system("ops"))
    flt = pb.SubscriptionFilter(ref_patterns=["mid/*"], job="mid", root_want="w")
    retry = pb.RetryPolicy(max_attempts=3, backoff_initial_ms=10, backoff_max_ms=100, max_age_ms=5, timeout_ms=1000)
    s.ok(subscription("filtered", filter=flt, retry=retry, ordering="root_want"))
    s.ok(pb.SubscriptionOffsetReset(name="filtered", queue=pb.SUBSCRIPTION_QUEUE_DLQ, to_seq=s.state.head_seq))
    s.ok(pb.ClockTick(), source=from_job_run("r-a"))
    return s.state


@cache
def corpus() -> tuple[BuildState, ...]:
    """States replayed from every golden log, and the rich story."""
    states = []
    for log in GOLDEN_LOGS:
        state = BuildState(strict=True)
        for seq, payload in enumerate(read(log.name), 1):
            state.apply_payload(seq, payload)
        states.append(state)
    return (*states, _rich_story())


def fresh_corpus() -> list[BuildState]:
    """Copies of the corpus that a test may change (a snapshot round trip each)."""
    return [decode_state(encode_state(state)) for state in corpus()]


# ----------------------------------------------------------------- the tests


def test_every_event_type_has_one_row_in_payload_order() -> None:
    assert row_problems(registry.ROWS) == []
    assert list(registry.HANDLERS) == list(registry.EVENT_TYPES) == [field.name for field in PAYLOAD.fields]


def test_a_missing_unknown_or_wrong_row_is_named() -> None:
    rows = registry.ROWS
    without_tick = tuple(row for row in rows if row.name != "clock_tick")
    assert row_problems(without_tick) == ["Event.payload member 'clock_tick' has no registry row"]
    made_up = dataclasses.replace(rows[0], name="want_whim")
    assert "registry row 'want_whim' is no Event.payload member" in row_problems((*rows, made_up))
    assert row_problems(rows[1::-1] + rows[2:]) == ["registry rows are not in Event.payload order"]
    success = registry.BY_NAME["job_run_success"]
    broken = tuple(dataclasses.replace(row, job_run=False) if row is success else row for row in rows)
    assert row_problems(broken) == [
        "registry row 'job_run_success': job_run=False, but its message's job_run_id says not",
        "registry row 'job_run_success': run phase 'COMPLETE' of a non-run or unknown phase",
    ]
    unfenced = tuple(dataclasses.replace(row, fence_refs=None) if row.name == "want_create" else row for row in rows)
    assert row_problems(unfenced) == ["registry row 'want_create': fence_refs disagrees with its message's fence field"]


def test_every_class_a_state_holds_is_listed_and_snapshots_round_trip() -> None:
    states = list(corpus())
    assert class_problems(states, registry.RECORD_CLASSES) == []
    for state in states:
        assert state_digest(decode_state(encode_state(state))) == state_digest(state)


def test_an_unlisted_record_class_is_named() -> None:
    without_ranges = tuple(cls for cls in registry.RECORD_CLASSES if cls.__name__ != "ScanRange")
    assert class_problems(list(corpus()), without_ranges) == [
        "a state holds partbuild.state.fold.records.ScanRange, which RECORD_CLASSES lacks"
    ]


def test_every_attribute_of_a_state_is_declared() -> None:
    assert attribute_problems(list(corpus()), BuildState.LAYOUT) == []


def test_a_state_refuses_an_attribute_its_layout_does_not_declare() -> None:
    """A misspelt attribute in a handler (`state.instance_count = ...`) fails at once instead of holding
    state that no digest, snapshot or read would ever see."""
    state = BuildState()
    with pytest.raises(AttributeError):
        state.instance_count = [0]  # type: ignore[attr-defined]
    assert list(state.attributes()) == list(BuildState.ATTRIBUTES)


def test_every_record_field_is_covered_by_the_digest() -> None:
    assert slot_problems(fresh_corpus(), registry.RECORD_CLASSES, state_digest) == []


def test_an_undeclared_attribute_and_uncovered_fields_are_named() -> None:
    """A layout that forgot the records by name: their attributes are undeclared, their fields unhashed."""
    layout = tuple(section for section in BuildState.LAYOUT if not isinstance(section, Records))
    states = fresh_corpus()
    assert attribute_problems(states, layout) == [
        f"BuildState attribute {name!r} is not declared in LAYOUT" for name in ("groups", "sources", "subscriptions")
    ]
    problems = slot_problems(states, registry.RECORD_CLASSES, partial(state_digest, layout=layout))
    for field in ("GroupState.epoch_id", "TaskState.data", "Subscription.endpoint", "SourceScan.pass_number"):
        assert f"changing {field} does not change the digest" in problems
    assert "changing ScanRange.last_key does not change the digest" in problems
    assert not [problem for problem in problems if "Instance." in problem or "Want." in problem]


def test_a_field_left_out_without_being_declared_derived_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """A record whose digest values skip a field: the check names exactly that field."""
    monkeypatch.setattr(
        Want,
        "digest_values",
        lambda want: tuple(v for n, v in zip(Want.__slots__, want.__getstate__(), strict=True) if n != "comment"),
    )
    assert slot_problems(fresh_corpus(), (Want,), state_digest) == ["changing Want.comment does not change the digest"]
