"""Property-based tests of the fold: random event logs, valid and invalid, against BuildState.

Hypothesis draws a list of *symbolic* steps (act on want #2, buffer run #1 for
refs #0 and #3, taint ref #5, feed garbage bytes, ...) from small pools so
that ids collide and real lifecycles happen. Instance UUIDs come from the log
position, so `materialize` folds the steps once with a strict BuildState and
resolves each symbolic ref to a concrete UUID (the current canonical one, some
UUID seen earlier, or a garbage one). The resulting log is fixed; the
properties are then checked on it:

1. replay with `strict=True` never raises (a handler bug would raise instead of
   becoming a rejection);
2. two replays (Event objects, and serialized payloads through one reused
   scratch message as `replay_into` does) give the same digest and the same
   complete state, derived indexes included; so do replays in processes with
   other PYTHONHASHSEEDs;
3. snapshot + tail (at one or two hypothesis-chosen cut points) equals the full
   replay, digest and complete state;
4. `check_invariants` holds after every event, every applied event moves
   entities only along allowed lifecycle edges (`check_transitions`), and a
   taint reaches exactly what it should (`check_taint_outcome`);
5. a rejected event changes nothing but `head_seq` and `rejections`; events the
   generator built to be invalid are rejected, those built to be valid applied.

Steps mix single events (valid or deliberately broken: bad ids, bad refs,
unknown or garbage UUIDs, negative numbers, no payload, a payload type from a
newer schema, random or bit-flipped bytes, a payload delivered twice) with
multi-event "build" steps (want, buffer, heartbeat, success / failure / dep
miss, derivative want and upstream build) so that deep lifecycles, taint and
upstream-failure cascades, TTL expiry and retention all happen regularly.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import (
    ACTIVE_RUN_STATES,
    BUILDABLE_INSTANCE_STATES,
    TERMINAL_WANT_STATES,
    Instance,
    InstanceState,
    JobRun,
    JobRunState,
    Rejection,
    Want,
    WantState,
)
from partbuild.state.fold.transitions import derive_want_state
from partbuild.state.log.digest import state_digest
from partbuild.state.log.events import envelope, from_job_run, manual, system
from partbuild.state.log.snapshot import decode_state, encode_state
from partbuild.state.rules.ids import instance_uuid
from partbuild.state.rules.queries import attempts_for, ref_history

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z

# Small pools: collisions (same want id twice, two runs for one instance, ...) happen often.
REFS = (
    "raw/clicks/date=2026-01-01",
    "raw/clicks/date=2026-01-02",
    "raw/views/date=2026-01-01",
    "agg/daily/date=2026-01-01",
    "agg/daily/date=2026-01-02",
    "agg/funnel/date=2026-01-01",
    "report/weekly/week=01",
    "géo/région=île-de-france",
)
BAD_REFS = ("", "nul\x00ref", "tab\tref", "del\x7fref", "c1\x85ref", "x" * 4097, "é" * 2049)
WANT_IDS = tuple(f"want-{c}" for c in "abcdefghijkl")
RUN_IDS = tuple(f"run-{n}" for n in range(1, 13))
BAD_IDS = ("", "i" * 257)
LOCATIONS = ("s3://lake/v1", "s3://lake/v2", "s3://lake/v3")
GARBAGE_UUIDS = (
    "",
    "not-a-uuid",
    "00000000-0000-0000-0000-000000000000",
    instance_uuid(10**9, REFS[0]),  # well-formed, never created
    "Z" * 36,
)
INT64_MAX = 2**63 - 1
FUTURE_FIELD = b"\x98\x06\x01"  # Event field 99 (varint 1): a payload type from a newer version

Action = tuple[Any, ...]
Step = tuple[Action, int, int]  # (action, timestamp delta in ms, seq gap)


# ----------------------------------------------------------------------------- strategies


def weighted(*choices: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """Pick one strategy with probability proportional to its weight, then draw from it.

    Shrinks towards the first choice, so list the simplest (or the valid) one first.
    """
    slots = [index for index, (weight, _) in enumerate(choices) for _ in range(weight)]
    return st.integers(0, len(slots) - 1).flatmap(lambda n: choices[slots[n]][1])


def _index(pool: Sequence[object]) -> st.SearchStrategy[int]:
    return st.integers(0, len(pool) - 1)


IdHandle = tuple[str, int]
# How a step names a want or job run: ("fresh", _) the first pool id not used yet, ("pool", i)
# pool[i] (used or not), ("active", pick) one that is not terminal yet, ("bad", i) BAD_IDS[i].
new_id = weighted(
    (8, st.tuples(st.just("fresh"), st.just(0))),
    (2, st.tuples(st.just("pool"), st.integers(0, 11))),
    (1, st.tuples(st.just("bad"), _index(BAD_IDS))),
)
existing_id = weighted(
    (8, st.tuples(st.just("active"), st.integers(0, 63))),
    (2, st.tuples(st.just("pool"), st.integers(0, 11))),
    (1, st.tuples(st.just("bad"), _index(BAD_IDS))),
)
# Below len(REFS): a valid ref; from len(REFS) on: BAD_REFS[i - len(REFS)].
ref_idx = weighted((16, _index(REFS)), (1, st.integers(len(REFS), len(REFS) + len(BAD_REFS) - 1)))
ref_list = weighted(
    (16, st.lists(ref_idx, min_size=1, max_size=3, unique=True)),
    (1, st.lists(ref_idx, min_size=2, max_size=3)),  # may repeat a ref
    (1, st.just([])),
)
# How a step names an instance: a buildable canonical one, a Live one (canonical preferred),
# the canonical one of REFS[pick], any UUID seen so far (possibly superseded or dropped), or garbage.
uuid_handle = st.tuples(
    st.sampled_from(["buildable"] * 2 + ["live"] * 2 + ["canon"] * 2 + ["known", "garbage"]), st.integers(0, 63)
)
buildable_handles = st.lists(st.tuples(st.just("buildable"), st.integers(0, 63)), min_size=1, max_size=3)
live_handles = st.lists(st.tuples(st.just("live"), st.integers(0, 63)), min_size=1, max_size=2)

want_action = st.tuples(
    st.just("want"),
    new_id,
    ref_list,
    weighted((20, st.just(0)), (16, st.integers(1, 120)), (1, st.just(INT64_MAX)), (2, st.just(-1))),  # ttl_seconds
    weighted((15, st.just(0)), (4, st.integers(1, 600)), (1, st.just(-1))),  # sla_seconds
    weighted((15, st.none()), (4, st.integers(0, 200_000)), (1, st.just(-1))),  # data_timestamp: ts - n
    weighted((5, st.none()), (3, existing_id)),  # parent
    weighted((16, st.just("derived")), (3, st.just("explicit")), (1, st.just("wrong"))),  # root_want_id
    st.integers(0, 3),  # source kind
)
buffer_action = st.tuples(
    st.just("buffer"),
    new_id,
    weighted((12, st.just(True)), (1, st.just(False))),  # has a job label
    weighted((12, buildable_handles), (4, st.lists(uuid_handle, min_size=1, max_size=3)), (1, st.just([]))),
)
heartbeat_action = st.tuples(st.just("heartbeat"), existing_id)
# Several events in one step: buffer a fresh run for buildable instances, maybe heartbeat, then an outcome.
build_action = st.tuples(
    st.just("build"),
    buildable_handles,
    weighted((3, st.just([])), (4, live_handles)),  # inputs
    st.booleans(),  # heartbeat first
    # "missing/<outcome>": after the dep miss, a second run builds the first missing ref with <outcome>;
    # "success/chain": after the success, a second run builds from the first one's output.
    st.sampled_from(
        ["success"] * 3
        + ["success/chain", "retryable", "permanent", "queued", "missing"]
        + ["missing/success", "missing/permanent", "missing/retryable"]
    ),
    st.lists(_index(REFS), min_size=1, max_size=3, unique=True),  # refs reported missing
    st.lists(_index(REFS), min_size=1, max_size=3, unique=True),  # refs wanted when nothing is buildable
)
success_action = st.tuples(
    st.just("success"),
    existing_id,
    weighted((6, st.just([])), (6, live_handles), (2, st.lists(uuid_handle, min_size=1, max_size=2))),  # inputs
    weighted((4, st.just("none")), (4, st.just("all")), (2, st.just("own_inputs")), (1, st.just("invalid"))),
    st.integers(0, 63),
)
failure_action = st.tuples(
    st.just("failure"),
    existing_id,
    st.sampled_from([pb.ERROR_CLASS_UNSPECIFIED, pb.ERROR_CLASS_RETRYABLE, pb.ERROR_CLASS_PERMANENT]),
    weighted((6, st.just(0)), (2, st.integers(1, 60_000)), (1, st.just(-1))),  # retry_after_ms
)
cancel_run_action = st.tuples(st.just("cancel_run"), existing_id)
missing_action = st.tuples(st.just("missing"), existing_id, ref_list)
# A ref index, or (kind, pick): a Live canonical ref with consumers ("upstream") or inputs ("downstream").
taint_action = st.tuples(
    st.just("taint"),
    weighted(
        (2, ref_idx),
        (2, st.tuples(st.just("upstream"), st.integers(0, 63))),
        (1, st.tuples(st.just("downstream"), st.integers(0, 63))),
    ),
    st.booleans(),
)
observe_action = st.tuples(
    st.just("observe"),
    ref_idx,
    st.integers(0, len(LOCATIONS)),  # len(LOCATIONS): empty location
    weighted((16, st.integers(0, 10**6)), (1, st.just(INT64_MAX)), (2, st.just(-1))),  # row_count
)
cancel_want_action = st.tuples(st.just("cancel_want"), existing_id)
# cutoff = this event's seq - n: 0 drops every superseded instance; a huge n makes it non-positive.
retention_action = st.tuples(
    st.just("retention"),
    weighted((3, st.just(0)), (3, st.integers(1, 40)), (1, st.just(-1)), (1, st.just(10**6))),
)
garbage_actions = st.one_of(
    st.tuples(st.just("bytes"), st.binary(max_size=48)),
    st.tuples(st.just("mutate"), st.integers(0, 255), st.integers(0, 4095), st.integers(1, 255)),
    st.tuples(st.just("repeat"), st.integers(0, 255)),
    st.tuples(st.just("empty")),
    st.tuples(st.just("future")),
)

action = weighted(
    (5, want_action),
    (6, build_action),
    (4, buffer_action),
    (1, heartbeat_action),
    (3, success_action),
    (2, failure_action),
    (1, cancel_run_action),
    (2, missing_action),
    (3, taint_action),
    (3, observe_action),
    (1, cancel_want_action),
    (2, retention_action),
    (2, garbage_actions),
)
# Mostly small steps forward, sometimes a jump past TTLs, sometimes backwards (clock skew), and
# rarely to before the epoch (negative timestamps for the rest of the log).
time_delta = weighted(
    (12, st.integers(0, 3_000)),
    (2, st.integers(20_000, 300_000)),
    (1, weighted((20, st.integers(-300_000, -1)), (1, st.just(-T0 - 5_000)))),
)
seq_gap = weighted((12, st.just(1)), (1, st.integers(2, 4)))
step = st.tuples(action, time_delta, seq_gap)
# Long logs make lifecycles happen; the short branch comes first so failures shrink to few steps.
steps_strategy = weighted(
    (1, st.lists(step, max_size=8)),
    (2, st.lists(step, min_size=8, max_size=30)),
    (3, st.lists(step, min_size=20, max_size=80)),
)


# ----------------------------------------------------------------------------- materializing


@dataclass(frozen=True)
class Entry:
    """One fixed event of a generated log."""

    seq: int
    payload: bytes  # what the log stores
    event: pb.Event | None  # None when the payload is raw bytes (garbage, mutated, future type)
    expect: str | None  # "apply", "reject", or None when the generator does not know
    action: Action


def _ref(index: int) -> str:
    return REFS[index] if index < len(REFS) else BAD_REFS[index - len(REFS)]


def _verdict(problem: bool) -> str:
    return "reject" if problem else "apply"


class Materializer:
    """Turns symbolic steps into concrete events, folding as it goes to resolve UUIDs."""

    def __init__(self) -> None:
        self.state = BuildState(strict=True)
        self.seq = 0
        self.ts = T0
        self.entries: list[Entry] = []
        self.seen_uuids: list[str] = []  # every instance UUID ever created, dropped ones included

    def run(self, steps: Sequence[Step]) -> list[Entry]:
        for act, delta, gap in steps:
            self.ts += delta
            self.seq += gap
            self._emit(getattr(self, f"_{act[0]}")(*act[1:]), act)
        return self.entries

    def _emit(self, built: tuple[pb.Event | bytes, str | None], act: Action) -> None:
        """Append one event at the current seq and fold it, so the next step sees its effect."""
        item, expect = built
        if isinstance(item, bytes):
            entry = Entry(self.seq, item, None, expect, act)
        else:
            entry = Entry(self.seq, item.SerializeToString(), item, expect, act)
        apply_entry(self.state, entry)
        self.entries.append(entry)
        known = set(self.seen_uuids)
        self.seen_uuids.extend(uuid for uuid in self.state.instances if uuid not in known)

    def _next(self) -> None:
        """Move to the next event of a multi-event step."""
        self.seq += 1
        self.ts += 1

    # --- helpers
    def _wrap(self, payload: Any, source: pb.EventSource | None = None) -> pb.Event:
        return envelope(payload, source=source, timestamp_ms=self.ts, event_id=f"evt-{self.seq}")

    def _buildable(self, taken: Sequence[str] = ()) -> list[str]:
        """Canonical instances a job run may be buffered for, except those already `taken`."""
        state = self.state
        return [
            uuid
            for ref in REFS
            if (uuid := state.canonical.get(ref)) is not None
            and state.instances[uuid].state in BUILDABLE_INSTANCE_STATES
            and uuid not in taken
        ]

    def _uuid(self, handle: tuple[str, int], taken: Sequence[str] = ()) -> str:
        """Resolve a UUID handle; "buildable" avoids the UUIDs already `taken` by the same event."""
        mode, pick = handle
        state = self.state
        if mode == "buildable":
            buildable = self._buildable(taken)
            if buildable:
                return buildable[pick % len(buildable)]
            mode = "canon"
        if mode == "recent":  # the canonical instance that most recently became Live
            live = [state.instances[u] for u in state.canonical.values()]
            live = [i for i in live if i.state == InstanceState.LIVE]
            if live:
                return max(live, key=lambda i: i.updated_seq).uuid
            mode = "known"
        if mode == "live":
            live = [u for u in state.canonical.values() if state.instances[u].state == InstanceState.LIVE]
            live += [u for u, i in state.instances.items() if i.superseded_seq and i.state == InstanceState.LIVE]
            if live and pick % 8:  # now and then a non-Live one, which is a valid input too
                return live[pick % len(live)]
            mode = "known"
        if mode == "canon":
            ref = REFS[pick % len(REFS)]
            return state.canonical.get(ref) or instance_uuid(10**9 + pick, ref)
        if mode == "known" and self.seen_uuids:
            return self.seen_uuids[pick % len(self.seen_uuids)]
        return GARBAGE_UUIDS[pick % len(GARBAGE_UUIDS)]

    def _id(self, handle: IdHandle, pool: Sequence[str], active: list[str], used: dict[str, Any]) -> str:
        """Resolve an id handle against the ids in use and the active (non-terminal) ones."""
        mode, pick = handle
        if mode == "bad":
            return BAD_IDS[pick]
        if mode == "fresh":
            unused = [candidate for candidate in pool if candidate not in used]
            return unused[0] if unused else pool[0]
        if mode == "active" and active:
            return active[pick % len(active)]
        if mode == "active" and used:  # none active: an existing one (terminal, so a rejection)
            return list(used)[pick % len(used)]
        return pool[pick % len(pool)]

    def _want_id(self, handle: IdHandle) -> str:
        wants = self.state.wants
        return self._id(handle, WANT_IDS, [k for k, w in wants.items() if w.tally is not None], wants)

    def _run_id(self, handle: IdHandle) -> str:
        runs = self.state.job_runs
        return self._id(handle, RUN_IDS, [k for k, r in runs.items() if r.state in ACTIVE_RUN_STATES], runs)

    def _active_run(self, run_id: str) -> JobRun | None:
        run = self.state.job_runs.get(run_id)
        return run if run is not None and run.state in ACTIVE_RUN_STATES else None

    def _inputs_bad(self, inputs: Sequence[str], built: Sequence[str]) -> bool:
        """Whether a success must be rejected for these inputs: unknown, duplicated or self-built."""
        unusable = any(uuid not in self.state.instances or uuid in built for uuid in inputs)
        return unusable or len(set(inputs)) != len(inputs)

    # --- one builder per action kind: (event or raw bytes, expected verdict)
    def _want(
        self,
        id_handle: IdHandle,
        ref_idxs: list[int],
        ttl: int,
        sla: int,
        data_back: int | None,
        parent_handle: IdHandle | None,
        root_mode: str,
        source_kind: int,
    ) -> tuple[pb.Event, str | None]:
        want_id = self._want_id(id_handle)
        refs = [_ref(i) for i in ref_idxs]
        parent_id = "" if parent_handle is None else self._want_id(parent_handle)
        parent = self.state.wants.get(parent_id)
        if root_mode == "explicit":
            root = parent.root_want_id if parent is not None else want_id
        else:
            root = "wrong-root" if root_mode == "wrong" else ""
        data_ts = 0 if data_back is None else (-1 if data_back < 0 else self.ts - data_back)
        msg = pb.WantCreate(
            want_id=want_id,
            partition_refs=refs,
            ttl_seconds=ttl,
            sla_seconds=sla,
            data_timestamp_ms=data_ts,
            comment="generated",
            parent_want_id=parent_id,
            root_want_id=root,
        )
        sources = (None, manual("alice"), from_job_run(RUN_IDS[0]), system("orchestrator"))
        bad = (
            want_id in BAD_IDS
            or want_id in self.state.wants
            or not refs
            or any(i >= len(REFS) for i in ref_idxs)
            or len(set(refs)) != len(refs)
            or min(ttl, sla, data_ts) < 0
            or (bool(parent_id) and parent is None)
            or root_mode == "wrong"
        )
        return self._wrap(msg, sources[source_kind]), _verdict(bad)

    def _buffer(
        self, id_handle: IdHandle, labeled: bool, handles: list[tuple[str, int]]
    ) -> tuple[pb.Event, str | None]:
        run_id = self._run_id(id_handle)
        uuids: list[str] = []
        for handle in handles:
            if handle[0] == "buildable" and uuids and not self._buildable(uuids):
                continue  # no other buildable instance: build fewer
            uuids.append(self._uuid(handle, uuids))
        msg = pb.JobRunBuffer(job_run_id=run_id, job_label="job/daily" if labeled else "", instance_uuids=uuids)
        instances = [self.state.instances.get(uuid) for uuid in uuids]
        bad = (
            run_id in BAD_IDS
            or run_id in self.state.job_runs
            or not labeled
            or not uuids
            or len(set(uuids)) != len(uuids)
            or any(i is None or i.superseded_seq or i.state not in BUILDABLE_INSTANCE_STATES for i in instances)
        )
        return self._wrap(msg), _verdict(bad)

    def _build(
        self,
        handles: list[tuple[str, int]],
        input_handles: list[tuple[str, int]],
        heartbeat: bool,
        outcome: str,
        missing_idxs: list[int],
        want_idxs: list[int],
    ) -> tuple[pb.Event, str | None]:
        fresh: IdHandle = ("fresh", 0)
        if not self._buildable():  # a want arrives first, as it would before the orchestrator acts
            self._emit(self._want(fresh, want_idxs, 0, 0, None, None, "derived", 1), ("build/want",))
            self._next()
        self._emit(self._buffer(fresh, True, handles), ("build/buffer",))
        run_id = self.entries[-1].event.job_run_buffer.job_run_id  # type: ignore[union-attr]
        handle: IdHandle = ("pool", RUN_IDS.index(run_id))
        if heartbeat:
            self._next()
            self._emit(self._heartbeat(handle), ("build/heartbeat",))
        self._next()
        if outcome == "success":
            return self._success(handle, input_handles, "none", 0)
        if outcome == "success/chain":
            self._emit(self._success(handle, input_handles, "none", 0), ("build/success",))
            self._next()
            return self._build([("buildable", missing_idxs[0])], [("recent", 0)], False, "success", [0], want_idxs)
        if outcome in ("retryable", "permanent"):
            error_class = pb.ERROR_CLASS_PERMANENT if outcome == "permanent" else pb.ERROR_CLASS_RETRYABLE
            return self._failure(handle, error_class, 0)
        if outcome.startswith("missing"):
            missing_idxs = self._pending_refs(run_id, missing_idxs)
            missing = self._missing(handle, missing_idxs)
            if outcome == "missing":
                return missing
            # "missing/<outcome>": a second run then builds the first missing ref with <outcome>.
            self._emit(missing, ("build/missing",))
            self._next()
            current = self.state.canonical_instance(REFS[missing_idxs[0]])
            if current is None or current.state not in BUILDABLE_INSTANCE_STATES:
                # A derivative want asks for the missing ref (a fresh instance if it had failed).
                derivative = self._want(fresh, missing_idxs[:1], 0, 0, None, ("active", 0), "derived", 2)
                self._emit(derivative, ("build/derivative want",))
                self._next()
            upstream = [("canon", missing_idxs[0])]
            return self._build(upstream, [], False, outcome.removeprefix("missing/"), [0], want_idxs)
        return self._heartbeat(handle)

    def _pending_refs(self, run_id: str, ref_idxs: list[int]) -> list[int]:
        """Mostly remap `ref_idxs` to refs wanted but not built yet (not the run's own), so that later
        steps build or fail what the run waits for."""
        run = self._active_run(run_id)
        own = {self.state.instances[u].ref for u in run.instance_uuids} if run is not None else set()
        pending = [REFS.index(ref) for u in self._buildable() if (ref := self.state.instances[u].ref) not in own]
        if not pending or ref_idxs[0] % 4 == 0:
            return ref_idxs
        remapped = [pending[i % len(pending)] for i in ref_idxs]
        return sorted(set(remapped), key=remapped.index)

    def _heartbeat(self, id_handle: IdHandle) -> tuple[pb.Event, str | None]:
        run_id = self._run_id(id_handle)
        return self._wrap(pb.JobRunHeartbeat(job_run_id=run_id)), _verdict(self._active_run(run_id) is None)

    def _success(
        self, id_handle: IdHandle, input_handles: list[tuple[str, int]], outputs_mode: str, pick: int
    ) -> tuple[pb.Event, str | None]:
        run_id = self._run_id(id_handle)
        run = self._active_run(run_id)
        built = run.instance_uuids if run is not None else ()
        inputs = [self._uuid(handle) for handle in input_handles]
        msg = pb.JobRunSuccess(job_run_id=run_id, input_instance_uuids=inputs)
        bad = run is None or self._inputs_bad(inputs, built)
        if outputs_mode == "all":
            for n, uuid in enumerate(built):
                output = msg.outputs.add(
                    instance_uuid=uuid, location=LOCATIONS[(pick + n) % 3], row_count=pick, bytes=pick * 64
                )
                if (pick + n) % 2:
                    output.metadata.update({"format": "parquet", "codec": "zstd"})
        elif outputs_mode == "own_inputs" and built:
            own = [self._uuid(("known", pick)), self._uuid(("canon", pick + 1))]
            msg.outputs.add(instance_uuid=built[pick % len(built)], input_instance_uuids=own)
            bad = bad or self._inputs_bad(own, built)
        elif outputs_mode == "invalid":
            variant = pick % 3
            if variant == 0 or not built:  # output for an instance the run does not build
                msg.outputs.add(instance_uuid=GARBAGE_UUIDS[pick % len(GARBAGE_UUIDS)])
            elif variant == 1:  # negative size
                msg.outputs.add(instance_uuid=built[0], row_count=-1)
            else:  # the same output twice
                msg.outputs.add(instance_uuid=built[0])
                msg.outputs.add(instance_uuid=built[0])
            bad = True
        return self._wrap(msg, from_job_run(run_id)), _verdict(bad)

    def _failure(self, id_handle: IdHandle, error_class: int, retry_after_ms: int) -> tuple[pb.Event, str | None]:
        run_id = self._run_id(id_handle)
        msg = pb.JobRunFailure(
            job_run_id=run_id, error_class=error_class, message="exit 1", retry_after_ms=retry_after_ms
        )
        return self._wrap(msg), _verdict(self._active_run(run_id) is None or retry_after_ms < 0)

    def _cancel_run(self, id_handle: IdHandle) -> tuple[pb.Event, str | None]:
        run_id = self._run_id(id_handle)
        msg = pb.JobRunCancel(job_run_id=run_id, reason="operator")
        return self._wrap(msg), _verdict(self._active_run(run_id) is None)

    def _missing(self, id_handle: IdHandle, ref_idxs: list[int]) -> tuple[pb.Event, str | None]:
        run_id = self._run_id(id_handle)
        run = self._active_run(run_id)
        refs = [_ref(i) for i in ref_idxs]
        own = {self.state.instances[uuid].ref for uuid in run.instance_uuids} if run is not None else set()
        bad = (
            run is None
            or not refs
            or any(i >= len(REFS) for i in ref_idxs)
            or len(set(refs)) != len(refs)
            or bool(own.intersection(refs))
        )
        return self._wrap(pb.JobRunMissingDeps(job_run_id=run_id, missing_refs=refs)), _verdict(bad)

    def _taint(self, target: int | tuple[str, int], only_this: bool) -> tuple[pb.Event, str | None]:
        if isinstance(target, tuple):
            state = self.state
            live = [r for r in REFS if _is_live(state, r)]
            if target[0] == "upstream":  # a cascade: some consumer is canonical and Live
                linked = [
                    r
                    for r in live
                    for c in state.instances[state.canonical[r]].consumers or ()
                    if _is_live(state, state.instances[c].ref) and state.canonical[state.instances[c].ref] == c
                ]
            else:
                linked = [r for r in live if state.instances[state.canonical[r]].inputs]
            candidates = linked or live or list(REFS)
            target = REFS.index(candidates[target[1] % len(candidates)])
        index = target
        ref = _ref(index)
        current = self.state.canonical_instance(ref) if index < len(REFS) else None
        msg = pb.PartitionTaint(partition_ref=ref, reason="bad data", only_this_ref=only_this)
        return self._wrap(msg), _verdict(current is None or current.state != InstanceState.LIVE)

    def _observe(self, index: int, location_idx: int, rows: int) -> tuple[pb.Event, str | None]:
        ref = _ref(index)
        location = LOCATIONS[location_idx] if location_idx < len(LOCATIONS) else ""
        current = self.state.canonical_instance(ref) if index < len(REFS) else None
        msg = pb.PartitionObserved(partition_ref=ref, location=location, row_count=rows, bytes=max(rows, 0))
        bad = (
            index >= len(REFS)
            or not location
            or rows < 0
            or (
                current is not None
                and (
                    current.state in (InstanceState.BUILDING, InstanceState.UPSTREAM_BUILDING)
                    or (current.state == InstanceState.LIVE and current.location == location)
                )
            )
        )
        return self._wrap(msg), _verdict(bad)

    def _cancel_want(self, id_handle: IdHandle) -> tuple[pb.Event, str | None]:
        want_id = self._want_id(id_handle)
        want = self.state.wants.get(want_id)
        msg = pb.WantCancel(want_id=want_id, reason="no longer needed")
        return self._wrap(msg), _verdict(want is None or want.tally is None)

    def _retention(self, back: int) -> tuple[pb.Event, str | None]:
        cutoff = self.seq - back
        msg = pb.InstanceRetention(drop_superseded_created_before_seq=cutoff)
        return self._wrap(msg), _verdict(cutoff <= 0)

    def _bytes(self, blob: bytes) -> tuple[bytes, str | None]:
        return blob, None  # random bytes may well parse as some Event

    def _mutate(self, pick: int, position: int, flip: int) -> tuple[bytes, str | None]:
        built = [entry.payload for entry in self.entries if entry.event is not None and entry.payload]
        if not built:
            return b"\xff", "reject"
        payload = bytearray(built[pick % len(built)])
        payload[position % len(payload)] ^= flip
        return bytes(payload), None

    def _repeat(self, pick: int) -> tuple[bytes, str | None]:
        """The same payload appended again (a writer retrying after a lost acknowledgement)."""
        if not self.entries:
            return b"", "reject"  # an empty payload parses as an Event without payload
        return self.entries[pick % len(self.entries)].payload, None

    def _empty(self) -> tuple[pb.Event, str | None]:
        return pb.Event(event_id=f"evt-{self.seq}", timestamp_ms=self.ts), "reject"

    def _future(self) -> tuple[bytes, str | None]:
        event_msg = pb.Event(event_id=f"evt-{self.seq}", timestamp_ms=self.ts)
        return event_msg.SerializeToString() + FUTURE_FIELD, "reject"


def materialize(steps: Sequence[Step]) -> list[Entry]:
    """The fixed log for these symbolic steps."""
    return Materializer().run(steps)


def apply_entry(state: BuildState, entry: Entry, scratch: pb.Event | None = None) -> str | None:
    """Fold one entry: the Event object when there is one, else (or with a scratch) the stored bytes."""
    if entry.event is not None and scratch is None:
        return state.apply(entry.seq, entry.event)
    return state.apply_payload(entry.seq, entry.payload, scratch)


def replay(entries: Sequence[Entry], state: BuildState | None = None, *, via_bytes: bool = False) -> BuildState:
    """Fold entries into `state` (a fresh strict one by default)."""
    if state is None:
        state = BuildState(strict=True)
    scratch = pb.Event() if via_bytes else None
    for entry in entries:
        apply_entry(state, entry, scratch)
    return state


# ----------------------------------------------------------------------------- state comparison


def _plain(value: Any) -> Any:
    """A comparable deep copy: records as tuples, dicts as ordered item tuples (order matters)."""
    if isinstance(value, Instance | Want | JobRun | Rejection):
        return (type(value).__name__, tuple(_plain(v) for v in value.__getstate__()))
    if isinstance(value, dict):
        return ("dict", tuple((k, _plain(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("list", tuple(_plain(v) for v in value))
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, IntEnum):
        return (type(value).__name__, int(value))
    assert value is None or isinstance(value, str | int | float | bytes), type(value)
    return value


def state_view(state: BuildState) -> dict[str, Any]:
    """Every attribute of the state (entities, derived indexes, counters) as comparable plain data."""
    return {name: _plain(value) for name, value in vars(state).items()}


# ----------------------------------------------------------------------------- invariants


def check_unchanged_but_rejection(
    before: bytes, state: BuildState, head: int, rejection_count: int, action: Action
) -> None:
    """Assert `state` equals the pickled `before` once head_seq and the new rejection are rolled back."""
    applied_head, rejections = state.head_seq, state.rejections
    state.head_seq, state.rejections = head, rejections[:rejection_count]
    try:
        rolled_back = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
        if rolled_back != before:  # the same object graph pickles to the same bytes; else compare values
            assert state_view(state) == state_view(pickle.loads(before)), f"rejected {action} changed the state"
    finally:
        state.head_seq, state.rejections = applied_head, rejections


_I = InstanceState
# Every instance state change one applied event may make (a new instance starts Missing or Live).
INSTANCE_TRANSITIONS: dict[InstanceState, frozenset[InstanceState]] = {
    _I.MISSING: frozenset({_I.BUILDING, _I.LIVE}),
    # Tainted: it succeeded, but an input it read was tainted or replaced by new data while it ran.
    _I.BUILDING: frozenset({_I.LIVE, _I.FAILED, _I.UP_FOR_RETRY, _I.MISSING, _I.UPSTREAM_BUILDING, _I.TAINTED}),
    _I.UPSTREAM_BUILDING: frozenset({_I.MISSING, _I.UPSTREAM_FAILED}),
    _I.UP_FOR_RETRY: frozenset({_I.BUILDING, _I.LIVE}),
    _I.LIVE: frozenset({_I.TAINTED}),
    _I.FAILED: frozenset(),
    _I.UPSTREAM_FAILED: frozenset(),
    _I.TAINTED: frozenset(),
}
RUN_TRANSITIONS: dict[JobRunState, frozenset[JobRunState]] = {
    JobRunState.QUEUED: frozenset(JobRunState) - {JobRunState.QUEUED},
    JobRunState.RUNNING: frozenset(JobRunState) - ACTIVE_RUN_STATES,
}


@dataclass(frozen=True)
class Marks:
    """The lifecycle fields of every entity, to compare across one event."""

    instances: dict[str, tuple[InstanceState, int]]  # uuid -> (state, superseded_seq)
    wants: dict[str, tuple[WantState, int]]  # want_id -> (state, updated_seq)
    runs: dict[str, tuple[JobRunState, int]]  # job_run_id -> (state, updated_seq)


def marks(state: BuildState) -> Marks:
    return Marks(
        {u: (i.state, i.superseded_seq) for u, i in state.instances.items()},
        {k: (w.state, w.updated_seq) for k, w in state.wants.items()},
        {k: (r.state, r.updated_seq) for k, r in state.job_runs.items()},
    )


def check_transitions(before: Marks, state: BuildState, seq: int, kind: str | None) -> None:
    """Assert that the applied event at `seq` (of payload `kind`) moved entities only along allowed edges."""
    for uuid, (old, superseded_seq) in before.instances.items():
        inst = state.instances.get(uuid)
        if inst is None:
            assert kind == "instance_retention" and superseded_seq, f"{kind} dropped {uuid} ({old.name})"
            continue
        if inst.state != old:
            assert inst.state in INSTANCE_TRANSITIONS[old], f"{kind}: {inst.ref!r} went {old.name}->{inst.state.name}"
            assert inst.updated_seq == seq
        if superseded_seq:
            assert inst.superseded_seq == superseded_seq, "superseded twice"
    for uuid, inst in state.instances.items():
        if uuid not in before.instances:
            assert inst.created_seq == seq and inst.state in (_I.MISSING, _I.LIVE), f"{kind} created {inst}"
    for want_id, (old_state, old_seq) in before.wants.items():
        want = state.wants[want_id]
        if old_state in TERMINAL_WANT_STATES:
            assert (want.state, want.updated_seq) == (old_state, old_seq), f"terminal want {want_id} changed"
        elif want.state != old_state:
            assert want.updated_seq == seq
    assert kind == "want_create" or len(state.wants) == len(before.wants)
    for run_id, (old_run_state, old_seq) in before.runs.items():
        run = state.job_runs[run_id]
        if run.state != old_run_state:
            moved = f"{run_id}: {old_run_state.name}->{run.state.name}"
            assert run.state in RUN_TRANSITIONS.get(old_run_state, ()), moved
            assert run.updated_seq == seq
        elif old_run_state not in ACTIVE_RUN_STATES:
            assert run.updated_seq == old_seq
    assert len(state.job_runs) == len(before.runs) + (kind == "job_run_buffer")


def check_taint_outcome(state: BuildState, seq: int, msg: pb.PartitionTaint) -> None:
    """After an applied taint: the ref's Live instance was replaced; cascades reached every Live consumer."""
    fresh = state.instances[state.canonical[msg.partition_ref]]
    assert fresh.state == InstanceState.MISSING and fresh.created_seq == seq
    first = state.instances[fresh.previous_uuid or ""]
    tainted = [i for i in state.instances.values() if i.state == InstanceState.TAINTED and i.updated_seq == seq]
    assert first in tainted
    for instance in tainted:
        assert instance.superseded_seq == seq and instance.note
        if msg.only_this_ref:
            assert instance is first, f"only_this_ref taint reached {instance.ref!r}"
            continue
        for uuid in instance.consumers or ():
            consumer = state.instances[uuid]
            assert consumer.superseded_seq or consumer.state != InstanceState.LIVE, (
                f"consumer {consumer.ref!r} of tainted {instance.ref!r} is still canonical and Live"
            )


def check_invariants(state: BuildState) -> None:
    """Assert the fold's structural invariants; each holds after every event, applied or rejected."""
    instances, wants, runs, canonical = state.instances, state.wants, state.job_runs, state.canonical

    # Canonical pointers: exactly the instances with superseded_seq == 0, one per ref.
    for ref, uuid in canonical.items():
        assert uuid in instances, f"canonical {ref!r} -> unknown {uuid}"
        assert instances[uuid].ref == ref
        assert instances[uuid].superseded_seq == 0
    assert sorted(state.superseded) == sorted(u for u, i in instances.items() if i.superseded_seq)
    assert len(set(state.superseded)) == len(state.superseded)

    upstream_building = InstanceState.UPSTREAM_BUILDING
    for uuid, inst in instances.items():
        assert inst.uuid == uuid
        assert uuid == instance_uuid(inst.created_seq, inst.ref), "UUID not derived from the log position"
        assert inst.created_seq <= inst.updated_seq <= state.head_seq
        is_canonical = canonical.get(inst.ref) == uuid
        assert is_canonical == (inst.superseded_seq == 0), f"{inst} canonical={is_canonical}"
        if inst.superseded_seq:
            assert inst.created_seq < inst.superseded_seq <= state.head_seq
        if inst.state in (InstanceState.BUILDING, upstream_building):
            assert is_canonical, f"{inst.state.name} instance is not canonical: {inst}"
        if inst.state == InstanceState.TAINTED:
            assert not is_canonical, f"canonical instance is tainted: {inst}"
        if inst.state == upstream_building:
            assert inst.waiting_on, f"UpstreamBuilding without upstreams: {inst}"
            assert inst.ref not in inst.waiting_on
            for ref in inst.waiting_on:
                assert uuid in state.waiters.get(ref, {}), f"{uuid} waits on {ref!r} but is not indexed"
                assert not _is_live(state, ref), f"{uuid} waits on {ref!r}, which is Live"
        else:
            assert inst.waiting_on is None, f"{inst.state.name} instance keeps waiting_on: {inst}"
        previous = instances.get(inst.previous_uuid) if inst.previous_uuid else None
        if previous is not None:
            assert previous.ref == inst.ref
            assert previous.superseded_seq == inst.created_seq
        if inst.built_by is not None:
            builder = runs[inst.built_by]
            assert builder.state == JobRunState.SUCCEEDED and uuid in builder.instance_uuids
        if inst.state == InstanceState.BUILDING:
            attempts = [run.job_run_id for run in attempts_for(state, uuid)]
            active = [run_id for run_id in attempts if runs[run_id].state in ACTIVE_RUN_STATES]
            assert attempts and active == [attempts[-1]], f"Building {uuid} has active runs {active}"

    # A canonical instance that failed in the latest event left nothing waiting for its ref.
    for ref, uuid in canonical.items():
        inst = instances[uuid]
        if inst.updated_seq == state.head_seq and inst.state in (InstanceState.FAILED, InstanceState.UPSTREAM_FAILED):
            assert not state.waiting_for(ref), f"{ref!r} failed but {state.waiting_for(ref)} still wait for it"

    # Waiter index: exactly the UpstreamBuilding instances, under each ref they wait on.
    for ref, waiters in state.waiters.items():
        assert waiters, f"empty waiter set left for {ref!r}"
        for uuid in waiters:
            assert instances[uuid].state == upstream_building and ref in (instances[uuid].waiting_on or ())

    # Per-state counters equal a recount.
    recounts = (
        (state.instance_counts, _recount((i.state for i in instances.values()), InstanceState)),
        (state.want_counts, _recount((w.state for w in wants.values()), WantState)),
        (state.run_counts, _recount((r.state for r in runs.values()), JobRunState)),
    )
    for kept, recount in recounts:
        assert kept == recount, f"per-state counts {kept} != recount {recount}"

    # Job runs: active ones build canonical Building instances; indexes are inverses.
    by_instance: dict[str, tuple[str, ...]] = {}
    for run in sorted(runs.values(), key=lambda r: r.created_seq):
        assert run.created_seq <= run.updated_seq <= state.head_seq
        if run.state in ACTIVE_RUN_STATES:
            for uuid in run.instance_uuids:
                inst = instances[uuid]
                assert inst.state == InstanceState.BUILDING and not inst.superseded_seq, f"{run} -> {inst}"
        if run.state == JobRunState.QUEUED:
            assert run.last_heartbeat_ms == 0
        if run.state == JobRunState.DEP_MISS:
            assert run.missing_refs
        assert (run.error_class is not None) == (run.state == JobRunState.FAILED)
        for uuid in run.instance_uuids:
            by_instance[uuid] = (*by_instance.get(uuid, ()), run.job_run_id)
    consumers: dict[str, Counter[str]] = {}
    for uuid, inst in instances.items():
        for input_uuid in inst.inputs:
            consumers.setdefault(input_uuid, Counter())[uuid] += 1
    by_age = sorted(runs.values(), key=lambda r: r.created_seq)
    active_runs = [r.job_run_id for r in by_age if r.state in ACTIVE_RUN_STATES]
    assert list(state.active_run_ids) == active_runs
    for uuid, inst in instances.items():
        assert inst.attempts == by_instance.get(uuid, ()), f"attempts of {uuid}"
        assert inst.consumers is None or inst.consumers, "empty consumer list kept"
        assert Counter(inst.consumers or ()) == consumers.get(uuid, Counter()), f"consumers of {uuid}"

    # Wants.
    wants_by_ref: dict[str, list[str]] = {}
    active_by_ref: dict[str, set[str]] = {}
    heap_entries = set(state.expiry)
    for want in sorted(wants.values(), key=lambda w: w.created_seq):
        for ref in want.refs:
            wants_by_ref.setdefault(ref, []).append(want.want_id)
        assert want.created_seq <= want.updated_seq <= state.head_seq
        is_active = want.tally is not None
        assert is_active == (want.state not in TERMINAL_WANT_STATES), f"{want}"
        expires_at = want.expires_at_ms
        if is_active:
            assert want.tally is not None  # for the type checker
            recount = [0] * len(InstanceState)
            for ref in want.refs:
                recount[instances[canonical[ref]].state] += 1
            assert want.tally == recount, f"{want.want_id}: tally {want.tally} != recount {recount}"
            assert want.state == derive_want_state(recount, len(want.refs))
            for ref in want.refs:
                active_by_ref.setdefault(ref, set()).add(want.want_id)
            if expires_at is not None:
                assert expires_at > state.clock_ms, f"{want.want_id} should have expired at {expires_at}"
                assert (expires_at, want.created_seq, want.want_id) in heap_entries
        if want.state == WantState.EXPIRED:
            assert expires_at is not None and expires_at <= state.clock_ms
        if want.state == WantState.SUCCESSFUL:
            assert len(want.satisfied_by) == len(want.refs)
            for ref, uuid in zip(want.refs, want.satisfied_by, strict=True):
                if uuid in instances:
                    assert instances[uuid].ref == ref and instances[uuid].created_seq <= want.updated_seq
        else:
            assert want.satisfied_by == ()
        assert (want.cancel_reason is not None) == (want.state == WantState.CANCELED)
        if want.parent_want_id is None:
            assert want.root_want_id == want.want_id
        else:
            parent = wants[want.parent_want_id]
            assert want.root_want_id == parent.root_want_id
            assert want.want_id in (parent.children or [])
            assert parent.created_seq < want.created_seq
        children = want.children or []
        assert [wants[c].parent_want_id for c in children] == [want.want_id] * len(children)
        assert len(set(children)) == len(children)
        if want.state == WantState.CANCELED:  # canceling a want cancels its active derivative wants
            for child in children:
                if wants[child].created_seq < want.updated_seq:
                    assert wants[child].tally is None, f"{child} outlived its canceled parent {want.want_id}"
    assert state.wants_by_ref == wants_by_ref
    assert {ref: set(ids) for ref, ids in state.active_wants_by_ref.items()} == active_by_ref
    assert all(state.active_wants_by_ref.values())
    heap = state.expiry
    assert all(heap[(i - 1) // 2] <= heap[i] for i in range(1, len(heap))), "expiry heap is not a heap"


def _is_live(state: BuildState, ref: str) -> bool:
    uuid = state.canonical.get(ref)
    return uuid is not None and state.instances[uuid].state == InstanceState.LIVE


def _recount(states: Any, enum: type[IntEnum]) -> list[int]:
    counts = [0] * len(enum)
    for value in states:
        counts[value] += 1
    return counts


# ----------------------------------------------------------------------------- properties

# About 5 s each on a 2-core machine; the logs are long, so one example exercises many lifecycles.
FAST = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


@FAST
@given(steps=steps_strategy, data=st.data())
def test_replays_agree_and_snapshot_plus_tail_equals_full_replay(steps: list[Step], data: st.DataObject) -> None:
    """Strict replay never raises; replays agree; snapshots (one or two, chained) + tail agree."""
    materializer = Materializer()
    entries = materializer.run(steps)
    full = replay(entries)
    via_bytes = replay(entries, via_bytes=True)
    digest = state_digest(full)
    assert state_digest(via_bytes) == digest
    assert state_digest(materializer.state) == digest
    view = state_view(full)
    assert state_view(via_bytes) == view
    assert state_view(materializer.state) == view

    # Clamped rather than bounded by len(entries), so dropping a step while shrinking keeps the draws valid.
    first = min(data.draw(st.integers(0, 200), label="snapshot after entry"), len(entries))
    second = min(first + data.draw(st.integers(0, 200), label="entries until a second snapshot"), len(entries))
    state = decode_state(encode_state(replay(entries[:first])))
    state = decode_state(encode_state(replay(entries[first:second], state)))
    resumed = replay(entries[second:], state, via_bytes=True)
    assert state_digest(resumed) == digest
    assert state_view(resumed) == view


@FAST
@given(steps=steps_strategy)
def test_invariants_hold_and_rejections_change_nothing(steps: list[Step]) -> None:
    """After every event the invariants hold; a rejected event only bumps head_seq and adds its Rejection."""
    entries = materialize(steps)
    state = BuildState(strict=True)
    clock = 0
    applied = rejected = 0
    for entry in entries:
        head, rejection_count = state.head_seq, len(state.rejections)
        before = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
        lifecycle = marks(state)
        reason = apply_entry(state, entry)
        assert state.head_seq == entry.seq
        if reason is None:
            applied += 1
            assert entry.expect != "reject", f"invalid event was applied: {entry.action}"
            assert len(state.rejections) == rejection_count
            parsed = pb.Event.FromString(entry.payload)
            clock = max(clock, parsed.timestamp_ms)
            check_transitions(lifecycle, state, entry.seq, parsed.WhichOneof("payload"))
            if parsed.HasField("partition_taint"):
                check_taint_outcome(state, entry.seq, parsed.partition_taint)
        else:
            rejected += 1
            assert entry.expect != "apply", f"valid event rejected ({reason}): {entry.action}"
            assert reason
            assert len(state.rejections) == rejection_count + 1
            assert state.rejections[-1].seq == entry.seq and state.rejections[-1].reason == reason
            check_unchanged_but_rejection(before, state, head, rejection_count, entry.action)
        assert state.clock_ms == clock
        check_invariants(state)
    event(f"applied events: {min(applied // 10 * 10, 40)}+")
    event(f"rejected events: {min(rejected // 10 * 10, 40)}+")
    for name, count in state.counts()["wants"].items():
        if count:
            event(f"final state has a want {name}")
    if state.dropped_instances:
        event("retention dropped instances")
    if any(i.state == InstanceState.TAINTED for i in state.instances.values()):
        event("an instance was tainted")


@settings(max_examples=200, deadline=None)
@given(blobs=st.lists(st.binary(max_size=64), max_size=20))
def test_random_bytes_never_raise(blobs: list[bytes]) -> None:
    """Arbitrary payloads are applied or rejected, never raise, and replay to the same digest."""
    state = BuildState(strict=True)
    scratch = pb.Event()
    for seq, blob in enumerate(blobs, start=1):
        state.apply_payload(seq, blob, scratch)
        check_invariants(state)
    assert state.head_seq == len(blobs)
    again = replay([Entry(seq, blob, None, None, ()) for seq, blob in enumerate(blobs, start=1)])
    assert state_view(again) == state_view(state)


_SUBPROCESS_REPLAY = """
import pickle, sys
from partbuild.state.fold.build_state import BuildState
from partbuild.state.log.digest import state_digest
for log in pickle.load(sys.stdin.buffer):
    state = BuildState(strict=True)
    for seq, payload in log:
        state.apply_payload(seq, payload)
    print(state_digest(state))
"""


@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(logs=st.lists(steps_strategy, min_size=4, max_size=4))
def test_digest_does_not_depend_on_the_process_or_string_hashing(logs: list[list[Step]]) -> None:
    """Replays in processes with different PYTHONHASHSEEDs give the in-process digests."""
    materialized = [[(e.seq, e.payload) for e in materialize(steps)] for steps in logs]
    expected = [state_digest(replay([Entry(s, p, None, None, ()) for s, p in log])) for log in materialized]
    for hash_seed in ("0", "12345"):
        result = subprocess.run(
            [sys.executable, "-c", _SUBPROCESS_REPLAY],
            input=pickle.dumps(materialized),
            capture_output=True,
            check=False,
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
        )
        assert result.returncode == 0, result.stderr.decode()
        assert result.stdout.decode().split() == expected, f"PYTHONHASHSEED={hash_seed}"


# ----------------------------------------------------------------------------- examples


class Log:
    """A tiny event writer for the example tests: consecutive seqs, a clock that ticks 1 s."""

    def __init__(self) -> None:
        self.state = BuildState(strict=True)
        self.ts = T0

    def add(self, payload: Any, *, advance_ms: int = 1_000) -> str | None:
        self.ts += advance_ms
        seq = self.state.head_seq + 1
        return self.state.apply(seq, envelope(payload, timestamp_ms=self.ts, event_id=f"evt-{seq}"))

    def ok(self, payload: Any, **kwargs: int) -> None:
        reason = self.add(payload, **kwargs)
        assert reason is None, reason
        check_invariants(self.state)

    def uuid(self, ref: str) -> str:
        return self.state.canonical[ref]


A, B, C = REFS[0], REFS[2], REFS[4]


def test_check_invariants_accepts_a_full_lifecycle_and_catches_corruption() -> None:
    """The checker passes on a state with every kind of entity, and fails on each injected corruption."""
    log = Log()
    log.ok(pb.WantCreate(want_id="w", partition_refs=[A, B], ttl_seconds=3600))
    log.ok(pb.JobRunBuffer(job_run_id="r1", job_label="j", instance_uuids=[log.uuid(B)]))
    log.ok(pb.JobRunMissingDeps(job_run_id="r1", missing_refs=[A, C]))
    assert log.state.wants["w"].state == WantState.UPSTREAM_BUILDING
    log.ok(pb.PartitionObserved(partition_ref=A, location=LOCATIONS[0]))
    log.ok(pb.PartitionObserved(partition_ref=C, location=LOCATIONS[0]))
    assert log.state.instances[log.uuid(B)].state == InstanceState.MISSING
    log.ok(pb.JobRunBuffer(job_run_id="r2", job_label="j", instance_uuids=[log.uuid(B)]))
    log.ok(pb.JobRunSuccess(job_run_id="r2", input_instance_uuids=[log.uuid(A), log.uuid(C)]))
    assert log.state.wants["w"].state == WantState.SUCCESSFUL
    log.ok(pb.PartitionTaint(partition_ref=A, reason="bad"))
    assert log.state.instances[log.state.instances[log.uuid(B)].previous_uuid or ""].state == InstanceState.TAINTED
    log.ok(pb.InstanceRetention(drop_superseded_created_before_seq=log.state.head_seq))
    assert log.state.dropped_instances == 2  # the tainted A and B
    log.ok(pb.WantCreate(want_id="w2", partition_refs=[B], ttl_seconds=3600))
    log.ok(pb.JobRunBuffer(job_run_id="r3", job_label="j", instance_uuids=[log.uuid(B)]))
    assert log.state.wants["w2"].state == WantState.BUILDING

    healthy = encode_state(log.state)
    live, missing = InstanceState.LIVE, InstanceState.MISSING
    corruptions = [
        lambda s: s.instance_counts.__setitem__(live, s.instance_counts[live] + 1),
        lambda s: setattr(s.instances[s.canonical[A]], "superseded_seq", 3),
        lambda s: setattr(s.instances[s.canonical[C]], "state", InstanceState.TAINTED),
        lambda s: s.canonical.__setitem__(A, s.canonical[C]),
        lambda s: setattr(s.instances[s.canonical[B]], "attempts", ()),
        lambda s: setattr(s.instances[s.canonical[A]], "consumers", [s.canonical[B]]),
        lambda s: s.wants_by_ref.clear(),
        lambda s: s.wants["w2"].tally.__setitem__(missing, 1),
        lambda s: setattr(s, "clock_ms", s.clock_ms + 3_600_000),  # w2 should have expired
        lambda s: s.active_wants_by_ref.clear(),
    ]
    for corrupt in corruptions:
        state = decode_state(healthy)
        check_invariants(state)
        corrupt(state)
        with pytest.raises(AssertionError):
            check_invariants(state)


def test_rejected_event_with_a_wild_timestamp_expires_nothing() -> None:
    """Only applied events move the clock: an invalid event far in the future leaves TTLs alone."""
    log = Log()
    log.ok(pb.WantCreate(want_id="w", partition_refs=[A], ttl_seconds=60))
    before = state_digest(log.state)
    assert log.add(pb.WantCancel(want_id="ghost"), advance_ms=10**9) is not None
    assert log.state.wants["w"].state == WantState.IDLE
    assert log.state.clock_ms == T0 + 1_000
    check_invariants(log.state)
    assert state_digest(log.state) != before  # head_seq and the rejection are part of the digest
    # The next applied event carries the clock past the TTL: the want expires in that same step.
    log.ok(pb.WantCreate(want_id="w2", partition_refs=[B]), advance_ms=0)
    assert log.state.wants["w"].state == WantState.EXPIRED
    assert log.state.wants["w2"].state == WantState.IDLE


def test_payload_from_a_newer_schema_and_garbage_are_rejections() -> None:
    """Unknown payload types, empty payloads and unparseable bytes become rejections, not errors."""
    state = BuildState(strict=True)
    assert state.apply_payload(1, pb.Event(event_id="e").SerializeToString() + FUTURE_FIELD) is not None
    assert state.apply_payload(2, b"") is not None
    assert state.apply_payload(3, b"\xff\xff\xff") is not None
    bad_utf8 = bytearray(envelope(pb.WantCancel(want_id="abc"), timestamp_ms=1, event_id="e").SerializeToString())
    bad_utf8[-1] = 0xFF
    assert state.apply_payload(4, bytes(bad_utf8)) is not None
    assert [r.event_type for r in state.rejections] == ["none", "none", "unparseable", "unparseable"]
    assert state.clock_ms == 0 and not state.wants and not state.instances
    with pytest.raises(ValueError):
        state.apply_payload(4, b"\xff")


def _build(log: Log, run_id: str, ref: str, inputs: Sequence[str] = ()) -> str:
    """Buffer and succeed one run for `ref`'s canonical instance; returns the instance built."""
    uuid = log.uuid(ref)
    log.ok(pb.JobRunBuffer(job_run_id=run_id, job_label="j", instance_uuids=[uuid]))
    log.ok(pb.JobRunSuccess(job_run_id=run_id, input_instance_uuids=list(inputs)))
    return uuid


def test_cascading_taint_terminates_on_a_provenance_cycle() -> None:
    """Inputs only have to exist, so x can be built from y and y from x; a taint still ends, tainting both."""
    log = Log()
    log.ok(pb.WantCreate(want_id="w", partition_refs=[A, B]))
    x, y = log.uuid(A), log.uuid(B)
    _build(log, "r1", B, [x])  # x is still Missing here: a valid (if odd) input
    _build(log, "r2", A, [y])
    assert log.state.instances[x].consumers == [y] and log.state.instances[y].consumers == [x]
    log.ok(pb.PartitionTaint(partition_ref=A, reason="bad"))
    check_taint_outcome(log.state, log.state.head_seq, pb.PartitionTaint(partition_ref=A))
    assert log.state.instances[x].state == log.state.instances[y].state == InstanceState.TAINTED
    assert log.state.instance_counts[InstanceState.MISSING] == 2  # one fresh instance per ref, not more


def test_cascading_taint_reaches_a_diamond_bottom_once() -> None:
    """A -> B, A -> C, (B, C) -> D: tainting A replaces each of B, C and D exactly once."""
    log = Log()
    d = REFS[6]
    log.ok(pb.WantCreate(want_id="w", partition_refs=[A, B, C, d]))
    a = _build(log, "ra", A)
    b = _build(log, "rb", B, [a])
    c = _build(log, "rc", C, [a])
    _build(log, "rd", d, [b, c])
    head = log.state.head_seq
    log.ok(pb.PartitionTaint(partition_ref=A))
    check_taint_outcome(log.state, head + 1, pb.PartitionTaint(partition_ref=A))
    assert [len(ref_history(log.state, ref)) for ref in (A, B, C, d)] == [2, 2, 2, 2]
    assert all(log.state.instances[log.uuid(ref)].state == InstanceState.MISSING for ref in (A, B, C, d))


def test_want_whose_ttl_passed_before_it_arrived_expires_in_the_same_event() -> None:
    """data_timestamp + ttl already behind the log's clock: applied, then expired at its own seq."""
    log = Log()
    log.ok(pb.WantCreate(want_id="late", partition_refs=[A], ttl_seconds=60, data_timestamp_ms=T0 - 3_600_000))
    want = log.state.wants["late"]
    assert want.state == WantState.EXPIRED and want.updated_seq == want.created_seq == log.state.head_seq
    assert want.tally is None and not log.state.expiry
    assert log.state.want_counts[WantState.EXPIRED] == 1 and sum(log.state.want_counts) == 1
    # Its instance stays, Missing, with no active want left for it.
    assert log.state.instances[log.uuid(A)].state == InstanceState.MISSING
    assert list(log.state.active_wants_for_ref(A)) == []


@pytest.mark.parametrize(
    ("ref", "want_id", "applied"),
    [
        ("x" * 4096, "i" * 256, True),  # both exactly at their limit
        ("é" * 2048, "w", True),  # 4096 bytes of UTF-8 in 2048 characters
        ("😀" * 1024, "w", True),  # 4096 bytes in 1024 characters
        ("é" * 2049, "w", False),  # 4098 bytes: over, although only 2049 characters
        ("x" * 4097, "w", False),
        ("ok", "i" * 257, False),
        ("a\u2028b", "w", True),  # a line separator is not a control character
        ("a\x9fb", "w", False),  # the last C1 control character
    ],
)
def test_ref_and_id_length_limits_are_exact(ref: str, want_id: str, applied: bool) -> None:
    """Limits count UTF-8 bytes for refs and characters for ids; a rejection leaves no trace but itself."""
    log = Log()
    reason = log.add(pb.WantCreate(want_id=want_id, partition_refs=[ref], ttl_seconds=INT64_MAX))
    assert (reason is None) == applied, reason
    assert (ref in log.state.canonical) == applied
    assert len(log.state.rejections) == (not applied)
    check_invariants(log.state)
