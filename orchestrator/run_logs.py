"""Capturing what each job run logs into the run-log store (`state/ops/run_logs.py`): redacted, batched, bounded.

`RunLogWriter` (one per executor) hands each run a `RunLog`: a `logging.Logger` of
its own (the run's `ctx.log`) whose lines are numbered, redacted and buffered, and
that still forwards every record to the job's process logger (`partbuild.executor.<job>`)
as before. A background thread writes the buffered lines of all runs in one
transaction every `flush_interval_s` (0.5 s: a follower sees lines live), and a
run's `close` writes what is left.

Bounds. A line keeps at most `max_line_chars` characters. A run keeps its first
`max_lines` lines; later ones are counted, not kept, and `close` writes one marker
line "... K lines dropped". Keeping the first lines (not the last) keeps every
line number a reader has paged past valid while the run goes on. The lines the
executor writes at the run's end (a failure's traceback, the run's Spark jobs)
have `reserve` lines of their own, so a chatty job never hides why it failed.
Across runs, the age cap is `RunLogStore.prune`, called by the orchestrator.

Redaction: a `Secret` prints itself as `Secret(***)` wherever it is formatted;
on top of that every line has control characters removed (a job cannot forge
lines), and these are replaced by `***`: AWS access key ids (`AKIA...`/`ASIA...`),
the value of anything written as `secret=`, `password=`, `token=` or
`aws_secret_access_key=` (`:` too), partbuild API tokens (`pbt_...`), and the
values of the process's `AWS_SECRET_ACCESS_KEY` / `AWS_SESSION_TOKEN` variables.
"""

from __future__ import annotations

import copy
import logging
import os
import re
import threading
import time
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from partbuild.state.log.events import Clock, wall_clock_ms
from partbuild.state.ops.run_logs import RunLogLine, RunLogStore

MAX_LINES = 10_000
RESERVE = 200
MAX_LINE_CHARS = 2_000
FLUSH_INTERVAL_S = 0.5
RUN_LOG_MAX_AGE_MS = 14 * 24 * 3600 * 1000  # the age cap: lines older than 14 days are pruned
RUN_LOG_PRUNE_EVERY_MS = 3600 * 1000  # how often the orchestrator prunes

_SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
_PATTERNS = (
    re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"),
    re.compile(r"\bpbt_[A-Za-z0-9_\-]{8,}"),
)
_ASSIGNED = re.compile(
    r"(?i)\b((?:aws_)?(?:secret(?:_access_key)?|password|passwd|token|session_token)\s*[=:]\s*)(\S+)"
)

process_logger = logging.getLogger("partbuild.run_logs")


def redact_line(text: str, extra: tuple[str, ...] = ()) -> str:
    """`text` without control characters and with the secrets the module docstring lists replaced by `***`."""
    kept = "".join(ch if not unicodedata.category(ch).startswith("C") else " " for ch in text)
    for value in extra:
        kept = kept.replace(value, "***")
    for pattern in _PATTERNS:
        kept = pattern.sub("***", kept)
    return _ASSIGNED.sub(lambda m: m.group(1) + "***", kept)


@dataclass
class _Run:
    next_no: int
    kept: int = 0
    dropped: int = 0
    ending: bool = False
    pending: list[RunLogLine] = field(default_factory=list)


class RunLogWriter:
    """Buffers the lines of every run of one executor and writes them in batches; see the module docstring."""

    def __init__(
        self,
        store: RunLogStore,
        *,
        max_lines: int = MAX_LINES,
        reserve: int = RESERVE,
        max_line_chars: int = MAX_LINE_CHARS,
        flush_interval_s: float = FLUSH_INTERVAL_S,
        clock: Clock = wall_clock_ms,
    ) -> None:
        self.store = store
        self.max_lines = max_lines
        self.reserve = reserve
        self.max_line_chars = max_line_chars
        self._clock = clock
        self._runs: dict[str, _Run] = {}
        self._closed: list[RunLogLine] = []  # lines of runs closed since the last flush
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()  # one flush at a time: lines reach the store in order
        self._secrets = tuple(v for name in _SECRET_ENV if (v := os.environ.get(name)))
        self._stopping = threading.Event()
        self._interval = flush_interval_s
        self._thread = threading.Thread(target=self._loop, name="partbuild-run-logs", daemon=True)
        self._thread.start()

    def open(self, run_id: str, parent: logging.Logger) -> RunLog:
        """The run's log, numbering after any lines the run already has (a run resumed here)."""
        try:
            first = self.store.last_line_no(run_id) + 1
        except Exception:
            process_logger.warning("could not read the run log of job run %s", run_id, exc_info=True)
            first = 1
        with self._lock:
            self._runs[run_id] = _Run(first)
        return RunLog(self, run_id, parent)

    def add(self, run_id: str, level: str, text: str) -> None:
        """Buffer `text` (split into lines, redacted, bounded) as the run's."""
        now = self._clock()
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                return  # closed: the run's log is written
            for raw in text.splitlines() or [""]:
                cap = self.max_lines + (self.reserve if run.ending else 0)
                if run.kept >= cap:
                    run.dropped += 1
                    continue
                line = redact_line(raw, self._secrets)
                if len(line) > self.max_line_chars:
                    line = line[: self.max_line_chars - 3] + "..."
                run.pending.append(RunLogLine(run_id, run.next_no, now, level, line))
                run.next_no += 1
                run.kept += 1

    def ending(self, run_id: str) -> None:
        """From now on the run's lines are the executor's end lines: they use the reserve, after a drop marker."""
        with self._lock:
            run = self._runs.get(run_id)
            if run is None or run.ending:
                return
            run.ending = True
            if run.dropped:
                marker = f"... {run.dropped} lines dropped (a run keeps its first {self.max_lines} lines)"
                run.pending.append(RunLogLine(run_id, run.next_no, self._clock(), "WARNING", marker))
                run.next_no += 1

    def close(self, run_id: str) -> None:
        """The run is over: write what is left of its lines now."""
        self.ending(run_id)
        with self._lock:
            run = self._runs.pop(run_id, None)
            if run is not None:
                self._closed.extend(run.pending)
        self.flush()

    def flush(self) -> None:
        """Write every buffered line, in one transaction."""
        with self._flush_lock:
            with self._lock:
                lines = self._closed
                self._closed = []
                for run in self._runs.values():
                    lines.extend(run.pending)
                    run.pending = []
            try:
                self.store.append(lines)
            except Exception:  # the run goes on; its log misses these lines
                process_logger.warning("could not write %d run-log lines", len(lines), exc_info=True)

    def shutdown(self) -> None:
        """Stop the flushing thread after a last flush."""
        self._stopping.set()
        self._thread.join(timeout=5)
        self.flush()

    def _loop(self) -> None:
        while not self._stopping.wait(self._interval):
            self.flush()


