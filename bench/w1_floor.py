"""The floor of W1 as a whole process: the same Spark work as partbuild's W1, two Spark jobs at a time.

One SparkSession with the settings partbuild's local session starts with (`spark_session`, the
same defaults from orchestrator/spark_conf.py), then `run_plain` with two threads: the 28 dailies
two at a time, then the weeklies two at a time (same outputs and formats as partbuild's jobs).
partbuild runs two job runs at once, so this is what it would cost with no orchestration at all.
`bench/w1_processes.py` times this process against partbuild's `want` + `run --until-idle`.

    .venv/bin/python bench/w1_floor.py --data clicks-data --out /tmp/floor [--days 28] [--threads 2]

Prints one JSON line: seconds from the interpreter's start to the session, and of the Spark work.
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()  # before the imports below: they are part of what the process pays

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, for `examples`

from examples.clicks.plain import run_plain  # noqa: E402
from partbuild.orchestrator.spark import spark_session  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="The raw data root (examples/clicks/generate.py).")
    parser.add_argument("--out", type=Path, required=True, help="Where the dailies and weeklies go.")
    parser.add_argument("--days", type=int, default=28)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    spark = spark_session()
    spark.sparkContext.setLogLevel("ERROR")
    session_s = time.perf_counter() - STARTED
    run_plain(spark, args.data, args.out, days=args.days, threads=args.threads)
    work_s = time.perf_counter() - STARTED - session_s
    spark.stop()
    print(json.dumps({"session_s": round(session_s, 3), "work_s": round(work_s, 3)}), flush=True)


if __name__ == "__main__":
    main()
