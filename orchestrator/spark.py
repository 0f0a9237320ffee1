"""The one long-lived SparkSession of an orchestrator process.

Start-up costs seconds (a JVM, or a connection), so a process creates its
session once and every job run uses it. It is created lazily (`LazySpark`):
by the first job run that asks for `ctx.spark`, so an orchestrator whose jobs
never touch Spark, or that never gets a run (an idle group member, a
round-robin turn with nothing to do), never starts one. Master: `local[*]` by default, a cluster master URL
(`spark://host:7077`, `yarn`, `k8s://...`), or a Spark Connect remote (`sc://host:15002`).
Which settings it starts with (the user's, spark-defaults.conf, partbuild's defaults): `spark_conf`;
settings a Connect server did not take are named in a warning.

A run's Spark jobs are tagged with its id (`tag_spark_jobs`) so a cancel can stop them
(`cancel_spark_jobs`). `bucket_column` is the bucket function (HMAC-MD5, as
`state/rules/bucketing.py`) as built-in Spark SQL, classic or Connect, no Python UDF:
`df.filter(bucket_column(KEY, "ref", 12) == 3)` keeps one bucket's entities.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from partbuild.orchestrator.spark_conf import effective_conf, launcher_settings, resolve_master

if TYPE_CHECKING:
    from pyspark.sql import Column

logger = logging.getLogger("partbuild.spark")


def spark_master(master: str | None = None) -> str:
    """The master a session for `master` uses: it, else env PARTBUILD_SPARK_MASTER, else `spark.master` of
    spark-defaults.conf, else local[*]."""
    return _resolve(master)[0]


def spark_session(master: str | None = None, app_name: str = "partbuild", conf: Mapping[str, str] | None = None) -> Any:
    """Get or create the process's SparkSession for `master` (see `spark_master`) with the user's `conf` on top.

    partbuild's defaults (`spark_conf.effective_conf`) fill in only keys that neither `conf` nor Spark's
    launcher files set. On a Spark Connect remote `conf` is set on the server session; what the server does
    not take (static and cluster settings, fixed when the server started) is named in a warning.
    """
    from pyspark.sql import SparkSession  # imported here: only processes that run jobs need Spark

    master, launcher = _resolve(master)
    settings = effective_conf(master, conf or {}, launcher.keys(), app_name)
    if master.startswith("sc://"):
        builder = SparkSession.builder.appName(app_name).remote(master)
    else:  # the app name is among the settings: spark-defaults.conf may name the app
        builder = SparkSession.builder.master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    logger.info("Spark %s, settings %s", master, ", ".join(f"{k}={v}" for k, v in settings.items()) or "none")
    session = builder.getOrCreate()
    if master.startswith("sc://") and settings:
        _warn_unapplied(session, settings)
    return session


class LazySpark:
    """The process's session, started by the first `get()` (from any thread; later calls wait for it).

    A failed start is not remembered: the next `get()` tries again (a cluster may be back), and the run
    that asked fails with the reason, to be retried under its job's retry policy.
    """

    def __init__(self, start: Callable[[], Any] | None, describe: str = "Spark") -> None:
        self._start = start
        self._session: Any = None
        self._lock = threading.Lock()
        self.describe = describe  # for messages: which master this would start

    @classmethod
    def of(cls, session: Any) -> LazySpark:
        """A holder of a session that already exists, or of none (`None`: jobs get no Spark)."""
        holder = cls(None)
        holder._session = session
        return holder

    def get(self, why: str = "for the first job run that uses it") -> Any:
        """The session, started now if it was not yet (None only for a holder of no session)."""
        with self._lock:
            if self._session is None and self._start is not None:
                logger.info("starting %s %s", self.describe, why)
                try:
                    self._session = self._start()
                except Exception as exc:  # no Java, a bad master URL: one line, not a py4j traceback
                    raise RuntimeError(f"cannot start {self.describe}: {_first_line(exc)}") from exc
            return self._session

    def start_in_background(self) -> threading.Thread:
        """Start the session now in a thread of its own (returned), while this process does other work.

        For a process that will surely need Spark: its JVM starts meanwhile instead of after, and a job
        run asking for the session waits for this start. A failure here is only logged: the first run
        that asks tries again and fails with the reason, as without an early start.
        """

        def start() -> None:
            try:
                self.get(why="in the background, while the log is read")
            except RuntimeError as exc:
                logger.warning("%s; the first job run that uses it tries again", exc)

        thread = threading.Thread(target=start, name="partbuild-spark-start", daemon=True)
        thread.start()
        return thread

    @property
    def started(self) -> Any:
        """The session if it exists already, else None (never starts one: for cancels and clean-up)."""
        return self._session


def lazy_spark_session(master: str | None = None, conf: Mapping[str, str] | None = None) -> LazySpark:
    """`spark_session(master, conf=conf)`, started by the first job run that uses it.

    The master is resolved now, so a process names the Spark it will use in its first lines.
    """
    resolved = spark_master(master)
    settings = dict(conf or {})
    return LazySpark(lambda: spark_session(resolved, conf=settings), describe=f"Spark {resolved}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def _resolve(master: str | None) -> tuple[str, dict[str, str]]:
    """(the master, the launcher's settings); a Spark Connect client never launches a JVM, so reads none."""
    given = master or os.environ.get("PARTBUILD_SPARK_MASTER")
    launcher = {} if given and given.startswith("sc://") else _launcher_settings()
    return resolve_master(given, os.environ, launcher), launcher


def _launcher_settings() -> dict[str, str]:
    """What PySpark's spark-submit reads by itself, for the Spark home it launches (as PySpark finds it)."""
    from pyspark.find_spark_home import _find_spark_home  # the launcher's own rule (env, then the package)

    try:
        spark_home: str | None = _find_spark_home()
    except SystemExit:  # no Spark home at all: PySpark will fail to launch, with its own message
        spark_home = None
    return launcher_settings(os.environ, spark_home)


def _warn_unapplied(session: Any, settings: Mapping[str, str]) -> None:
    # The Connect client sets the builder's settings after connecting, silently skipping any the server
    # refuses; read them back so the user learns which ones did not take.
    current = session.conf.getAll
    unapplied = sorted(key for key, value in settings.items() if current.get(key) != value)
    if unapplied:
        logger.warning(
            "the Spark Connect server did not apply %s: static and cluster settings are fixed when the server "
            "starts (set them there)",
            ", ".join(unapplied),
        )


# --- Tagging a job run's Spark jobs, to cancel them from another thread -----------------------------
#
# Classic sessions: a job group. `setJobGroup` labels the Spark jobs the calling thread starts (PySpark
# pins each Python thread to its own JVM thread), and `cancelJobGroup` cancels them from any thread.
# Session tags (`addTag`/`interruptTag`, classic since Spark 4.0) do not fit here: classic
# `interruptTag(tag)` looks the tag up in the *calling* thread's tags, so the orchestrator thread
# cannot cancel a job thread's work with it, and it only covers DataFrame/SQL executions, not RDD jobs.
# Spark Connect sessions have no SparkContext: the client sends the calling thread's tags with every
# operation, and `interruptTag` asks the server to interrupt every operation of the session that
# carries the tag, whichever thread asks.


def tag_spark_jobs(spark: Any, run_id: str, description: str) -> None:
    """Label the Spark jobs this thread starts from now on as the run's (Spark UI, cancellation)."""
    context = _spark_context(spark)
    if context is not None:
        context.setJobGroup(run_id, description, interruptOnCancel=True)  # interrupt running tasks too
    else:
        spark.addTag(connect_tag(run_id))


def untag_spark_jobs(spark: Any, run_id: str) -> None:
    """Stop labelling this thread's Spark jobs as the run's (the thread goes back to the pool)."""
    # Classic: PySpark has no clearJobGroup; the next run's setJobGroup replaces the group.
    if _spark_context(spark) is None:
        spark.removeTag(connect_tag(run_id))


def cancel_spark_jobs(spark: Any, run_id: str) -> None:
    """Cancel the run's active Spark jobs, from any thread; jobs it starts later are not affected."""
    context = _spark_context(spark)
    if context is not None:
        context.cancelJobGroup(run_id)
    else:
        spark.interruptTag(connect_tag(run_id))


def connect_tag(run_id: str) -> str:
    """The run's Spark Connect operation tag: tags may not contain ',' (escaped, so still one per run)."""
    return run_id.replace("%", "%25").replace(",", "%2C")


def _spark_context(spark: Any) -> Any:
    # A Spark Connect session raises an AttributeError for `sparkContext`.
    return getattr(spark, "sparkContext", None)


# --- Bucketing in Spark: HMAC-MD5 out of built-in SQL functions ---------------------------------------
#
# `bucket(key, data, total)` (partbuild.state.rules.bucketing) is HMAC-MD5(key, data)'s first 32 bits mod total,
# plus one. Spark SQL has no HMAC, but RFC 2104 needs only MD5, concatenation and two constant pads: the
# key is a Python constant, so its padded blocks XOR ipad/opad are computed here once and shipped as binary
# literals, and every row costs two `md5` calls in the JVM. No Python UDF: rows never leave the JVM, and
# the same expression runs unchanged on a Spark Connect server.

_MD5_BLOCK_BYTES = 64
_IPAD = 0x36
_OPAD = 0x5C
_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1


def bucket_column(key: str, column: Column | str, bucket_total: int) -> Column:
    """`bucket(key, value, bucket_total)` for every row of the string `column`, as a Spark Column.

    Null in, null out. The type is int, or bigint when `bucket_total` exceeds int's range (2**31 - 1).
    Spark strings are UTF-8, so a value hashes as the bytes Python's `str.encode()` gives for it (characters
    outside the BMP included). A Python string with a lone surrogate, which the reference cannot encode,
    never reaches Spark as such: it is replaced on the way in (U+FFFD by a classic `createDataFrame`), and
    its bucket is the reference's bucket of the string Spark holds.
    """
    inner_pad, outer_pad = _hmac_md5_pads(key, bucket_total)
    # The flavour-neutral names: pyspark.sql.Column is the base of the classic and the Connect Column, and
    # pyspark.sql.functions builds Connect expressions on a Connect client (imported here, as above).
    from pyspark.sql import Column
    from pyspark.sql import functions as F

    if isinstance(column, str):
        column = F.col(column)
    elif not isinstance(column, Column):
        raise ValueError(f"column must be a column name or a Column, not {type(column).__name__}")
    message = F.encode(column, "UTF-8")
    inner = F.unhex(F.md5(F.concat(F.unhex(F.lit(inner_pad.hex())), message)))
    outer = F.md5(F.concat(F.unhex(F.lit(outer_pad.hex())), inner))  # 32 lowercase hex characters
    # The first 8 hex characters are an unsigned 32-bit number: conv's string fits a bigint exactly.
    first32 = F.conv(F.substring(outer, 1, 8), 16, 10).cast("bigint")
    result = F.pmod(first32, F.lit(bucket_total)) + F.lit(1)
    return result.cast("int" if bucket_total <= _INT_MAX else "bigint")


def _hmac_md5_pads(key: str, bucket_total: int) -> tuple[bytes, bytes]:
    """(K xor ipad, K xor opad) of RFC 2104 for `key`, after checking the arguments of `bucket_column`."""
    if not isinstance(key, str):
        raise ValueError(f"key must be a str, not {type(key).__name__}")
    # bool is an int subclass: True would silently mean one bucket.
    if not isinstance(bucket_total, int) or isinstance(bucket_total, bool):
        raise ValueError(f"bucket_total must be an int, not {type(bucket_total).__name__}")
    if not 1 <= bucket_total <= _LONG_MAX:
        raise ValueError(f"bucket_total must be between 1 and 2**63 - 1 (a Spark bigint), not {bucket_total}")
    try:
        key_bytes = key.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate: the reference cannot hash with this key either
        raise ValueError(f"key must be encodable as UTF-8: {exc}") from None
    if len(key_bytes) > _MD5_BLOCK_BYTES:
        key_bytes = hashlib.md5(key_bytes).digest()
    block = key_bytes.ljust(_MD5_BLOCK_BYTES, b"\0")
    return bytes(b ^ _IPAD for b in block), bytes(b ^ _OPAD for b in block)
