"""A read replica (`serve --replica`) beside a `serve` that folds the log, on one W1 log, in one run (issue 37).

Builds (or reuses, `--db`: a SQLite file or a database URL) a W1 log of `--instances` and projects its state
store (a fold and a first projection in this process) when it is not projected yet. Then, one after the other, a
`partbuild serve` (it loads the state: the newest snapshot and the tail, or the whole log) and a `partbuild
serve --replica` (it replays nothing): for each, the time to healthy and the resident memory, then the same
reads over HTTP, each timed as a client sees it: point reads (a want, a job run, a ref's canonical instance),
now and as of seqs across the log; a page of 100 of each list (wants, job runs, partitions) now and as of a
seq; the wants of a ref; the counts as of a seq; a page of 100 changes between two seqs; and the memory after them.

    .venv/bin/python bench/replica_serve.py [--db FILE] [--instances 1000000] [--reads 200] [--replica-only]

Targets (the issue's, for the replica): healthy within 10 s, resident <= 512 MiB after the reads, point reads
p99 <= 10 ms, a page of changes p99 <= 50 ms, counts as of a seq p99 <= 200 ms. The lists have no target of
their own; they are printed beside the folding server's.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import sqlalchemy as sa
from _common import machine, percentile, project_store, w1_log
from _servekit import MIB, Client, Server

from partbuild.state.database import Database
from partbuild.state.schema import state_records
from partbuild.state.store.records import REF, RUN, WANT

SERVE_S, POINT_MS, CHANGES_MS, COUNTS_MS, RSS_BYTES = 10.0, 10.0, 50.0, 200.0, 512 * MIB
EXECUTABLE = Path(sys.executable).parent / "partbuild"


def sample_ids(url: str, kind: int, n: int, rng: random.Random) -> list[str]:
    """`n` ids of rows of `kind`, picked at random in the database."""
    with Database.open(url) as db, db.changes.records.engine.connect() as conn:
        query = sa.select(state_records.c.id).where(state_records.c.kind == kind)
        ids = list(conn.execute(query.order_by(sa.func.random()).limit(n)).scalars())
    rng.shuffle(ids)
    return [ids[i % len(ids)] for i in range(n)]


def reads(head: int, ids: dict[int, list[str]], n: int) -> dict[str, Callable[[int], str]]:
    """The reads, by label: each a function of the read's number giving its path."""
    seqs = {"now": None, "as of 50 %": head // 2, "as of 10 %": head // 10}
    found: dict[str, Callable[[int], str]] = {}
    for label, seq in seqs.items():
        at = "" if seq is None else f"as_of_seq={seq}"
        found[f"want {label}"] = lambda i, at=at: f"/api/v1/wants/{ids[WANT][i]}?{at}"
        found[f"job run {label}"] = lambda i, at=at: f"/api/v1/job-runs/{ids[RUN][i]}?{at}"
        found[f"canonical {label}"] = lambda i, at=at: f"/api/v1/partitions/canonical/{quote(ids[REF][i])}?{at}"
        for path in ("wants", "job-runs", "partitions"):
            found[f"{path} page {label}"] = lambda i, at=at, path=path: f"/api/v1/{path}?limit=100&{at}"
        found[f"wants of a ref {label}"] = lambda i, at=at: f"/api/v1/wants?ref={quote(ids[REF][i])}&{at}"
    found["counts as of a seq"] = lambda i: f"/api/v1/counts?as_of_seq={1 + (i * 7919) % head}"
    found["changes page"] = lambda i: f"/api/v1/changes?from_seq={(i * 7919) % head}&to_seq={head}&limit=100"
    return found


def is_point(label: str) -> bool:
    """Whether a read is of one record (a list, the counts: not)."""
    return not any(word in label for word in ("page", "counts", "wants of"))


def measure(server: Server, head: int, ids: dict[int, list[str]], n: int) -> dict[str, tuple[float, float]]:
    """p50 and p99 in ms of each read, `n` times (lists and counts: `n` // 10)."""
    client = Client(server.base_url, 120)
    out: dict[str, tuple[float, float]] = {}
    try:
        for label, path_of in reads(head, ids, n).items():
            times = []
            for i in range(n if is_point(label) else max(5, n // 10)):
                status, body, ms = client.get(path_of(i))
                if status not in (200, 404):  # 404: a record created after the seq asked about
                    raise RuntimeError(f"{path_of(i)}: HTTP {status}: {body[:200]!r}")
                times.append(ms)
            out[label] = (percentile(times, 0.5), percentile(times, 0.99))
    finally:
        client.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", help="a database URL or SQLite file (built when empty; default: a temporary file)")
    parser.add_argument("--instances", type=int, default=1_000_000)
    parser.add_argument("--reads", type=int, default=200)
    parser.add_argument("--startup-timeout", type=float, default=600)
    parser.add_argument(
        "--replica-only", action="store_true", help="no folding `serve` beside it (a log too big to fold twice)"
    )
    args = parser.parse_args()
    print(f"machine: {machine()}")
    rng = random.Random(37)
    with tempfile.TemporaryDirectory() as tmp, w1_log(args.db, tmp, "replica.db", args.instances) as (url, log):
        head = log.head()
        project_store(url, snapshot=not args.replica_only)  # (a snapshot only for the folding server to load)
        ids = {kind: sample_ids(url, kind, args.reads, rng) for kind in (WANT, RUN, REF)}
        db_file: Path | str = Path(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else url
        results: dict[str, Figures] = {}
        servers = (("serve", ()), ("serve --replica", ("--replica",)))
        for name, extra in servers[1:] if args.replica_only else servers:
            with Server(EXECUTABLE, db_file, Path(tmp), args.startup_timeout, 1.0, extra) as server:
                started_rss, _ = server.memory()
                figures = measure(server, head, ids, args.reads)
                rss, peak = server.memory()
            results[name] = Figures(server.startup_s, started_rss, rss, peak, figures)
            print(
                f"{name}: healthy after {server.startup_s:.1f} s, {started_rss / MIB:,.0f} MiB resident; "
                f"after the reads {rss / MIB:,.0f} MiB (peak {peak / MIB:,.0f} MiB)",
                flush=True,
            )
    report(results.get("serve"), results["serve --replica"])


@dataclass(frozen=True)
class Figures:
    """One server's: seconds to healthy, resident bytes then, after the reads and at the peak, the reads."""

    start_s: float
    rss_start: int
    rss: int
    peak: int
    reads: dict[str, tuple[float, float]]


def report(folding: Figures | None, replica: Figures) -> None:
    print(f"{'read':<32} {'serve p50 / p99 ms':>20} {'replica p50 / p99 ms':>22}")
    for label, (p50, p99) in replica.reads.items():
        f50, f99 = folding.reads[label] if folding is not None else (float("nan"), float("nan"))
        print(f"{label:<32} {f50:>9.1f} / {f99:>8.1f} {p50:>11.1f} / {p99:>8.1f}")
    reads = replica.reads
    point = max(p99 for label, (_, p99) in reads.items() if is_point(label))
    verdicts = {
        f"healthy within {SERVE_S:.0f} s": replica.start_s <= SERVE_S,
        f"<= {RSS_BYTES // MIB} MiB after the reads": replica.rss <= RSS_BYTES,
        f"point reads p99 <= {POINT_MS:.0f} ms": point <= POINT_MS,
        f"changes page p99 <= {CHANGES_MS:.0f} ms": reads["changes page"][1] <= CHANGES_MS,
        f"counts as of a seq p99 <= {COUNTS_MS:.0f} ms": reads["counts as of a seq"][1] <= COUNTS_MS,
    }
    beside = (
        f", 1/{folding.rss / replica.rss:.1f} of the folding server's; healthy after {replica.start_s:.1f} s "
        f"({folding.start_s:.1f} s for the folding server)"
        if folding is not None
        else f"; healthy after {replica.start_s:.1f} s"
    )
    print(f"replica: resident {replica.rss / MIB:,.0f} MiB{beside}")
    for what, passed in verdicts.items():
        print(f"  {what}: {'PASS' if passed else 'MISS'}")


if __name__ == "__main__":
    main()
