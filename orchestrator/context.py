"""What a job run sees: the Spark session (started on first use), resolved inputs, its outputs, a logger.

A job function takes a `JobContext` and returns nothing. The ways it can end,
all recorded as events:

| how the function ends | event | what happens next |
| --- | --- | --- |
| returns | JobRunSuccess, with the inputs read and `ctx.record(...)` metadata | instances Live |
| returns after `ctx.fail(ref, reason)` | JobRunSuccess listing those failed | others Live; each failed one alone |
| returns, an output's blocking check fails or raises | that output failed alone, naming the check | as above |
| returns with every output failed on its own | JobRunFailure, each output with its own error | as failures below |
| raises `MissingInputs(refs)` | JobRunMissingDeps + derivative wants | retried once those refs are Live |
| raises `PermanentJobError` | JobRunFailure (permanent) | wants Failed, waiters UpstreamFailed |
| raises anything else | JobRunFailure (retryable) | retried per the job's RetryPolicy, then permanent |
| raises (either way) in a run of several outputs | JobRunFailure, split | each output retried alone, no retry spent |

A batch is an efficiency, never a failure domain: an exception that ends a run of several outputs says
nothing about which of them is bad, so each is retried alone, where its own error (if it has one) is its
alone. The error recorded is the root cause, one line (`orchestrator/errors.py`); the stack is in the run log.
| is canceled (someone appended JobRunCancel) | none more from the run | see below |

A canceled run's instances end Canceled as soon as the fold accepts the
JobRunCancel, and a fresh Missing instance (a new UUID, so a new location)
replaces each: a rebuild, in this process or any other, can start at once and
never writes where the canceled function may still be writing (Python code
cannot be stopped from outside, so work outside Spark runs on until the
function ends). The orchestrator running it cancels its Spark jobs (tagged with
the run id; so an action in flight raises) and drops whatever the function
returns or raises, with no heartbeats meanwhile. A run still waiting for a
thread never starts. (A JobRunCancel written before `replace_instances` existed
put the same instances back to Missing; a rebuild of those in the same process
waited for the canceled function to return, as a retry of a run failed as stale
still does.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from partbuild.orchestrator.graph import Partition
from partbuild.orchestrator.observed_writes import Watch, WriteObserver


class MissingInputs(Exception):
    """Raised by a job that found inputs absent; partbuild builds them and retries."""

    def __init__(self, refs: Iterable[str]) -> None:
        self.refs = sorted(set(refs))
        super().__init__(f"missing inputs: {', '.join(self.refs)}")


class PermanentJobError(Exception):
    """Raised by a job when retrying cannot help (bad data, bad code, bad configuration)."""


@dataclass(frozen=True)
class OutputTarget:
    """One partition a run builds: its instance and where that instance's data goes."""

    partition: Partition
    instance_uuid: str
    location: str  # unique to the instance: a rebuild never overwrites an older instance

    @property
    def ref(self) -> str:
        return self.partition.ref


@dataclass
class OutputRecord:
    row_count: int = 0
    byte_count: int = 0
    metadata: dict[str, str] = field(default_factory=dict)


# ref -> (instance UUID, location) of its canonical instance if Live, else None.
Resolver = Callable[[str], tuple[str, str] | None]


@dataclass
class JobContext:
    """Handed to a job function for one job run."""

    job_run_id: str
    job_label: str
    outputs: list[OutputTarget]
    # Input ref -> location of its canonical Live instance, for every declared input that is Live.
    input_locations: Mapping[str, str]
    log: logging.Logger
    # Looks up refs the job did not declare (inputs discovered while running).
    resolve: Resolver | None = None
    records: dict[str, OutputRecord] = field(default_factory=dict)
    # Undeclared refs read through `resolve`: ref -> instance UUID, recorded as provenance.
    extra_reads: dict[str, str] = field(default_factory=dict)
    # Refs this context looked up and found not Live: a MissingInputs naming them is a real dep miss,
    # even if they became Live since (another run may finish between the lookup and the raise).
    found_absent: set[str] = field(default_factory=set)
    # Outputs the job function said failed on their own (`fail`): ref -> (reason, retryable).
    failures: dict[str, tuple[str, bool]] = field(default_factory=dict)
    # Gives the process's SparkSession (pyspark.sql.SparkSession, typed loosely so that state-only users
    # need no pyspark), starting it if no run has yet: read through `spark`, only by jobs that use Spark.
    open_spark: Callable[[], Any] = field(default=lambda: None, repr=False)
    # Attaches the job's checks to what `write` writes (orchestrator/observed_writes.py).
    observer: WriteObserver = field(default_factory=lambda: WriteObserver(()), repr=False)
    # Output ref -> its write's observation (None: written more than once; the gate reads it back).
    watches: dict[str, Watch | None] = field(default_factory=dict)

    @property
    def spark(self) -> Any:
        """The process's SparkSession; the first run that asks starts it (seconds), so ask only if needed."""
        return self.open_spark()

    def input(self, ref: str) -> str:
        """The location of an input's Live instance; raises MissingInputs if it is not Live."""
        return self.inputs([ref])[0]

    def inputs(self, refs: Iterable[str]) -> list[str]:
        """Locations of several inputs; raises MissingInputs naming every absent one."""
        locations: list[str] = []
        absent: list[str] = []
        for ref in refs:
            location = self.input_locations.get(ref) or self._resolve_extra(ref)
            if location is None:
                absent.append(ref)
            else:
                locations.append(location)
        if absent:
            self.found_absent.update(absent)
            raise MissingInputs(absent)
        return locations

    def _resolve_extra(self, ref: str) -> str | None:
        found = self.resolve(ref) if self.resolve is not None else None
        if found is None:
            return None
        uuid, location = found
        self.extra_reads[ref] = uuid
        return location

    def fail(self, ref: str, reason: str, *, retryable: bool = False) -> None:
        """Say that output `ref` failed (e.g. its input file is corrupt): the run's other outputs still go Live.

        `retryable`: it may succeed if tried again (the job's RetryPolicy); by default it fails for good until
        it is wanted again (new input data, a fix). Its data, if written, is never read.
        """
        self._target(ref)  # an output of this run, or ValueError
        self.failures[ref] = (" ".join(str(reason).split()) or "failed", retryable)

    def write(self, ref: str, frame: Any, *, format: str = "parquet", mode: str = "overwrite", **options: Any) -> str:
        """Write the DataFrame `frame` as output `ref` (to its instance's location) and return the location.

        The job's checks that Spark can observe are computed as the rows are written, in the write's own
        action, and so is the row count (recorded as the output's `row_count` unless `record` gives one):
        the gate then reads nothing back for them. `options` go to the writer (`.options(**options)`).
        """
        location = self._target(ref).location
        observed, watch = self.observer.observe(frame)
        observed.write.format(format).mode(mode).options(**options).save(location)
        # A second write of one output (e.g. an append) leaves the first one's rows unobserved.
        self.watches[ref] = None if ref in self.watches else watch
        return location

    def _target(self, ref: str) -> OutputTarget:
        for target in self.outputs:
            if target.ref == ref:
                return target
        raise ValueError(f"{ref!r} is not an output of job run {self.job_run_id}")

    def record(self, ref: str, *, row_count: int = 0, byte_count: int = 0, **metadata: Any) -> None:
        """Attach output metadata (row count, size, anything else) to the partition just written."""
        self._target(ref)  # an output of this run, or ValueError
        self.records[ref] = OutputRecord(row_count, byte_count, {k: str(v) for k, v in metadata.items()})
