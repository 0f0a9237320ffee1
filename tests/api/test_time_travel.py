"""Time travel against replay: every read as of a seq equals the same read of a state replayed to that seq.

The live side is a `Service` over a database holding the whole log, asked with `as_of_seq=N`. The
oracle is a `Service` over a second database into which the log is copied one event at a time, folded
after each, and asked without `as_of_seq` while it holds exactly N events (it only ever moves forward).
The oracle's clock is the log's clock at its head, so "now" as of N is the time of the log then (SLA
breaches are judged then). The logs: every golden log, a generated W1 history
(tests/kits/timetravelkit.py) and a few random histories (tests/kits/stepkit.py), at every seq from 0
to the head; over HTTP (the app in-process, JSON against JSON) for a sample of seqs.

At each seq the test reads every record the event at that seq or the next one may have changed (so
each version of a record is read at its first and at its last seq), a rotating slice of every id the
log ever names (ids not created yet included: those must be unknown on both sides), ids no log has,
and windows of every list (first pages, pages around what changed, the newest); at a sample of seqs,
every page of every list. A read whose method does not take `as_of_seq` yet is skipped, and the test
prints which. Two tests keep that choice honest: on a small generated history every read whose replayed
answer changes between two seqs is among those chosen at both, and reading the live side one seq off
makes the comparison fail at every seq where something changed.

Equal means equal: the same model, or the same error class with the same message (the live side may
add " as of seq N", which says what it answers about), once the fields a read says of "now" by design
are left out (NOW_FIELDS: where a subscription's deliveries stand, the time a group's heartbeats are
judged at). One exception: an instance that retention has dropped since N may be unanswerable as of N
(it is gone); a 404 or 410 is then accepted, but only where the replayed answer names an instance the
live state no longer holds, or a 410 that names the ref of such an instance (a pointer to it, or a list
filtered by states that needs its state); and an answer may leave out what retention dropped (a consumer,
a lineage node, a run's ref) only where the replayed answer names a dropped instance or its ref.
"""

from __future__ import annotations

import asyncio
import inspect
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, get_args
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from pydantic import BaseModel

from partbuild.api.app import create_app
from partbuild.api.errors import ApiError
from partbuild.api.models.partitions import InstanceStateName
from partbuild.api.models.runs import JobRunStateName
from partbuild.api.models.wants import WantStateName
from partbuild.api.service import Service
from partbuild.api.surface import OPERATIONS
from partbuild.api.surface.common import Marker
from partbuild.api.surface.common import Path as InPath
from partbuild.orchestrator.graph import Graph, GraphError, Job
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.build_state import BuildState
from partbuild.state.store.projector import Projector

from golden_log import GOLDEN_LOGS, read_events
from httpkit import JSON, PROBLEM_JSON
from stepkit import Step, appendable_histories, materialize
from timetravelkit import SMALL_PLAN, Catalog, Key, catalog, w1_history

NOW_MS = 1_800_000_000_000  # the live side's clock ("now", long after every log)
ROTATION = 32  # ids read at each seq besides those that change around it
# A read replica's (`lean`): every id is still read every ~100 seqs of the longest logs, and as it changes;
LEAN_ROTATION = 8
LEAN_LISTS = 4  # and each list's first page every 4th seq, every page of each at every walk
PAGE = 3  # items per page: lists page many times
MAX_PAGES = 5_000  # a list that pages longer than that never ends
WALK_EVERY = 16  # every page of every list at every 16th seq (and the last), on logs longer than that
UNKNOWN: tuple[Key, ...] = (
    ("ref", "no/such/ref"),
    ("uuid", "00000000-0000-0000-0000-000000000000"),
    ("want", "no-such-want"),
    ("run", "no-such-run"),
    ("group", "no-such-group"),
    ("subscription", "no-such-subscription"),
)
DIRECTIONS = ("upstream", "downstream", "both")
GONE = (404, 410)
# What a read says of "now" by design, not of the seq it is as of: where a subscription's deliveries stand
# (the delivery store, now; the wall clock), and the time a group's heartbeat rows (read now) are judged at.
DELIVERIES = frozenset(
    {"lag_events", "lag_seconds", "rq_messages", "dlq_messages", "delivered", "retried", "dead_lettered"}
)
NOW_FIELDS = {"get_subscription": DELIVERIES, "list_subscriptions": DELIVERIES, "group": frozenset({"now_ms"})}
HTTP_ROTATION = 6  # over HTTP, at each sampled seq: a smaller rotating slice,
HTTP_KEYS = 10  # and about this many of the records that change around it
RANDOM_HISTORIES = 5  # examples of the random-history test (fixed: derandomized)


