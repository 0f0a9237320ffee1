"""Automatic snapshots of `partbuild run`, run in-process on the tests' shared SparkSession (which it gets
rather than creates): it snapshots, and the next replay starts from that snapshot. Snapshots of the
orchestrator and the service without Spark: tests/state/log/test_checkpoints.py.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from partbuild.api.cli import main
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.log.events import envelope, manual
from partbuild.state.log.store import EventLog


def _want(log: EventLog, want_id: str, *refs: str) -> None:
    log.append([envelope(pb.WantCreate(want_id=want_id, partition_refs=list(refs)), source=manual("test"))])


def test_cli_run_snapshots_and_replay_starts_from_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, spark: Any
) -> None:
    """`partbuild run` in-process (on the tests' shared SparkSession, which it gets rather than creates)."""
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    graph_file = tmp_path / "graph.py"
    graph_file.write_text(
        "from partbuild.orchestrator.graph import Graph, Job\n"
        'graph = Graph([Job("noop", ["noop/{n}"], lambda ctx: None)])\n'
    )
    with Database.open(db, auto_upgrade=True) as database:
        log = database.log
        _want(log, "w", "noop/1", "noop/2")

    def cli(*args: str) -> str:
        with pytest.raises(SystemExit) as exited:
            main(list(args))
        out, err = capsys.readouterr()
        assert exited.value.code in (0, None), err
        return out

    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:  # `run` installs its stop handlers: give pytest its own back afterwards
        cli("run", "--db", db, "--graph", str(graph_file), "--warehouse", str(tmp_path / "wh"), "--until-idle",
            "--snapshot-every", "1")  # fmt: skip
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    report = json.loads(cli("replay", "--db", db, "--json"))
    assert report["snapshot_seq"] == report["head_seq"] > 1
    assert report["replayed_events"] == 0 and report["counts"]["wants"]["successful"] == 1
