"""W1 workers as real processes: a table of them that kills what is left, what each printed, and the check
that the log they built holds every wanted partition built exactly once."""

from __future__ import annotations

import subprocess
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from examples.clicks.pipeline import daily_ref, days_in_range, raw_ref, weekly_ref
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import InstanceState, JobRunState, WantState

from sparkkit import CLICKS_DAYS, CLICKS_START
from w1kit import WEEKS

Processes = dict[str, subprocess.Popen[bytes]]  # name -> process


def wanted_refs() -> list[str]:
    """The weeklies, their dailies and the raw sources: every ref the wants need Live."""
    days = days_in_range(CLICKS_DAYS, CLICKS_START)
    return [weekly_ref(w) for w in WEEKS] + [daily_ref(d) for d in days] + [raw_ref(d) for d in days]


def built_refs() -> list[str]:
    """The wanted refs job runs build (raw sources are observed, not built)."""
    return [ref for ref in wanted_refs() if not ref.startswith("raw/")]


@contextmanager
def processes() -> Iterator[Processes]:
    """A name -> process table; whatever is still running on the way out is killed."""
    table: Processes = {}
    try:
        yield table
    finally:
        for process in table.values():
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)


def output(tmp_path: Path, name: str) -> str:
    """What process `name` printed so far."""
    return (tmp_path / f"{name}.log").read_text(errors="replace")


def assert_running(procs: Processes, names: list[str], tmp_path: Path) -> None:
    """Fail with its output if one of `names` has exited."""
    for name in names:
        code = procs[name].poll()
        assert code is None, f"{name} exited ({code}):\n{output(tmp_path, name)[-3000:]}"


def assert_built_once_each(state: BuildState) -> None:
    """Every want successful; one Live instance per wanted ref; nothing built by two succeeded runs."""
    assert all(want.state == WantState.SUCCESSFUL for want in state.wants.values())
    assert not state.active_run_ids
    live = Counter(i.ref for i in state.instances.values() if i.state == InstanceState.LIVE)
    for ref in wanted_refs():
        canonical = state.canonical_instance(ref)
        assert canonical is not None and canonical.state == InstanceState.LIVE, ref
        assert live[ref] == 1, f"{ref} has {live[ref]} Live instances"
    succeeded = [run for run in state.job_runs.values() if run.state == JobRunState.SUCCEEDED]
    built = Counter(uuid for run in succeeded for uuid in run.instance_uuids)
    assert [uuid for uuid, runs in built.items() if runs > 1] == []
    refs = Counter(state.instances[uuid].ref for uuid in built)
    assert [ref for ref, times in refs.items() if times > 1] == []
    assert set(refs) == set(built_refs())
