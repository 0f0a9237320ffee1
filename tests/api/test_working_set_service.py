"""A service over a live state that holds its working set (what `up --working-set` serves): its reads come from
the state store its own projector keeps (a read replica of its own database), its writes are checked against
the working set. A write is read back with `min_seq`; the answers are a whole state's over the same log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from partbuild.api.app import create_app
from partbuild.api.service import Service
from partbuild.state.database import Database
from partbuild.state.fold.cold import REF
from partbuild.state.log.live import LiveState
from partbuild.state.store.checkpoints import keep_working_set
from partbuild.state.store.cold_start import load_working_set
from partbuild.state.store.projector import Projector
from partbuild.state.store.reader import StoreReader
from partbuild.state.store.records import REF as REF_ROW

from timetravelkit import SMALL_PLAN, w1_history


@pytest.fixture
def working(tmp_path: Path) -> Iterator[tuple[Database, Service]]:
    with Database.open(f"sqlite:///{tmp_path / 'w.db'}", auto_upgrade=True) as db:
        events = w1_history(SMALL_PLAN)
        db.log.append(events[: len(events) // 2])
        assert Projector(LiveState(db.log, use_snapshots=False), db.changes).project() == len(events) // 2
        db.log.append(events[len(events) // 2 :])
        live = LiveState(db.log, load=lambda log, progress: load_working_set(log, db.changes))
        assert live.working is not None and sum(live.working.faults.evicted.values()) > 0
        projector = Projector(live, db.changes)
        keep_working_set(live, projector)
        projector.start(0.02)
        try:
            yield db, Service(db, live=live)
        finally:
            projector.stop()


def test_a_working_set_s_service_reads_the_store_and_reads_its_writes(working: tuple[Database, Service]) -> None:
    db, service = working
    assert isinstance(service.reads, StoreReader)
    refs = ["agg/daily_clicks/site=s0/date=2026-03-01", "agg/daily_clicks/site=s1/date=2026-03-01"]
    with TestClient(create_app(service)) as client:
        written = client.post("/api/v1/wants", json={"refs": refs, "want_id": "mine"})
        assert written.status_code == 201, written.text
        seq = written.json()["seq"]
        assert client.get("/api/v1/wants/mine", params={"min_seq": seq}).json()["refs"] == refs
        canceled = client.post("/api/v1/wants/mine/cancel", json={"reason": "changed my mind"})
        assert canceled.status_code == 200, canceled.text
        after = canceled.json()["seq"]
        assert client.get("/api/v1/wants/mine", params={"min_seq": after}).json()["state"] == "canceled"
        ours = {path: _ok(client, path, after) for path in PATHS}
    whole = Service(db)  # a whole state over the same log: the reference
    with TestClient(create_app(whole)) as client:
        for path in PATHS:
            assert _ok(client, path, after) == ours[path], path


PATHS = ("/counts", "/wants/mine", "/wants?limit=5", "/job-runs?limit=5", "/partitions?limit=5")


def _ok(client: TestClient, path: str, seq: int) -> object:
    answer = client.get(f"/api/v1{path}", params={"as_of_seq": seq})
    assert answer.status_code == 200, (path, answer.text)
    return answer.json()


def test_a_working_set_s_service_answers_a_read_after_its_write_without_min_seq(
    working: tuple[Database, Service],
) -> None:
    """As a whole state's does: what it wrote is there at once (the read waits for its projector's pass)."""
    _, service = working
    refs = ["agg/daily_clicks/site=s2/date=2026-03-01"]
    with TestClient(create_app(service)) as client:
        for n in range(5):
            written = client.post("/api/v1/wants", json={"refs": refs, "want_id": f"at-once-{n}"})
            assert written.status_code == 201, written.text
            answer = client.get(f"/api/v1/wants/at-once-{n}")
            assert answer.status_code == 200, answer.text
            assert answer.json()["refs"] == refs


def test_a_working_set_s_metrics_count_from_the_store_and_gauge_its_small_records(
    working: tuple[Database, Service],
) -> None:
    """The same gauges as a whole state's over the same log (the counts from the store, the groups', sources',
    subscriptions' and schedules' from the small records it holds, the check results' tally the fold keeps);
    and its own: its records in memory and in the store, the times it was loaded again."""
    db, service = working
    with TestClient(create_app(service)) as client:
        seq = client.post("/api/v1/wants", json={"refs": ["report/1"], "want_id": "m"}).json()["seq"]
        client.get("/api/v1/wants/m", params={"min_seq": seq})
        ours = _gauges(client.get("/metrics").text)
    with TestClient(create_app(Service(db))) as client:
        theirs = _gauges(client.get("/metrics").text)
    working = {"partbuild_working_set_records", "partbuild_working_set_loaded_again_total"}  # a working set's only
    assert set(theirs) == set(ours) - working
    live = service.live
    assert live.working is not None
    held, cold = live.working.sizes()
    assert held > 0 and cold > 0  # (it evicted at its load)
    assert ours["partbuild_working_set_records"] == [
        f'partbuild_working_set_records{{where="memory"}} {held:.1f}',
        f'partbuild_working_set_records{{where="store"}} {cold:.1f}',
    ]
    assert ours["partbuild_working_set_loaded_again_total"] == ["partbuild_working_set_loaded_again_total 0.0"]
    counted = ("partbuild_wants", "partbuild_job_runs", "partbuild_instances", "partbuild_check_results_total")
    for name in (*counted, "partbuild_log_head_seq"):
        assert ours[name] == theirs[name] and ours[name], name
    assert "partbuild_schedule_last_tick_failed" in ours


def _gauges(text: str) -> dict[str, list[str]]:
    """The samples of each metric family but the latencies' histograms, by family."""
    families: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE ") and not line.endswith(" histogram"):
            families[line.split()[2]] = []
        elif line and not line.startswith("#"):
            name = line.split("{")[0].split(" ")[0]
            if name in families:
                families[name].append(line)
    return families


