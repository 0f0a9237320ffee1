"""A bounded replay's rows written from a child process (state/store/scratch_writer.py): `partbuild replay
--bounded` reports what a replay does, and a replay that writes its scratch rows there digests as a full one;
a read of the rows waits for the spans handed over before it; a span the child fails to write, or a child
gone, stops the replay with what happened."""

from __future__ import annotations

import json
import os
import pickle
import signal
import sqlite3
import threading
from collections.abc import Iterator
from itertools import islice
from pathlib import Path

import pytest
import sqlalchemy as sa

from partbuild.examples.clicks.simulate import SimulationPlan, simulate
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.transitions import is_live
from partbuild.state.log.digest import state_digest
from partbuild.state.log.events import envelope, manual
from partbuild.state.log.replay import load_state
from partbuild.state.schema import state_changes, state_counts, state_records
from partbuild.state.store.changes import ChangeStore
from partbuild.state.store.cold_digest import working_set_digest
from partbuild.state.store.cold_replay import replay_in_working_set
from partbuild.state.store.cold_rows import StoreRows
from partbuild.state.store.cold_verify import bounded_verify
from partbuild.state.store.records import REF, RecordStore, Rows
from partbuild.state.store.scratch_writer import RowWriter, ScratchWriteFailed

from clikit import run_cli
from golden_log import read_events
from storekit import projected_while_growing

pytestmark = pytest.mark.process


def _rows(*refs: str) -> Rows:
    """Rows of refs, each pointing at an instance named after it."""
    return Rows([(REF, ref, 5, pickle.dumps((f"uuid-{ref}", 1, None, None)), 1, None) for ref in refs], [], [])


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[RecordStore]:
    with Database.open(f"sqlite:///{tmp_path}/scratch.db", auto_upgrade=True) as database:
        yield database.changes.records


def test_a_bounded_replay_reports_what_a_replay_does(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, tmp_path: Path
) -> None:
    run_cli(capsys, "demo", "--db", sqlite_url, "--weeks", "8", "--sites", "2")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    code, out, err = run_cli(capsys, "replay", "--db", sqlite_url, "--json")
    assert code == 0, err
    whole = json.loads(out)
    for extra in ((), ("--scratch-dir", str(scratch))):
        code, out, err = run_cli(capsys, "replay", "--db", sqlite_url, "--bounded", "--json", *extra)
        assert code == 0, err
        bounded = json.loads(out)
        assert bounded["digest"] == whole["digest"] and bounded["counts"] == whole["counts"]
        assert bounded["head_seq"] == bounded["state_seq"] == bounded["replayed_events"] == whole["head_seq"]
        assert bounded["snapshot_seq"] == 0 < whole["snapshot_seq"]  # it never loads a snapshot
    assert list(scratch.iterdir()) == []  # the scratch database is gone
    code, out, _ = run_cli(capsys, "replay", "--db", sqlite_url, "--bounded", "--as-of", "10", "--json")
    assert code == 0 and json.loads(out)["state_seq"] == 10
    code, _, err = run_cli(capsys, "replay", "--db", sqlite_url, "--bounded", "--as-of", "999999")
    assert code == 2 and "after the log head" in err


