"""Scan passes over 100,000 unchanged files, main's scanner vs this checkout's, and a pass after touching them all.

Issue 23 item 2: a moved weak version is confirmed by content before it counts, and "the cost
of a pass over 100,000 unchanged files stays as today". The tree is built once (in /dev/shm):
`--files` files in partitions `date=YYYY-MM-DD` of `--per-partition` files (the last one each
partition's `_SUCCESS`, the others `--file-bytes` bytes). Each side runs in its own child
process over its own SQLite log: "before" imports partbuild from a `git worktree` of
`--before-ref` (main), "after" from this checkout. Each side first observes the tree (after:
new partitions observed at once, then every byte read once for their digests, at the end of the
pass and over as many more passes as the read budget needs; the time of the pass's last
observation is printed beside the pass's), then times passes over the unchanged tree,
`--passes` per child, the sides alternating over `--rounds` rounds in the same run; the verdict
is on the ratio of the medians (target about 1.0: at most 1.10). Then every file is touched
(mtime + 1 s) and each side times three passes (before: every partition re-observed, then nothing;
after: every byte read once within the per-pass budget, which may take two passes, nothing observed,
then confirmed from the stored digests, nothing read).

    .venv/bin/python bench/scan_unchanged.py [--files 100000] [--per-partition 100] [--file-bytes 1024]
        [--rounds 3] [--passes 3] [--before-ref main] [--dir /dev/shm]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SOURCE, PATTERN, KEYS = "raw", "raw/date={date:date}", "date={date:date}"
TARGET_RATIO = 1.10


def use_code(root: str) -> None:
    """Import partbuild from the checkout at `root` (the editable install maps it to this one)."""
    for finder in sys.meta_path:
        mapping = getattr(sys.modules.get(getattr(finder, "__module__", "")), "MAPPING", None)
        if isinstance(mapping, dict) and "partbuild.state" in mapping:
            for name, path in mapping.items():
                mapping[name] = os.path.join(root, os.path.relpath(path, REPO))
            return
    raise SystemExit("scan_unchanged: partbuild is not an editable install; cannot run another checkout")


# ----------------------------------------------------------------- child: one side's passes


def child(args: argparse.Namespace) -> dict[str, Any]:
    use_code(args.code)
    from partbuild.orchestrator.graph import SourceDataset
    from partbuild.orchestrator.sources.discovery import filesystem_discovery
    from partbuild.orchestrator.sources.scanner import SourceScanner
    from partbuild.proto.v1 import events_pb2 as pb
    from partbuild.state.database import Database
    from partbuild.state.log.events import envelope, manual
    from partbuild.state.log.live import LiveState

    with Database.open(args.db, auto_upgrade=True) as db:
        discovery = filesystem_discovery(args.tree, KEYS, rescan_every_s=3600.0)
        options = {"digests": db.content_digests} if hasattr(db, "content_digests") else {}
        live = LiveState(db.log)
        scanner = SourceScanner(db.log, live, [SourceDataset(SOURCE, PATTERN, discovery=discovery)], **options)
        check = scanner.content_check(SOURCE) if hasattr(scanner, "content_check") else None

        def one_pass() -> dict[str, float]:
            live.catch_up()
            record = live.state.sources.get(SOURCE)
            if record is not None:
                db.log.append([envelope(pb.SourceScanRequest(source=SOURCE, reason="bench"), source=manual("bench"))])
            goal = (record.passes_done if record else 0) + 1
            head, read = live.state.head_seq, check.bytes_read if check else 0
            started_ms, started, cpu = time.time() * 1000, time.perf_counter(), time.process_time()
            while (done := live.state.sources.get(SOURCE)) is None or done.passes_done < goal:
                scanner.step()
            seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
            observed, after, last_observed_ms = 0, head, started_ms
            while rows := db.log.read(after, 10_000):
                seen = [row.recorded_at_ms for row in rows if row.event_type == "partition_observed"]
                observed, last_observed_ms = observed + len(seen), max([last_observed_ms, *seen])
                after = rows[-1].seq
            read = (check.bytes_read if check else 0) - read
            # When the pass's last observation was recorded (new partitions: before their digests are read).
            observed_s = (last_observed_ms - started_ms) / 1000
            return {"s": seconds, "cpu": cpu, "read": read, "observed": observed, "observed_s": observed_s}

        passes = [one_pass() for _ in range(args.passes)]
        while args.settle and (passes[-1]["read"] or passes[-1]["observed"]) and len(passes) < 10:
            passes.append(one_pass())  # a first pass cut short by the read budget is finished by the next
        return {"passes": passes}


def run_child(side: str, code: Path, tree: Path, db: str, passes: int, settle: bool = False) -> list[dict[str, float]]:
    command = [sys.executable, __file__, "child", "--code", str(code), "--tree", str(tree), "--db", db]
    command += ["--settle"] if settle else []
    done = subprocess.run([*command, "--passes", str(passes)], check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])["passes"]


# ----------------------------------------------------------------- the run


def build(root: Path, files: int, per_partition: int, file_bytes: int) -> int:
    """The tree; returns the bytes in it."""
    body = (b"0123456789abcdef" * (file_bytes // 16 + 1))[:file_bytes]
    total = 0
    for number in range(files // per_partition):
        day = root / f"date={date(2000, 1, 1) + timedelta(days=number)}"
        day.mkdir(parents=True)
        for part in range(per_partition - 1):
            (day / f"part-{part:05d}.csv").write_bytes(body)
            total += file_bytes
        (day / "_SUCCESS").write_bytes(b"")
    return total


def touch_all(root: Path) -> None:
    for path in root.rglob("*"):
        if path.is_file():
            stat = path.stat()
            os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))


def summary(passes: list[dict[str, float]], what: str = "s") -> str:
    seconds = [one[what] for one in passes]
    median = statistics.median(seconds)
    return f"median {median:.3f} s (min {min(seconds):.3f}, max {max(seconds):.3f}, n={len(seconds)})"


def ratio(unchanged: dict[str, list[dict[str, float]]], what: str) -> float:
    medians = {side: statistics.median(one[what] for one in passes) for side, passes in unchanged.items()}
    return medians["after"] / medians["before"]


def main(args: argparse.Namespace) -> None:
    from _common import machine

    print(f"machine: {machine()}; load {os.getloadavg()[0]:.1f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="scan-unchanged-", dir=args.dir) as temp:
        base = Path(temp)
        started = time.perf_counter()
        total = build(base / "tree", args.files, args.per_partition, args.file_bytes)
        print(f"tree: {args.files:,} files, {total:,} bytes, built in {time.perf_counter() - started:.1f} s")
        before_code = base / "before"
        ref = args.before_ref
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(before_code), ref], check=True)
        try:
            sides = {"before": before_code, "after": REPO}
            dbs = {side: f"sqlite:///{base / side}.db" for side in sides}
            for side, code in sides.items():
                for number, first in enumerate(run_child(side, code, base / "tree", dbs[side], 1, settle=True), 1):
                    counts = f"observed {first['observed']:.0f} (the last at {first['observed_s']:.2f} s)"
                    counts += f", read {first['read']:,.0f} B"
                    print(f"{side}: first passes, {number}: {first['s']:.2f} s, CPU {first['cpu']:.2f} s, {counts}")
            unchanged: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
            for round_number in range(args.rounds):
                order = list(sides) if round_number % 2 == 0 else list(reversed(sides))
                for side in order:
                    unchanged[side] += run_child(side, sides[side], base / "tree", dbs[side], args.passes)
                print(f"round {round_number + 1}: load {os.getloadavg()[0]:.1f}", flush=True)
            for side in sides:
                reads = sum(one["read"] for one in unchanged[side])
                observed = sum(one["observed"] for one in unchanged[side])
                print(f"{side}: unchanged pass, wall {summary(unchanged[side])}; CPU {summary(unchanged[side], 'cpu')}")
                print(f"{side}: unchanged passes read {reads:.0f} B, observed {observed:.0f}")
            for what, label in (("s", "wall"), ("cpu", "CPU")):
                value = ratio(unchanged, what)
                verdict = "PASS" if value <= TARGET_RATIO else "MISS"
                print(f"after/before, unchanged pass, {label} time: {value:.3f} (target <= {TARGET_RATIO}): {verdict}")
            touch_all(base / "tree")
            for side, code in sides.items():
                passes = run_child(side, code, base / "tree", dbs[side], 3)
                for number, one in enumerate(passes, 1):
                    label = f"pass {number} after touching every file"
                    counts = f"observed {one['observed']:.0f}, read {one['read']:,.0f} B"
                    print(f"{side}: {label} {one['s']:.2f} s, CPU {one['cpu']:.2f} s ({counts})")
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(before_code)], check=False)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    one = sub.add_parser("child", help="(internal) one side's passes, as JSON")
    one.add_argument("--code", required=True)
    one.add_argument("--tree", required=True)
    one.add_argument("--db", required=True)
    one.add_argument("--passes", type=int, default=1)
    one.add_argument("--settle", action="store_true", help="then more passes until one reads and observes nothing")
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--per-partition", type=int, default=100)
    parser.add_argument("--file-bytes", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--passes", type=int, default=3, help="timed passes per child")
    parser.add_argument("--before-ref", default="main")
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    parser.add_argument("--dir", default=shm, help="where to build the tree (default: /dev/shm, else the temp dir)")
    return parser.parse_args()


if __name__ == "__main__":
    arguments = parse()
    if arguments.command == "child":
        print(json.dumps(child(arguments)))
    else:
        main(arguments)