# ----------------------------------------------------------------------------- the two sides


@dataclass
class Sides:
    """The live service (the whole log) and the oracle (the log up to `seq`, copied event by event);
    `folded`: the whole log folded (the live service's state, or, when that is a read replica, its primary's)."""

    live: Service
    oracle: Service
    events: list[pb.Event]
    folded: BuildState
    seq: int = 0

    def advance(self) -> None:
        """Copy the next event into the oracle's database and fold it there."""
        self.oracle.log.append([self.events[self.seq]], expected_head=self.seq)
        self.seq += 1
        assert self.oracle.refresh() == 1

    def seqs(self) -> Iterator[int]:
        """0, 1, ..., the head: the oracle holds exactly that many events at each."""
        yield 0
        while self.seq < len(self.events):
            self.advance()
            yield self.seq


CURRENT_VERSION = "v2"  # every job's code version in the served graph: runs of another recorded one are stale


def versions_graph(events: list[pb.Event]) -> Graph:
    """A graph of the log's job labels (outputs no log names), each at `CURRENT_VERSION`: what stale compares with.
    Labels no graph may have (the fold takes any id, a job's label has no slash) are left out: never stale."""
    labels = sorted({event.job_run_buffer.job_label for event in events if event.HasField("job_run_buffer")})
    jobs = []
    for n, label in enumerate(labels):
        try:
            jobs.append(Job(label, [f"versions-{n}/{{x}}"], _noop, code_version=CURRENT_VERSION))
        except GraphError:
            continue
    return Graph(jobs)


def _noop(ctx: object) -> None:
    """A job body: reads never run it."""


@contextmanager
def sides(
    events: list[pb.Event], folder: Path, snapshot_at: int = 0, projected: bool = True, replica: bool = False
) -> Iterator[Sides]:
    """The two sides; with `snapshot_at`, the live one loads a snapshot of that seq and folds the rest. With
    `projected`, the live side's state store is projected to the head, so the reads it has answer from it;
    with `replica`, the live side is a read replica of that store (`serve --replica`), which folds nothing."""
    with ExitStack() as stack:
        live_db = stack.enter_context(Database.open(f"sqlite:///{folder / 'live.db'}", auto_upgrade=True))
        if snapshot_at:
            live_db.log.append(events[:snapshot_at])
            Service(live_db, snapshot_every=1).stop()  # a server checkpoints when it starts
        if events[snapshot_at:]:
            live_db.log.append(events[snapshot_at:])
        oracle_db = stack.enter_context(Database.open(f"sqlite:///{folder / 'oracle.db'}", auto_upgrade=True))
        graph = versions_graph(events)
        live = Service(live_db, clock=lambda: NOW_MS, graph=graph)
        stack.callback(live.stop)
        if projected:
            assert Projector(live.live, live_db.changes).project() == len(events)
        oracle = Service(oracle_db, graph=graph)
        oracle.clock = lambda: oracle.state.clock_ms  # the time as of its head: the log's clock then
        stack.callback(oracle.stop)
        assert live.state.head_seq == len(events) and live.live.loaded.snapshot_seq == snapshot_at
        if not replica:
            yield Sides(live, oracle, events, live.state)
            return
        reader = Service(live_db, clock=lambda: NOW_MS, graph=graph, replica=True)
        stack.callback(reader.stop)
        assert reader.reads.head_seq == len(events)
        yield Sides(reader, oracle, events, live.state)


# ----------------------------------------------------------------------------- reads


@dataclass(frozen=True)
class Read:
    """One call of a read operation (a method of `Service`, an operation of the HTTP API)."""

    method: str
    args: tuple[tuple[str, Any], ...] = ()
    pages: int = 1  # how many pages of a paged list to follow (0: all)

    def __str__(self) -> str:
        return f"{self.method}({', '.join(f'{name}={value!r}' for name, value in self.args)})"


