"""Web UI pages on a state of 1,000,000 partition instances, and the browser's lineage graph draw time.

Targets: server time per page p99 <= 100 ms for every page; a 300-node lineage
graph drawn in the browser <= 1 s.

Builds (or reuses, `--db`) a SQLite log holding a simulated W1 history with at least
`--instances` partition instances (`_common.build`), plus a short tail this benchmark adds
once: a `yearly` instance built from 20 weekly ones, so its lineage upstream at depth 3 has
1 + 20 weekly + 140 daily + 140 raw = 301 nodes and 300 edges, and the want that asked for it
with a tree of 160 derivative wants (20 weekly, 140 daily). W1 alone has no lineage over 15
nodes and no want tree over 2 levels.

Starts the API server on it in its own process (one uvicorn worker; `api_wants.ApiServer`),
with a `Server-Timing` header the benchmark wraps around the app (`_common.server_timing`):
the server reports its own time per request, so the figures do not depend on the load
generator sharing the 2 cores. Then, one request at a time (a page's time, not a queue's),
after a warm-up, it asks for every page kind in a seeded random order with random
parameters: overview, wants list (filters, next pages), want pages (W1 roots, derivatives and
the 160-want tree), partitions (prefix + state), ref pages, instance pages (W1, and the
301-node one), job runs list and run pages, the event log (unfiltered, by type, ref, want),
the audit page (no replay), /system, the sign-in page, and pages time travelling to a few
seqs (`?as_of=`): the first request at a new seq rebuilds that past state (a replay up to it)
and is reported on its own line; the others read it from the cache.

Last, headless Chromium (Debian's /usr/bin/chromium, driven by Playwright) opens the 301-node
instance page `--draw-rounds` times, each in a fresh browser context (cold cache), and
records the time from navigation start to `#lineage-status[data-state=drawn]` (recorded in
the page when the attribute changes) and lineage.js's own `data-ms` (layout and drawing).

    .venv/bin/python bench/web_pages.py [--instances 1000000] [--db web.db] [--per-kind 100] [--draw-rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import random
import re
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import quote, urlencode

import httpx
from _common import FULL_SIZE, exit_on_sigterm, machine, percentile, w1_log
from api_wants import ApiServer, RawConnection

from partbuild.examples.clicks.simulate import START_DATE, SimulationPlan
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.records import WantState
from partbuild.state.log.events import envelope, from_job_run, manual
from partbuild.state.log.store import EventLog
from partbuild.state.rules.ids import instance_uuid

TARGET_P99_MS = 100.0
TARGET_DRAW_S = 1.0
CHROMIUM = "/usr/bin/chromium"
TAIL_WANT = "want-web-bench-yearly"
TAIL_RUN = "run-web-bench-yearly"
TAIL_WEEKS = 20  # weekly inputs of the yearly instance: 1 + 20 + 20 * 7 + 20 * 7 = 301 nodes at depth 3
YEARLY_REF = "agg/yearly_clicks/site=0/weeks=2026-W02..W21"
DRAWN = "#lineage-status[data-state=drawn]"
# Records when lineage.js marks the graph drawn, from navigation start (an init script: not subject to the CSP).
DRAWN_PROBE = """
new MutationObserver(function (changes, observer) {
  for (const change of changes) {
    if (change.target.id === "lineage-status" && change.target.getAttribute("data-state") === "drawn") {
      window.__drawnAt = performance.now();
      observer.disconnect();
      return;
    }
  }
}).observe(document, { subtree: true, attributes: true, attributeFilter: ["data-state"] });
"""


# ----------------------------------------------------------------- the state


def append_tail(log: EventLog) -> None:
    """Append the benchmark's tail (the 301-node lineage and the 161-want tree) unless the log ends with it."""
    head = log.head()
    if TAIL_RUN.encode() in log.read(head - 1, 1)[0].payload:
        return
    weekly: dict[int, tuple[str, str, list[str]]] = {}  # week -> (weekly ref, weekly uuid, daily refs) of site 0
    refs: dict[int, str] = {}
    dailies: dict[int, list[str]] = {}
    event = pb.Event()
    for _, payload in log.iter_payloads(page_size=2_000):
        event.ParseFromString(payload)
        which = event.WhichOneof("payload")
        if which == "want_create" and (match := re.fullmatch(r"want-s0w(\d+)", event.want_create.want_id)):
            refs[int(match[1])] = event.want_create.partition_refs[0]
        elif which == "job_run_missing_deps" and (
            match := re.fullmatch(r"run-s0w(\d+)-weekly-1", event.job_run_missing_deps.job_run_id)
        ):
            dailies[int(match[1])] = list(event.job_run_missing_deps.missing_refs)
        elif which == "job_run_success" and (
            match := re.fullmatch(r"run-s0w(\d+)-weekly-2", event.job_run_success.job_run_id)
        ):
            week = int(match[1])
            weekly[week] = (refs[week], event.job_run_success.outputs[0].instance_uuid, dailies[week])
            if len(weekly) == TAIL_WEEKS:
                break
    if len(weekly) < TAIL_WEEKS:
        raise SystemExit(f"the log has {len(weekly)} weekly instances of site 0, the benchmark needs {TAIL_WEEKS}")
    seq = head
    start_ms = SimulationPlan(weeks=1).start_ms

    def emit(payload: object, source: pb.EventSource | None = None) -> pb.Event:
        nonlocal seq
        seq += 1
        # The simulation's clock: one event a second.
        return envelope(payload, source=source, timestamp_ms=start_ms + 1_000 * seq, event_id=f"web-bench-{seq}")  # type: ignore[arg-type]

    events = [
        emit(pb.WantCreate(want_id=TAIL_WANT, partition_refs=[YEARLY_REF], comment="yearly report"), manual("analyst"))
    ]
    yearly_uuid = instance_uuid(seq, YEARLY_REF)
    events.append(emit(pb.JobRunBuffer(job_run_id=TAIL_RUN, job_label="yearly", instance_uuids=[yearly_uuid])))
    # A backfill's tree of derivative wants: a want per weekly input, and under each a want per daily.
    for week, (weekly_ref, _, daily_refs) in sorted(weekly.items()):
        child = f"{TAIL_WANT}-w{week}"
        events.append(
            emit(
                pb.WantCreate(want_id=child, partition_refs=[weekly_ref], parent_want_id=TAIL_WANT),
                from_job_run(TAIL_RUN),
            )
        )
        for day, daily_ref in enumerate(daily_refs):
            grandchild = pb.WantCreate(want_id=f"{child}-d{day}", partition_refs=[daily_ref], parent_want_id=child)
            events.append(emit(grandchild, from_job_run(TAIL_RUN)))
    success = pb.JobRunSuccess(
        job_run_id=TAIL_RUN,
        input_instance_uuids=[uuid for _, uuid, _ in (weekly[week] for week in sorted(weekly))],
        outputs=[
            pb.OutputResult(instance_uuid=yearly_uuid, location=f"/data/{YEARLY_REF}/{yearly_uuid}", row_count=20)
        ],
    )
    events.append(emit(success))
    log.append(events, expected_head=head)
    print(f"appended the benchmark's tail: {len(events)} events (seq {head + 1:,} - {seq:,})", flush=True)


