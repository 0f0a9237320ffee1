"""Row counts of parquet data on the local file system, from the files' footers: no Spark job.

A check that counts rows (of an output's inputs, of its previous instance) needs no row of data: every
parquet file states its row count in its footer. For a location on the local file system the gate
reads those footers directly (pyarrow), the files chosen as Spark chooses them when it reads the
directory: every file below it, but those whose name starts with `.`, or with `_` without a `=` in
it (`_SUCCESS`, `_metadata`; `_x=1` is a partition directory), or that ends in `._COPYING_`.
A location elsewhere (an object store, HDFS), or one whose files pyarrow cannot read as parquet, has
no answer here (None): Spark counts it, and reports its error if it has one.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

logger = logging.getLogger("partbuild.checks")


def footer_rows(spark: Any, locations: Sequence[str]) -> dict[str, int]:
    """The rows of each location whose files this process can read as Spark's driver would (the others: none).

    Only with a classic SparkSession, whose driver is this process: a Spark Connect server may see another
    file system. A bare path is local only if the session's default file system is.
    """
    try:
        default_fs = spark.sparkContext._jsc.hadoopConfiguration().get("fs.defaultFS") or "file:///"
    except Exception:  # Spark Connect (no SparkContext here), or no JVM: Spark counts them all
        return {}
    bare_is_local = default_fs.startswith("file:")
    found = {}
    for location in locations:
        rows = local_rows(location, bare_is_local=bare_is_local)
        if rows is not None:
            found[location] = rows
    return found


def local_rows(location: str, *, bare_is_local: bool = True) -> int | None:
    """The rows of the parquet data at `location` if it is a local directory or file; None to let Spark count."""
    path = _local_path(location, bare_is_local)
    if path is None or not os.path.exists(path):
        return None
    try:
        import pyarrow.parquet as pq

        return sum(pq.ParquetFile(file).metadata.num_rows for file in _data_files(path))
    except Exception:  # not parquet, unreadable, or no pyarrow: Spark's count says what is wrong
        logger.debug("no footer row count for %s", location, exc_info=True)
        return None


def _local_path(location: str, bare_is_local: bool) -> str | None:
    """The local path of `location` (a bare path or a `file:` URI), None for any other scheme."""
    parts = urlsplit(location)
    if parts.scheme == "" or (len(parts.scheme) == 1 and location[1:2] == ":"):  # a bare path (or a drive)
        return os.path.abspath(location) if bare_is_local else None
    if parts.scheme.lower() == "file" and parts.netloc in ("", "localhost"):
        return unquote(parts.path)
    return None


def _data_files(path: str) -> list[str]:
    """The files Spark reads under `path` (itself, if it is a file), in a stable order."""
    if os.path.isfile(path):
        return [path]
    found: list[str] = []
    for root, directories, files in os.walk(path):
        directories[:] = sorted(name for name in directories if not _hidden(name))
        found.extend(os.path.join(root, name) for name in sorted(files) if not _hidden(name))
    return found


def _hidden(name: str) -> bool:
    """Whether Spark leaves a file or directory of this name out of a read (its `shouldFilterOutPathName`)."""
    return (name.startswith("_") and "=" not in name) or name.startswith(".") or name.endswith("._COPYING_")
