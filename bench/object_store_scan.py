"""Object-store connector benchmark: items per second listing 20,000 objects from a local moto S3 server.

A moto server (a child process on a free local port, as in the tests) holds
`--objects` empty objects in directories of 1,000. Each scan drains the bucket
in pages of `--page` items with a fresh connector, as a restarted scanner
would, once resuming each page by S3 continuation token (the cursor's token)
and once by key alone (StartAfter). The figure is dominated by the server: moto
is Python and builds each XML listing itself, so a real S3 endpoint's rate
depends on its latency instead; this measures the connector's overhead on top
of a nearby server. The client's own cost is shown apart, as items per CPU
second of the scanning process (parsing the XML, building items).

    .venv/bin/python bench/object_store_scan.py [--objects 20000] [--page 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from _common import machine

from partbuild.orchestrator.connectors.object_store import ObjectStoreConnector
from partbuild.orchestrator.connectors.paging import Budgets, Cursor, KeyRange
from partbuild.orchestrator.connectors.s3_config import ObjectStoreConfig

BUCKET = "bench-scan"
PER_DIR = 1000


def start_moto() -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return process, f"http://127.0.0.1:{port}"
        time.sleep(0.1)
    process.kill()
    raise SystemExit("moto server did not start")


def fill(client: Any, objects: int) -> None:
    client.create_bucket(Bucket=BUCKET)
    keys = [f"raw/d{index // PER_DIR:04d}/part-{index % PER_DIR:05d}" for index in range(objects)]
    with ThreadPoolExecutor(8) as pool:  # PUTs are round trips: overlap them
        list(pool.map(lambda key: client.put_object(Bucket=BUCKET, Key=key, Body=b""), keys))


def drain(config: ObjectStoreConfig, page: int, tokens: bool) -> int:
    connector = ObjectStoreConnector(config)
    budgets = Budgets(page, 1 << 40)
    cursor, count = Cursor(), 0
    while (found := connector.fill_page(KeyRange(), cursor, budgets)) is not None:
        count += len(found)
        cursor = found.cursor if tokens else found.cursor.without_token()
    return count


def rate(config: ObjectStoreConfig, page: int, tokens: bool, repeat: int) -> tuple[int, float, float]:
    """(items, best items per wall second, best items per CPU second of this process: the client's share)."""
    best, best_cpu, items = 0.0, 0.0, 0
    for _ in range(repeat):
        started, cpu = time.perf_counter(), time.process_time()
        items = drain(config, page, tokens)
        best = max(best, items / (time.perf_counter() - started))
        best_cpu = max(best_cpu, items / max(time.process_time() - cpu, 1e-9))
    return items, best, best_cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=20_000)
    parser.add_argument("--page", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    process, endpoint = start_moto()
    try:
        config = ObjectStoreConfig(
            BUCKET, "raw/", endpoint_url=endpoint, access_key_id="bench", secret_access_key="bench"
        )
        started = time.perf_counter()
        fill(config.make_client(), args.objects)
        print(f"filled {args.objects:,} objects in {time.perf_counter() - started:.1f}s")
        for tokens in (True, False):
            items, best, best_cpu = rate(config, args.page, tokens, args.repeat)
            assert items == args.objects, f"listed {items} of {args.objects}"
            how = "continuation tokens" if tokens else "key only (StartAfter)"
            print(
                f"scan {items:,} objects, pages of {args.page}, {how}: {best:,.0f} items/s"
                f" (client side {best_cpu:,.0f} items per CPU second; best of {args.repeat})"
            )
    finally:
        process.kill()
        process.wait()
    print(f"machine: {machine()}")


if __name__ == "__main__":
    main()