def sites_in(log: EventLog) -> int:
    """How many W1 sites the history has: the highest `site=N` in its last W1 events, plus one."""
    head = log.head()
    recent = log.read(max(0, head - 400), 400)
    return 1 + max(int(n) for row in recent for n in re.findall(rb"site=(\d+)", row.payload))


# ----------------------------------------------------------------- the requests


@dataclass
class Sample:
    """What the random parameters are drawn from (ids that exist in W1, UUIDs asked of the API)."""

    sites: int
    head: int
    tail_seq: int  # the first seq of the benchmark's tail
    instances: list[str] = field(default_factory=list)
    yearly_uuid: str = ""


def _monday(week: int) -> dt.date:
    return START_DATE + dt.timedelta(weeks=week)


def weekly_ref(site: int, week: int) -> str:
    year, iso_week, _ = _monday(week).isocalendar()
    return f"agg/weekly_clicks/site={site}/week={year}-W{iso_week:02d}"


def daily_ref(site: int, week: int, day: int) -> str:
    return f"agg/daily_clicks/site={site}/date={(_monday(week) + dt.timedelta(days=day)).isoformat()}"


def raw_ref(site: int, week: int, day: int) -> str:
    return daily_ref(site, week, day).replace("agg/daily_clicks/", "raw/clicks/")


Maker = Callable[[random.Random, Sample, int], str]  # (rng, sample, sites in reach) -> path


def _site(rng: random.Random, sites: int) -> int:
    return rng.randrange(sites)


