"""Each job run's code version in a row of its own (state/store/run_versions.py): ids that say where each part
ends, so one job's runs of every version but one are two range scans, whatever the names hold."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from partbuild.state.database import Database
from partbuild.state.schema import state_records
from partbuild.state.store.records import RUN_VERSION
from partbuild.state.store.run_versions import parse_key, run_version_key, runs_of_other_versions

# Names with the characters the ids use (':' '/' digits) and some beyond.
NAMES = st.text(alphabet=st.sampled_from("ab1:/9z\u00e9\u4e00"), min_size=1, max_size=6)


@given(NAMES, NAMES, NAMES)
def test_an_id_gives_back_its_job_version_and_run(job: str, version: str, run: str) -> None:
    assert parse_key(run_version_key(job, version, run)) == (job, version, run)


def test_ids_this_kind_is_never_written_with_are_refused() -> None:
    for key in ("", "3:ab", "1:a1:v", "1:a1:vx", "\u00b2:ab1:v/r", "9:a1:v/r", "1:a:v/r"):
        assert parse_key(key) is None, key


@settings(max_examples=25, deadline=None)
@given(
    runs=st.lists(st.tuples(NAMES, NAMES), min_size=1, max_size=12),
    asked=st.tuples(NAMES, NAMES),
)
def test_the_runs_of_other_versions_are_exactly_those_of_the_job_whose_version_differs(
    tmp_path_factory: pytest.TempPathFactory, runs: list[tuple[str, str]], asked: tuple[str, str]
) -> None:
    folder = tmp_path_factory.mktemp("rv")
    job, current = asked
    rows = [(j, v, f"run-{n}", n + 1) for n, (j, v) in enumerate([*runs, (job, current), (job, current + "x")])]
    with Database.open(f"sqlite:///{folder / 'v.db'}", auto_upgrade=True) as db:
        with db.changes.records.engine.begin() as conn:
            conn.execute(
                sa.insert(state_records),
                [
                    {"kind": RUN_VERSION, "id": run_version_key(j, v, r), "seq": c, "body": b"", "created": c}
                    for j, v, r, c in rows
                ],
            )
        with db.changes.records.engine.connect() as conn:
            found = runs_of_other_versions(conn, RUN_VERSION, job, current, 0, len(rows))
            later = runs_of_other_versions(conn, RUN_VERSION, job, current, 3, len(rows) - 1)
    expected = [(c, r) for j, v, r, c in rows if j == job and v != current]
    assert found == [r for _, r in sorted(expected)]  # in creation order
    assert later == [r for c, r in sorted(expected) if 3 < c <= len(rows) - 1]
