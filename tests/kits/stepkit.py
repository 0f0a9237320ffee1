"""Symbolic steps of an event log, for the fold's property tests (tests/state/fold/test_properties.py,
tests/state/rules/test_retention.py).

Hypothesis draws a list of *symbolic* steps (act on want #2, buffer run #1 for
refs #0 and #3, taint ref #5, feed garbage bytes, ...) from small pools so
that ids collide and real lifecycles happen. Instance UUIDs come from the log
position, so `materialize` folds the steps once with a strict BuildState and
resolves each symbolic ref to a concrete UUID (the current canonical one, some
UUID seen earlier, or a garbage one). The resulting log of `Entry`s is fixed;
`replay` folds it again.

Steps mix single events (valid or deliberately broken: bad ids, bad refs,
unknown or garbage UUIDs, negative numbers, no payload, a payload type from a
newer schema, random or bit-flipped bytes, a payload delivered twice) with
multi-event "build" steps (want, buffer, heartbeat, success / failure / dep
miss, derivative want and upstream build) so that deep lifecycles, taint and
upstream-failure cascades, TTL expiry and retention all happen regularly. Each
built event carries the verdict the generator expects ("apply", "reject", or
None when it cannot know).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import ACTIVE_RUN_STATES, BUILDABLE_INSTANCE_STATES, InstanceState, JobRun
from partbuild.state.log.events import envelope, from_job_run, manual, system
from partbuild.state.rules.ids import instance_uuid

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
# replace_instances: set by writers since issue 23 (a fresh instance per ref); unset as in older logs.
cancel_run_action = st.tuples(st.just("cancel_run"), existing_id, st.booleans())
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
# cutoff = this event's seq - n: 0 drops every superseded instance; a huge n makes it non-positive. By when
# an instance stopped being canonical (writers since issue 23) or, as in older logs, by when it was created.
retention_action = st.tuples(
    st.just("retention"),
    weighted((3, st.just(0)), (3, st.integers(1, 40)), (1, st.just(-1)), (1, st.just(10**6))),
    st.booleans(),
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

    def _cancel_run(self, id_handle: IdHandle, replace: bool) -> tuple[pb.Event, str | None]:
        run_id = self._run_id(id_handle)
        msg = pb.JobRunCancel(job_run_id=run_id, reason="operator", replace_instances=replace)
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
            live = [r for r in REFS if is_live(state, r)]
            if target[0] == "upstream":  # a cascade: some consumer is canonical and Live
                linked = [
                    r
                    for r in live
                    for c in state.instances[state.canonical[r]].consumers or ()
                    if is_live(state, state.instances[c].ref) and state.canonical[state.instances[c].ref] == c
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

    def _retention(self, back: int, by_supersession: bool) -> tuple[pb.Event, str | None]:
        cutoff = self.seq - back
        if by_supersession:
            msg = pb.InstanceRetention(drop_superseded_before_seq=cutoff)
        else:
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


def is_live(state: BuildState, ref: str) -> bool:
    """Whether `ref` has a canonical instance and it is Live."""
    uuid = state.canonical.get(ref)
    return uuid is not None and state.instances[uuid].state == InstanceState.LIVE


RAW_PAYLOADS = {"bytes", "mutate", "repeat", "future"}  # steps that store bytes: EventLog.append takes events


def appendable(steps: list[Step]) -> list[Step]:
    """The steps without raw payloads, and without seq gaps (a log has none)."""
    return [(act, delta, 1) for act, delta, _ in steps if act[0] not in RAW_PAYLOADS]


# Histories a log can hold as they are (appended as events): those of the time-travel and state store tests.
appendable_histories = steps_strategy.map(appendable)
