"""The state store's records (`state_records`) on both backends: projected while the log grows, every
instance, want, job run and ref read from the rows alone is, as of every seq of every golden log, what a state
replayed to that seq holds; the rows are whole only once every record is in, and they follow retention."""

from __future__ import annotations

import pickle
import tempfile
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.past import HistoryDropped, PastState
from partbuild.state.fold.records import ACTIVE_RUN_STATES
from partbuild.state.log.events import from_job_run
from partbuild.state.log.live import LiveState
from partbuild.state.log.snapshot import SnapshotError
from partbuild.state.queries.cells import GRID_STATES, ref_cell
from partbuild.state.schema import state_cells, state_projections, state_records, state_want_refs
from partbuild.state.store import records as records_module
from partbuild.state.store import row_stream
from partbuild.state.store.projector import Projector
from partbuild.state.store.records import (
    CLOCK,
    INSTANCE,
    PROJECTION,
    RUN,
    VERSION,
    Rows,
    body_of,
    decoded,
    loads,
    want_refs_of,
)
from partbuild.state.store.stored import StoredRecords, open_stored
from partbuild.state.store.verify import record_problems, store_problems

from foldkit import Story
from golden_log import GOLDEN_LOGS, read_events
from stepkit import Step, appendable_histories, materialize
from storekit import projected_while_growing


def _answer(read: Callable[[], Any]) -> Any:
    """A read's answer in a comparable form: a record's fields, a UUID, None, or that retention dropped what
    it needs."""
    try:
        found = read()
    except HistoryDropped:
        return "dropped"
    except KeyError:  # a table of the past has no dropped record: the rows have none either
        return None
    return found.__getstate__() if hasattr(found, "__getstate__") and not isinstance(found, str) else found


def _mismatches(stored: StoredRecords, live: BuildState, replayed: BuildState, seq: int) -> list[str]:
    """What the rows, read as of `seq`, tell otherwise than the live state's past (the reads of the past
    in memory), which tells what `replayed` (a state replayed to `seq`) holds but what retention dropped."""
    past = PastState(live, seq, lambda: 0)
    replay = PastState(replayed, seq, lambda: 0)  # the replay's records in the form reads of the past give
    reads: list[tuple[str, Callable[[], Any], Callable[[], Any], Callable[[], Any]]] = []
    tables = (
        ("instance", stored.instance, "instances"),
        ("want", stored.want, "wants"),
        ("run", stored.job_run, "job_runs"),
    )
    for label, from_rows, name in tables:
        for key in getattr(replayed, name):
            reads.append(
                (
                    f"{label} {key}",
                    lambda k=key, read=from_rows: read(k, seq),
                    lambda k=key, n=name: getattr(past, n)[k],
                    lambda k=key, n=name: getattr(replay, n)[k],
                )
            )
    for ref in replayed.canonical:
        reads.append(
            (
                f"canonical of {ref}",
                lambda r=ref: stored.canonical_uuid(r, seq),
                lambda r=ref: past.canonical.get(r),
                lambda r=ref: replayed.canonical[r],
            )
        )
        reads.append(
            (
                f"served of {ref}",
                lambda r=ref: stored.served_uuid(r, seq),
                lambda r=ref: _uuid(past.served_instance(r)),
                lambda r=ref: _uuid(replayed.served_instance(r)),
            )
        )
    wrong = []
    for what, from_rows, from_memory, from_replay in reads:
        answer = _answer(from_rows)
        # Retention drops history: after one, the past in memory forgets what it dropped (a consumer, say),
        # and the rows with it; the time-travel tests hold the past in memory to a replay where it answers.
        if answer != _answer(from_memory) or (not live.dropped_instances and answer != _answer(from_replay)):
            wrong.append(what)
    return wrong


def _uuid(instance: Any) -> str | None:
    return None if instance is None else instance.uuid


@pytest.mark.parametrize("name", [log.name for log in GOLDEN_LOGS])
def test_every_record_as_of_every_seq_read_from_the_rows_is_a_replay_s(database: Database, name: str) -> None:
    """Appended 7 events at a time, each time folded and projected (the touched passes write the rows of what
    the fold changed): as of every seq, the rows alone answer what a replay to that seq holds."""
    events = read_events(name)
    live = projected_while_growing(database, events)
    replayed = BuildState()
    with open_stored(database.changes.records) as stored:
        assert stored is not None and stored.head_seq == live.head_seq
        for seq, event in enumerate(events, start=1):
            replayed.apply(seq, event)
            assert _mismatches(stored, live.state, replayed, seq) == [], seq
        assert stored.instance("no-such-uuid") is None


