"""The state store's changes (`Database.changes`) on both backends: projected span by span while the log
grows, its pages are the live state's pages (every golden log), retention deletes what the state dropped,
and two projectors of one database never write a span twice."""

from __future__ import annotations

import logging
import threading
import time

import pytest
import sqlalchemy as sa

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.db import WRITE_WAIT_ENV, WriteLockTimeout
from partbuild.state.fold.records import InstanceState
from partbuild.state.log.live import LiveState
from partbuild.state.log.snapshot import decode_state, encode_state
from partbuild.state.queries.changes import INSTANCE_CREATED, INSTANCE_STATE, Change, changes_between, changes_page
from partbuild.state.schema import state_changes, state_projections
from partbuild.state.store import row_stream
from partbuild.state.store.changes import ChangeStore
from partbuild.state.store.projector import Projector
from partbuild.state.store.verify import store_problems

from golden_log import GOLDEN_LOGS, read_events
from pgkit import PgServer, postgres_url
from storekit import projected_while_growing


def _paged(page: object, first: int, last: int, limit: int) -> list[Change]:
    """Every change in (first, last] from `page(first, last, limit, after)`, a page after another."""
    found: list[Change] = []
    while True:
        got = page(first, last, limit, found[-1].key if found else None)  # type: ignore[operator]
        assert len(got) <= limit
        found += got
        if len(got) < limit:
            return found


