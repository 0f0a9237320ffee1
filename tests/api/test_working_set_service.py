"""A service over a live state that holds its working set (what `up --working-set` serves): its reads come from
the state store its own projector keeps (a read replica of its own database), its writes are checked against
the working set. A write is read back with `min_seq`; the answers are a whole state's over the same log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from partbuild.api.app import create_app
from partbuild.api.service import Service
from partbuild.state.database import Database
from partbuild.state.log.live import LiveState
from partbuild.state.store.checkpoints import keep_working_set
from partbuild.state.store.cold_start import load_working_set
from partbuild.state.store.projector import Projector
from partbuild.state.store.reader import StoreReader

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
        keep_working_set(live, projector, live.working)
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