@pytest.mark.parametrize("name", [log.name for log in GOLDEN_LOGS])
def test_after_every_pass_each_row_is_its_record_as_the_live_state_holds_it(database: Database, name: str) -> None:
    """A golden log appended 3 events at a time, each time folded and projected: after each pass every row is
    its record as the live state holds it then, and every record has its row: no change the fold made was
    missed (a heartbeat, a consumer, what an instance waits for, a drop), whatever came after it."""
    live = LiveState(database.log)
    projector = Projector(live, database.changes)
    events = read_events(name)
    for start in range(0, len(events), 3):
        database.log.append(events[start : start + 3])
        live.catch_up()
        projector.project()
        assert database.changes.records.watermark() == live.head_seq
        assert record_problems(database.changes.records, live.state) == [], start


def test_a_process_that_finds_the_rows_behind_writes_them_all_then_they_are_whole(database: Database) -> None:
    """Rows gone behind the changes (a new table, say): reads do not answer from them until a process has
    written every record it holds and a pass has said so; then they answer as a replay does."""
    events = read_events("v1")
    half = len(events) // 2
    database.log.append(events[:half])
    Projector(LiveState(database.log), database.changes).project()
    records = database.changes.records
    with records.engine.begin() as conn:  # as if the rows were never written
        conn.execute(sa.delete(state_records))
        conn.execute(sa.delete(state_projections).where(state_projections.c.name == PROJECTION))
    database.log.append(events[half:])
    with open_stored(records) as stored:
        assert stored is None
    second = LiveState(database.log)
    assert Projector(second, database.changes).project() == second.head_seq == records.watermark()
    with open_stored(records) as stored:
        assert stored is not None
        replayed = BuildState()
        for seq, event in enumerate(events, start=1):
            replayed.apply(seq, event)
        assert _mismatches(stored, second.state, replayed, second.head_seq) == []


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)  # SQLite plans these reads without statistics
def test_postgresql_plans_from_statistics_once_every_row_is_written(database: Database) -> None:
    """A first projection writes every row at once: the planner is told to look at the tables then (with no
    statistics it guesses a handful of rows, and a page of wants sorts all of them instead of reading an
    index in order), not left to an autovacuum that may be off."""
    database.log.append(read_events("v1"))
    Projector(LiveState(database.log), database.changes).project()
    with database.changes.records.engine.connect() as conn:
        analyzed = conn.execute(
            sa.text("SELECT relname FROM pg_stat_user_tables WHERE last_analyze IS NOT NULL")
        ).scalars()
        assert {"state_records", "state_heartbeats", "state_want_refs"} <= set(analyzed)


def test_retention_deletes_the_rows_of_what_it_dropped(database: Database) -> None:
    """The v1 log ends with a retention: the dropped instances' rows go, and a read of one says it is gone."""
    events = read_events("v1")
    retention = next(n for n, event in enumerate(events) if event.WhichOneof("payload") == "instance_retention")
    live = projected_while_growing(database, events[:retention])
    before = set(live.state.instances)
    database.log.append(events[retention:])
    live.catch_up()
    Projector(live, database.changes).project()
    with database.changes.records.engine.connect() as conn:
        held = set(conn.execute(sa.select(state_records.c.id).where(state_records.c.kind == INSTANCE)).scalars())
    assert held == set(live.state.instances) < before


def test_a_row_is_never_replaced_by_an_older_one(database: Database) -> None:
    """Two writers of one record: the row with the greater seq stays, whichever wrote last."""
    records = database.changes.records
    records.dump(Rows([(INSTANCE, "a", 9, b"newer", 1, None)], [], []))
    records.dump(Rows([(INSTANCE, "a", 4, b"older", 1, None), (INSTANCE, "b", 4, b"b", 2, None)], [], []))
    with database.changes.records.engine.connect() as conn:
        rows = {row.id: (row.seq, row.body) for row in conn.execute(sa.select(state_records))}
    assert rows == {"a": (9, b"newer"), "b": (4, b"b")}


