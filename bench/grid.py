"""The partition status grid (issue 26) on a state of 1,000,000 partition instances.

Target: the grid page over 100,000 partitions of one job within 200 ms p99 of server time (the live state;
the same as of an earlier seq is measured too, without a target: each such page looks its refs up in the past).

Builds (or reuses, from `--cache`, default /work/benchdata) the simulated W1 log of at least
`--instances` partition instances (`time_travel.cached_log`), loads it into one in-process
`Service` with a graph declaring W1's patterns with their `site` field (`daily_clicks`:
`agg/daily_clicks/site={site:int}/date={date:date}`, about 467,000 dailies at full size),
and asks the web app (Starlette's TestClient, with the `Server-Timing` wrapper of
`_common.server_timing`: the figures are the app's own time per request) for:
- `/jobs/daily_clicks?start=A&end=B`: a key range holding `--partitions` dailies (100,000), at random
  offsets; the answer aggregates runs of equal state, so its HTML stays bounded (its size is printed);
- the same as of a random earlier seq (`?as_of=N`: the past state's canonical instances);
- `GET /api/v1/jobs/daily_clicks/partitions/summary` (counts of all the job's partitions; kept per head seq);
- the grid of such a range filtered by a check and its result (`&check=daily_not_empty&check_result=failed`,
  issue 36): every cell of the range looked up, its instance's latest checks read;
- the grid after the log moved (`--moves` times: a new daily wanted and a Live one tainted, two events
  folded, then the grid): what a page costs on a log being written to (the cells are brought forward from
  the last head's, not looked up again).
The first request of each kind (it builds the index of the pattern's refs, or the past state) is
reported on its own line.

The live state's server projects its state store as `serve` does (first whole, then each move before its
grid: a `serve` whose projector has caught up), so its grids as of a seq and those filtered by a check come
from the store's cells; `--memory-only` serves them from its memory instead, with no store (the figures of
that path, beside the real ones).

With `--replica`, the same pages come from a read replica (`Service(replica=True)`: the state store's rows,
nothing folded); the log's store is projected first, and the moves are folded and projected by a live state
of their own (the replica sees them once its store's watermark moves, as a `serve --replica` would).

    .venv/bin/python bench/grid.py [--instances 1000000] [--partitions 100000] [--requests 50]
                                   [--replica | --memory-only]
"""

from __future__ import annotations

import argparse
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import FULL_SIZE, machine, percentile, project_store, server_timing
from time_travel import cached_log
from up_memory import sidecars

from partbuild.api.app import create_app
from partbuild.api.service import Service
from partbuild.orchestrator.graph import Graph, Job, Partition, SourceDataset
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.transitions import is_live
from partbuild.state.log.events import envelope, manual
from partbuild.state.log.live import LiveState
from partbuild.state.store.projector import Projector
from partbuild.state.store.reader import StoreReader

TARGET_P99_MS = 200.0
DAILY = "agg/daily_clicks/site={site:int}/date={date:date}"


def _no_run(_: object) -> None:
    raise AssertionError("the benchmark runs no job")


def _daily_inputs(partition: Partition) -> list[str]:
    return [f"raw/clicks/site={partition['site']}/date={partition['date'].isoformat()}"]


def bench_graph() -> Graph:
    return Graph(
        jobs=[Job("daily_clicks", [DAILY], run=_no_run, inputs=_daily_inputs)],
        sources=[SourceDataset("raw_clicks", "raw/clicks/site={site:int}/date={date:date}", locate=lambda _: None)],
    )


def server_ms(response: object) -> float:
    header = response.headers["server-timing"]  # type: ignore[attr-defined]
    found = re.search(r"dur=([0-9.]+)", header)
    assert found is not None, header
    return float(found.group(1))


def line(label: str, values: list[float], target: float | None = None) -> str:
    p50, p99 = statistics.median(values), percentile(values, 0.99)
    verdict = "" if target is None else (" (meets)" if p99 <= target else " (MISSES)")
    return f"  {label:<44} n={len(values):>4}  p50 {p50:7.1f} ms  p99 {p99:7.1f} ms  max {max(values):7.1f} ms{verdict}"


