"""`partbuild up` holding its working set (the default, `--working-set`) against `partbuild up --whole-state`, as
real processes on one W1 log, in one run (issue 37).

Builds (or reuses, `--db FILE`) a SQLite W1 log of `--instances` and projects its state store once (what `db
upgrade` or a first `up` does). Then, for each mode, on a byte-for-byte copy of that file: `up` started twice
(`cold`: the whole state replays the log, a working set loads from the log and the store's rows; `restart`: the
whole state from the snapshot its first start wrote, the working set as before), each measured until healthy,
then `--settle` seconds of its orchestrator's steps and `--reads` point reads over HTTP (wants, job runs and
refs' canonical instances picked at random, now), then stopped with SIGTERM. Then `crash`: `up` started again,
`--crash-events` wants appended to the log behind its back (each naming 4 Live refs, so its fold reads their
records back and their rows move on; the last 10,000 after a pause, once the rest are folded and projected),
killed with SIGKILL once it has folded and projected them all, and
started a last time (the whole state from its newest snapshot and the tail; the working set from its newest
checkpoint, saved every 50,000 events, and the tail), measured as the others. Printed per run: the time to
healthy, the resident memory after the reads and the peak (VmRSS, VmHWM of the Python process; the Spark JVM
starts only for a job run, none here), and the reads' p50/p99. Then the working set's memory as a ratio of the
whole state's, same run.

    .venv/bin/python bench/up_working_set.py [--db FILE] [--instances 1000000] [--settle 20] [--reads 300]
        [--crash-events 60000]

Target (the issue's): `up` resident <= 2 GiB at 10M instances, about 215 bytes an instance: at 1M, 205 MiB
over the interpreter's baseline (the figure printed beside it).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx
import sqlalchemy as sa
from _common import machine, percentile, w1_log
from replica_serve import sample_ids
from up_memory import DEFAULT_GRAPH, READY_LINE, child_env, proc_memory, sidecars

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.log.store import EventLog
from partbuild.state.queries.cells import CELL_CODES
from partbuild.state.schema import state_cells
from partbuild.state.store.records import REF, RUN, WANT

MIB = 1 << 20
TARGET_BYTES_PER_INSTANCE = (2 << 30) / 10_000_000
EXECUTABLE = Path(sys.executable).parent / "partbuild"
MODES = {"whole": ["--whole-state"], "working set": ["--working-set"]}


@dataclass
class Run:
    mode: str
    scenario: str
    healthy_s: float = float("nan")
    rss: int = 0
    peak: int = 0
    p50_ms: float = float("nan")
    p99_ms: float = float("nan")
    held: str = ""
    error: str = ""


def start_up(db_file: Path, workdir: Path, flags: list[str], output: Path) -> subprocess.Popen[bytes]:
    command = [str(EXECUTABLE), "up", "--db", f"sqlite:///{db_file}", "--graph", str(DEFAULT_GRAPH)]
    command += ["--warehouse", str(workdir / "warehouse"), "--host", "127.0.0.1", "--port", "0", *flags]
    with open(output, "wb") as sink:
        return subprocess.Popen(
            command, cwd=workdir, env=child_env(workdir), stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )


def healthy_url(process: subprocess.Popen[bytes], output: Path, timeout_s: float) -> str:
    """The API's URL once `/healthz` answers with its state at the log's head."""
    deadline = time.perf_counter() + timeout_s
    url = None
    while time.perf_counter() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"`up` exited (code {process.returncode})")
        found = url or (m.group(1) if (m := READY_LINE.search(output.read_text(errors="replace"))) else None)
        url = found
        if url is not None:
            try:
                health = httpx.get(f"{url}/healthz", timeout=5)
                if health.status_code == 200 and health.json().get("state_seq") == health.json().get("head_seq"):
                    return url
            except httpx.HTTPError:
                pass
        time.sleep(0.1)
    raise TimeoutError(f"`up` not healthy within {timeout_s:.0f} s")


def one_run(
    db_file: Path, workdir: Path, mode: str, scenario: str, ids: dict[int, list[str]], args: argparse.Namespace
) -> Run:
    run = Run(mode, scenario)
    output = workdir / f"up-{mode.replace(' ', '-')}-{scenario}.log"
    started = time.perf_counter()
    process = start_up(db_file, workdir, MODES[mode], output)
    try:
        url = healthy_url(process, output, args.timeout)
        run.healthy_s = time.perf_counter() - started
        time.sleep(args.settle)
        run.p50_ms, run.p99_ms = point_reads(url, ids, args.reads)
        memory = proc_memory(process.pid)
        assert memory is not None, "`up` exited"
        run.rss, run.peak = memory
        said = output.read_text(errors="replace")
        run.held = next(
            (line.split("holding ", 1)[1] for line in said.splitlines() if "holding a working set" in line), ""
        )
        process.send_signal(signal.SIGTERM)
        process.wait(args.timeout)
    except Exception as exc:  # reported with the run, the others go on
        run.error = f"{type(exc).__name__}: {exc}"
        print("".join(output.read_text(errors="replace").splitlines(True)[-15:]), flush=True)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return run


def killed_after_appends(
    db_file: Path, workdir: Path, mode: str, refs: list[str], args: argparse.Namespace
) -> tuple[int, int]:
    """`up` started, `args.crash_events` wants appended to its log by another writer, then SIGKILL once `up` has
    folded and projected them: (events appended, the log's head)."""
    output = workdir / f"up-{mode.replace(' ', '-')}-before-crash.log"
    process = start_up(db_file, workdir, MODES[mode], output)
    try:
        url = healthy_url(process, output, args.timeout)
        tail = min(10_000, args.crash_events // 6)
        for first, last in ((0, args.crash_events - tail), (args.crash_events - tail, args.crash_events)):
            with EventLog.open(f"sqlite:///{db_file}") as log:
                for start in range(first, last, 1_000):
                    log.append(wants_of_live_refs(start, min(1_000, last - start), refs))
                head = log.head()
            wait_for_the_store(url, head, args.timeout)
            time.sleep(args.settle)  # (a checkpoint due is saved after the pass that reached the head)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    saved = [line for line in output.read_text(errors="replace").splitlines() if "saved the working set" in line]
    if saved:
        print(f"{mode}: {len(saved)} checkpoint(s) before the crash, the last {saved[-1].split('saved ', 1)[1]}")
    return args.crash_events, head


def wait_for_the_store(url: str, seq: int, timeout_s: float) -> None:
    """Until `up` answers a read with `min_seq` = `seq` (its store projected that far)."""
    deadline = time.perf_counter() + timeout_s
    answer = httpx.get(f"{url}/api/v1/counts", params={"min_seq": seq}, timeout=timeout_s)
    while answer.status_code == 503 and time.perf_counter() < deadline:
        answer = httpx.get(f"{url}/api/v1/counts", params={"min_seq": seq}, timeout=timeout_s)
    assert answer.status_code == 200, answer.text[:200]


def wants_of_live_refs(start: int, size: int, refs: list[str]) -> list[pb.Event]:
    """`size` wants, each of 4 of `refs` (Live: satisfied as they come, no job run)."""
    batch = []
    now_ms = int(time.time() * 1000)
    for n in range(start, start + size):
        event = pb.Event(event_id=f"bench-crash-{n:09d}", timestamp_ms=now_ms)
        event.source.manual.user = "bench"
        event.want_create.want_id = f"bench-crash-{n:09d}"
        event.want_create.partition_refs.extend(refs[(n * 4 + k) % len(refs)] for k in range(4))
        batch.append(event)
    return batch


def live_refs(url: str, n: int) -> list[str]:
    """`n` refs whose grid cell is Live, picked at random."""
    with Database.open(url) as db, db.changes.records.engine.connect() as conn:
        query = sa.select(state_cells.c.ref).where(state_cells.c.cell == CELL_CODES["live"])
        return list(conn.execute(query.order_by(sa.func.random()).limit(n)).scalars())


def point_reads(url: str, ids: dict[int, list[str]], n: int) -> tuple[float, float]:
    """p50 and p99 (ms) of `n` point reads: a want, a job run, a ref's canonical instance, in turn."""
    timings = []
    with httpx.Client(base_url=url, timeout=30) as client:
        for i in range(n):
            path = (
                f"/api/v1/wants/{ids[WANT][i]}",
                f"/api/v1/job-runs/{ids[RUN][i]}",
                f"/api/v1/partitions/canonical/{quote(ids[REF][i])}",
            )[i % 3]
            began = time.perf_counter()
            answer = client.get(path)
            timings.append((time.perf_counter() - began) * 1000)
            assert answer.status_code == 200, (path, answer.status_code, answer.text[:200])
    return percentile(timings, 0.5), percentile(timings, 0.99)


def project_in_a_child(url: str) -> None:
    """`partbuild db upgrade` (a first projection of the store) unless the store is whole at the head: in a
    process of its own, whose whole state is then gone."""
    from partbuild.state.database import Database

    with Database.open(url) as db:
        head = db.log.head()
        if db.changes.watermark() == head == db.changes.records.watermark():
            return
    started = time.perf_counter()
    subprocess.run([str(EXECUTABLE), "db", "upgrade", "--db", url], check=True)
    print(f"projected the store ({head:,} events) in {time.perf_counter() - started:.0f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", help="SQLite file of a W1 log (built there when empty)")
    parser.add_argument("--instances", type=int, default=1_000_000)
    parser.add_argument("--settle", type=float, default=20.0)
    parser.add_argument("--reads", type=int, default=300)
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--modes", default=",".join(MODES), help="which of: " + ", ".join(MODES))
    parser.add_argument("--crash-events", type=int, default=60_000, help="wants appended before the SIGKILL")
    args = parser.parse_args()
    print(f"machine: {machine()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="partbuild-up-ws-") as tmp:
        with w1_log(args.db, tmp, "w1.db", args.instances) as (url, _log):
            pass
        project_in_a_child(url)
        source = Path(url.removeprefix("sqlite:///"))
        ids = {kind: sample_ids(url, kind, args.reads, random.Random(kind)) for kind in (WANT, RUN, REF)}
        refs = live_refs(url, 5_000)
        baseline = empty_up(Path(tmp), args)
        runs = []
        for mode in args.modes.split(","):
            workdir = Path(tmp) / mode.replace(" ", "-")
            workdir.mkdir()
            copy = workdir / "w1.db"
            for sidecar, copied in zip(sidecars(source), sidecars(copy), strict=True):
                if sidecar.exists():
                    shutil.copyfile(sidecar, copied)
            for scenario in ("cold", "restart", "crash"):
                if scenario == "crash":
                    appended, head = killed_after_appends(copy, workdir, mode, refs, args)
                    print(f"{mode}: {appended:,} wants appended (head {head:,}), then SIGKILL", flush=True)
                runs.append(one_run(copy, workdir, mode, scenario, ids, args))
                report(runs[-1])
            for copied in sidecars(copy):  # (a copy of a 10M log is 23 GB: one at a time)
                copied.unlink(missing_ok=True)
        summary(runs, args.instances, baseline)


def empty_up(tmp: Path, args: argparse.Namespace) -> int:
    """The resident memory of `up --working-set` on an empty database: the interpreter, the modules, Spark's
    Python side, the API (what any `up` holds before a state)."""
    workdir = tmp / "empty"
    workdir.mkdir()
    output = workdir / "up.log"
    process = start_up(workdir / "empty.db", workdir, MODES["working set"], output)
    try:
        healthy_url(process, output, args.timeout)
        time.sleep(min(args.settle, 5.0))
        memory = proc_memory(process.pid)
        assert memory is not None, "`up` exited"
        print(f"empty database: resident {memory[0] / MIB:,.0f} MiB", flush=True)
        return memory[0]
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(args.timeout)


def report(run: Run) -> None:
    if run.error:
        print(f"{run.mode:<12} {run.scenario:<8} FAILED: {run.error}", flush=True)
        return
    print(
        f"{run.mode:<12} {run.scenario:<8} healthy {run.healthy_s:6.1f} s, resident {run.rss / MIB:7,.0f} MiB, "
        f"peak {run.peak / MIB:7,.0f} MiB, point reads p50 {run.p50_ms:.1f} ms p99 {run.p99_ms:.1f} ms"
        + (f"; {run.held}" if run.held else ""),
        flush=True,
    )


def summary(runs: list[Run], instances: int, baseline: int) -> None:
    by = {(run.mode, run.scenario): run for run in runs if not run.error}
    for scenario in ("cold", "restart", "crash"):
        whole, working = by.get(("whole", scenario)), by.get(("working set", scenario))
        if whole is None or working is None:
            continue
        print(
            f"{scenario}: working set / whole: resident {working.rss / whole.rss:.2f}x "
            f"({working.rss / MIB:,.0f} / {whole.rss / MIB:,.0f} MiB), peak {working.peak / whole.peak:.2f}x, "
            f"healthy {working.healthy_s / whole.healthy_s:.2f}x",
            flush=True,
        )
        over = (working.rss - baseline) / instances
        print(f"{scenario}: the working set holds {over:,.0f} bytes an instance over the empty database's", flush=True)
    target = TARGET_BYTES_PER_INSTANCE
    print(f"target: <= {target:,.0f} bytes an instance over the empty database's (2 GiB at 10M instances)")


if __name__ == "__main__":
    main()
