"""`partbuild up --working-set` as a real process (issue 37): it holds only what decisions need, answers reads
from the state store, builds what is wanted, and after SIGKILL starts again from the log and the store's rows
(most records left in the rows), losing nothing, and after a clean stop from the working set it saved;
`replay --verify` then finds the store as a replay makes it."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from partbuild.state.schema import PROJECTOR_STALE_MS

from upkit import REPORT_GRAPH, ApiProcess, free_port, partbuild_exe, started, wait_healthy
from waitkit import wait_for

pytestmark = pytest.mark.process

HELD = re.compile(r"holding a working set at seq (\d+)([^:]*): (\d+) records in memory, (\d+) in the store's rows")


class Up(ApiProcess):
    def __init__(self, db: str, folder: Path, stack: ExitStack, *options: str) -> None:
        self.db, self.folder, self.stack, self.options = db, folder, stack, list(options)
        (folder / "graph.py").write_text(REPORT_GRAPH)
        self.url = f"http://127.0.0.1:{free_port()}"
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> Up:
        self.starts += 1
        command = [partbuild_exe(), "up", "--db", self.db, "--graph", str(self.folder / "graph.py")]
        command += ["--port", self.url.rsplit(":", 1)[1], "--warehouse", str(self.folder / "wh"), "--working-set"]
        command += self.options
        self.process = self.stack.enter_context(started(command, self.log))
        wait_healthy(self.url, self.process, 60, self.log)
        return self

    @property
    def log(self) -> Path:
        return self.folder / f"up-{self.starts}.log"


def test_up_holding_its_working_set_builds_reads_its_writes_and_starts_again_from_the_rows(
    db: str, tmp_path: Path
) -> None:
    with ExitStack() as stack:
        up = Up(db, tmp_path, stack).start()
        seq = up.want([f"report/{n}" for n in range(12)], "first")
        assert up.get("/wants/first", min_seq=seq)["want_id"] == "first"  # from the store, once projected
        wait_for("built", lambda: up.get("/wants/first")["state"] == "successful", 120)
        assert up.get("/counts")["instances"]["live"] == 12

        assert up.process is not None
        up.process.send_signal(signal.SIGKILL)
        up.process.wait(timeout=30)
        up.start()
        loaded = HELD.search(up.log.read_text())
        assert loaded is not None and int(loaded.group(4)) > 0, up.log.read_text()  # most records left in the rows
        assert up.get("/wants/first")["state"] == "successful"
        seq = up.want([f"report/{n}" for n in range(8, 20)], "second")  # 4 Live already, 8 to build
        wait_for("built again", lambda: up.get("/wants/second", min_seq=seq)["state"] == "successful", 120)
        head = up.get("/counts")["seq"]
        assert up.get("/counts", as_of_seq=head)["instances"]["live"] == 20
        assert up.get("/partitions/canonical/report/3")["state"] == "live"
        up.process.send_signal(signal.SIGTERM)
        assert up.process.wait(timeout=60) == 0
        assert "saved the working set at seq" in up.log.read_text()

        up.start()  # after a clean stop: from the working set it saved, the tail folded
        loaded = HELD.search(up.log.read_text())
        assert loaded is not None and "from its checkpoint at seq" in loaded.group(2), up.log.read_text()
        assert up.get("/wants/second")["state"] == "successful"
        assert up.get("/counts", as_of_seq=head)["instances"]["live"] == 20
        up.process.send_signal(signal.SIGTERM)
        assert up.process.wait(timeout=60) == 0
    audit = subprocess.run([partbuild_exe(), "replay", "--db", db, "--verify"], capture_output=True, text=True)
    assert audit.returncode == 0, audit.stdout + audit.stderr


def test_up_killed_after_a_checkpoint_starts_from_it_however_far_its_rows_moved_since(db: str, tmp_path: Path) -> None:
    with ExitStack() as stack:
        up = Up(db, tmp_path, stack, "--snapshot-every", "10").start()  # once: the first build is 10 events
        seq = up.want([f"report/{n}" for n in range(10)], "first")
        wait_for("built", lambda: up.get("/wants/first", min_seq=seq)["state"] == "successful", 120)
        wait_for("a checkpoint", lambda: "saved the working set at seq" in up.log.read_text(), 30)
        saved = max(int(n) for n in re.findall(r"saved the working set at seq (\d+)", up.log.read_text()))
        seq = up.want([f"report/{n}" for n in range(5, 12)], "second")  # 5 Live already (their rows move on)
        wait_for("built again", lambda: up.get("/wants/second", min_seq=seq)["state"] == "successful", 120)
        head = up.get("/counts")["seq"]
        before = [up.get(f"/partitions/canonical/report/{n}") for n in range(12)]
        assert up.process is not None
        up.process.send_signal(signal.SIGKILL)
        up.process.wait(timeout=30)

        up.start()
        loaded = HELD.search(up.log.read_text())
        assert loaded is not None, up.log.read_text()
        checkpoint = re.search(r"from its checkpoint at seq (\d+), the rows' at (\d+)", loaded.group(2))
        assert checkpoint is not None, loaded.group(0)  # not replayed from seq 0
        assert saved <= int(checkpoint.group(1)) < int(checkpoint.group(2)) <= head
        assert [up.get(f"/partitions/canonical/report/{n}", min_seq=head) for n in range(12)] == before
        assert up.get("/counts", as_of_seq=head)["instances"]["live"] == 12
        up.process.send_signal(signal.SIGTERM)
        assert up.process.wait(timeout=60) == 0
    audit = subprocess.run([partbuild_exe(), "replay", "--db", db, "--verify"], capture_output=True, text=True)
    assert audit.returncode == 0, audit.stdout + audit.stderr


def test_serve_holding_its_working_set_reads_its_writes_and_saves_it_at_a_clean_stop(db: str, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    command = [partbuild_exe(), "serve", "--db", db, "--port", url.rsplit(":", 1)[1], "--working-set"]
    server = ApiProcess()
    server.url = url
    first: Any = None
    for start in (1, 2):
        log = tmp_path / f"serve-{start}.log"
        with started(command, log) as process:
            wait_healthy(url, process, 60, log)
            if start == 1:
                seq = server.want(["report/1", "report/2"], "mine")
                first = server.get("/wants/mine", min_seq=seq)
                assert first["refs"] == ["report/1", "report/2"]
            else:
                assert "from its checkpoint at seq" in log.read_text()
                assert server.get("/wants/mine") == first
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=60) == 0
        assert "saved the working set at seq" in log.read_text()


def test_a_working_set_is_refused_on_a_read_replica(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'fresh.db'}"
    done = subprocess.run(
        [partbuild_exe(), "serve", "--replica", "--working-set", "--db", db, "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, done.stdout + done.stderr
    assert "--working-set folds the log and projects its store: not on a read replica" in done.stderr


def test_up_holding_its_working_set_beside_a_folding_server_builds_what_it_is_asked_there(
    db: str, tmp_path: Path
) -> None:
    """`up --working-set` beside a `serve` that folds the log and projects the store too: wants written on the
    server are built by `up`, whose fold reads its cold records back as of its own head while the server writes
    the rows past it; killed and started again beside it, nothing is lost; the audit finds the store whole."""
    with ExitStack() as stack:
        server, serving, serve_log = _folding_server(db, tmp_path, stack)
        up = Up(db, tmp_path, stack, "--snapshot-every", "20").start()
        assert "another process projects this database's state store" in up.log.read_text()
        seq = server.want([f"report/{n}" for n in range(10)], "first")
        wait_for("built", lambda: server.get("/wants/first", min_seq=seq)["state"] == "successful", 120)
        seq = server.want([f"report/{n}" for n in range(5, 14)], "second")  # 5 Live already: read back to decide
        wait_for("built again", lambda: server.get("/wants/second", min_seq=seq)["state"] == "successful", 120)
        assert up.process is not None
        up.process.send_signal(signal.SIGKILL)
        up.process.wait(timeout=30)
        seq = server.want([f"report/{n}" for n in range(12, 16)], "third")  # while it is down
        up.start()
        wait_for("built after", lambda: server.get("/wants/third", min_seq=seq)["state"] == "successful", 120)
        head = server.get("/counts")["seq"]
        assert up.get("/counts", min_seq=head)["instances"]["live"] == 16 == server.get("/counts")["instances"]["live"]
        assert up.get("/partitions/canonical/report/3", min_seq=head) == server.get("/partitions/canonical/report/3")
        for process, log in ((up.process, up.log), (serving, serve_log)):
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=60) == 0
            assert "cannot read its cold records back" not in log.read_text()
    audit = subprocess.run([partbuild_exe(), "replay", "--db", db, "--verify"], capture_output=True, text=True)
    assert audit.returncode == 0, audit.stdout + audit.stderr


def test_run_holding_its_working_set_builds_until_idle_and_starts_again_from_its_checkpoint(
    db: str, tmp_path: Path
) -> None:
    """`partbuild run --working-set` (a group worker's way): it projects its own rows, evicts after each pass and
    saves its working set at its stop; the next run loads it and folds only the tail."""
    (tmp_path / "graph.py").write_text(REPORT_GRAPH)
    command = [partbuild_exe(), "run", "--db", db, "--graph", str(tmp_path / "graph.py")]
    command += ["--warehouse", str(tmp_path / "wh"), "--working-set", "--until-idle", "--timeout", "120"]
    for start, refs in enumerate(([f"report/{n}" for n in range(10)], [f"report/{n}" for n in range(6, 14)])):
        wanted = subprocess.run([partbuild_exe(), "want", "--db", db, *refs], capture_output=True, text=True)
        assert wanted.returncode == 0, wanted.stderr
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        said = done.stdout + done.stderr
        assert done.returncode == 0, said
        loaded = HELD.search(said)
        assert loaded is not None and "saved the working set at seq" in said, said
        assert ("from its checkpoint at seq" in loaded.group(2)) == (start == 1), loaded.group(0)
        assert f"wants successful {start + 1}" in said, said  # (the summary line)
    audit = subprocess.run([partbuild_exe(), "replay", "--db", db, "--verify"], capture_output=True, text=True)
    assert audit.returncode == 0, audit.stdout + audit.stderr


def test_up_paused_past_its_registration_loads_its_working_set_again_and_builds_on(
    sqlite_url: str, tmp_path: Path
) -> None:
    """`up` (its working set) stopped by SIGSTOP for longer than a registration lives, beside a `serve` that
    folds and projects: meanwhile partitions `up` left cold are tainted and wanted again there, and their rows
    rewritten with no version kept for it. Continued, `up` cannot read them back as of its head: it loads its
    working set again from the store, its orchestrator starts again on it, and it builds them; the audit
    finds the store whole. On SQLite only (it waits out a registration, 30 s): PostgreSQL's side is the
    in-process tests' (tests/state/store/test_working_set_beside.py, tests/orchestrator)."""
    db = sqlite_url
    with ExitStack() as stack:
        server, serving, _ = _folding_server(db, tmp_path, stack)
        up = Up(db, tmp_path, stack).start()
        seq = server.want([f"report/{n}" for n in range(8)], "first")
        wait_for("built", lambda: server.get("/wants/first", min_seq=seq)["state"] == "successful", 120)
        wait_for("gone cold", lambda: _working_set(up)['records{where="store"}'] >= 16, 60)  # 8 instances, refs
        assert up.process is not None
        up.process.send_signal(signal.SIGSTOP)
        try:
            time.sleep((PROJECTOR_STALE_MS + 2_000) / 1000)  # its registration goes stale
            for n in (1, 2):
                tainted = subprocess.run(
                    [partbuild_exe(), "taint", "--server", server.url, f"report/{n}", "--only-this-ref"],
                    capture_output=True,
                    text=True,
                )
                assert tainted.returncode == 0, tainted.stdout + tainted.stderr
            seq = server.want(["report/1", "report/2", "report/9"], "again")
            time.sleep(3)  # the server's projector rewrites their rows (passes every second)
        finally:
            up.process.send_signal(signal.SIGCONT)
        wait_for("built again", lambda: server.get("/wants/again", min_seq=seq)["state"] == "successful", 120)
        said = up.log.read_text()
        assert "loading it again from the store" in said and "a new orchestrator starts" in said, said
        assert httpx.get(f"{up.url}/healthz", timeout=30).json()["status"] == "ok"
        assert _working_set(up)["loaded_again_total"] == 1
        head = server.get("/counts")["seq"]
        assert up.get("/counts", min_seq=head)["instances"] == server.get("/counts")["instances"]
        for process in (up.process, serving):
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=60) == 0
    audit = subprocess.run([partbuild_exe(), "replay", "--db", db, "--verify"], capture_output=True, text=True)
    assert audit.returncode == 0, audit.stdout + audit.stderr


def _working_set(up: Up) -> dict[str, float]:
    """`up`'s working-set samples in /metrics, by name after `partbuild_working_set_`."""
    text = httpx.get(f"{up.url}/metrics", timeout=30).text
    prefix = "partbuild_working_set_"
    samples = (line.rsplit(" ", 1) for line in text.splitlines() if line.startswith(prefix))
    return {name.removeprefix(prefix): float(value) for name, value in samples}


def _folding_server(db: str, folder: Path, stack: ExitStack) -> tuple[ApiProcess, subprocess.Popen[bytes], Path]:
    """A `serve` of `db` that folds the log and projects the store (its whole state), healthy: what to ask it,
    its process, its log."""
    port = free_port()
    log = folder / "serve.log"
    process = stack.enter_context(started([partbuild_exe(), "serve", "--db", db, "--port", str(port)], log))
    server = ApiProcess()
    server.url = f"http://127.0.0.1:{port}"
    wait_healthy(server.url, process, 60, log)
    return server, process, log