def test_a_row_decodes_nothing_but_the_state_s_classes() -> None:
    """A tampered body cannot run code: the unpickler refuses any class but the state's own."""
    with pytest.raises(SnapshotError, match="not a state class"):
        loads(INSTANCE, pickle.dumps(PurePosixPath("/etc/passwd")))


def test_the_audit_finds_a_row_that_differs_from_the_replay(database: Database) -> None:
    """`replay --verify` compares every row with the replayed record: a tampered row, a missing one and one
    the replay does not hold are each named; untouched rows agree."""
    events = read_events("outcomes")
    live = projected_while_growing(database, events)
    replayed = BuildState()
    for seq, event in enumerate(events, start=1):
        replayed.apply(seq, event)
    store = database.changes
    assert store_problems(store, replayed) == []
    uuid = next(iter(live.state.instances))
    tampered = live.state.instances[uuid]
    other = next(u for u in live.state.instances if u != uuid)
    row = (state_records.c.kind == INSTANCE) & (state_records.c.id == uuid)
    with store.records.engine.begin() as conn:
        original = conn.execute(sa.select(state_records.c.body).where(row)).scalar_one()
        conn.execute(sa.update(state_records).where(row).values(body=body_of(live.state, INSTANCE, other)))
    assert record_problems(store.records, replayed) == [
        f"the state store's row of instance {uuid!r} differs from the replay's record"
    ]
    with store.records.engine.begin() as conn:
        conn.execute(sa.update(state_records).where(row).values(body=original, id="not-an-instance"))
    assert record_problems(store.records, replayed) == [
        "the state store holds a row of instance 'not-an-instance', which the replay does not hold"
    ]
    with store.records.engine.begin() as conn:
        conn.execute(sa.delete(state_records).where(state_records.c.id == "not-an-instance"))
    assert record_problems(store.records, replayed) == [
        f"the state store has no row of instance {tampered.uuid!r}, which the replay holds"
    ]
    with store.records.engine.begin() as conn:  # back, but with no created seq: the listings would miss it
        conn.execute(sa.insert(state_records).values(kind=INSTANCE, id=uuid, seq=live.head_seq, body=original))
    assert record_problems(store.records, replayed) == [
        f"the state store's row of instance {uuid!r} says it was created at seq None"
    ]
    ended = next(run for run in live.state.job_runs.values() if run.state not in ACTIVE_RUN_STATES)
    run_row = (state_records.c.kind == RUN) & (state_records.c.id == ended.job_run_id)
    with store.records.engine.begin() as conn:  # an ended run said to be in flight: a replica would list it
        conn.execute(sa.update(state_records).where(row).values(created=tampered.created_seq))
        conn.execute(sa.update(state_records).where(run_row).values(closed=None))
    assert record_problems(store.records, replayed) == [
        f"the state store's row of job run {ended.job_run_id!r} says it ended at seq None"
    ]
    with store.records.engine.begin() as conn:  # rows keyed by a number: an id that is none is named too
        conn.execute(sa.update(state_records).where(run_row).values(closed=ended.updated_seq))
        conn.execute(sa.insert(state_records).values(kind=CLOCK, id="x1", seq=live.head_seq, body=original))
    assert record_problems(store.records, live.state) == [
        "the state store holds a row of clock 'x1', which the replay does not hold"
    ]
    want = next(iter(live.state.wants.values()))
    with store.records.engine.begin() as conn:  # a want missing from its refs' lists: a replica would not list it
        conn.execute(sa.delete(state_records).where(state_records.c.id == "x1"))
        conn.execute(sa.delete(state_want_refs).where(state_want_refs.c.want_id == want.want_id))
    replayed = sorted(row for one in live.state.wants.values() for row in want_refs_of(one))
    kept = [row for row in replayed if row[2] != want.want_id]
    missing = next(row for row in replayed if row[2] == want.want_id)
    at = replayed.index(missing)
    said = f"want {kept[at][2]!r} naming {kept[at][0]!r}" if at < len(kept) else "none"
    assert record_problems(store.records, live.state) == [
        f"the state store's wants by ref differ from the replay's: stored {said}, replayed {missing}"
    ]
    ref = min(live.state.canonical)  # a grid cell that says another state: a replica's grid would show it
    cell = ref_cell(live.state, ref)
    assert cell is not None
    other_cell = (cell[0] + 1) % len(GRID_STATES)
    with store.records.engine.begin() as conn:
        back = [{"ref": r, "created": c, "want_id": w} for r, c, w in replayed if w == want.want_id]
        conn.execute(sa.insert(state_want_refs), back)
        conn.execute(
            sa.update(state_cells).where(state_cells.c.ref == ref).values(cell=(cell[0] + 1) % len(GRID_STATES))
        )
    assert record_problems(store.records, live.state) == [
        f"the state store's grid cells differ from the replay's: stored ref {ref!r}: cell {other_cell} "
        f"since {cell[1]}, replayed ref {ref!r}: cell {cell[0]} since {cell[1]}"
    ]
    with store.records.engine.begin() as conn:  # and one missing
        conn.execute(sa.update(state_cells).where(state_cells.c.ref == ref).values(cell=cell[0]))
        conn.execute(sa.delete(state_cells).where(state_cells.c.ref == ref))
    assert record_problems(store.records, live.state)[0].startswith(
        f"the state store's grid cells differ from the replay's: stored ref {sorted(live.state.canonical)[1]!r}"
    )


