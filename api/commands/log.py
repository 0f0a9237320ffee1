"""Commands on the event log itself: `db upgrade`, `replay`, `retention` and `demo`."""

from __future__ import annotations

import json
from pathlib import Path

import click
import sqlalchemy as sa

from partbuild.api import render
from partbuild.api.commands.common import (
    SEQ,
    CommandFailed,
    Target,
    connect,
    db_option,
    json_option,
    open_database,
    sqlite_path,
    target_options,
    user_option,
)
from partbuild.api.models.audit import AuditOut
from partbuild.api.models.partitions import RetentionRequest
from partbuild.examples.clicks.simulate import SimulationPlan, simulate
from partbuild.state.db import driver_message
from partbuild.state.fold.records import Rejection
from partbuild.state.log.audit import AuditInputError, AuditReport, audit
from partbuild.state.log.live import LiveState
from partbuild.state.log.replay import load_state, save_snapshot
from partbuild.state.migrate import upgrade
from partbuild.state.store.cold_replay import bounded_audit
from partbuild.state.store.cold_verify import bounded_verify
from partbuild.state.store.projector import Projector
from partbuild.state.store.verify import store_problems

APPEND_BATCH = 2_000


@click.group()
def db() -> None:
    """Database schema commands."""


@db.command("upgrade")
@db_option
def db_upgrade(db_url: str) -> None:
    """Create or migrate the event log's schema to the newest revision."""
    try:
        sa.make_url(db_url)
    except sa.exc.ArgumentError:
        raise click.BadParameter(f"{db_url!r} is not a database URL", param_hint="'--db'") from None
    try:
        upgrade(db_url)
    except sa.exc.OperationalError as exc:
        raise CommandFailed(f"cannot open database {db_url}: {driver_message(exc)}") from None
    with open_database(db_url, must_exist=False) as db:
        revision = db.schema_revision()
        try:
            # An existing log is projected into the state store once, here, rather than by the first server.
            projected = Projector(LiveState(db.log), db.changes).project()
        except sa.exc.DBAPIError as exc:
            raise CommandFailed(
                f"database at revision {revision}, but projecting its log into the state store failed: "
                f"{driver_message(exc)} (`partbuild serve` or `up` projects it when they start)"
            ) from None
        render.console.print(
            f"database at revision {revision}, log head seq {db.log.head()}, "
            f"state store projected up to seq {projected}"
        )


@click.command()
@target_options
@click.option("--verify", is_flag=True, help="Also replay from seq 0 without snapshots and compare digests.")
@click.option("--as-of", "as_of", type=SEQ, metavar="SEQ", help="Replay only up to this seq.")
@click.option("--save-snapshot", is_flag=True, help="Store a snapshot of the replayed state.")
@click.option(
    "--rejected",
    "rejected_limit",
    type=click.IntRange(min=0),
    default=20,
    show_default=True,
    help="How many rejected events to list.",
)
@click.option(
    "--bounded",
    is_flag=True,
    help="Replay from seq 0 holding only the working set: the records it has not touched lately go to a scratch "
    "SQLite database (about 1.2 GB per million instances, deleted after); with --verify, the state store is "
    "rebuilt there and compared with this one, table by table. Not with --save-snapshot.",
)
@click.option(
    "--scratch-dir",
    type=click.Path(file_okay=False, exists=True),
    help="Where --bounded puts its scratch database (default: the temporary directory).",
)
@json_option
def replay(
    target: Target,
    verify: bool,
    as_of: int | None,
    save_snapshot: bool,
    rejected_limit: int,
    bounded: bool,
    scratch_dir: str | None,
    as_json: bool,
) -> None:
    """Replay the event log and print head seq, digest, counts and rejected events.

    With --server the server replays its log (its audit endpoint); --save-snapshot and --bounded need --db.
    """
    _check_replay_options(target, verify, save_snapshot, bounded, scratch_dir)
    if target.server is not None:
        with connect(target) as client:
            report = _report_of(client.audit(rejected_limit, as_of, verify))
    elif bounded:
        report = _replay_bounded(target.db_url, as_of, verify, rejected_limit, scratch_dir)
    else:
        report = _replay_database(target.db_url, as_of, verify, save_snapshot, rejected_limit)
    if as_json:
        payload = report.as_dict() | {"events_per_second": round(report.events_per_second)}
        click.echo(json.dumps(payload, indent=2))
    else:
        render.console.print(render.report_grid(report))
    if report.verified is False:
        raise CommandFailed("verification failed: " + "; ".join(report.problems))


def _check_replay_options(
    target: Target, verify: bool, save_snapshot: bool, bounded: bool, scratch_dir: str | None
) -> None:
    if target.server is not None and (save_snapshot or bounded):
        flag = "--save-snapshot" if save_snapshot else "--bounded"
        raise click.UsageError(f"{flag} needs --db: it reads the log where it is stored")
    if bounded and save_snapshot:
        raise click.UsageError("--bounded does not take --save-snapshot: a bounded replay holds no whole state for it")
    if scratch_dir is not None and not bounded:
        raise click.UsageError("--scratch-dir is where --bounded puts its scratch database: give --bounded too")


