"""`partbuild serve` on a real PostgreSQL hot standby (streaming replication from a primary of the test's own,
tests/kits/standbykit.py): it starts, follows what the primary's writers append as the standby replays it
(polling: a standby cannot LISTEN), answers reads, from the state store the primary's server projected
too, and refuses writes with a 503, projecting and snapshotting nothing itself."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest

from partbuild.state.database import Database

from standbykit import hot_standby
from upkit import free_port, partbuild_exe, started, wait_healthy
from waitkit import wait_for

pytestmark = pytest.mark.process


def test_a_server_on_a_hot_standby_reads_what_the_primary_writes_and_refuses_writes(tmp_path: Path) -> None:
    with hot_standby() as (primary, standby):
        exe = partbuild_exe()
        subprocess.run([exe, "db", "upgrade", "--db", primary], check=True, capture_output=True, timeout=120)
        ports = free_port(), free_port()
        writer = [exe, "serve", "--db", primary, "--port", str(ports[0])]
        reader = [exe, "serve", "--db", standby, "--port", str(ports[1])]
        urls = [f"http://127.0.0.1:{port}/api/v1" for port in ports]
        with (
            started(writer, tmp_path / "primary.log") as on_primary,
            started(reader, tmp_path / "standby.log") as on_standby,
        ):
            wait_healthy(urls[0].removesuffix("/api/v1"), on_primary, 60, tmp_path / "primary.log")
            wait_healthy(urls[1].removesuffix("/api/v1"), on_standby, 60, tmp_path / "standby.log")
            written = httpx.post(f"{urls[0]}/wants", json={"refs": ["a/1", "a/2"], "want_id": "w"}, timeout=30)
            assert written.status_code == 201, written.text
            seq = written.json()["seq"]

            def replicated() -> bool:  # a seq the standby has not replayed yet is a 409: ask again
                return httpx.get(f"{urls[1]}/wants/w", params={"min_seq": seq}, timeout=30).status_code == 200

            wait_for("read on the standby", replicated, 60)
            with Database.open(primary) as db:
                wait_for("projected by the primary's server", lambda: db.changes.watermark() >= seq, 60)
            counts = httpx.get(f"{urls[1]}/counts", params={"as_of_seq": seq}, timeout=30).json()
            assert counts["wants"]["idle"] == 1 and counts["instances"]["missing"] == 2
            refused = httpx.post(f"{urls[1]}/wants", json={"refs": ["a/3"]}, timeout=30)
            assert refused.status_code == 503 and "send writes to a server on the primary" in refused.json()["detail"]
            # Later appends reach the standby's server without a request asking for them (it polls the log).
            later = httpx.post(f"{urls[0]}/wants", json={"refs": ["a/4"], "want_id": "later"}, timeout=30)
            later_seq = later.json()["seq"]
            wait_for("tailed", lambda: httpx.get(f"{urls[1]}/counts", timeout=30).json()["seq"] >= later_seq, 60)
        said = (tmp_path / "standby.log").read_text()
        assert "the database is read-only" in said
        assert "Traceback" not in said and "failed" not in said, said
        with Database.open(primary) as db:
            assert db.log.head() == later_seq  # the refused write is not in the log
        with Database.open(standby) as db:
            assert db.read_only() and db.log.append_listener() is None  # no LISTEN in recovery: readers poll