def _any_ref(rng: random.Random, sites: int) -> str:
    site, week, day = _site(rng, sites), rng.randrange(52), rng.randrange(7)
    # Weeks 24 and 49 had a daily tainted and rebuilt: their refs have a timeline of two instances.
    if rng.random() < 0.25:
        week, day = rng.choice((24, 49)), 0
    return rng.choice((weekly_ref(site, week), daily_ref(site, week, day), raw_ref(site, week, day)))


def _want_id(rng: random.Random, sites: int) -> str:
    tag = f"s{_site(rng, sites)}w{rng.randrange(52)}"
    return rng.choice((f"want-{tag}", f"want-{tag}-daily"))


def _run_id(rng: random.Random, sites: int) -> str:
    site, week = _site(rng, sites), rng.randrange(52)
    tag = f"s{site}w{week}"
    runs = [f"run-{tag}-weekly-1", f"run-{tag}-weekly-2", f"run-{tag}-daily-1"]
    if week % 10 == 9:  # the daily run of every tenth week failed first: its retry is the second attempt
        runs.append(f"run-{tag}-daily-2")
    return rng.choice(runs)


def _q(path: str, **params: object) -> str:
    query = {key: value for key, value in params.items() if value not in (None, "")}
    return f"{path}?{urlencode(query)}" if query else path


def _states(enum: type) -> list[str]:
    return [member.name.lower() for member in enum]


# Page kind -> how to make a path; every kind is asked `--per-kind` times, in one shuffled order.
PAGES: dict[str, Maker] = {
    "overview": lambda rng, s, n: "/",
    "wants": lambda rng, s, n: "/wants",
    "wants ?state|ref": lambda rng, s, n: (
        _q("/wants", state=rng.choice(_states(WantState))) if rng.random() < 0.6 else _q("/wants", ref=_any_ref(rng, n))
    ),
    "wants next page": lambda rng, s, n: _q(
        "/wants", before=rng.randrange(1, s.head), state=rng.choice(["", "", "successful", "idle"])
    ),
    "want (W1)": lambda rng, s, n: f"/wants/{_want_id(rng, n)}",
    "want (161-want tree)": lambda rng, s, n: f"/wants/{TAIL_WANT}",
    "partitions": lambda rng, s, n: _q(
        "/partitions",
        prefix=rng.choice(
            [
                "",
                "raw/",
                "agg/daily_clicks/",
                f"agg/weekly_clicks/site={_site(rng, n)}/",
                f"agg/daily_clicks/site={_site(rng, n)}/",
                f"raw/clicks/site={_site(rng, n)}/date=2026-0",
            ]
        ),
        state=rng.choice(["", "", "live", "tainted"]),
    ),
    "partitions next page": lambda rng, s, n: _q(
        "/partitions", prefix="agg/daily_clicks/", after=daily_ref(_site(rng, n), rng.randrange(52), 0)
    ),
    "ref": lambda rng, s, n: _q("/partition", ref=_any_ref(rng, n)),
    "instance (W1)": lambda rng, s, n: f"/instances/{rng.choice(s.instances)}",
    "instance (301-node lineage)": lambda rng, s, n: _q(f"/instances/{s.yearly_uuid}", direction="upstream", depth=3),
    "runs": lambda rng, s, n: _q(
        "/runs", state=rng.choice(["", "", "failed", "succeeded"]), job=rng.choice(["", "", "daily", "weekly"])
    ),
    "runs next page": lambda rng, s, n: _q("/runs", before=rng.randrange(1, s.head)),
    "run": lambda rng, s, n: f"/runs/{_run_id(rng, n)}",
    "events": lambda rng, s, n: _q("/events", before=rng.choice([None, None, rng.randrange(2, s.head)])),
    "events ?type": lambda rng, s, n: _q(
        "/events", type=rng.choice(["want_create", "job_run_success", "partition_taint", "job_run_failure"])
    ),
    "events ?ref": lambda rng, s, n: _q("/events", ref=_any_ref(rng, n)),
    "events ?want": lambda rng, s, n: _q("/events", want=_want_id(rng, n)),
    "audit": lambda rng, s, n: "/audit",
    "system": lambda rng, s, n: "/system",
    "signin": lambda rng, s, n: "/signin",
}
# Pages asked as of a past seq (once that state is cached): what exists by then.
AS_OF_PAGES = ["overview", "wants", "wants ?state|ref", "want (W1)", "partitions", "ref", "run", "events", "audit"]