def _replay_bounded(
    db_url: str, as_of: int | None, verify: bool, rejected_limit: int, scratch_dir: str | None
) -> AuditReport:
    with open_database(db_url, must_exist=True) as db:
        head = db.log.head()
        try:
            with render.progress("replaying", 0, head if as_of is None else min(as_of, head)) as progress:
                # The scratch rows written from a child process, while this one folds (state/store/scratch_writer.py).
                if verify:
                    return bounded_verify(
                        db.log,
                        db.changes,
                        scratch_dir,
                        as_of=as_of,
                        rejected_limit=rejected_limit,
                        progress=progress,
                        in_child=True,
                    )
                return bounded_audit(
                    db.log, scratch_dir, as_of=as_of, rejected_limit=rejected_limit, progress=progress, in_child=True
                )
        except AuditInputError as exc:
            raise click.BadParameter(str(exc).removeprefix("--as-of "), param_hint="'--as-of'") from None


def _replay_database(
    db_url: str, as_of: int | None, verify: bool, save_snapshot: bool, rejected_limit: int
) -> AuditReport:
    with open_database(db_url, must_exist=True) as db:
        log = db.log
        head = log.head()
        try:
            with render.progress("replaying", 0, head if as_of is None else min(as_of, head)) as progress:
                return audit(
                    log,
                    log.snapshots,
                    as_of=as_of,
                    verify=verify,
                    save=save_snapshot,
                    rejected_limit=rejected_limit,
                    progress=progress,
                    verify_also=lambda state: store_problems(db.changes, state),
                )
        except AuditInputError as exc:
            raise click.BadParameter(str(exc).removeprefix("--as-of "), param_hint="'--as-of'") from None


def _report_of(found: AuditOut) -> AuditReport:
    """The server's audit as the report `replay --db` prints (nothing verified or saved)."""
    rejected = [Rejection(r.seq, r.event_type, r.reason) for r in found.rejected]
    fields = found.model_dump(exclude={"rejected"})
    return AuditReport(**fields, rejected=rejected)


@click.command()
@db_option
@click.option(
    "--weeks",
    type=click.IntRange(1, 5_000),
    default=52,
    show_default=True,
    help="Simulated weeks of the clicks pipeline per site.",
)
@click.option(
    "--sites",
    type=click.IntRange(1, 1_000),
    default=10,
    show_default=True,
    help="Independent copies of the pipeline (distinct refs).",
)
@click.option("--fresh", is_flag=True, help="Delete the SQLite database first.")
def demo(db_url: str, weeks: int, sites: int, fresh: bool) -> None:
    """Write a simulated W1 history (wants, dep misses, retries, taints) into an empty log."""
    try:
        path = sqlite_path(db_url)
    except sa.exc.ArgumentError:
        raise click.BadParameter(f"{db_url!r} is not a database URL", param_hint="'--db'") from None
    if fresh:
        if path is None:
            raise click.BadParameter("--fresh only deletes SQLite files", param_hint="'--fresh'")
        for leftover in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
            leftover.unlink(missing_ok=True)
    with open_database(db_url, must_exist=False) as db:
        log = db.log
        head = log.head()
        if head:
            raise click.BadParameter(
                f"the log already holds {head:,} events; the demo needs an empty one (use --fresh for SQLite)",
                param_hint="'--db'",
            )
        events = list(simulate(SimulationPlan(weeks=weeks, sites=sites)))
        with render.progress("appending", 0, len(events)) as progress:
            for start in range(0, len(events), APPEND_BATCH):
                result = log.append(events[start : start + APPEND_BATCH], expected_head=start)
                if progress is not None:
                    progress(result.last_seq)
        # A snapshot half-way, so a later replay shows snapshot + tail and --verify has something to compare.
        state, _ = load_state(log, upto_seq=len(events) // 2)
        save_snapshot(state, log.snapshots)
        render.console.print(
            f"wrote {len(events):,} events ({sites} sites x {weeks} weeks of the clicks pipeline) to {db_url}; "
            f"snapshot at seq {state.head_seq:,}"
        )


@click.command()
@target_options
@click.option(
    "--retain-days",
    type=click.IntRange(min=0),
    required=True,
    help="Keep this many days of history: instances superseded longer ago are dropped (canonical ones never).",
)
@click.option("--dry-run", is_flag=True, help="Only show what would be dropped.")
@user_option
@json_option
def retention(target: Target, retain_days: int, dry_run: bool, user: str, as_json: bool) -> None:
    """Drop instances superseded more than --retain-days ago, or preview it with --dry-run."""
    request = RetentionRequest(retain_days=retain_days, dry_run=dry_run)
    with connect(target) as client:
        report = client.retention(request, user)
    render.emit(report, as_json, lambda: render.retention_text(report))
