"""What retention gives back (issue 37): the memory a state holds before and after dropping superseded instances.

Retention drops superseded instances with their histories; what each added to the counts by state stays,
so counts as of an earlier seq still count it (`BuildState.dropped_changes`, 8 bytes a change, 3 or 4 a
dropped instance). Before, those were per-seq dicts, and the issue measured memory *rising* 371-548 B for
each instance dropped.

Builds a state of `--refs` source partitions observed twice (the first instance of each superseded by the
second), then folds one InstanceRetention dropping every superseded one, and measures with tracemalloc the
memory the state holds before and after (the garbage collected), per dropped instance; also the bytes the
dropped instances' counts keep. Target: memory drops.

With `--db URL` (a SQLite file, or a PostgreSQL schema at head), the same events are appended to that log
and projected into its state store (`Projector`) before and after the retention: the rows of each store
table and the bytes they take (SQLite: the pages in use; PostgreSQL: the tables with their indexes, after
`VACUUM` makes the deleted rows' space reusable, and after `VACUUM FULL` gives it back to the disk), and
what the projector's pass over the retention allocates at its peak (tracemalloc). Target: the store's rows
and bytes drop.

    .venv/bin/python bench/retention_memory.py [--refs 100000] [--db URL]
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc
from collections.abc import Iterator

import sqlalchemy as sa
from _common import machine
from sqlalchemy.engine import Engine

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.build_state import BuildState
from partbuild.state.log.events import envelope, manual
from partbuild.state.log.live import LiveState
from partbuild.state.store.projector import Projector

STORE_TABLES = ("state_changes", "state_counts", "state_records", "state_heartbeats")


def observed_twice_events(refs: int) -> Iterator[pb.Event]:
    """Every `src/n={i}` observed at one location, then at another: half the instances superseded."""
    seq = 0
    for round_ in ("a", "b"):
        for index in range(refs):
            seq += 1
            yield envelope(
                pb.PartitionObserved(partition_ref=f"src/n={index}", location=f"/data/{round_}/{index}"),
                source=manual("bench"),
                timestamp_ms=1_790_000_000_000 + seq,
            )


def observed_twice(refs: int) -> BuildState:
    state = BuildState()
    for seq, event in enumerate(observed_twice_events(refs), 1):
        assert state.apply(seq, event) is None
    return state


def retention_after(head: int) -> pb.Event:
    """An InstanceRetention dropping every instance superseded by `head`."""
    retention = pb.InstanceRetention(drop_superseded_before_seq=head + 1)
    return envelope(retention, source=manual("bench"), timestamp_ms=1_800_000_000_000)


def held() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--refs", type=int, default=100_000)
    parser.add_argument("--db", help="also the state store's rows and bytes, in this empty database")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    tracemalloc.start()
    state = observed_twice(args.refs)
    before, instances = held(), len(state.instances)
    started = time.perf_counter()
    reason = state.apply(state.head_seq + 1, retention_after(state.head_seq))
    seconds = time.perf_counter() - started
    assert reason is None, reason
    after = held()
    dropped = instances - len(state.instances)
    assert dropped == args.refs, dropped
    change = (after - before) / dropped
    print(
        f"{instances:,} instances, {dropped:,} dropped in {seconds:.2f} s: held {before / 2**20:.1f} MiB before, "
        f"{after / 2**20:.1f} MiB after: {change:+.0f} B per dropped instance "
        f"(the counts they keep: {len(state.dropped_changes) / dropped:.0f} B each)"
    )
    print(f"retention_memory: memory drops: {'PASS' if after < before else 'MISS'}")
    if args.db:
        tracemalloc.stop()
        store_leg(args.db, args.refs)


def store_leg(url: str, refs: int) -> None:
    """The store's rows and bytes before and after the retention, projected as a server would."""
    with Database.open(url) as db:
        if db.log.head() != 0:
            raise SystemExit(f"{url} already holds a log: give an empty database")
        events = list(observed_twice_events(refs))
        for start in range(0, len(events), 10_000):
            db.log.append(events[start : start + 10_000], expected_head=db.log.head())
        live = LiveState(db.log, use_snapshots=False)
        projector = Projector(live, db.changes)
        projector.project()
        before = store_sizes(db.changes.records.engine)
        db.log.append([retention_after(db.log.head())], expected_head=db.log.head())
        live.catch_up()
        tracemalloc.start()  # the pass that deletes the dropped rows: what it allocates at its peak
        started = time.perf_counter()
        projector.project()
        seconds = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        after = store_sizes(db.changes.records.engine)
    print(
        f"the store ({db_kind(url)}), projected before and after the retention ({seconds:.1f} s to project it, "
        f"{peak / 2**20:.1f} MiB allocated at the pass's peak):"
    )
    for name in (*STORE_TABLES, "bytes", *(key for key in after if key.startswith("bytes "))):  # SQLite: the file
        print(f"  {name:28s} {before[name]:>14,} -> {after[name]:>14,}")
    dropped = all(after[name] < before[name] for name in ("state_records", "bytes"))
    print(f"retention_memory: the store's rows and bytes drop: {'PASS' if dropped else 'MISS'}")


def db_kind(url: str) -> str:
    return "PostgreSQL" if url.startswith("postgresql") else "SQLite"


def store_sizes(engine: Engine) -> dict[str, int]:
    """Rows of each store table, and the bytes the store takes (see the module)."""
    with engine.connect() as conn:
        sizes = {name: conn.execute(sa.text(f"SELECT count(*) FROM {name}")).scalar_one() for name in STORE_TABLES}
        if engine.dialect.name == "sqlite":
            page = conn.exec_driver_sql("PRAGMA page_size").scalar_one()
            used = (
                conn.exec_driver_sql("PRAGMA page_count").scalar_one()
                - conn.exec_driver_sql("PRAGMA freelist_count").scalar_one()
            )
            return sizes | {"bytes": used * page}
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        total = " + ".join(f"pg_total_relation_size('{name}')" for name in STORE_TABLES)
        conn.exec_driver_sql(f"VACUUM {', '.join(STORE_TABLES)}")
        reusable = conn.exec_driver_sql(f"SELECT {total}").scalar_one()
        # The bytes the live rows take: after VACUUM the dead rows' space is free for reuse, not given back.
        conn.exec_driver_sql(f"VACUUM FULL {', '.join(STORE_TABLES)}")
        return sizes | {
            "bytes": conn.exec_driver_sql(f"SELECT {total}").scalar_one(),
            "bytes before VACUUM FULL": reusable,
        }


if __name__ == "__main__":
    main()