def paged(method: str, pages: int = 2, cursor: str | None = None, **filters: Any) -> Read:
    args = {**filters, "limit": PAGE, **({"cursor": cursor} if cursor is not None else {})}
    return Read(method, tuple(args.items()), pages)


def lists(labels: list[str]) -> list[Read]:
    """Every list: unfiltered (two pages), and under each filter value (a page)."""
    found = [paged("partitions"), paged("wants"), paged("job_runs"), paged("partitions", 1, prefix="agg/")]
    found += [paged("partitions", 1, state_filter=state) for state in get_args(InstanceStateName)]
    found += [paged("wants", 1, state_filter=state) for state in get_args(WantStateName)]
    found += [paged("job_runs", 1, state_filter=state) for state in get_args(JobRunStateName)]
    found += [paged("partitions", 1, stale_filter=True), paged("partitions", 1, unwanted_filter=True)]
    found += [Read("stale", (("job", label), ("limit", PAGE))) for label in labels]
    return found + [paged("job_runs", 1, job=label) for label in labels]


WHOLE = [
    Read("counts"),
    Read("groups"),
    Read("bucket_layouts"),
    Read("sources"),
    Read("list_subscriptions"),
    Read("automation"),
]


def reads_of(key: Key, log: Catalog, variant: int | None = None, lineage: int | None = None) -> list[Read]:
    """The reads that show one record: all of them, or with a `variant` one lineage and no lists (`lineage`:
    every read but one lineage, that one)."""
    kind, ident = key
    if kind == "ref":
        found = [Read("canonical", (("ref", ident),)), Read("history", (("ref", ident),))]
        return found if variant is not None else [*found, paged("wants", ref=ident)]
    if kind == "uuid":
        lineages = [
            Read("lineage", (("uuid", ident), ("direction", direction), ("depth", depth)))
            for direction in DIRECTIONS
            for depth in (1, 2)
        ]
        turn = variant if variant is not None else lineage
        chosen = lineages if turn is None else [lineages[turn % len(lineages)]]
        return [Read("instance", (("uuid", ident),)), *chosen]
    if kind == "want":
        found = [Read("want", (("want_id", ident),))]
        return found if variant is not None else [*found, paged("wants", root=log.roots.get(ident, ident))]
    if kind == "run":
        return [Read("job_run", (("job_run_id", ident),))]
    if kind == "group":
        return [Read("group", (("name", ident),))]
    return [Read("get_subscription", (("name", ident),))]


def changing(log: Catalog, seq: int) -> set[Key]:
    """What the event at `seq` or the next one changes, and ids no log has."""
    keys = set(log.changed[seq]) | set(UNKNOWN)
    if seq + 1 < len(log.changed):
        keys |= log.changed[seq + 1]
    return keys


