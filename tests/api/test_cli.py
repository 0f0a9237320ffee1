"""The `partbuild` CLI: demo, replay, db upgrade, and one clear line with exit 2 on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
import sqlalchemy as sa

from partbuild.api.cli import COMMANDS, cli, load_command
from partbuild.state.database import Database
from partbuild.state.log.live import LiveState
from partbuild.state.log.store import EventLog
from partbuild.state.queries.changes import changes_between
from partbuild.state.schema import state_changes

from clikit import run_cli


def test_demo_then_replay_verify_json(capsys: pytest.CaptureFixture[str], sqlite_url: str) -> None:
    code, out, _ = run_cli(capsys, "demo", "--db", sqlite_url, "--weeks", "8", "--sites", "2")
    assert code == 0 and "wrote" in out
    code, out, err = run_cli(capsys, "replay", "--db", sqlite_url, "--verify", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["verified"] is True and report["problems"] == []
    assert report["head_seq"] == report["state_seq"] > 0
    assert report["snapshot_seq"] == report["head_seq"] // 2  # the demo leaves a snapshot half-way
    assert report["rejected_total"] == 0
    assert report["counts"]["wants"]["successful"] > 0
    assert len(report["digest"]) == 64


def test_replay_as_of_and_human_output(capsys: pytest.CaptureFixture[str], sqlite_url: str) -> None:
    run_cli(capsys, "demo", "--db", sqlite_url, "--weeks", "4", "--sites", "1")
    code, full, _ = run_cli(capsys, "replay", "--db", sqlite_url)
    assert code == 0 and "log head seq" in full and "digest" in full and "rejected events" in full
    code, past, _ = run_cli(capsys, "replay", "--db", sqlite_url, "--as-of", "10", "--json")
    assert code == 0 and json.loads(past)["state_seq"] == 10


def test_replay_lists_rejected_events(capsys: pytest.CaptureFixture[str], sqlite_url: str) -> None:
    from partbuild.proto.v1 import events_pb2 as pb
    from partbuild.state.log.events import envelope

    with EventLog.open(sqlite_url) as log:
        log.append([envelope(pb.WantCancel(want_id="ghost"))])
    code, out, _ = run_cli(capsys, "replay", "--db", sqlite_url)
    assert code == 0
    assert "seq 1  want_cancel: want 'ghost' does not exist" in out


def test_replay_save_snapshot_is_used_next_time(capsys: pytest.CaptureFixture[str], sqlite_url: str) -> None:
    run_cli(capsys, "demo", "--db", sqlite_url, "--weeks", "4", "--sites", "1")
    code, out, _ = run_cli(capsys, "replay", "--db", sqlite_url, "--save-snapshot", "--json")
    head = json.loads(out)["head_seq"]
    assert code == 0 and json.loads(out)["snapshot_saved_at"] == head
    _, out, _ = run_cli(capsys, "replay", "--db", sqlite_url, "--json")
    assert json.loads(out)["snapshot_seq"] == head and json.loads(out)["replayed_events"] == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["replay", "--db", "{db}", "--as-of", "-1"], "Invalid value for '--as-of': '-1' is not a seq"),
        (["replay", "--db", "{db}", "--as-of", "abc"], "'abc' is not a seq (an integer from 0 to 9007199254740991)"),
        (["replay", "--db", "{db}", "--as-of", "999999"], "999999 is after the log head"),
        (["replay", "--db", "{db}", "--bogus"], "No such option '--bogus'"),
        (["frobnicate"], "No such command 'frobnicate'"),
        (["demo", "--db", "{db}"], "the log already holds"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, args: list[str], message: str
) -> None:
    run_cli(capsys, "demo", "--db", sqlite_url, "--weeks", "1", "--sites", "1")
    with EventLog.open(sqlite_url) as log:
        head_before = log.head()
    code, _, err = run_cli(capsys, *(arg.replace("{db}", sqlite_url) for arg in args))
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("partbuild: error: ")
    assert message in err
    with EventLog.open(sqlite_url) as log:
        assert log.head() == head_before  # nothing recorded was lost or changed


def test_missing_database_and_bad_url(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run_cli(capsys, "replay", "--db", f"sqlite:///{tmp_path / 'absent.db'}")
    assert code == 2 and "no database at" in err
    assert not (tmp_path / "absent.db").exists()  # a typo must not create an empty database
    code, _, err = run_cli(capsys, "replay", "--db", "not a url")
    assert code == 2 and "is not a database URL" in err
    code, _, err = run_cli(capsys, "replay", "--db", "mysql://localhost/x")
    assert code == 2 and "unsupported database" in err and err.count("\n") == 1


@pytest.mark.parametrize("value", ["abc", "0", "1e9"])
def test_a_bad_write_bound_in_the_environment_is_named(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, sqlite_url: str, value: str
) -> None:
    run_cli(capsys, "demo", "--db", sqlite_url, "--weeks", "1", "--sites", "1")
    monkeypatch.setenv("PARTBUILD_WRITE_HOLD_S", value)
    code, _, err = run_cli(capsys, "replay", "--db", sqlite_url)
    assert code == 2 and err.count("\n") == 1
    assert "PARTBUILD_WRITE_HOLD_S must be" in err and repr(value) in err and "--db" not in err


def test_db_upgrade_creates_schema(capsys: pytest.CaptureFixture[str], db_url: str) -> None:
    code, out, _ = run_cli(capsys, "db", "upgrade", "--db", db_url)
    assert code == 0 and "log head seq 0" in out
    code, out, _ = run_cli(capsys, "db", "upgrade", "--db", db_url)  # idempotent
    assert code == 0


def test_db_upgrade_projects_an_existing_log_into_the_state_store(capsys: pytest.CaptureFixture[str], db: str) -> None:
    assert run_cli(capsys, "demo", "--db", db, "--weeks", "1", "--sites", "1")[0] == 0
    code, out, _ = run_cli(capsys, "db", "upgrade", "--db", db)
    with Database.open(db) as database:
        head = database.log.head()
        assert code == 0 and f"log head seq {head}, state store projected up to seq {head}" in out
        state = LiveState(database.log).state
        assert database.changes.watermark() == head
        assert database.changes.page(0, head, 10**6) == changes_between(state, 0, head)
    assert run_cli(capsys, "replay", "--db", db, "--verify")[0] == 0  # the audit checks the store too
    with Database.open(db) as database, database.log._engine.begin() as conn:
        conn.execute(sa.delete(state_changes).where(state_changes.c.seq == head))
    code, _, err = run_cli(capsys, "replay", "--db", db, "--verify")
    assert code == 1 and "verification failed: the state store differs from the replay" in err
    assert f"a change missing from the store: Change(seq={head}" in err


def _revision(db: str) -> str:
    with Database.open(db) as database:
        return database.schema_revision()


def test_a_database_that_refuses_the_commands_writes_is_one_line_and_the_schema_stays(
    capsys: pytest.CaptureFixture[str], db: str
) -> None:
    """A SQLite file opened read-only, a PostgreSQL session read-only by default: `db upgrade` (its schema
    already at head) cannot project the log, and a want cannot be appended. Each says so in one line, exit 1,
    without SQLAlchemy's statement and its parameters."""
    assert run_cli(capsys, "want", "--db", db, "raw/x/date=2026-01-01")[0] == 0
    if db.startswith("sqlite"):
        read_only = f"sqlite:///file:{db.removeprefix('sqlite:///')}?mode=ro&uri=true"
        refused = "attempt to write a readonly database"
        upgrade_refused = f"database at revision {_revision(db)}, but projecting its log into the state store failed"
        want_refused = f"the database failed the command: {refused}"
    else:  # known read-only before anything is tried
        read_only = f"{db}%20-cdefault_transaction_read_only%3Don"
        upgrade_refused = want_refused = "the database is read-only (a PostgreSQL hot standby or a read-only session)"
    code, _, err = run_cli(capsys, "db", "upgrade", "--db", read_only)
    assert code == 1 and err.count("\n") == 1 and upgrade_refused in err, err
    assert db.startswith("postgresql") or err.endswith(
        f"{refused} (`partbuild serve` or `up` projects it when they start)\n"
    )
    assert "[SQL" not in err and "parameters" not in err
    code, _, err = run_cli(capsys, "want", "--db", read_only, "raw/x/date=2026-01-02")
    assert code == 1 and err.count("\n") == 1 and want_refused in err, err
    with Database.open(db) as database:  # nothing recorded was lost, nothing more was
        assert database.log.head() == 1 and database.changes.watermark() == 0
    assert run_cli(capsys, "db", "upgrade", "--db", db)[0] == 0


