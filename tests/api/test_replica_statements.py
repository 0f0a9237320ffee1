"""A read replica's point reads cost a few statements, however much the record they read names: an instance's
rebuild as of a seq reads each of its job runs and each of its consumers (with the run that built it), and a
want's reads each of its refs, their canonical instances and their runs, so those rows come in a statement per
kind, not one each. The answers are the folding server's."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from partbuild.api.service import Service
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.fold.history import CLOCK_MARK_EVERY
from partbuild.state.log.events import from_job_run
from partbuild.state.store.driver import DriverQuery
from partbuild.state.store.projector import Projector

from timetravelkit import History


def hub_history(consumers: int, refs: int) -> History:
    """`hub/1` built after two retryable failures, then read by `consumers` weeklies (each built by a run of
    its own); a want of `refs` dailies, each built by a run of its own."""
    h = History([])
    for n in range(CLOCK_MARK_EVERY):  # a log longer than a clock mark's stride, whatever the sizes
        h.add(pb.WantCreate(want_id=f"w-other-{n}", partition_refs=[f"other/{n}"]))
    h.add(pb.WantCreate(want_id="w-hub", partition_refs=["hub/1"]))
    for attempt in range(1, 3):
        h.run(f"hub-{attempt}", "hub", ["hub/1"])
        failure = pb.JobRunFailure(job_run_id=f"hub-{attempt}", error_class=pb.ERROR_CLASS_RETRYABLE, message="flaky")
        h.add(failure, from_job_run(f"hub-{attempt}"))
    h.run("hub-3", "hub", ["hub/1"])
    h.succeed("hub-3", [])
    hub = h.uuid("hub/1")
    weeklies = [f"weekly/{n}" for n in range(consumers)]
    h.add(pb.WantCreate(want_id="w-weeklies", partition_refs=weeklies))
    for n, ref in enumerate(weeklies):
        h.run(f"weekly-{n}", "weekly", [ref])
        h.succeed(f"weekly-{n}", [hub])
    dailies = [f"daily/{n}" for n in range(refs)]
    h.add(pb.WantCreate(want_id="w-dailies", partition_refs=dailies))
    for n, ref in enumerate(dailies):
        h.run(f"daily-{n}", "daily", [ref])
        h.succeed(f"daily-{n}", [])
    return h


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The statements run on any engine, as they run (the store's driver runs its own on the DBAPI cursor)."""
    ran: list[str] = []
    real = DriverQuery.all

    def counted(self: DriverQuery, conn: Connection, params: Mapping[str, object]) -> Sequence[Sequence[Any]]:
        ran.append(str(self._statement))
        return real(self, conn, params)

    def executed(*_: object) -> None:
        ran.append("a statement through SQLAlchemy")

    monkeypatch.setattr(DriverQuery, "all", counted)
    sa.event.listen(sa.engine.Engine, "before_cursor_execute", executed)
    yield ran
    sa.event.remove(sa.engine.Engine, "before_cursor_execute", executed)


def _sides(tmp_path: Path, consumers: int, refs: int) -> Iterator[tuple[History, Service, Database]]:
    h = hub_history(consumers, refs)
    with Database.open(f"sqlite:///{tmp_path / f'{consumers}.db'}", auto_upgrade=True) as db:
        db.log.append(h.events)
        primary = Service(db)
        assert Projector(primary.live, db.changes).project() == db.log.head()
        yield h, primary, db


@pytest.mark.parametrize("read", ["instance", "canonical", "want"])
def test_a_point_read_costs_the_same_statements_for_a_record_that_names_three_or_forty(
    tmp_path: Path, statements: list[str], read: str
) -> None:
    counts = []
    for size in (3, 40):
        for h, primary, db in _sides(tmp_path, size, size):
            hub = h.uuid("hub/1")
            ask = {
                "instance": lambda service, seq, hub=hub: service.instance(hub, as_of_seq=seq),
                "canonical": lambda service, seq: service.canonical("hub/1", as_of_seq=seq),
                "want": lambda service, seq: service.want("w-dailies", as_of_seq=seq),
            }[read]
            for seq in (None, h.seq - 1):  # now, and as of a seq (the newest weekly or daily not built yet)
                expected = ask(primary, seq)
                replica = Service(db, replica=True)  # a replica of its own: nothing read yet
                statements.clear()
                assert ask(replica, seq) == expected
                counts.append(len(statements))
    assert counts[:2] == counts[2:], counts  # 40 named records cost what 3 did
    assert max(counts) <= 9, counts  # (BEGIN, the watermarks, the clock and the checks requests count too)
