"""The overview's numbers on a 1,000,000-instance W1 state: what counting waiting instances no active want needs costs.

Target: the overview (and `GET /api/v1/counts`) does not scan the instances: the split of each waiting
state into wanted and unwanted (`state/queries/wanted.py`) reads an index of the fold
(`wanted_instance_counts`), so it adds under 10% to the overview page's server time (p50 of the
overview with it vs without it, interleaved), whatever the number of actively wanted refs.

Builds (or reuses, `--db`) the benchmarks' W1 log (`_common.build`, at least `--instances` instances),
appends once a tail of two wants over refs no one builds: `--backfill` refs wanted by an active want
(Missing, wanted) and `--expired` refs wanted by a want that expires on arrival (Missing, unwanted).
Loads it in process (`Service`, a full replay), then, one call at a time, interleaved round by round:
the overview page's view (`views.overview`) as served, the same view with the waiting split replaced
by nothing (its cost taken out), the split alone (`waiting_counts`), and `Service.counts` (the API's
answer). Last, as of three seqs, interleaved, 5 rounds: the overview view with and without the split, and
`Service.counts` (a `PastState`: a scan of the records, as the overview as of a seq already was; the
split adds a scan of the wants), then the same after projecting the state store (the counts as of a seq
from its index, state/store/counts.py). Prints p50 / p99 in ms of each, and the answer it checked.

    .venv/bin/python bench/overview_counts.py [--db w1.db] [--instances 1000000] [--rounds 200]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from typing import Any

from _common import FULL_SIZE, machine, percentile, w1_log

from partbuild.api.service import Service
from partbuild.api.web import views
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.log.events import envelope, manual
from partbuild.state.log.store import EventLog
from partbuild.state.queries.wanted import waiting_counts
from partbuild.state.store.projector import Projector

TAIL_WANTS = ("bench-overview-backfill", "bench-overview-expired")


def append_tail(log: EventLog, backfill: int, expired: int) -> None:
    """Once: an active want of `backfill` refs and a want of `expired` refs that expires on arrival."""
    if any(TAIL_WANTS[1].encode() in event.payload for event in log.read(max(0, log.head() - 2), 2)):
        print("tail already appended", flush=True)
        return
    now = int(time.time() * 1000)
    active = pb.WantCreate(
        want_id=TAIL_WANTS[0], partition_refs=[f"bench/backfill/{n}" for n in range(backfill)], comment="backfill"
    )
    gone = pb.WantCreate(
        want_id=TAIL_WANTS[1],
        partition_refs=[f"bench/expired/{n}" for n in range(expired)],
        data_timestamp_ms=1,
        ttl_seconds=1,
        comment="expired on arrival",
    )
    log.append([envelope(want, source=manual("bench"), timestamp_ms=now) for want in (active, gone)])


def timed(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--db", help="a W1 log to reuse (built there when empty)")
    parser.add_argument("--instances", type=int, default=FULL_SIZE)
    parser.add_argument("--backfill", type=int, default=10_000)
    parser.add_argument("--expired", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    print(machine(), flush=True)
    with tempfile.TemporaryDirectory() as tmp, w1_log(args.db, tmp, "w1-overview.db", args.instances) as (url, log):
        append_tail(log, args.backfill, args.expired)
        started = time.perf_counter()
        with Database.open(url) as db:
            service = Service(db)
            try:
                print(f"loaded {service.state.head_seq:,} events in {time.perf_counter() - started:.0f} s", flush=True)
                measure(service, args.rounds)
            finally:
                service.stop()


def measure(service: Service, rounds: int) -> None:
    state = service.state
    counts = state.counts()["instances"]
    found = waiting_counts(state, counts)
    print(
        f"{len(state.instances):,} instances, {len(state.active_wants_by_ref):,} actively wanted refs; "
        f"missing: {found['missing'].total:,} ({found['missing'].wanted:,} wanted, "
        f"{found['missing'].unwanted:,} unwanted)",
        flush=True,
    )
    real = views.waiting_counts
    calls: dict[str, Callable[[], Any]] = {
        "overview view (as served)": lambda: views.overview(service, None),
        "overview view without the split": lambda: _without_split(service, real),
        "waiting_counts alone": lambda: waiting_counts(state, state.counts()["instances"]),
        "Service.counts (GET /counts)": lambda: service.counts(),
    }
    for call in calls.values():  # warm-up
        for _ in range(10):
            call()
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            times[name].append(timed(call))
    print(f"{'what':<36} {'p50 ms':>8} {'p99 ms':>8}")
    for name, values in times.items():
        print(f"{name:<36} {percentile(values, 0.5):>8.2f} {percentile(values, 0.99):>8.2f}")
    with_split = percentile(times["overview view (as served)"], 0.5)
    without = percentile(times["overview view without the split"], 0.5)
    print(f"overview p50 with / without the split: {with_split / without:.3f}x (target < 1.10x)")
    measure_as_of(service, real, "as of seq, no state store")
    started = time.perf_counter()
    Projector(service.live, service.db.changes).project()
    print(f"projected the state store in {time.perf_counter() - started:.0f} s", flush=True)
    measure_as_of(service, real, "as of seq, from the state store")


def measure_as_of(service: Service, real: Callable[..., Any], label: str) -> None:
    """As of three seqs, 5 rounds interleaved: the overview with and without the split, and the counts."""
    head = service.state.head_seq
    print(f"{label:<36} {'overview':>9} {'no split':>9} {'counts':>9}  p50 ms (5 rounds)")
    for seq in (head // 4, head // 2, head - 1):
        past: dict[str, list[float]] = {"overview": [], "no split": [], "counts": []}
        for _ in range(5):
            past["overview"].append(timed(lambda s=seq: views.overview(service, s)))  # type: ignore[misc]
            past["no split"].append(timed(lambda s=seq: _without_split(service, real, s)))  # type: ignore[misc]
            past["counts"].append(timed(lambda s=seq: service.counts(as_of_seq=s)))  # type: ignore[misc]
        shown = " ".join(f"{percentile(values, 0.5):>9.1f}" for values in past.values())
        print(f"{seq:<36,} {shown}")


def _without_split(service: Service, real: Callable[..., Any], as_of: int | None = None) -> Any:
    """The overview view with `waiting_counts` answering nothing: what the page cost before the split."""
    views.waiting_counts = lambda state, counts: {}  # type: ignore[assignment]
    try:
        return views.overview(service, as_of)
    finally:
        views.waiting_counts = real  # type: ignore[assignment]


if __name__ == "__main__":
    main()
