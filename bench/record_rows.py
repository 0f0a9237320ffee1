"""The state store's records (issue 37): what writing them costs, what they take on disk, how fast they read.

Builds (or reuses, `--db`) a W1 log of `--instances`, folds it, then projects it into the store twice in one
run, from an empty store each time: the changes and counts alone (the records' rows deleted as each pass
ends, so none is ever read back) and with the records (every instance, want, job run and ref in its row),
and prints the ratio. Then the table's size on disk per million instances, and point reads from the rows
alone (`StoredRecords`: no live state), now and as of seqs across the log, against the same reads of the
live state's past in memory, with the same answers asserted. Targets (the issue's): a point read p99 <= 10 ms.

    .venv/bin/python bench/record_rows.py [--db URL] [--instances 1000000] [--reads 2000]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections.abc import Callable

import sqlalchemy as sa
from _common import machine, percentile, w1_log

from partbuild.state.database import Database
from partbuild.state.fold.past import PastState
from partbuild.state.log.live import LiveState
from partbuild.state.schema import state_changes, state_counts, state_projections, state_records
from partbuild.state.store.projector import Projector
from partbuild.state.store.stored import StoredRecords, open_stored

TARGET_MS = 10.0


def _empty_store(db: Database) -> None:
    with db.changes.records.engine.begin() as conn:
        for table in (state_changes, state_counts, state_records, state_projections):
            conn.execute(sa.delete(table))


def project_seconds(db: Database, live: LiveState, records: bool) -> float:
    """Seconds to project the whole log into an empty store (a first projection: scan, then write the rows)."""
    _empty_store(db)
    live.state.touched = None
    projector = Projector(live, db.changes)
    if not records:
        projector._records_behind = lambda _mark: False  # type: ignore[method-assign]  # the changes alone
    started = time.perf_counter()
    projector.project()
    return time.perf_counter() - started


def table_bytes(db: Database) -> int:
    """The records table's size on disk, its index included."""
    engine = db.changes.records.engine
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            return int(conn.execute(sa.text("SELECT pg_total_relation_size('state_records')")).scalar_one())
        found = conn.execute(sa.text("SELECT sum(pgsize) FROM dbstat WHERE name LIKE '%state_records%'"))
        return int(found.scalar_one() or 0)


def timed(reads: list[Callable[[], object]]) -> tuple[float, float, list[object]]:
    """(p50, p99) in ms of each read, and the answers."""
    times, answers = [], []
    for read in reads:
        started = time.perf_counter()
        answers.append(read())
        times.append((time.perf_counter() - started) * 1000)
    return percentile(times, 0.5), percentile(times, 0.99), answers


def _state(record: object) -> object:
    return None if record is None else record.__getstate__()  # type: ignore[attr-defined]


Pick = tuple[str, str, str, str]  # an instance UUID, a want id, a job run id, a ref
Read = Callable[[Pick], object]


def _reads(stored: StoredRecords, past: PastState, seq: int) -> list[tuple[str, Read, Read]]:
    """(what, the read from the rows, the same read of the past in memory) of each kind of point read."""
    return [
        ("instance", lambda p: _state(stored.instance(p[0], seq)), lambda p: _state(past.instances.get(p[0]))),
        ("want", lambda p: _state(stored.want(p[1], seq)), lambda p: _state(past.wants.get(p[1]))),
        ("job run", lambda p: _state(stored.job_run(p[2], seq)), lambda p: _state(past.job_runs.get(p[2]))),
        ("canonical", lambda p: stored.canonical_uuid(p[3], seq), lambda p: past.canonical.get(p[3])),
    ]


def _each(read: Read, picks: list[Pick]) -> list[Callable[[], object]]:
    return [lambda pick=pick: read(pick) for pick in picks]


def point_reads(db: Database, live: LiveState, count: int) -> bool:
    """Time point reads from the rows and from memory, now and as of seqs across the log; True: in target."""
    state = live.state
    head = state.head_seq
    rng = random.Random(37)
    instances, wants, runs, refs = list(state.instances), list(state.wants), list(state.job_runs), list(state.canonical)
    verdicts = []
    for label, seq in (("now", head), ("as of 10 %", head // 10), ("as of 50 %", head // 2)):
        picks = [(rng.choice(instances), rng.choice(wants), rng.choice(runs), rng.choice(refs)) for _ in range(count)]
        # A fresh snapshot per seq: the rows read once are cached by it, and a reader's request opens its own.
        with open_stored(db.changes.records) as stored:
            assert stored is not None, "the records are not whole after the projection"
            for what, from_rows, from_memory in _reads(stored, PastState(state, seq, lambda: 0), seq):
                p50, p99, answers = timed(_each(from_rows, picks))
                m50, m99, expected = timed(_each(from_memory, picks))
                assert answers == expected, f"{what} {label}: the rows answer otherwise than the memory"
                verdicts.append(p99 <= TARGET_MS)
                print(
                    f"{what} {label}: from the rows p50 {p50:.2f} / p99 {p99:.2f} ms; in memory p50 {m50:.3f} / "
                    f"p99 {m99:.3f} ms (target p99 <= {TARGET_MS:.0f} ms)"
                )
    return all(verdicts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", help="a database URL or SQLite file (built when empty; default: a temporary file)")
    parser.add_argument("--instances", type=int, default=1_000_000)
    parser.add_argument("--reads", type=int, default=2000)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    with (
        tempfile.TemporaryDirectory() as tmp,
        w1_log(args.db, tmp, "records.db", args.instances) as (url, _),
        Database.open(url, auto_upgrade=True) as db,
    ):
        started = time.perf_counter()
        live = LiveState(db.log, use_snapshots=False)
        held = len(live.state.instances)
        print(f"folded {live.head_seq:,} events ({held:,} instances) in {time.perf_counter() - started:.0f} s")
        without = project_seconds(db, live, records=False)
        with_records = project_seconds(db, live, records=True)
        print(
            f"first projection: {without:.1f} s the changes and counts alone, {with_records:.1f} s with the records "
            f"({with_records / without:.2f}x)"
        )
        size = table_bytes(db)
        print(f"records on disk: {size / 2**20:,.0f} MiB, {size / held * 1e6 / 2**20:,.0f} MiB per million instances")
        passed = point_reads(db, live, args.reads)
        print(f"record_rows ({db.backend}): {'PASS' if passed else 'MISS'}")


if __name__ == "__main__":
    main()