def test_the_audit_compares_the_rows_values_not_their_bytes(database: Database) -> None:
    """A row is first compared by its bytes with the replayed record pickled; rows pickled otherwise (another
    protocol: other bytes, the same values) agree, and a row with another record's values pickled otherwise
    is named."""
    events = read_events("outcomes")
    live = projected_while_growing(database, events)
    store = database.changes
    with store.records.engine.begin() as conn:
        for kind, key, body in conn.execute(sa.select(state_records.c.kind, state_records.c.id, state_records.c.body)):
            again = pickle.dumps(decoded(body), protocol=4)
            assert again != body and decoded(again) == decoded(body)
            row = (state_records.c.kind == kind) & (state_records.c.id == key)
            conn.execute(sa.update(state_records).where(row).values(body=again))
    assert store_problems(store, live.state) == []
    uuid, other = sorted(live.state.instances)[:2]
    body = body_of(live.state, INSTANCE, other)
    assert body is not None
    with store.records.engine.begin() as conn:
        row = (state_records.c.kind == INSTANCE) & (state_records.c.id == uuid)
        conn.execute(sa.update(state_records).where(row).values(body=pickle.dumps(decoded(body), protocol=4)))
    assert record_problems(store.records, live.state) == [
        f"the state store's row of instance {uuid!r} differs from the replay's record"
    ]