def test_a_bounded_replay_verifies_the_state_store_it_rebuilds(capsys: pytest.CaptureFixture[str], db: str) -> None:
    assert run_cli(capsys, "demo", "--db", db, "--weeks", "2", "--sites", "1")[0] == 0
    assert run_cli(capsys, "db", "upgrade", "--db", db)[0] == 0  # the store projected
    code, out, err = run_cli(capsys, "replay", "--db", db, "--bounded", "--verify", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["verified"] is True and report["problems"] == []
    with Database.open(db) as database, database.log._engine.begin() as conn:
        head = database.log.head()
        conn.execute(sa.delete(state_changes).where(state_changes.c.seq == head))
    code, _, err = run_cli(capsys, "replay", "--db", db, "--bounded", "--verify")
    assert code == 1 and "verification failed: the state store's changes differ from the replay's: no row of" in err


def test_a_replay_writing_from_a_child_digests_as_a_full_replay(database: Database, tmp_path: Path) -> None:
    database.log.append(list(islice(simulate(SimulationPlan(weeks=4, sites=40)), 3_000)))
    early = load_state(database.log, upto_seq=300)[0]
    old_refs = [ref for ref in early.canonical if is_live(early, ref)][:20]
    assert old_refs
    # Tainting partitions built at the start: their records went cold long before, and are read back.
    taints = [pb.PartitionTaint(partition_ref=ref, reason="late audit", only_this_ref=True) for ref in old_refs]
    database.log.append([envelope(taint, source=manual("auditor")) for taint in taints])
    with Database.open(f"sqlite:///{tmp_path}/scratch.db", auto_upgrade=True) as scratch:
        records = scratch.changes.records
        with RowWriter(records, in_child=True) as writer:
            working = replay_in_working_set(database.log, records, every=250, writer=writer)
        full = load_state(database.log)[0]
        assert len(dict.keys(working.state.instances)) < len(full.instances) // 5  # the rest cold
        assert working.faults.read_back["instance"] >= len(old_refs)  # read back from the child's rows
        assert working_set_digest(working, records) == state_digest(full)


def test_a_read_waits_for_the_rows_handed_to_the_child(scratch: RecordStore) -> None:
    assert scratch.engine.url.database is not None
    blocker = sqlite3.connect(scratch.engine.url.database, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # the child's write waits for this lock
    found: list[object] = []
    with RowWriter(scratch, in_child=True) as writer:
        writer.submit(_rows("a", "b"))
        rows = StoreRows(scratch, lambda: 10, before_read=writer.wait)
        reader = threading.Thread(target=lambda: found.append(rows.many("ref", ["a", "b"])))
        reader.start()
        reader.join(0.5)
        assert reader.is_alive() and found == []  # waiting for the span, not reading without its rows
        blocker.rollback()
        blocker.close()
        reader.join(30)
    assert found == [{"a": "uuid-a", "b": "uuid-b"}]  # the canonical pointers the rows hold


def test_a_span_the_child_cannot_write_stops_the_replay_with_why(scratch: RecordStore) -> None:
    with scratch.engine.begin() as conn:
        conn.execute(sa.text(f"DROP TABLE {state_records.name}"))
    writer = RowWriter(scratch, in_child=True)
    writer.submit(_rows("a"))
    with pytest.raises(ScratchWriteFailed, match=r"writing the scratch rows failed: .*no such table: state_records"):
        writer.wait()
    writer.submit(_rows("b"))  # the child goes on answering
    with pytest.raises(ScratchWriteFailed, match="no such table"):
        writer.close()


def test_a_child_gone_is_said(scratch: RecordStore) -> None:
    writer = RowWriter(scratch, in_child=True)
    assert writer._child is not None
    os.kill(writer._child.pid, signal.SIGKILL)
    writer._child.wait()
    with pytest.raises(ScratchWriteFailed, match=r"the scratch rows' writer exited \(-9\)"):
        writer.submit(_rows("a"))
    writer.close()  # nothing more to say


def test_the_child_is_told_its_database_on_its_standard_input_not_its_command_line(scratch: RecordStore) -> None:
    with RowWriter(scratch, in_child=True) as writer:
        assert writer._child is not None
        with open(f"/proc/{writer._child.pid}/cmdline", "rb") as cmdline:
            argv = cmdline.read().split(b"\0")
        assert scratch.engine.url.database is not None
        assert not any(scratch.engine.url.database.encode() in arg for arg in argv)  # `ps` would show a password
        writer.submit(_rows("a"))
        writer.wait()
    with scratch.engine.connect() as conn:
        assert scratch.rows(conn, [(REF, "a")])  # and it wrote there


def test_a_comparison_the_child_cannot_make_is_said_without_the_url(scratch: RecordStore, tmp_path: Path) -> None:
    """The real store's URL goes to the child on its standard input, and a failure to read it never says it."""
    secret = "hunter2-not-said"
    real = ChangeStore(sa.create_engine(f"postgresql+psycopg://reader:{secret}@127.0.0.1:9/nowhere"))
    with RowWriter(scratch, ChangeStore(scratch.engine), in_child=True) as writer:
        writer.compare(real, 10, whole=True)
        with pytest.raises(ScratchWriteFailed, match="comparing the stores failed: OperationalError") as failed:
            writer.differences()
        assert secret not in str(failed.value)
        writer.submit(_rows("a"))  # the child goes on
        writer.wait()
    with pytest.raises(RuntimeError, match="no comparison was handed over"):
        RowWriter(scratch).differences()
    with RowWriter(scratch, ChangeStore(scratch.engine), in_child=True) as unasked:  # (its caller failed first)
        unasked.compare(real, 10, whole=True)
        child = unasked._child
    assert child is not None and child.returncode == 0  # the answer read and let go, the child gone


@pytest.mark.parametrize("name", ["v1", "cancel_retention", "outcomes"])
def test_a_bounded_verify_writing_from_a_child_agrees_with_the_store_projected(database: Database, name: str) -> None:
    """The spans' rows, changes and counts from the child (a retention's span in line: "v1", "cancel_retention")."""
    events = read_events(name)
    projected_while_growing(database, events)
    report = bounded_verify(database.log, database.changes, every=5, in_child=True)
    assert report.problems == [] and report.verified and report.state_seq == len(events)
    with database.changes.records.engine.begin() as conn:  # the last count row tampered with: said
        kind, state, seq = conn.execute(
            sa.select(state_counts.c.kind, state_counts.c.state, state_counts.c.seq).order_by(state_counts.c.seq.desc())
        ).first() or pytest.fail("no count rows")
        key = (state_counts.c.kind == kind, state_counts.c.state == state, state_counts.c.seq == seq)
        conn.execute(sa.update(state_counts).where(*key).values(total=999))
    touched = bounded_verify(database.log, database.changes, every=5, in_child=True)
    assert touched.problems and touched.problems[0].startswith("the state store's counts differ from the replay's")