class _RunLogHandler(logging.Handler):
    def __init__(self, writer: RunLogWriter, run_id: str) -> None:
        super().__init__(logging.DEBUG)
        self._writer = writer
        self._run_id = run_id
        self.setFormatter(logging.Formatter("%(message)s"))  # a traceback follows the message

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._writer.add(self._run_id, record.levelname, self.format(record))
        except Exception:
            self.handleError(record)


class _Forward(logging.Handler):
    """Hands a record to the job's process logger as if logged there (its level and handlers decide)."""

    def __init__(self, parent: logging.Logger) -> None:
        super().__init__(logging.DEBUG)
        self._parent = parent

    def emit(self, record: logging.LogRecord) -> None:
        if self._parent.isEnabledFor(record.levelno):
            if record.exc_info or record.exc_text:
                # The traceback is the run's log's (read it there); the process's output keeps one line a failure.
                record = copy.copy(record)
                record.exc_info, record.exc_text = None, None
            self._parent.handle(record)


class RunLog:
    """One run's log: `logger` is its `ctx.log` (DEBUG and up are kept; the process logger filters its own)."""

    def __init__(self, writer: RunLogWriter, run_id: str, parent: logging.Logger) -> None:
        self.run_id = run_id
        self._writer = writer
        # Not registered with `logging.getLogger`: one per run would never be freed.
        self.logger = logging.Logger(parent.name, logging.DEBUG)
        self.logger.parent = parent
        self.logger.propagate = False
        self.logger.addHandler(_RunLogHandler(writer, run_id))
        self.logger.addHandler(_Forward(parent))

    def ending(self) -> None:
        """The job function is over: what follows is the executor's account of its end."""
        self._writer.ending(self.run_id)

    def close(self) -> None:
        self._writer.close(self.run_id)


def spark_job_lines(spark: object, run_id: str, settle_s: float = 2.0) -> list[str]:
    """One line per Spark job of the run's job group (classic sessions; none on Spark Connect).

    Called once the job function returned, so its jobs have ended; but Spark's listener bus tells the status
    tracker so a moment later (longer on a loaded machine): a job still said to run is asked again, for up to
    `settle_s`, before its line says so.

    PySpark's status tracker gives each job's id, status and stages and keeps only recent jobs
    (`spark.ui.retainedJobs`). It has no times: a job's duration comes from the JVM's status store (what
    the Spark UI shows, kept with the UI off too), read through the session's gateway.
    """
    context = getattr(spark, "sparkContext", None)  # Spark Connect: an AttributeError, so None
    if context is None:
        return []
    tracker = context.statusTracker()
    lines = []
    for job_id in sorted(tracker.getJobIdsForGroup(run_id)):
        info = _settled_info(tracker, job_id, settle_s)
        if info is not None:
            took = _spark_job_duration(context, job_id)
            lasted = "" if took is None else f", {took:.3f} s"
            lines.append(f"Spark job {job_id}: {info.status}{lasted}, stages {list(info.stageIds)}")
    return lines


def _settled_info(tracker: Any, job_id: int, settle_s: float) -> Any:
    """The tracker's info on a job, once it no longer says RUNNING (or `settle_s` passed)."""
    deadline = time.monotonic() + settle_s
    info = tracker.getJobInfo(job_id)
    while info is not None and info.status in ("RUNNING", "UNKNOWN") and time.monotonic() < deadline:
        time.sleep(0.02)
        info = tracker.getJobInfo(job_id)
    return info


def _spark_job_duration(context: Any, job_id: int) -> float | None:
    """Seconds from the job's submission to its completion, or None while it runs or if Spark forgot it."""
    try:
        job = context._jsc.sc().statusStore().job(job_id)  # AppStatusStore.job: v1.JobData, or raises
        submitted, completed = job.submissionTime(), job.completionTime()  # Scala Options of java.util.Date
        if not (submitted.isDefined() and completed.isDefined()):
            return None
        return (completed.get().getTime() - submitted.get().getTime()) / 1000
    except Exception:  # no such job any more (retention), or not a JVM-backed context: no duration, still a line
        return None
