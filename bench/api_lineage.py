"""Lineage queries over HTTP on a state of 1,000,000 partition instances.

Target: GET /api/v1/instances/{uuid}/lineage with p99 <= 20 ms.

Builds (or reuses, `--db`) a SQLite log holding a simulated W1 history with at
least `--instances` partition instances, starts the API server on it in its own
process (one uvicorn worker; the service loads the state by replay at start-up,
which is timed), then sends seeded random lineage queries: weekly instances
upstream to depth 2, daily instances both ways to depth 1, raw instances
downstream to depth 2, a third each, after a warm-up. The load generator runs in
this process on the same machine; its CPU use is reported (see api_wants for
`--client raw`, a load generator that needs far less CPU than httpx).

    .venv/bin/python bench/api_lineage.py [--instances 1000000] [--db lineage.db] [--requests 2000] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import tempfile
import time
from collections import defaultdict

from _common import FULL_SIZE, machine, percentile, w1_log
from api_wants import ApiServer, LoadResult, RequestSpec, exit_on_sigterm, run_load

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.log.store import EventLog
from partbuild.state.rules.ids import instance_uuid

TARGET_P99_S = 0.020
# kind -> (direction, depth) of its queries
QUERIES = {"weekly": ("upstream", 2), "daily": ("both", 1), "raw": ("downstream", 2)}


def instances_by_kind(log: EventLog) -> dict[str, list[str]]:
    """UUIDs of the raw, daily and weekly instances in the log, read from the events (no fold).

    Raw instances are created by PartitionObserved (UUID from the seq and ref);
    built ones are named by JobRunBuffer of the `daily` and `weekly` jobs.
    """
    kinds: dict[str, dict[str, None]] = defaultdict(dict)
    event = pb.Event()
    for seq, payload in log.iter_payloads():
        event.ParseFromString(payload)
        which = event.WhichOneof("payload")
        if which == "partition_observed" and event.partition_observed.partition_ref.startswith("raw/"):
            kinds["raw"][instance_uuid(seq, event.partition_observed.partition_ref)] = None
        elif which == "job_run_buffer" and event.job_run_buffer.job_label in QUERIES:
            kinds[event.job_run_buffer.job_label].update(dict.fromkeys(event.job_run_buffer.instance_uuids))
    return {kind: list(uuids) for kind, uuids in kinds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=FULL_SIZE, help="partition instances to build (at least)")
    parser.add_argument("--db", help="SQLite file or URL to build into, or to reuse when it holds events")
    parser.add_argument("--requests", type=int, default=2_000, help="timed lineage queries")
    parser.add_argument("--warm-up", type=int, default=100, help="untimed queries first")
    parser.add_argument("--concurrency", type=int, default=4, help="queries in flight")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--time-limit", type=float, default=300.0, help="seconds at most for the timed queries")
    parser.add_argument("--startup-timeout", type=float, default=1_800.0, help="seconds at most for server start-up")
    parser.add_argument("--client", choices=("httpx", "raw"), default="raw", help="load generator (see api_wants)")
    args = parser.parse_args()
    exit_on_sigterm()

    with tempfile.TemporaryDirectory() as tmp:
        with w1_log(args.db, tmp, "lineage.db", args.instances) as (url, log):
            started = time.perf_counter()
            kinds = instances_by_kind(log)
            counts = ", ".join(f"{len(kinds.get(kind, [])):,} {kind}" for kind in QUERIES)
            print(f"sampled from the log in {time.perf_counter() - started:.1f} s: {counts}", flush=True)
            head = log.head()

        if not all(kinds.get(kind) for kind in QUERIES):
            raise SystemExit(f"the log at {url} is not a W1 history: it needs raw, daily and weekly instances")
        rng = random.Random(args.seed)
        plan = []
        for _ in range(args.warm_up + args.requests):
            kind = rng.choice(list(QUERIES))
            plan.append((kind, rng.choice(kinds[kind])))
        del kinds

        with ApiServer(url, startup_timeout_s=args.startup_timeout) as server:
            metrics = server.metric_sums()
            instances = int(metrics["partbuild_instances"])
            print(f"machine: {machine()}; load average {os.getloadavg()[0]:.2f}")
            print(
                f"server: uvicorn, 1 worker, pid {server.pid}; start-up {server.startup_s:.1f} s "
                f"(state load by replay {server.load_s:.1f} s) for {head:,} events, "
                f"{instances:,} partition instances"
            )
            rss_loaded, _ = server.rss_bytes()

            nodes: dict[str, list[int]] = defaultdict(list)

            def request(index: int) -> RequestSpec:
                kind, uuid = plan[index]
                direction, depth = QUERIES[kind]
                return "GET", f"/api/v1/instances/{uuid}/lineage", {"params": {"direction": direction, "depth": depth}}

            def check(index: int, status: int, body: bytes) -> str | None:
                if status != 200:
                    return f"HTTP {status} for {plan[index]}: {body[:200]!r}"
                answer = json.loads(body)
                if answer["root"] != plan[index][1]:
                    return f"root {answer['root']} for {plan[index][1]}"
                nodes[plan[index][0]].append(len(answer["nodes"]))
                return None

            def load(offset: int, count: int) -> LoadResult:
                def shifted(index: int) -> RequestSpec:
                    return request(offset + index)

                def checked(index: int, status: int, body: bytes) -> str | None:
                    return check(offset + index, status, body)

                return asyncio.run(
                    run_load(
                        server.base_url, shifted, count, args.concurrency, args.time_limit, checked, client=args.client
                    )
                )

            warm = load(0, args.warm_up)
            if warm.errors:
                raise RuntimeError(f"warm-up failed: {warm.errors[:3]}")
            nodes.clear()
            server_cpu = server.cpu_seconds()
            result = load(args.warm_up, args.requests)
            server_cpu = server.cpu_seconds() - server_cpu
            rss, peak = server.rss_bytes()

    print(
        f"lineage: {len(result.latencies):,} of {args.requests:,} queries (after {args.warm_up} warm-up), "
        f"concurrency {args.concurrency}, {args.client} client, HTTP/1.1 keep-alive, seed {args.seed}, "
        f"{result.wall_s:.2f} s{' (time limit reached)' if result.timed_out else ''}"
    )
    print(f"  {result.summary()}")
    for error in result.errors[:3]:
        print(f"  error: {error}")
    latency: dict[str, list[float]] = defaultdict(list)
    for index, seconds in zip(result.indexes, result.latencies, strict=True):
        latency[plan[args.warm_up + index][0]].append(seconds)
    for kind, (direction, depth) in QUERIES.items():
        counts, times = nodes.get(kind, []), latency.get(kind, [])
        if counts:
            print(
                f"  {kind:<6} direction={direction:<10} depth={depth}: {len(counts):,} queries, "
                f"p50 {1e3 * percentile(times, 0.5):.1f} ms, p99 {1e3 * percentile(times, 0.99):.1f} ms; "
                f"nodes returned min {min(counts)}, median {statistics.median(counts):g}, max {max(counts)}"
            )
    print(f"  {result.cpu_line(server_cpu)}")
    print(
        f"server RSS {rss / 2**20:,.0f} MiB after the queries ({rss_loaded / 2**20:,.0f} MiB after start-up, "
        f"peak {peak / 2**20:,.0f} MiB)"
    )
    p99 = result.percentile(0.99)
    ok = not result.errors and len(result.latencies) == args.requests and p99 <= TARGET_P99_S
    scaled = "" if instances >= FULL_SIZE else f"; scaled down, the target is for {FULL_SIZE:,} instances"
    print(
        f"api lineage: {len(result.latencies):,} queries on {instances:,} partition instances, "
        f"p99 {1e3 * p99:.1f} ms, {len(result.errors)} errors "
        f"(target p99 <= {1e3 * TARGET_P99_S:.0f} ms{scaled}): {'PASS' if ok else 'MISS'}"
    )


if __name__ == "__main__":
    main()
