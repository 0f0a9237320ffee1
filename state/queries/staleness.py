"""Stale instances: Live ones built by a code version other than their job's current one.

The version that built an instance is a fact of the log: its `built_by` run's
`code_version` (recorded at the run's JobRunBuffer). Whether it is stale compares
that fact with the graph served now, so a read as of an earlier seq says whether the
instance then Live was built by a version other than the one served now. An
instance whose run recorded no version (a log written before versions were) is
never stale: upgrading partbuild rebuilds nothing.

`StaleIndex` follows a BuildState as it grows (like `listing.ListingIndex`): per job
label and version, the runs that recorded it, so listing a job's stale instances
reads only that job's runs of other versions, never every instance of every job.
Reads of now drop the runs that can no longer have a Live instance (terminal, none
of theirs Live: an instance never becomes Live again), so once a job is rebuilt its
old runs cost nothing.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Iterable, Iterator, Mapping

from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.cold import created_since
from partbuild.state.fold.records import ACTIVE_RUN_STATES, Instance, InstanceState, JobRun
from partbuild.state.fold.view import StateView

_LIVE = InstanceState.LIVE


def built_version(state: StateView, instance: Instance) -> str | None:
    """The code version of the run that built `instance` (None: source data, not built yet, or unknown)."""
    run_id = instance.built_by
    if run_id is None:
        return None
    run = state.job_runs.get(run_id)
    return None if run is None else run.code_version


def is_stale(state: StateView, instance: Instance, current: Mapping[str, str | None]) -> bool:
    """Whether `instance` is Live, built by a known version, and its job's current version (`current`, by job
    label: the served graph's) is another one. A job missing from `current` makes nothing stale."""
    if instance.state != _LIVE or instance.built_by is None:
        return False
    run = state.job_runs.get(instance.built_by)
    if run is None or run.code_version is None:
        return False
    now = current.get(run.job_label)
    return now is not None and now != run.code_version


class StaleIndex:
    """Runs by job label and code version, updated by the one folding thread (`update`), read by many."""

    def __init__(self) -> None:
        self.seen = 0  # the head when last updated: the runs created by then are in
        # label -> version -> run ids in creation order (every versioned run: reads as of a seq need them all)
        self._runs: dict[str, dict[str, list[str]]] = {}
        # label -> version -> the run ids that may still have a Live instance now (reads of now prune them)
        self._current: dict[str, dict[str, list[str]]] = {}
        self._lock = threading.Lock()

    def update(self, state: BuildState) -> None:
        """Take in the runs `state` created since the last update."""
        if state.head_seq > self.seen:
            self.add(created_since(state.job_runs, self.seen))
            self.seen = state.head_seq

    def add(self, runs: Iterable[JobRun]) -> None:
        """Take in these runs, newer than any taken in before, oldest first."""
        with self._lock:
            for run in runs:
                if run.code_version is not None:
                    self._runs.setdefault(run.job_label, {}).setdefault(run.code_version, []).append(run.job_run_id)
                    current = self._current.setdefault(run.job_label, {})
                    current.setdefault(run.code_version, []).append(run.job_run_id)

    def forget(self, label: str) -> None:
        """Drop every run of job `label` taken in (to take them in again)."""
        with self._lock:
            self._runs.pop(label, None)
            self._current.pop(label, None)

    def versions(self, label: str) -> list[str]:
        """The code versions runs of `label` recorded, in the order first seen."""
        with self._lock:
            return list(self._runs.get(label, {}))

    def stale(self, state: StateView, label: str, current: str, limit: int, *, now: bool = True) -> list[Instance]:
        """Up to `limit` Live instances of job `label` built by a version other than `current`, oldest partitions
        last (refs in descending order: for date-keyed partitions, newest first). `now`: `state` is the live
        state (runs without a Live instance are dropped for later reads); else a state as of a seq (a PastState,
        which lists only what existed then)."""
        return heapq.nlargest(limit, self._candidates(state, label, current, now), key=_ref_of)

    def count(self, state: StateView, label: str, current: str, *, now: bool = True) -> int:
        """How many Live instances of `label` are stale."""
        return sum(1 for _ in self._candidates(state, label, current, now))

    def _candidates(self, state: StateView, label: str, current: str, now: bool) -> Iterator[Instance]:
        with self._lock:
            table = self._current if now else self._runs
            groups = [(version, ids, len(ids)) for version, ids in table.get(label, {}).items() if version != current]
        runs, instances = state.job_runs, state.instances
        for version, ids, known in groups:
            kept: list[str] = []
            for run_id in ids[:known]:
                run = runs.get(run_id)
                if run is None:  # as of a seq: a run that came later (the rest came later too)
                    break
                found = False
                for uuid in run.instance_uuids:
                    instance = instances.get(uuid)
                    if instance is not None and instance.state == _LIVE and instance.built_by == run_id:
                        found = True
                        yield instance
                if found or run.state in ACTIVE_RUN_STATES:
                    kept.append(run_id)
            if now and len(kept) < known:  # the others never have a Live instance again
                self._keep(label, version, ids, known, kept)

    def _keep(self, label: str, version: str, scanned: list[str], known: int, kept: list[str]) -> None:
        with self._lock:
            by_version = self._current[label]
            if by_version.get(version) is scanned:  # no other reader replaced it meanwhile
                by_version[version] = kept + scanned[known:]  # and what `update` appended since


def _ref_of(instance: Instance) -> str:
    return instance.ref
