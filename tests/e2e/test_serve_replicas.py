"""Two `partbuild serve` replicas and an `up` on one PostgreSQL database, as real processes (issue 37); and
a read replica (`serve --replica`) beside them, which folds nothing and answers from the state store.

A want written through one replica is read on the other with `min_seq` (read your writes across processes);
`up` builds it; both replicas answer the same counts and changes, as of the head and of an earlier seq; a
replica killed with SIGKILL loses nothing: the other goes on answering, and the restarted one answers as it
did, its state store projected by whoever got there first and checked by `replay --verify`. A replica on a
read-only session (what a hot standby gives) answers reads from the store the others projected, projects
nothing itself, and refuses writes with a 503.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from partbuild.state.database import Database

from pgkit import read_only_url
from upkit import REPORT_GRAPH, ApiProcess, free_port, partbuild_exe, started, wait_healthy
from waitkit import wait_for

pytestmark = pytest.mark.process


class Replica(ApiProcess):
    """A `serve` process on a port of its own, restartable; `read_replica`: `serve --replica`."""

    def __init__(self, name: str, db: str, folder: Path, stack: ExitStack, *, read_replica: bool = False) -> None:
        self.name, self.db, self.folder, self.stack = name, db, folder, stack
        self.read_replica = read_replica
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> Replica:
        self.starts += 1
        log_file = self.folder / f"{self.name}-{self.starts}.log"
        command = [partbuild_exe(), "serve", "--db", self.db, "--port", str(self.port)]
        command += ["--replica"] if self.read_replica else []
        self.process = self.stack.enter_context(started(command, log_file))
        wait_healthy(self.url, self.process, 60, log_file)
        return self


@pytest.fixture
def replicas(db: str, tmp_path: Path) -> Iterator[tuple[Replica, Replica, str]]:
    graph = tmp_path / "graph.py"
    graph.write_text(REPORT_GRAPH)
    with ExitStack() as stack:
        a = Replica("a", db, tmp_path, stack).start()
        b = Replica("b", db, tmp_path, stack).start()
        up_port = free_port()
        command = [partbuild_exe(), "up", "--db", db, "--graph", str(graph), "--port", str(up_port)]
        command += ["--warehouse", str(tmp_path / "warehouse")]
        up_log = tmp_path / "up.log"
        up = stack.enter_context(started(command, up_log))
        wait_healthy(f"http://127.0.0.1:{up_port}", up, 60, up_log)
        yield a, b, f"http://127.0.0.1:{up_port}"


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_a_want_written_on_one_replica_is_read_on_another_and_a_killed_replica_loses_nothing(
    replicas: tuple[Replica, Replica, str], db: str
) -> None:
    a, b, _up = replicas
    refs = [f"report/{n}" for n in range(6)]
    seq = a.want(refs, "w")
    assert b.get("/wants/w", min_seq=seq)["want_id"] == "w"  # b folds up to the seq before it answers

    wait_for("built by up", lambda: b.get("/wants/w")["state"] == "successful", 120)
    head = b.get("/counts")["seq"]
    for replica in (a, b):
        wait_for(f"{replica.name} caught up", lambda r=replica: r.get("/counts", min_seq=head)["seq"] >= head, 30)
    assert a.get("/counts", as_of_seq=head) == b.get("/counts", as_of_seq=head)
    assert a.get("/counts", as_of_seq=seq) == b.get("/counts", as_of_seq=seq)
    assert a.get("/changes", from_seq=0, to_seq=head, limit=1000) == b.get(
        "/changes", from_seq=0, to_seq=head, limit=1000
    )
    assert b.get("/counts", as_of_seq=head)["instances"]["live"] == len(refs)

    assert a.process is not None
    a.process.send_signal(signal.SIGKILL)
    a.process.wait(timeout=30)
    assert b.get("/wants/w")["state"] == "successful"  # the other replica goes on answering
    a.start()
    assert a.get("/wants/w", min_seq=head)["state"] == "successful"
    assert a.get("/counts", as_of_seq=seq) == b.get("/counts", as_of_seq=seq)
    with Database.open(db) as database:
        wait_for("projected up to the head", lambda: database.changes.watermark() >= head, 60)
    standby = Replica("standby", read_only_url(db), a.folder, a.stack).start()  # as on a hot standby
    assert standby.get("/wants/w", min_seq=head)["state"] == "successful"
    assert standby.get("/counts", as_of_seq=seq) == b.get("/counts", as_of_seq=seq)  # the primary's store
    refused = httpx.post(f"{standby.url}/api/v1/wants", json={"refs": ["report/9"]}, timeout=30)
    assert refused.status_code == 503 and "read-only" in refused.json()["detail"]
    said = (a.folder / "standby-1.log").read_text()
    assert "the database is read-only" in said and "projecting the state's changes failed" not in said
    audit = subprocess.run(
        [partbuild_exe(), "replay", "--db", db, "--verify"], capture_output=True, text=True, timeout=300
    )
    assert audit.returncode == 0, audit.stdout + audit.stderr


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_a_read_replica_reads_your_writes_from_the_store_and_refuses_writes(
    replicas: tuple[Replica, Replica, str], db: str, tmp_path: Path
) -> None:
    a, b, _up = replicas
    refs = [f"report/{n}" for n in range(5)]
    seq = a.want(refs, "w")
    with Database.open(db) as database:  # a read replica starts on a store someone has projected
        wait_for("the store projected", lambda: database.changes.records.watermark() >= seq, 60)
    reader = Replica("reader", db, tmp_path, a.stack, read_replica=True).start()
    assert reader.get("/wants/w", min_seq=seq)["want_id"] == "w"

    wait_for("built by up", lambda: reader.get("/wants/w")["state"] == "successful", 120)
    head = reader.get("/counts")["seq"]
    assert reader.get("/counts", as_of_seq=head) == b.get("/counts", as_of_seq=head, min_seq=head)
    for path in ("/partitions", "/job-runs", "/wants"):  # lists from the store's index, as a folding server's
        assert reader.get(path, as_of_seq=head, limit=3) == b.get(path, as_of_seq=head, limit=3), path
    assert reader.get("/partitions/canonical/report/3") == b.get("/partitions/canonical/report/3")

    refused = httpx.post(f"{reader.url}/api/v1/wants", json={"refs": ["report/9"]}, timeout=30)
    assert refused.status_code == 503 and "read replica" in refused.json()["detail"], refused.text
    assert b.get("/wants", ref="report/9")["items"] == []  # nothing was written

    assert reader.process is not None
    reader.process.send_signal(signal.SIGKILL)
    reader.process.wait(timeout=30)
    reader.start()
    assert reader.get("/wants/w")["state"] == "successful"
    assert reader.get("/counts", as_of_seq=seq) == b.get("/counts", as_of_seq=seq)
    said = (tmp_path / "reader-2.log").read_text()
    assert "a read replica of the state store (at seq" in said, said


def test_a_read_replica_of_a_store_nobody_projected_exits_2(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'fresh.db'}"
    with Database.open(db, auto_upgrade=True):
        pass
    done = subprocess.run(
        [partbuild_exe(), "serve", "--replica", "--db", db, "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().count("\n") == 0 and "not projected yet" in done.stderr, done.stderr
