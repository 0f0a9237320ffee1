"""A graph for benchmarks: one job whose runs each build one partition by sleeping, no Spark at all.

- `bench/sleep/n={n:int}` for n in 0..PARTBUILD_SLEEP_PARTITIONS-1 (default 240): no inputs,
  one partition per run (`batch_size=1`), each run sleeps PARTBUILD_SLEEP_S seconds (default 1)
  and writes nothing; a ref outside the range fails permanently, so a typo cannot hide in a figure.
- `max_concurrency` is PARTBUILD_SLEEP_CONCURRENCY (default 4). It is a limit on the whole log
  (runs of the job queued or running, whoever buffered them), not per worker: k workers of a
  group share it, so a benchmark giving each of k workers 4 slots sets it to 4 * k.
- PARTBUILD_SLEEP_SLOTS (default 0: none) caps the runs that sleep at once in one process, with a
  semaphore: a model of a worker whose own capacity is fixed (runs past the cap wait, Running, for
  a slot). Used with a large `max_concurrency`.

The job never touches `ctx.spark`. Only `partbuild.*` is imported: `partbuild run --graph`
imports this file by path. `python bench/graphs/sleep.py refs` prints the refs, one a line,
for `partbuild want --file -`.
"""

from __future__ import annotations

import os
import threading
import time

from partbuild.orchestrator.context import JobContext, PermanentJobError
from partbuild.orchestrator.graph import Graph, Job, PartitionPattern

SLEEP = PartitionPattern("bench/sleep/n={n:int}")


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, str(default)))


PARTITIONS = _env_int("PARTBUILD_SLEEP_PARTITIONS", 240)
SLEEP_S = float(os.environ.get("PARTBUILD_SLEEP_S", "1"))
CONCURRENCY = _env_int("PARTBUILD_SLEEP_CONCURRENCY", 4)
SLOTS = _env_int("PARTBUILD_SLEEP_SLOTS", 0)
# One per process: the graph file is imported once by `partbuild run`.
_slots = threading.BoundedSemaphore(SLOTS) if SLOTS > 0 else None


def sleep_refs(partitions: int = PARTITIONS) -> list[str]:
    """The refs of the graph's partitions, in order."""
    return [SLEEP.format(n=n) for n in range(partitions)]


def run_sleep(ctx: JobContext) -> None:
    """Sleep once per partition of the run (one, with batch_size 1); build no data."""
    for target in ctx.outputs:
        if not 0 <= target.partition["n"] < PARTITIONS:
            raise PermanentJobError(f"{target.ref}: outside 0..{PARTITIONS - 1} (PARTBUILD_SLEEP_PARTITIONS)")
    if _slots is None:
        time.sleep(SLEEP_S * len(ctx.outputs))
        return
    with _slots:
        time.sleep(SLEEP_S * len(ctx.outputs))


graph = Graph([Job("sleep", [SLEEP], run=run_sleep, batch_size=1, max_concurrency=CONCURRENCY)])


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["refs"]:
        raise SystemExit("usage: python bench/graphs/sleep.py refs")
    print("\n".join(sleep_refs()))