@dataclass
class Timed:
    """Times of one page kind: round trip measured by the client, and the server's own (Server-Timing)."""

    client_ms: list[float] = field(default_factory=list)
    server_ms: list[float] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    bytes: list[int] = field(default_factory=list)


async def fetch_all(base_url: str, paths: list[tuple[str, str]], warm_up: int) -> tuple[dict[str, Timed], list[str]]:
    """GET every (kind, path) in order, one at a time on one keep-alive connection; the first `warm_up` untimed."""
    host, port = base_url.removeprefix("http://").split(":")
    connection = RawConnection(host, int(port))
    timed: dict[str, Timed] = defaultdict(Timed)
    errors: list[str] = []
    try:
        for index, (kind, path) in enumerate(paths):
            started = time.perf_counter()
            status, body = await connection.request("GET", path, b"")
            elapsed = 1e3 * (time.perf_counter() - started)
            if status != 200:
                errors.append(f"{kind}: HTTP {status} for {path}: {body[:160]!r}")
                continue
            if index < warm_up:
                continue
            entry = timed[kind]
            entry.client_ms.append(elapsed)
            entry.server_ms.append(connection.server_ms if connection.server_ms is not None else float("nan"))
            entry.paths.append(path)
            entry.bytes.append(len(body))
    finally:
        await connection.close()
    return timed, errors


def sample_instances(base_url: str, rng: random.Random, sites: int, count: int) -> list[str]:
    """UUIDs of the canonical instances of `count` random refs (asked of the API, untimed)."""
    uuids = []
    with httpx.Client(base_url=base_url, timeout=30) as client:
        while len(uuids) < count:
            ref = _any_ref(rng, sites)
            response = client.get(f"/api/v1/partitions/canonical/{quote(ref, safe='/')}")
            response.raise_for_status()
            uuids.append(response.json()["uuid"])
    return uuids


# ----------------------------------------------------------------- the browser


@dataclass
class Draw:
    """One visit of the 301-node instance page in a fresh browser context."""

    drawn_ms: float  # navigation start -> data-state=drawn (in the page)
    draw_ms: float  # lineage.js's data-ms: layout and SVG
    response_end_ms: float  # navigation start -> the page's HTML received
    nodes: int
    edges: int
    dcl_ms: float  # navigation start -> DOMContentLoaded (lineage.js asks for the graph then)
    fetched_ms: float  # navigation start -> the lineage JSON received


def browser_draws(url: str, rounds: int) -> list[Draw]:
    """Open `url` `rounds` times in headless Chromium, each in a new context; the drawn times."""
    from playwright.sync_api import sync_playwright

    draws = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            for _ in range(rounds):
                context = browser.new_context(viewport={"width": 1400, "height": 900})
                page = context.new_page()
                page.add_init_script(DRAWN_PROBE)
                page.goto(url, wait_until="commit")
                page.wait_for_selector(DRAWN, state="attached", timeout=60_000)
                page.wait_for_function("window.__drawnAt !== undefined", timeout=10_000)
                found = page.evaluate(
                    """() => {
                      const s = document.querySelector("#lineage-status");
                      const nav = performance.getEntriesByType("navigation")[0];
                      const api = performance.getEntriesByType("resource").filter((r) => r.name.includes("/lineage?"));
                      return [window.__drawnAt, +s.dataset.ms, nav.responseEnd, +s.dataset.nodes, +s.dataset.edges,
                              nav.domContentLoadedEventStart, api.length ? api[0].responseEnd : NaN];
                    }"""
                )
                draws.append(Draw(found[0], found[1], found[2], int(found[3]), int(found[4]), found[5], found[6]))
                svg_nodes = page.locator("[data-testid=lineage-node]").count()
                if svg_nodes != draws[-1].nodes:
                    raise RuntimeError(f"{svg_nodes} nodes drawn, the status says {draws[-1].nodes}")
                context.close()
        finally:
            browser.close()
    return draws


# ----------------------------------------------------------------- the benchmark