def moved_grids(
    service: Service,
    db: Database,
    client: Any,
    refs: list[str],
    grid_path: Any,
    moves: int,
    rng: random.Random,
    project: bool,
) -> list[float]:
    """Server ms of a grid after each of `moves` appends of two events: a new daily wanted (a ref added) and a
    Live daily tainted (its cell moves); they are folded before the request (a replica's store projected)."""
    replica = isinstance(service.reads, StoreReader)
    # A replica folds nothing: a live state of the bench's own folds the moves and projects them.
    writer = LiveState(db.log) if replica else service.live
    projector = Projector(writer, db.changes) if replica or project else None
    times = []
    for move in range(moves):
        new_ref = f"agg/daily_clicks/site=999999/date=2030-01-{move % 28 + 1:02d}"
        victim = rng.choice(refs)
        events = [envelope(pb.WantCreate(want_id=f"grid-bench-{move}", partition_refs=[new_ref]), source=manual("b"))]
        if writer.state.canonical_instance(victim) is not None and is_live(writer.state, victim):
            events.append(
                envelope(
                    pb.PartitionTaint(partition_ref=victim, reason="bench", only_this_ref=True), source=manual("b")
                )
            )
        db.log.append(events)
        writer.catch_up()
        if projector is not None:
            projector.project()
        service.refresh()
        response = client.get(grid_path(None))
        assert response.status_code == 200, response.text[:300]
        times.append(server_ms(response))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--instances", type=int, default=FULL_SIZE)
    parser.add_argument("--partitions", type=int, default=100_000, help="Dailies in each grid's key range.")
    parser.add_argument("--requests", type=int, default=50, help="Requests per kind (after a warm-up).")
    parser.add_argument("--cache", default="/work/benchdata", help="Where the W1 log is cached.")
    parser.add_argument("--moves", type=int, default=20, help="Grids after the log moved by two events.")
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--replica", action="store_true", help="Serve from the state store, folding nothing.")
    parser.add_argument("--memory-only", action="store_true", help="The live state's server with no state store.")
    args = parser.parse_args()
    from fastapi.testclient import TestClient

    cached = cached_log(Path(args.cache), args.instances)
    print(f"machine: {machine()}", flush=True)
    started = time.perf_counter()
    scratch = tempfile.TemporaryDirectory(prefix="grid-bench-", dir=args.cache)
    path = Path(scratch.name) / cached.name  # a copy: the moves append to it, the cached log stays as built
    for source, copy in zip(sidecars(cached), sidecars(path), strict=True):
        if source.exists():
            shutil.copyfile(source, copy)
    if args.replica:
        project_store(f"sqlite:///{path}")
    with scratch, Database.open(f"sqlite:///{path}") as db:
        service = Service(db, graph=bench_graph(), replica=args.replica, past_from_store=not args.memory_only)
        if not args.replica and not args.memory_only:  # as `serve` does, in the background
            projected_at = time.perf_counter()
            Projector(service.live, db.changes).project()
            print(f"projected the store in {time.perf_counter() - projected_at:.0f} s", flush=True)
        head = service.reads.head_seq
        kind = "a read replica of the state store" if args.replica else "the live state"
        print(f"loaded: {kind}, head seq {head:,}, in {time.perf_counter() - started:.0f} s", flush=True)
        rng = random.Random(args.seed)
        with TestClient(server_timing(create_app(service))) as client:  # type: ignore[arg-type]
            first = client.get("/api/v1/jobs/daily_clicks/partitions/summary")
            assert first.status_code == 200, first.text
            total = first.json()["total"]
            refs = service.listing.refs_matching(
                DAILY, "agg/daily_clicks/site=", bench_graph().jobs["daily_clicks"].outputs[0].match
            )
            size = min(args.partitions, len(refs))
            print(
                f"daily_clicks: {total:,} partitions; grids of {size:,}; first summary {server_ms(first):.0f} ms",
                flush=True,
            )

            def grid_path(as_of: int | None) -> str:
                low = rng.randrange(0, len(refs) - size + 1)
                query = f"start={refs[low]}&end={refs[low + size - 1]}"
                return f"/jobs/daily_clicks?{query}" + (f"&as_of={as_of}" if as_of is not None else "")

            timings: dict[str, list[float]] = {"grid": [], "grid as of a seq": [], "summary": [], "check filter": []}
            sizes: list[int] = []
            seqs = [rng.randrange(head // 2, head) for _ in range(3)]
            for seq in seqs:  # the first read of a past seq builds it: reported apart
                response = client.get(grid_path(seq))
                assert response.status_code == 200, response.text[:300]
                print(f"  first grid as of seq {seq:,}: {server_ms(response):.0f} ms", flush=True)
            for _ in range(3):  # warm-up
                client.get(grid_path(None))
            for _ in range(args.requests):
                response = client.get(grid_path(None))
                assert response.status_code == 200
                timings["grid"].append(server_ms(response))
                sizes.append(len(response.content))
                response = client.get(grid_path(rng.choice(seqs)))
                assert response.status_code == 200
                timings["grid as of a seq"].append(server_ms(response))
                response = client.get("/api/v1/jobs/daily_clicks/partitions/summary")
                timings["summary"].append(server_ms(response))
                response = client.get(grid_path(None) + "&check=daily_not_empty&check_result=failed")
                assert response.status_code == 200
                timings["check filter"].append(server_ms(response))
            timings["grid after the log moved"] = moved_grids(
                service, db, client, refs, grid_path, args.moves, rng, not args.memory_only
            )
        service.stop()
    print(
        f"results ({'read replica, ' if args.replica else 'memory only, ' if args.memory_only else ''}"
        f"{args.instances:,} instances, grids of {size:,} "
        f"partitions, target p99 <= {TARGET_P99_MS:.0f} ms):"
    )
    print(line(f"grid page, {size:,} partitions", timings["grid"], TARGET_P99_MS))
    print(line(f"grid page as of a seq, {size:,} partitions", timings["grid as of a seq"]))
    print(line(f"summary, {total:,} partitions (per head seq)", timings["summary"]))
    print(line(f"grid page with a check filter, {size:,} partitions", timings["check filter"], TARGET_P99_MS))
    print(
        line(f"grid page after the log moved, {size:,} partitions", timings["grid after the log moved"], TARGET_P99_MS)
    )
    print(f"  grid page HTML: max {max(sizes):,} bytes")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