@pytest.mark.parametrize("chunk", [1, 2, 5000])
def test_the_audit_names_a_row_more_or_less_at_the_end_in_chunks_of_any_size(
    database: Database, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    """The rows of the wants by ref and of the grid cells are compared a chunk at a time with the replay's: a
    row the replay does not have after the last of its own, or one fewer than it has (the stored rows end with
    a full chunk where the chunks are of one row), is named."""
    live = projected_while_growing(database, read_events("outcomes"))
    records = database.changes.records
    monkeypatch.setattr(row_stream, "CHUNK", chunk)
    assert record_problems(records, live.state) == []
    with records.engine.begin() as conn:
        conn.execute(sa.insert(state_want_refs).values(ref="~extra", created=1, want_id="~want"))
    assert record_problems(records, live.state) == [
        "the state store's wants by ref differ from the replay's: stored want '~want' naming '~extra', replayed None"
    ]
    with records.engine.begin() as conn:
        conn.execute(sa.delete(state_want_refs).where(state_want_refs.c.ref == "~extra"))
        last = conn.execute(sa.select(state_cells).order_by(state_cells.c.ref.desc()).limit(1)).one()
        conn.execute(sa.delete(state_cells).where(state_cells.c.ref == last.ref))
    assert record_problems(records, live.state) == [
        "the state store's grid cells differ from the replay's: stored none, "
        f"replayed ref {last.ref!r}: cell {last.cell} since {last.since}"
    ]


@pytest.mark.parametrize("name", ["outcomes", "v1"])
def test_processes_taking_turns_keep_the_rows_whole(database: Database, name: str) -> None:
    """Three processes of one database fold the log and project in turns, each starting when it likes (one
    joins late, one stops for a while): the rows stay whole wherever the watermark is, as a replay says."""
    events = read_events(name)
    lives = [LiveState(database.log) for _ in range(3)]
    projectors = [Projector(live, database.changes, span=5) for live in lives]
    replayed, seq = BuildState(), 0
    for turn, start in enumerate(range(0, len(events), 6)):
        database.log.append(events[start : start + 6])
        for event in events[start : start + 6]:
            seq += 1
            replayed.apply(seq, event)
        # Turn by turn: the first projects every other turn, the second each turn once the third turn has come,
        # the third every third turn (when it projects, it has folded all the log).
        takers = [n for n, every in ((0, 2), (1, 1), (2, 3)) if turn % every == 0 and (n != 1 or turn >= 3)]
        for n in takers:
            lives[n].catch_up()
            projectors[n].project()
        with open_stored(database.changes.records) as stored:
            if stored is not None and stored.head_seq == seq and turn % 5 == 0:  # (every record: a few turns)
                assert _mismatches(stored, lives[takers[-1]].state, replayed, seq) == [], turn
    lives[1].catch_up()
    projectors[1].project()
    with open_stored(database.changes.records) as stored:
        assert stored is not None and stored.head_seq == len(events)
        assert _mismatches(stored, lives[1].state, replayed, len(events)) == []
    assert record_problems(database.changes.records, replayed) == []


def test_changes_that_are_no_state_change_rewrite_their_rows(database: Database) -> None:
    """A run's later heartbeats, an instance that stops waiting for one of two refs, a want that gains a
    child: none moves a state, and each rewrites its record's row (projected after every event)."""
    story = Story()
    story.want("root", "agg/t=1")
    story.buffer("r1", "agg/t=1")
    for _ in range(3):  # the first makes it Running; the later ones only say it is alive
        story.ok(pb.JobRunHeartbeat(job_run_id="r1"), source=from_job_run("r1"))
    story.missing("r1", "raw/a", "raw/b")  # the instance waits for both
    story.derivative("child", "root", "r1", "raw/a", "raw/b")  # the root want gains a child
    story.observe("raw/a")  # it waits for raw/b alone now
    story.observe("raw/b")
    live = LiveState(database.log)
    projector = Projector(live, database.changes)
    for seq, event in enumerate(story.events, start=1):
        database.log.append([event])
        live.catch_up()
        projector.project()
        assert record_problems(database.changes.records, live.state) == [], seq


@settings(max_examples=8, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(steps=appendable_histories)
def test_random_histories_keep_the_rows_whole_and_read_as_memory_does(steps: list[Step]) -> None:
    """Histories from the fold's property tests (tests/kits/stepkit.py: clock skew, retention with any cutoff,
    cascades, rejected events), projected every 3 events: each pass leaves every row its record, and as of
    every seq the rows answer what the live state's past does."""
    events = [entry.event for entry in materialize(steps) if entry.event is not None]
    with tempfile.TemporaryDirectory() as folder, Database.open(f"sqlite:///{folder}/p.db", auto_upgrade=True) as db:
        live = LiveState(db.log)
        projector = Projector(live, db.changes)
        for start in range(0, len(events), 3):
            db.log.append(events[start : start + 3])
            live.catch_up()
            projector.project()
            assert record_problems(db.changes.records, live.state) == [], start
        replayed = BuildState()
        with open_stored(db.changes.records) as stored:
            assert (stored is None) == (not events)
            for seq, event in enumerate(events, start=1):
                replayed.apply(seq, event)
                assert stored is not None and _mismatches(stored, live.state, replayed, seq) == [], seq


def test_the_rows_format_is_pinned() -> None:
    """The records' fields changed (a slot added, renamed or moved): bump `records.ENCODING` (a newer format
    owns the rows, and an older partbuild then leaves them alone), then pin the new fingerprint here."""
    assert (records_module.ENCODING, records_module.FINGERPRINT) == (9, "b0c4dc6d7df2")


def _as_format(monkeypatch: pytest.MonkeyPatch, encoding: int, fingerprint: str) -> None:
    """This process writes and reads the rows as a partbuild of another format would (another version)."""
    monkeypatch.setattr(records_module, "ENCODING", encoding)
    monkeypatch.setattr(records_module, "PROJECTION", f"records:{encoding}:{fingerprint}")


def _rows_by_key(database: Database) -> dict[tuple[int, str], int]:
    with database.changes.records.engine.connect() as conn:
        return {(row.kind, row.id): row.seq for row in conn.execute(sa.select(state_records))}


def _formats(database: Database) -> dict[str, int]:
    with database.changes.records.engine.connect() as conn:
        query = sa.select(state_projections).where(state_projections.c.name.like("records:%"))
        return {row.name: row.seq for row in conn.execute(query)}


def test_the_newest_format_owns_the_rows_and_an_older_one_leaves_them_alone(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rolling upgrade: an older and a newer partbuild project one database in turns. The newer one takes
    the rows once; the older one then writes none and reads none (its reads use its memory), so the two do
    not rewrite every record in turn. With the newer one gone, the older one takes them back."""
    events = read_events("v1")
    third = len(events) // 3
    database.log.append(events[:third])
    older = LiveState(database.log)
    assert Projector(older, database.changes).project() == third
    ours = records_module.PROJECTION
    assert _formats(database) == {ours: third}

    newer = LiveState(database.log)
    with monkeypatch.context() as patched:
        _as_format(patched, records_module.ENCODING + 1, "feedbeef0000")
        newer_projector = Projector(newer, database.changes)
        newer_projector.project()
        newer_name = records_module.PROJECTION
        assert _formats(database) == {newer_name: third}  # taken: the older format's watermark is gone
    newer_rows = _rows_by_key(database)

    database.log.append(events[third : 2 * third])
    older.catch_up()
    assert Projector(older, database.changes).project() == 2 * third  # its changes, not the rows
    assert _rows_by_key(database) == newer_rows and _formats(database) == {newer_name: third}
    with open_stored(database.changes.records) as stored:
        assert stored is None  # not its format: its reads of the past use its memory

    newer.catch_up()
    with monkeypatch.context() as patched:
        _as_format(patched, records_module.ENCODING + 1, "feedbeef0000")
        newer_projector.project()
        assert _formats(database) == {newer_name: 2 * third}  # whole again, as the newer one's
        assert record_problems(database.changes.records, newer.state) == []

    # Rows of a format older than ours (a partbuild before this one) are ours to take: cleared, written again.
    with database.changes.records.engine.begin() as conn:
        renamed = sa.update(state_projections).where(state_projections.c.name == newer_name)
        conn.execute(renamed.values(name=f"records:{records_module.ENCODING - 1}:0123456789ab"))
    database.log.append(events[2 * third :])
    older.catch_up()
    assert Projector(older, database.changes).project() == older.head_seq == database.changes.records.watermark()
    assert _formats(database) == {ours: older.head_seq}
    assert record_problems(database.changes.records, older.state) == []


def test_a_small_record_s_versions_pickled_apart_by_another_process_are_the_same_rows(database: Database) -> None:
    """Each version is kept pickled, and an equal set of strings pickles in another order in a process with
    another hash seed: the audit compares what they hold (here: the same versions pickled with another protocol)."""
    events = read_events("group")
    database.log.append(events)
    state = LiveState(database.log, use_snapshots=False)
    assert Projector(state, database.changes).project() == len(events)
    records = database.changes.records
    with records.engine.begin() as conn:
        key, body = conn.execute(
            sa.select(state_records.c.id, state_records.c.body).where(state_records.c.kind == VERSION)
        ).first()
        apart = tuple((seq, pickle.dumps(pickle.loads(copy), protocol=4)) for seq, copy in decoded(body))
        assert apart != decoded(body)
        rewritten = pickle.dumps(apart, protocol=pickle.HIGHEST_PROTOCOL)
        conn.execute(
            sa.update(state_records)
            .where(state_records.c.kind == VERSION, state_records.c.id == key)
            .values(body=rewritten)
        )
    assert record_problems(records, state.state) == []
    with records.engine.begin() as conn:
        changed = pickle.dumps(apart[:-1] or ((1, pickle.dumps("other")),), protocol=pickle.HIGHEST_PROTOCOL)
        conn.execute(
            sa.update(state_records)
            .where(state_records.c.kind == VERSION, state_records.c.id == key)
            .values(body=changed)
        )
    assert record_problems(records, state.state) == [
        f"the state store's row of version {key!r} differs from the replay's record"
    ]
