"""Build a class-data-sharing archive of a Spark driver's classes, for the tests' Spark drivers to start from.

Most of the CPU a test's Spark driver spends on two cores is loading and verifying the classes of Spark and
its libraries (measured: a local session started and stopped 8.9 -> 4.5 s of CPU with the archive, a small
aggregation and parquet round trip 18 -> 9.7 s). The end-to-end tests start about 45 drivers, each
`partbuild run`, `up` and the shared session one. JDK 17 records the classes a run loaded at its exit
(`-XX:ArchiveClassesAtExit`, dynamic AppCDS); later drivers map them from the archive.

This runs a W1 build of two days on the embedded default in this process, with the recording driver, and
moves the archive into place once that JVM has exited. `make test` builds it once per virtual environment
(the archive belongs to its JDK and Spark jars); tests/conftest.py hands it to every driver the tests start
through SPARK_SUBMIT_OPTS, when the file exists. A JVM that cannot use it (another JDK or classpath) starts
as it would without it.

Usage: python tests/kits/spark_cds.py ARCHIVE
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from datetime import date
from pathlib import Path

from sparkkit import TEST_JVM_OPTIONS

# The flags the tests' JVMs run with; set before anything starts a JVM.
os.environ.setdefault("JDK_JAVA_OPTIONS", TEST_JVM_OPTIONS)
os.environ["PARTBUILD_CLICKS_SCHEDULE"] = "0"

DAYS = 2
START = date(2026, 1, 1)
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # examples/clicks/generate.py imports `examples.*`, as `python -m` from the root does


def _build_w1(work: Path) -> None:
    """Generate two days of clicks, want their week, build it with `partbuild run --until-idle`."""
    from partbuild.api.cli import main
    from partbuild.examples.clicks.generate import generate_raw
    from partbuild.examples.clicks.pipeline import weekly_ref, weeks_in_range
    from partbuild.orchestrator.spark import spark_session

    os.environ["PARTBUILD_CLICKS_ROOT"] = str(work / "clicks")
    os.environ["PARTBUILD_CLICKS_DAYS"] = str(DAYS)
    spark = spark_session(master="local[2]", app_name="partbuild-cds")
    generate_raw(spark, work / "clicks", days=DAYS, rows_per_day=200, start=START)
    db, graph = f"sqlite:///{work / 'cds.db'}", str(ROOT / "examples/clicks/pipeline.py")
    for args in (
        ["want", "--db", db, "--graph", graph, *map(weekly_ref, weeks_in_range(DAYS, START))],
        ["run", "--db", db, "--graph", graph, "--warehouse", str(work / "warehouse"), "--until-idle"],
    ):
        with contextlib.suppress(SystemExit):
            main(args)


def _stop_driver() -> None:
    """Stop the session and wait for its JVM to exit: it writes the archive on its way out."""
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    if context is None:
        raise SystemExit("no Spark driver ran: nothing was recorded")
    process = context._gateway.proc
    context.stop()
    process.stdin.close()  # the driver exits when its standard input closes
    process.wait(timeout=300)


def main(archive: Path) -> None:
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(archive.name + ".partial")
    partial.unlink(missing_ok=True)
    os.environ["SPARK_SUBMIT_OPTS"] = f"-XX:ArchiveClassesAtExit={partial} -Xlog:cds*=off"
    with tempfile.TemporaryDirectory(prefix="partbuild-cds-") as work:
        _build_w1(Path(work))
        _stop_driver()
    if not partial.exists():
        raise SystemExit(f"the driver wrote no archive at {partial}")
    partial.replace(archive)  # whole or absent: a test never maps half an archive
    print(f"Spark class archive: {archive} ({archive.stat().st_size / 2**20:.0f} MiB)")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__.rsplit("Usage: ", 1)[1].strip())
    main(Path(sys.argv[1]))