@pytest.mark.parametrize("name", [log.name for log in GOLDEN_LOGS])
def test_projected_while_the_log_grows_the_store_pages_as_the_live_state_does(database: Database, name: str) -> None:
    """Spans projected at an earlier head stay true: a span's changes are final once folded. A golden log
    is appended 7 events at a time, each time folded and projected in spans of 3 seqs."""
    live = projected_while_growing(database, read_events(name))
    state, head = live.state, live.head_seq
    store = database.changes
    assert store.page(0, head, 10**6) == changes_between(state, 0, head)
    for first, last in {(0, head), (head // 3, 2 * head // 3), (head - 1, head), (0, 1), (5, 5)}:
        for limit in (1, 4, 1_000):
            live_pages = _paged(lambda *a: changes_page(state, *a), first, last, limit)
            assert _paged(store.page, first, last, limit) == live_pages, (first, last, limit)


@pytest.mark.parametrize("chunk", [None, 7], ids=["one chunk", "chunks of 7"])
def test_retention_deletes_the_changes_of_the_instances_it_dropped(
    database: Database, chunk: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The v1 log ends with a retention: projected before it, the store held the instances it drops. The
    created instances are read a chunk at a time: with chunks of 7, what one chunk drops is deleted too."""
    if chunk is not None:
        monkeypatch.setattr(row_stream, "CHUNK", chunk)
    events = read_events("v1")
    retention = next(n for n, event in enumerate(events) if event.WhichOneof("payload") == "instance_retention")
    live = LiveState(database.log)
    projector = Projector(live, database.changes)
    database.log.append(events[:retention])
    live.catch_up()
    projector.project()
    created_before = _created(database.changes, live.head_seq)
    assert created_before == set(live.state.instances)
    database.log.append(events[retention:])
    live.catch_up()
    projector.project()
    kept = set(live.state.instances)
    assert kept < created_before  # the retention dropped some
    assert _created(database.changes, live.head_seq) == kept
    head = live.head_seq
    assert database.changes.page(0, head, 10**6) == changes_between(live.state, 0, head)


def _created(store: ChangeStore, head: int) -> set[str]:
    return {change.id for change in store.page(0, head, 10**6) if change.kind == INSTANCE_CREATED}


def test_a_span_is_written_once_whoever_projects_it(database: Database) -> None:
    """The watermark moves by compare and set with the rows: a projector behind it writes nothing."""
    database.log.append(read_events("v1")[:20])
    live = LiveState(database.log)
    store = database.changes
    changes = changes_between(live.state, 0, 10)

    def none_dropped(_ids: object) -> set[str]:
        return set()

    assert store.write(0, 10, changes, none_dropped)
    assert not store.write(0, 10, changes, none_dropped)  # a second projector of the same span
    assert not store.write(5, 12, changes_between(live.state, 5, 12), none_dropped)  # one behind the mark
    assert store.watermark() == 10
    assert store.page(0, 20, 1_000) == changes  # each row once, nothing past the mark
    other = Projector(LiveState(database.log), store, span=4)  # a second process: goes on from the mark
    assert other.project() == 20
    assert store.page(0, 20, 1_000) == changes_between(live.state, 0, 20)


def test_ids_sort_byte_by_byte_as_the_live_state_sorts_them(database: Database) -> None:
    """Want ids differing only in case and punctuation, in one seq: PostgreSQL's locale order would differ."""
    ids = ["b", "B", "a-1", "a_1", "A", "a.2", "Z9", "z"]
    database.log.append([pb.Event(want_create=pb.WantCreate(want_id=i, partition_refs=[f"r/{i}"])) for i in ids])
    live = LiveState(database.log)
    Projector(live, database.changes).project()
    head = live.head_seq
    assert database.changes.page(0, head, 1_000) == changes_between(live.state, 0, head)
    first_states = {c.id: c.to_state for c in database.changes.page(0, head, 1_000) if c.kind == INSTANCE_CREATED}
    assert set(first_states.values()) == {InstanceState.MISSING}


def test_the_audit_finds_a_store_that_differs_from_the_replay(database: Database) -> None:
    """`replay --verify`'s check of the store: a row lost or changed is named with its span; a store behind
    a retention (rows the projector has yet to delete) agrees."""
    events = read_events("v1")
    retention = next(n for n, event in enumerate(events) if event.WhichOneof("payload") == "instance_retention")
    database.log.append(events[:retention])
    live = LiveState(database.log)
    Projector(live, database.changes, span=100).project()
    database.log.append(events[retention:])
    replayed = LiveState(database.log).state
    assert store_problems(database.changes, replayed, span=100) == []  # behind the retention, with its drops
    live.catch_up()
    Projector(live, database.changes, span=100).project()
    assert store_problems(database.changes, replayed, span=100) == []
    some = next(c for c in database.changes.page(150, 250, 1_000) if c.kind == INSTANCE_STATE)
    wrong = InstanceState.TAINTED if some.to_state != InstanceState.TAINTED else InstanceState.FAILED
    with database.log._engine.begin() as conn:
        row = (state_changes.c.seq == some.seq) & (state_changes.c.id == some.id)
        conn.execute(sa.update(state_changes).where(row, state_changes.c.kind == 1).values(to_state=int(wrong)))
    problems = store_problems(database.changes, replayed, span=100)
    span = f"in seqs ({some.seq // 100 * 100}, {some.seq // 100 * 100 + 100}]"
    assert len(problems) == 1 and span in problems[0] and f"to_state=<InstanceState.{wrong.name}" in problems[0]
    with database.log._engine.begin() as conn:
        conn.execute(sa.delete(state_changes).where(row))
    problems = store_problems(database.changes, replayed, span=100)
    assert len(problems) == 1 and "a change missing from the store" in problems[0] and f"seq={some.seq}" in problems[0]


def test_a_started_projector_follows_each_fold_and_stops(database: Database) -> None:
    events = read_events("v1")
    live = LiveState(database.log)
    projector = Projector(live, database.changes).start(gap_s=0.05)
    try:
        for start in (0, 30, 60):
            database.log.append(events[start : start + 30])
            live.catch_up()
            deadline = time.monotonic() + 20
            while database.changes.watermark() < start + 30:
                assert time.monotonic() < deadline, f"not projected up to {start + 30}"
                time.sleep(0.02)
    finally:
        projector.stop()
    assert not any(thread.name == "partbuild-project" for thread in threading.enumerate())
    database.log.append(events[90:100])
    live.catch_up()
    time.sleep(0.2)
    assert database.changes.watermark() == 90  # stopped: nothing projected any more


def test_after_its_first_pass_a_projector_reads_only_the_records_the_fold_touched(database: Database) -> None:
    """The first pass scans and turns the fold's tracking on; the next reads the touched records alone
    (a record changed without being tracked would be missed: the pages would differ), and snapshots leave
    the tracking out."""
    events = read_events("v1")
    live = LiveState(database.log)
    assert live.state.touched is None  # off until a projector asks
    database.log.append(events[:200])
    live.catch_up()
    projector = Projector(live, database.changes)
    assert projector.project() == 200
    touched = live.state.touched
    assert touched is not None and touched.since == 200 and not (touched.instances or touched.wants or touched.runs)
    database.log.append(events[200:])
    live.catch_up()
    changed = {c.id for c in changes_between(live.state, 200, live.head_seq) if c.kind != "canonical_moved"}
    assert changed and changed <= touched.instances | touched.wants | touched.runs
    assert len(touched.instances) < len(live.state.instances)  # not every record: what changed
    assert projector.project() == live.head_seq
    head = live.head_seq
    assert database.changes.page(0, head, 10**6) == changes_between(live.state, 0, head)
    assert decode_state(encode_state(live.state)).touched is None


def test_a_failing_projector_says_so_once_backs_off_and_recovers(
    database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    """A database that refuses the store (here: its watermark table is gone; a read-only standby alike) costs
    one warning, not one a second, and the thread goes on when it is back."""
    caplog.set_level(logging.INFO, logger="partbuild.state.store")
    events = read_events("v1")
    live = LiveState(database.log)
    engine = database.log._engine
    state_projections.drop(engine)
    projector = Projector(live, database.changes).start(gap_s=0.02)
    try:
        database.log.append(events[:50])
        live.catch_up()
        time.sleep(0.4)  # several passes fail meanwhile
        warnings = [r for r in caplog.records if r.name == "partbuild.state.store" and r.levelname == "WARNING"]
        assert len(warnings) == 1 and "projecting the state's changes failed" in warnings[0].getMessage()
        state_projections.create(engine)
        deadline = time.monotonic() + 20
        while database.changes.watermark() < 50:
            assert time.monotonic() < deadline, "the projector did not recover"
            time.sleep(0.02)
    finally:
        projector.stop()
    assert any("works again after" in r.getMessage() for r in caplog.records if r.name == "partbuild.state.store")


def test_a_projector_waits_for_a_stopped_one_within_the_write_bounds(
    pg_server: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process's projector holding the watermark's row (stopped mid-span): this one gives up after
    the wait bound, having written nothing, and projects once the holder is gone."""
    monkeypatch.setenv(WRITE_WAIT_ENV, "1")
    for url in postgres_url(pg_server):
        with Database.open(url, auto_upgrade=True) as database:
            database.log.append(read_events("v1")[:20])
            live = LiveState(database.log)
            Projector(live, database.changes, span=10).project()
            database.log.append(read_events("v1")[20:30])
            live.catch_up()
            holder = database.log._engine.connect()
            try:
                with holder.begin():
                    holder.execute(sa.update(state_projections).values(seq=state_projections.c.seq))
                    started = time.monotonic()
                    with pytest.raises(WriteLockTimeout):
                        Projector(live, database.changes).project()
                    assert time.monotonic() - started < 10
            finally:
                holder.close()
            assert database.changes.watermark() == 20
            assert Projector(live, database.changes).project() == 30