def rotating(log: Catalog, seq: int, rotation: int) -> tuple[set[Key], int]:
    """A slice of every id the log names, each id once every `step` seqs; and which turn this is."""
    step = max(1, -(-sum(map(len, log.ids.values())) // rotation))
    keys = {(kind, ident) for kind, ids in log.ids.items() for ident in ids[seq % step :: step]}
    return keys, seq // step


def windows(oracle: Service, keys: set[Key]) -> list[Read]:
    """One page of each list where a changed record is, and the newest page of the creation-ordered lists."""
    state = oracle.state
    found = [paged("partitions", prefix=ident, pages=1) for kind, ident in keys if kind == "ref"]
    for method, kind, table in (("wants", "want", state.wants), ("job_runs", "run", state.job_runs)):
        created = sorted(record.created_seq for record in table.values())
        starts = {created[-PAGE - 1]} if len(created) > PAGE else set()
        for ident in (ident for key_kind, ident in keys if key_kind == kind and ident in table):
            index = created.index(table[ident].created_seq)
            if index:
                starts.add(created[index - 1])
        found += [paged(method, pages=1, cursor=str(start)) for start in starts]
    return found


def reads_at(log: Catalog, oracle: Service, seq: int, *, walk: bool, lean: bool = False) -> list[Read]:
    """Every read of what changes around `seq`, fewer of the rotating slice, windows and pages of the lists.
    `lean` (a read replica's, whose every read opens a transaction of the store and whose filtered lists scan its
    rows: CI time): of an instance that changes, one lineage, turning with the seq; a smaller rotating slice;
    between walks, a quarter of the lists' first pages, turning with the seq."""
    changed = changing(log, seq)
    others, turn = rotating(log, seq, LEAN_ROTATION if lean else ROTATION)
    found = [read for key in sorted(changed) for read in reads_of(key, log, lineage=seq if lean else None)]
    found += [read for key in sorted(others - changed) for read in reads_of(key, log, turn)]
    found += WHOLE + windows(oracle, changed)
    every_list = lists(log.labels)
    if walk:
        return found + [Read(each.method, each.args, 0) for each in every_list]
    return found + (every_list[seq % LEAN_LISTS :: LEAN_LISTS] if lean else every_list)


def walked(seq: int, head: int) -> bool:
    """Whether every page of every list is read at `seq`."""
    return head <= WALK_EVERY or seq % WALK_EVERY == 0 or seq == head


# ----------------------------------------------------------------------------- answers


@dataclass(frozen=True)
class Answer:
    status: int
    kind: str  # "ok", else the error: its class (service) or its title (HTTP)
    body: Any  # the model dumped, the JSON, or the error's message

    def __str__(self) -> str:
        return f"{self.status} {self.kind} {str(self.body)[:1500]}"  # only to report a difference


Ask = Callable[[Read, int | None, str | None], Answer]  # (read, as_of_seq, cursor) -> answer


def dumped(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump()
    if isinstance(value, list):
        return [dumped(item) for item in value]
    return value


def service_asker(service: Service) -> Ask:
    def ask(call: Read, as_of_seq: int | None, cursor: str | None) -> Answer:
        kwargs = dict(call.args)
        if as_of_seq is not None:
            kwargs["as_of_seq"] = as_of_seq
        if cursor is not None:
            kwargs["cursor"] = cursor
        try:
            result = getattr(service, call.method)(**kwargs)
        except ApiError as exc:
            return Answer(exc.status, type(exc).__name__, str(exc))
        return Answer(200, "ok", dumped(result))

    return ask


@cache
def service_takes_as_of(method: str) -> bool:
    return "as_of_seq" in inspect.signature(getattr(Service, method)).parameters


@cache
def http_takes_as_of(method: str) -> bool:
    return any(parameter.name == "as_of_seq" for parameter in OPERATIONS[method].parameters)


class Http:
    """The HTTP app of a service, called in-process (no server, no lifespan: nothing tails the log)."""

    def __init__(self, service: Service) -> None:
        self.runner = asyncio.Runner()
        transport = httpx.ASGITransport(app=create_app(service))
        self.client = httpx.AsyncClient(transport=transport, base_url="http://partbuild.test")

    def close(self) -> None:
        self.runner.run(self.client.aclose())
        self.runner.close()

    def get(self, path: str, query: dict[str, Any]) -> httpx.Response:
        return self.runner.run(self.client.get(path, params=query))


def http_asker(http: Http) -> Ask:
    """Reads through the HTTP API, each request built from the operation's declaration."""

    def ask(call: Read, as_of_seq: int | None, cursor: str | None) -> Answer:
        operation = OPERATIONS[call.method]
        path, query = operation.route, {}
        values = {**dict(call.args), "as_of_seq": as_of_seq, "cursor": cursor}
        for parameter in operation.parameters:
            value = values.get(parameter.name)
            if value is None:
                continue
            marker = next(extra for extra in parameter.annotation.__metadata__ if isinstance(extra, Marker))
            if isinstance(marker, InPath):
                path = path.replace(f"{{{parameter.name}:path}}", quote(value, safe="/"))
                path = path.replace(f"{{{parameter.name}}}", quote(value, safe=""))
            else:
                query[marker.alias or parameter.name] = value
        response = http.get(path, query)
        assert response.status_code < 500, (path, query, response.text)
        body = response.json()
        if response.status_code == 200:
            assert response.headers["content-type"] == JSON, (path, query)
            return Answer(200, "ok", body)
        assert response.headers["content-type"] == PROBLEM_JSON and body["status"] == response.status_code
        return Answer(response.status_code, body["title"], body["detail"])

    return ask


def pages_of(ask: Ask, call: Read, as_of_seq: int | None) -> list[Answer]:
    """The answer, or the pages of a list (following each page's own cursor), as many as `call` says."""
    start = dict(call.args).get("cursor")
    first = Read(call.method, tuple((name, value) for name, value in call.args if name != "cursor"), call.pages)
    answers = [ask(first, as_of_seq, start)]
    while answers[-1].status == 200 and isinstance(answers[-1].body, dict) and "next_cursor" in answers[-1].body:
        cursor = answers[-1].body["next_cursor"]
        if cursor is None or len(answers) == call.pages:
            break
        assert len(answers) < MAX_PAGES, f"{call} as of {as_of_seq}: paging does not end"
        answers.append(ask(first, as_of_seq, cursor))
    return answers


def settled(call: Read, answer: Answer) -> Answer:
    """The answer without what its read says of "now" by design (NOW_FIELDS)."""
    if call.method not in NOW_FIELDS or answer.status != 200:
        return answer
    return Answer(answer.status, answer.kind, without(answer.body, NOW_FIELDS[call.method]))


def without(body: Any, names: frozenset[str]) -> Any:
    if isinstance(body, dict):
        return {key: without(value, names) for key, value in body.items() if key not in names}
    if isinstance(body, list):
        return [without(value, names) for value in body]
    return body


def unseq(body: Any) -> Any:
    """The answer without the seq it says it is as of (which moves at every seq)."""
    return {key: value for key, value in body.items() if key != "as_of_seq"} if isinstance(body, dict) else body


def difference(live: Any, replayed: Any, path: str = "") -> str:
    """Where two answers first differ, as `path: live != replayed`."""
    if isinstance(live, dict) and isinstance(replayed, dict):
        for key in [*live, *(key for key in replayed if key not in live)]:
            if live.get(key, "<absent>") != replayed.get(key, "<absent>"):
                return difference(live.get(key, "<absent>"), replayed.get(key, "<absent>"), f"{path}.{key}")
    if isinstance(live, list) and isinstance(replayed, list):
        for index, (mine, theirs) in enumerate(zip(live, replayed, strict=False)):
            if mine != theirs:
                return difference(mine, theirs, f"{path}[{index}]")
        if len(live) != len(replayed):
            return f"{path}: {len(live)} items != {len(replayed)} items"
    return f"{path or 'the answer'}: {str(live)[:300]} != {str(replayed)[:300]}"


def names_a(body: Any, uuids: frozenset[str]) -> bool:
    """Whether an answer names one of `uuids` anywhere."""
    if isinstance(body, str):
        return body in uuids
    if isinstance(body, dict):
        return any(names_a(value, uuids) for value in body.values())
    if isinstance(body, list):
        return any(names_a(value, uuids) for value in body)
    return False


def refs_with_dropped_instances(state: Any) -> frozenset[str]:
    """Refs one of whose instances retention dropped: a previous instance the state no longer holds."""
    found = set()
    for ref, uuid in state.canonical.items():
        while uuid is not None:
            instance = state.instances.get(uuid)
            if instance is None:
                found.add(ref)
                break
            uuid = instance.previous_uuid
    return frozenset(found)


# ----------------------------------------------------------------------------- the comparison


@dataclass(frozen=True)
class Mismatch:
    seq: int
    call: Read
    page: int
    live: Answer | None
    replayed: Answer | None

    def __str__(self) -> str:
        mine, theirs = self.live, self.replayed
        where = difference(mine.body, theirs.body) if mine and theirs else "one side has more pages"
        return f"as of seq {self.seq}: {self.call} page {self.page}: {where}\n  live:     {mine}\n  replayed: {theirs}"


@dataclass
class Judge:
    """Asks both sides the same reads as of a seq, and keeps what differs."""

    live: Ask
    oracle: Ask
    takes_as_of: Callable[[str], bool]
    dropped: frozenset[str]  # instances the live state no longer holds (retention)
    dropped_refs: frozenset[str] = frozenset()  # the refs of those instances
    lag: int = 0  # read the live side this many seqs earlier: only to show that the comparison can fail
    mismatches: list[Mismatch] = field(default_factory=list)
    skipped: set[str] = field(default_factory=set)
    compared: int = 0
    gone: int = 0

    def check(self, seq: int, calls: list[Read]) -> None:
        for call in calls:
            if not self.takes_as_of(call.method):
                self.skipped.add(call.method)
                continue
            live = [settled(call, answer) for answer in pages_of(self.live, call, max(0, seq - self.lag))]
            oracle = [settled(call, answer) for answer in pages_of(self.oracle, call, None)]
            self.compared += 1
            for number in range(max(len(live), len(oracle))):
                mine = live[number] if number < len(live) else None
                theirs = oracle[number] if number < len(oracle) else None
                verdict = self.verdict_of(mine, theirs, seq)
                if verdict == "gone":
                    break
                if verdict == "differ":
                    self.mismatches.append(Mismatch(seq, call, number + 1, mine, theirs))
                    break

    def verdict_of(self, live: Answer | None, oracle: Answer | None, seq: int) -> str:
        """ "same", "differ", or "gone" (a dropped instance, unanswerable as of a seq before it was dropped)."""
        if live is None or oracle is None:
            return "differ"
        if live == oracle:
            return "same"
        if (
            live.status == oracle.status != 200
            and live.kind == oracle.kind
            and live.body == f"{oracle.body} as of seq {seq}"
        ):
            return "same"
        if live.status in GONE and oracle.status == 200 and names_a(oracle.body, self.dropped):
            self.gone += 1
            return "gone"
        # A read that needs a dropped instance's state (a pointer to it, a list filtered by states) is a 410
        # naming its ref; a run's refs no longer include a dropped instance's (as now).
        if live.status == 410 and any(repr(ref) in str(live.body) for ref in self.dropped_refs):
            self.gone += 1
            return "gone"
        if live.status == 200 and oracle.status == 200 and names_a(oracle.body, self.dropped | self.dropped_refs):
            self.gone += 1  # what retention dropped is left out of the live answer (consumers, lineage, refs)
            return "gone"
        return "differ"

    def report(self, what: str) -> None:
        """Print what was compared and skipped; fail with the first differences."""
        if self.skipped:
            print(f"{what}: skipped, as_of_seq not taken yet by: {', '.join(sorted(self.skipped))}")
        print(f"{what}: {self.compared} reads compared, {self.gone} answered as gone (retention)")
        shown = "\n".join(map(str, self.mismatches[:12]))
        assert not self.mismatches, f"{what}: {len(self.mismatches)} reads differ from replay, the first:\n{shown}"


def judge_for(pair: Sides, log: Catalog, lag: int = 0) -> Judge:
    dropped = frozenset(log.ids["uuid"]) - frozenset(pair.folded.instances)
    refs = refs_with_dropped_instances(pair.folded)
    return Judge(service_asker(pair.live), service_asker(pair.oracle), service_takes_as_of, dropped, refs, lag)


def every_seq(
    events: list[pb.Event],
    log: Catalog,
    folder: Path,
    what: str,
    snapshot_at: int = 0,
    projected: bool = True,
    replica: bool = False,
) -> Judge:
    """Compare the live service with replay at every seq of `events` (`projected`, `replica`: see `sides`)."""
    with sides(events, folder, snapshot_at, projected, replica) as pair:
        judge = judge_for(pair, log)
        for seq in pair.seqs():
            judge.check(seq, reads_at(log, pair.oracle, seq, walk=walked(seq, len(events)), lean=replica))
    judge.report(what)
    return judge


@cache
def history(name: str) -> tuple[list[pb.Event], Catalog]:
    """A golden log by name, or "w1" (the generated history), with its catalog."""
    events = w1_history() if name == "w1" else read_events(name)
    return events, catalog(events)


# ----------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("name", [log.name for log in GOLDEN_LOGS])
def test_every_as_of_read_of_a_golden_log_equals_replay(name: str, tmp_path: Path) -> None:
    judge = every_seq(*history(name), tmp_path, f"golden log {name}")
    assert judge.compared > 0


@pytest.mark.parametrize("name", [log.name for log in GOLDEN_LOGS] + ["w1"])
def test_every_as_of_read_of_a_read_replica_equals_replay(name: str, tmp_path: Path) -> None:
    """A read replica (`serve --replica`) answers from the state store alone: its lists from the store's index,
    every record from its row, nothing folded; every read as of every seq, and of now, equals replay."""
    judge = every_seq(*history(name), tmp_path, f"a read replica of {name}", replica=True)
    assert judge.compared > 0


def test_every_as_of_read_of_a_generated_w1_history_equals_replay(tmp_path: Path) -> None:
    """The live state loaded from a snapshot of the middle of the log (as a restarted server is): what it
    knows of the seqs before the snapshot comes from the snapshot."""
    events, log = history("w1")
    judge = every_seq(events, log, tmp_path, "generated W1 history", snapshot_at=len(events) // 2)
    assert judge.compared > 0


@settings(
    max_examples=RANDOM_HISTORIES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(steps=appendable_histories)
def test_every_as_of_read_of_a_random_history_equals_replay(steps: list[Step]) -> None:
    """Histories from the fold's property tests (tests/kits/stepkit.py): clock skew, odd TTLs, retention
    with any cutoff, cascades, rejected events; gapless, without undecodable payloads."""
    events = [entry.event for entry in materialize(steps) if entry.event is not None]
    with tempfile.TemporaryDirectory() as folder:
        # Without the state store: the reads it would answer come from the live state's histories here.
        every_seq(events, catalog(events), Path(folder), f"a random history of {len(events)} events", projected=False)


def retention_seqs(events: list[pb.Event]) -> set[int]:
    return {seq for seq, event in enumerate(events, 1) if event.WhichOneof("payload") == "instance_retention"}


def sample(events: list[pb.Event]) -> set[int]:
    """The seqs read over HTTP: the ends, the middle, around every retention."""
    head = len(events)
    around = {seq + step for seq in retention_seqs(events) for step in (-1, 0)}
    return {0, head // 2, head} | around


def http_reads(log: Catalog, oracle: Service, seq: int) -> list[Read]:
    """About HTTP_KEYS records (what changes around `seq` first), every list's first pages."""
    changed = sorted(changing(log, seq))
    others, turn = rotating(log, seq, HTTP_ROTATION)
    kept = set(changed[:: max(1, len(changed) // HTTP_KEYS)]) | set(UNKNOWN)
    found = [read for key in sorted(kept) for read in reads_of(key, log)]
    found += [read for key in sorted(others - kept) for read in reads_of(key, log, turn)]
    return found + WHOLE + windows(oracle, kept) + lists(log.labels)


@pytest.mark.parametrize("name", [log.name for log in GOLDEN_LOGS] + ["w1"])
def test_as_of_reads_over_http_equal_replay_for_a_sample_of_seqs(name: str, tmp_path: Path) -> None:
    """The same comparison through the HTTP app, JSON against JSON, for a deterministic sample of seqs."""
    events, log = history(name)
    seqs = sample(events)
    with sides(events, tmp_path) as pair, ExitStack() as stack:
        live, oracle = Http(pair.live), Http(pair.oracle)
        stack.callback(live.close)
        stack.callback(oracle.close)
        dropped = frozenset(log.ids["uuid"]) - frozenset(pair.folded.instances)
        refs = refs_with_dropped_instances(pair.folded)
        judge = Judge(http_asker(live), http_asker(oracle), http_takes_as_of, dropped, refs)
        for seq in pair.seqs():
            if seq in seqs:
                judge.check(seq, http_reads(log, pair.oracle, seq))
    judge.report(f"{name} over HTTP at seqs {sorted(seqs)}")
    assert judge.compared > 0


SINGLE_READS = {"ref": "canonical", "uuid": "instance", "want": "want", "run": "job_run"}


def test_the_reads_chosen_at_each_seq_include_every_read_whose_replayed_answer_changes(tmp_path: Path) -> None:
    """On a small generated history with every kind of change, asking the oracle every read of every id at
    every seq: each read whose answer differs between seq N - 1 and N is chosen at both (lists aside; of
    the lineages the widest, which shows whatever the others show)."""
    events = w1_history(SMALL_PLAN)
    log = catalog(events)
    keys = [(kind, ident) for kind, ids in log.ids.items() for ident in ids]
    widest = len(DIRECTIONS) * 2 - 1  # reads_of's variant of lineage(direction="both", depth=2)
    reads = [(key, read) for key in keys for read in reads_of(key, log, widest) if read.pages == 1]
    with sides(events, tmp_path) as pair:
        ask = service_asker(pair.oracle)
        before: dict[str, Any] = {}
        missed, changed = [], 0
        for seq in pair.seqs():
            answers = {str(read): unseq(settled(read, ask(read, None, None)).body) for _, read in reads}
            chosen = changing(log, seq) & changing(log, seq - 1) if seq else set()
            moved = [(key, read) for key, read in reads if seq and answers[str(read)] != before[str(read)]]
            changed += len(moved)
            missed += [f"seq {seq}: {read}" for key, read in moved if key not in chosen]
            before = answers
    assert changed > len(events) and missed == [], missed[:20]


@pytest.mark.parametrize("lag", [1, -1], ids=["one-seq-early", "one-seq-late"])
def test_the_comparison_fails_when_the_live_side_reads_one_seq_off(lag: int, tmp_path: Path) -> None:
    """Read one seq off, every change shows as a difference: the comparison can fail, and does where it must.

    Counted: the seqs that changed an instance, a canonical pointer, a want or a job run whose read takes
    `as_of_seq` (wants and job runs count once theirs do).
    """
    events = w1_history(SMALL_PLAN)
    log = catalog(events)
    kinds = {kind for kind, method in SINGLE_READS.items() if service_takes_as_of(method)}
    with sides(events, tmp_path) as pair:
        judge = judge_for(pair, log, lag)
        differing = set()
        for seq in pair.seqs():
            before = len(judge.mismatches)
            judge.check(seq, [read for key in sorted(changing(log, seq)) for read in reads_of(key, log)])
            if len(judge.mismatches) > before:
                differing.add(seq)
    changed_at = {seq for seq, keys in enumerate(log.moved) if any(kind in kinds for kind, _ in keys)}
    expected = changed_at if lag == 1 else {seq - 1 for seq in changed_at}
    assert len(expected) > len(events) // 2 and expected <= differing, sorted(expected - differing)


def test_only_the_declared_differences_are_accepted() -> None:
    """The suffix " as of seq N" on an error, and a 404 or 410 where replay names a dropped instance."""

    def unasked(call: Read, as_of_seq: int | None, cursor: str | None) -> Answer:
        raise AssertionError("only answers are judged here")

    judge = Judge(unasked, unasked, bool, dropped=frozenset({"u1"}))
    names_dropped, names_kept = Answer(200, "ok", {"nodes": [{"uuid": "u1"}]}), Answer(200, "ok", {"uuid": "u2"})
    unknown = Answer(404, "NotFound", "no want 'w'")
    assert judge.verdict_of(Answer(404, "NotFound", "no want 'w' as of seq 7"), unknown, 7) == "same"
    assert judge.verdict_of(Answer(404, "NotFound", "no want 'w' as of seq 6"), unknown, 7) == "differ"
    assert judge.verdict_of(Answer(404, "Conflict", "no want 'w' as of seq 7"), unknown, 7) == "differ"
    assert judge.verdict_of(Answer(404, "NotFound", "no instance 'u1'"), names_dropped, 7) == "gone"
    assert judge.verdict_of(Answer(410, "Gone", "instance u1 was dropped"), names_dropped, 7) == "gone"
    assert judge.verdict_of(Answer(404, "NotFound", "no instance 'u2'"), names_kept, 7) == "differ"
    assert judge.verdict_of(Answer(409, "Conflict", "dropped"), names_dropped, 7) == "differ"
    assert judge.verdict_of(Answer(200, "ok", {"nodes": []}), names_dropped, 7) == "gone"  # left out, dropped
    assert judge.verdict_of(Answer(200, "ok", {"uuid": "u3"}), names_kept, 7) == "differ"
    assert judge.verdict_of(None, names_kept, 7) == "differ"