def line(kind: str, entry: Timed) -> tuple[str, bool]:
    """One line of the per-page table and whether the page met the target (on the server's p99)."""
    server, client = entry.server_ms, entry.client_ms
    p99 = percentile(server, 0.99)
    ok = p99 <= TARGET_P99_MS
    text = (
        f"  {kind:<30} {len(server):>5} {percentile(server, 0.5):>8.1f} {p99:>8.1f} {max(server):>8.1f}   "
        f"{percentile(client, 0.5):>8.1f} {percentile(client, 0.99):>8.1f} {max(client):>8.1f}   "
        f"{statistics.median(entry.bytes) / 1024:>6.0f}  {'PASS' if ok else 'MISS'}"
    )
    return text, ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=FULL_SIZE, help="partition instances to build (at least)")
    parser.add_argument("--db", help="SQLite file or URL to build into, or to reuse when it holds events")
    parser.add_argument("--per-kind", type=int, default=100, help="timed requests per page kind")
    parser.add_argument("--warm-up", type=int, default=100, help="untimed requests first (every kind)")
    parser.add_argument("--as-of", type=int, default=3, help="distinct past seqs to time travel to (<= 4: cached)")
    parser.add_argument("--draw-rounds", type=int, default=5, help="browser visits of the 301-node graph (0: none)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--startup-timeout", type=float, default=1_800.0, help="seconds at most for server start-up")
    args = parser.parse_args()
    exit_on_sigterm()

    with tempfile.TemporaryDirectory() as tmp:
        with w1_log(args.db, tmp, "web.db", args.instances) as (url, log):
            append_tail(log)
            head = log.head()
            tail_seq = head - (2 + TAIL_WEEKS * 8)
            sites = sites_in(log)

        with ApiServer(url, startup_timeout_s=args.startup_timeout, server_timing=True) as server:
            instances = int(server.metric_sums()["partbuild_instances"])
            print(f"machine: {machine()}; load average {os.getloadavg()[0]:.2f} at start")
            print(
                f"server: uvicorn, 1 worker, pid {server.pid}; start-up {server.startup_s:.1f} s "
                f"(state load by replay {server.load_s:.1f} s) for {head:,} events, {instances:,} partition "
                f"instances, {sites:,} W1 sites",
                flush=True,
            )
            rng = random.Random(args.seed)
            sample = Sample(sites=sites, head=head, tail_seq=tail_seq)
            sample.instances = sample_instances(server.base_url, rng, sites, 300)
            with httpx.Client(base_url=server.base_url, timeout=30) as client:
                sample.yearly_uuid = client.get(f"/api/v1/partitions/canonical/{YEARLY_REF}").json()["uuid"]
                lineage = client.get(
                    f"/api/v1/instances/{sample.yearly_uuid}/lineage", params={"direction": "upstream", "depth": 3}
                ).json()
            print(
                f"the 301-node instance {sample.yearly_uuid}: upstream depth 3 has {len(lineage['nodes'])} nodes, "
                f"{len(lineage['edges'])} edges",
                flush=True,
            )

            # Time travel: a few seqs spread over the W1 history; each first visit rebuilds that past state.
            seqs = [int(head * (k + 1) / (args.as_of + 1)) for k in range(args.as_of)]
            first_visits: list[tuple[int, float, float]] = []
            with httpx.Client(base_url=server.base_url, timeout=600) as client:
                for seq in seqs:
                    started = time.perf_counter()
                    response = client.get("/", params={"as_of": seq})
                    response.raise_for_status()
                    server_ms = float(response.headers["server-timing"].split("dur=")[1])
                    first_visits.append((seq, 1e3 * (time.perf_counter() - started), server_ms))
                    print(f"  first visit as of seq {seq:,}: {server_ms / 1e3:.1f} s (rebuilds that state)", flush=True)

            plan = [(kind, PAGES[kind]) for kind in PAGES for _ in range(args.per_kind)]
            plan += [(f"as_of {kind}", PAGES[kind]) for kind in AS_OF_PAGES for _ in range(max(1, args.per_kind // 4))]
            rng.shuffle(plan)
            warm = [rng.choice(list(PAGES.items())) for _ in range(args.warm_up)]
            paths = [(kind, make(rng, sample, sites)) for kind, make in warm]
            for kind, make in plan:
                if kind.startswith("as_of "):
                    seq = rng.choice(seqs)
                    # Only what existed by then: the sites whose history was complete at that seq.
                    reach = max(1, int(sites * seq / tail_seq) - 1)
                    path = make(rng, sample, reach)
                    paths.append((kind, path + ("&" if "?" in path else "?") + f"as_of={seq}"))
                else:
                    paths.append((kind, make(rng, sample, sites)))
            print(f"requests: {args.warm_up} warm-up, then {len(plan):,} timed, one at a time", flush=True)
            server_cpu = server.cpu_seconds()
            started, client_cpu = time.perf_counter(), time.process_time()
            timed, errors = asyncio.run(fetch_all(server.base_url, paths, args.warm_up))
            wall, client_cpu = time.perf_counter() - started, time.process_time() - client_cpu
            server_cpu = server.cpu_seconds() - server_cpu
            load_after = os.getloadavg()[0]
            rss, peak = server.rss_bytes()

            draws: list[Draw] = []
            if args.draw_rounds and not os.access(CHROMIUM, os.X_OK):
                print(f"no browser at {CHROMIUM} (Debian's chromium package): the draw time is not measured")
            elif args.draw_rounds:
                page_url = f"{server.base_url}/instances/{sample.yearly_uuid}?direction=upstream&depth=3"
                draws = browser_draws(page_url, args.draw_rounds)

    done = sum(len(entry.server_ms) for entry in timed.values())
    print(
        f"pages: {done:,} timed requests in {wall:.1f} s, seed {args.seed}, {len(errors)} errors; server CPU "
        f"{1e3 * server_cpu / max(done, 1):.1f} ms/request, client (this process) "
        f"{1e3 * client_cpu / max(done, 1):.1f} ms/request; load average {load_after:.2f} after; "
        f"server RSS {rss / 2**20:,.0f} MiB (peak {peak / 2**20:,.0f})"
    )
    for error in errors[:5]:
        print(f"  error: {error}")
    print(
        f"  {'page (ms)':<30} {'count':>5} {'p50':>8} {'p99':>8} {'max':>8}   "
        f"{'rt p50':>8} {'rt p99':>8} {'rt max':>8}   {'KiB':>6}  (server time; rt: client round trip)"
    )
    verdicts = []
    for kind in [*PAGES, *(f"as_of {kind}" for kind in AS_OF_PAGES)]:
        if kind in timed:
            text, ok = line(kind, timed[kind])
            verdicts.append((kind, ok))
            print(text)
    for seq, client_ms, server_ms in first_visits:
        print(
            f"  {'as_of first visit (rebuild)':<30} seq {seq:,}: {server_ms:,.0f} ms server, "
            f"{client_ms:,.0f} ms round trip"
        )
    missed = [kind for kind, ok in verdicts if not ok]
    ok = not errors and not missed and len(verdicts) == len(PAGES) + len(AS_OF_PAGES)
    scaled = "" if instances >= FULL_SIZE else f"; scaled down, the target is for {FULL_SIZE:,} instances"
    worst = max(verdicts, key=lambda v: percentile(timed[v[0]].server_ms, 0.99))[0]
    print(
        f"web pages: {len(verdicts)} page kinds on {instances:,} partition instances, worst p99 "
        f"{percentile(timed[worst].server_ms, 0.99):.1f} ms ({worst}), {len(errors)} errors "
        f"(target p99 <= {TARGET_P99_MS:.0f} ms for every page, cached time travel included{scaled}): "
        f"{'PASS' if ok else 'MISS'}{' - missed: ' + ', '.join(missed) if missed else ''}"
    )
    if first_visits:
        slowest = max(server_ms for _, _, server_ms in first_visits)
        print(
            f"web time travel, first visit to a new seq: up to {slowest / 1e3:.1f} s (a replay to that seq; "
            f"then cached, {len(seqs)} seqs here): not under the page target, reported on its own"
        )
    if draws:
        drawn = [d.drawn_ms for d in draws]
        print(
            f"lineage graph draw ({draws[0].nodes} nodes, {draws[0].edges} edges, headless Chromium, "
            f"{len(draws)} fresh contexts): navigation start -> drawn "
            f"{', '.join(f'{ms:.0f}' for ms in drawn)} ms (median {statistics.median(drawn):.0f}, "
            f"max {max(drawn):.0f}); of which layout + SVG (data-ms) median "
            f"{statistics.median(d.draw_ms for d in draws):.0f} ms; medians from navigation start: HTML received "
            f"{statistics.median(d.response_end_ms for d in draws):.0f} ms, DOMContentLoaded (the graph asked for) "
            f"{statistics.median(d.dcl_ms for d in draws):.0f} ms, graph JSON received "
            f"{statistics.median(d.fetched_ms for d in draws):.0f} ms"
        )
        ok_draw = max(drawn) <= 1e3 * TARGET_DRAW_S
        print(
            f"web lineage draw: {draws[0].nodes} nodes drawn in max {max(drawn):.0f} ms "
            f"(target <= {TARGET_DRAW_S:.0f} s{scaled}): {'PASS' if ok_draw else 'MISS'}"
        )


if __name__ == "__main__":
    main()