# ----------------------------------------------------------------- the lazy command table

# Loaded at collection: importing some libraries the commands use runs a child process (`file -b`).
LOADED = {name: load_command(name) for name in COMMANDS}


def test_each_row_of_the_command_table_names_its_command_and_help() -> None:
    for name, (_, _, text) in COMMANDS.items():
        command = LOADED[name]
        assert command.name == name
        first_paragraph = " ".join((command.help or "").split("\n\n")[0].split())
        assert text == first_paragraph, name


def test_help_lists_the_commands_as_an_eager_group_would(capsys: pytest.CaptureFixture[str]) -> None:
    eager = click.Group("partbuild", help=cli.help, params=cli.params, context_settings=cli.context_settings)
    for name in COMMANDS:
        eager.add_command(LOADED[name], name)
    fresh = type(cli)("partbuild", help=cli.help, params=cli.params, context_settings=cli.context_settings)

    def help_of(group: click.Group) -> str:
        return group.get_help(click.Context(group, info_name="partbuild", **cli.context_settings))

    assert help_of(fresh) == help_of(eager)
    assert fresh.commands == {}  # listing them loaded none
    code, out, _ = run_cli(capsys, "--help")
    assert code == 0 and out.strip() == help_of(eager).strip()


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (("--bounded", "--save-snapshot"), "--bounded does not take --save-snapshot"),
        (("--scratch-dir", "."), "give --bounded too"),
    ],
)
def test_a_bounded_replay_refuses_what_it_cannot_do(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, flags: tuple[str, ...], said: str
) -> None:
    run_cli(capsys, "demo", "--db", sqlite_url, "--weeks", "1", "--sites", "1")
    code, out, err = run_cli(capsys, "replay", "--db", sqlite_url, *flags)
    assert code == 2 and said in err and out == ""
    assert len(err.strip().splitlines()) == 1