def test_a_write_the_working_set_cannot_read_back_for_is_a_503_that_says_whether_it_was_written(
    working: tuple[Database, Service],
) -> None:
    """The store's rows unreadable for a moment (their table renamed away), of a ref the working set left cold:
    a taint, whose check reads it, is answered 503 with Retry-After and nothing is appended; a want, appended
    (its check needs no record) but not folded (the fold reads the ref), is answered 503 saying it was written
    and at which seq, and is there to read once the rows are back. The causes are logged, never answered."""
    db, service = working
    live = service.live
    assert live.working is not None
    rows = db.changes.records.all_rows()
    cold = next(key for kind, key, *_ in rows if kind == REF_ROW and not live.working.is_held(REF, key))
    engine = db.changes.records.engine
    with TestClient(create_app(service)) as client:
        head = db.log.head()
        with engine.begin() as conn:
            conn.execute(sa.text("ALTER TABLE state_records RENAME TO state_records_away"))
        try:
            tainted = client.post("/api/v1/partitions/taint", json={"ref": cold, "reason": "bad"})
            after_taint = db.log.head()
            wanted = client.post("/api/v1/wants", json={"refs": [cold], "want_id": "later"})
        finally:
            with engine.begin() as conn:
                conn.execute(sa.text("ALTER TABLE state_records_away RENAME TO state_records"))
        assert tainted.status_code == 503 and tainted.headers["Retry-After"] == "1", tainted.text
        assert tainted.json()["detail"] == "the state store could not be read to check this write; try again"
        assert after_taint == head  # nothing written
        assert wanted.status_code == 503 and wanted.headers["Retry-After"] == "1", wanted.text
        written = db.log.head()
        assert written == head + 1
        assert wanted.json()["detail"] == (
            f"written at seq {written}, but not folded yet (the state store could not be read): "
            f"read it back with min_seq={written}"
        )
        assert "state_records" not in tainted.text + wanted.text
        assert client.get("/api/v1/wants/later", params={"min_seq": written}).json()["refs"] == [cold]
