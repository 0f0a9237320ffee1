"""Long-running processes: `serve` (HTTP API), `run` (orchestrator) and `up` (both in one process)."""

from __future__ import annotations

import logging
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from partbuild.api import render
from partbuild.api.commands.bucketing import PositiveInt, bucketing_config, bucketing_options
from partbuild.api.commands.common import (
    BadInput,
    CommandFailed,
    configure_logging,
    db_option,
    host_option,
    open_database,
    port_option,
    read_graph,
    retain_days_option,
)
from partbuild.api.commands.signals import on_stop_signal
from partbuild.api.commands.tokens import insecure_option, refuse_open_access
from partbuild.orchestrator.retention import RetentionPolicy
from partbuild.orchestrator.spark_conf import parse_setting
from partbuild.state.database import Registration
from partbuild.state.log.collector import settle_loaded_state
from partbuild.state.log.events import wall_clock_ms
from partbuild.state.log.live import LiveState
from partbuild.state.log.replay import DEFAULT_SNAPSHOT_EVERY
from partbuild.state.ops.projectors import BEAT_EVERY_S
from partbuild.state.store.projector import Beat, Projector

if TYPE_CHECKING:
    from partbuild.orchestrator.delivery.deliverer import Deliverer, ShardSelector
    from partbuild.state.database import Database

DEFAULT_GRAPH = "examples/clicks/pipeline.py"

logger = logging.getLogger("partbuild")
WORKING_SET_GAP_S = 0.2  # a working set's projector passes at most this often


working_set_option = click.option(
    "--working-set",
    is_flag=True,
    help="Hold only what decisions need: the rest in the state store's rows, reads answered from the store "
    "(memory bounded by the working set, not the history; its snapshots are the working set, saved every "
    "--snapshot-every events and at a clean stop). Other processes may fold and project the same database.",
)
up_working_set_option = click.option(
    "--working-set/--whole-state",
    default=True,
    show_default=True,
    help="Hold only what decisions need, the rest in the state store's rows, reads answered from the store "
    "(memory bounded by the working set, not the history; its snapshots are the working set, saved every "
    "--snapshot-every events and at a clean stop); or the whole state in memory, snapshotted (--whole-state). "
    "Other processes may fold and project the same database either way.",
)
snapshot_every_option = click.option(
    "--snapshot-every",
    type=click.IntRange(min=0),
    default=DEFAULT_SNAPSHOT_EVERY,
    show_default=True,
    envvar="PARTBUILD_SNAPSHOT_EVERY",
    help="Snapshot the state on start and stop when this many events past the newest snapshot (0: never); with "
    "--working-set, save the working set every this many events while running (0: at a clean stop only).",
)


class SparkSetting(click.ParamType):
    """`KEY=VALUE` -> (KEY, VALUE); anything else is bad input naming the value."""

    name = "KEY=VALUE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> tuple[str, str]:
        if isinstance(value, tuple):
            return value
        try:
            return parse_setting(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


master_option = click.option(
    "--master", envvar="PARTBUILD_SPARK_MASTER", help="Spark master: local[*] (default), spark://..., sc://..."
)
# PARTBUILD_SPARK_CONF holds settings separated by whitespace (spaces or newlines, click's rule for
# repeatable options); a value containing whitespace needs --spark-conf or spark-defaults.conf.
spark_conf_option = click.option(
    "--spark-conf",
    "spark_conf",
    type=SparkSetting(),
    multiple=True,
    envvar="PARTBUILD_SPARK_CONF",
    help=(
        "A Spark setting, repeatable; beats spark-defaults.conf and partbuild's defaults (few shuffle "
        "partitions, UI off: local masters only). Env: PARTBUILD_SPARK_CONF, whitespace-separated; the "
        "command line replaces it."
    ),
)


def _retention(retain_days: int | None) -> RetentionPolicy | None:
    return RetentionPolicy(retain_days) if retain_days is not None else None


def _listen(host: str, port: int) -> socket.socket:
    """Bind before anything slow starts, so a busy port fails at once and port 0 has a real number to print."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        return socket.create_server((host, port), family=family, backlog=2048)
    except OSError as exc:
        raise CommandFailed(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _serve_http(
    app: Any, sock: socket.socket, on_stop: Callable[[], None], stopping: threading.Event | None = None
) -> None:
    """Serve `app` on `sock` in this thread until SIGTERM/SIGINT; `on_stop` runs when a signal arrives.

    uvicorn catches the signals while it serves and, once shut down, raises them
    again under the handlers that were installed before: ours, so the process
    stops cleanly with exit code 0 instead of dying of the re-raised SIGTERM.
    `stopping`: set when a stop signal came before this was called (the server then starts and stops at once).
    """
    import uvicorn

    host, port = sock.getsockname()[:2]
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, workers=1, log_level="info"))

    def stop(signum: int, _frame: object) -> None:
        logger.info("%s: stopping", signal.Signals(signum).name)
        server.should_exit = True
        on_stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if stopping is not None and stopping.is_set():
        server.should_exit = True  # told to stop while starting up: it binds, then shuts down
    server.run(sockets=[sock])
    if not server.started:
        raise CommandFailed("the HTTP API did not start (see the log above)")


@click.command()
@db_option
@click.option("--graph", "graph_path", help="Graph file: refuse wants and observations it does not allow.")
@host_option
@port_option
@insecure_option
@snapshot_every_option
@click.option(
    "--replica",
    is_flag=True,
    help="Replay nothing: answer reads from the state store that `serve` and `up` keep, refuse writes (503).",
)
@working_set_option
def serve(
    db_url: str,
    graph_path: str | None,
    host: str,
    port: int,
    insecure: bool,
    snapshot_every: int,
    replica: bool,
    working_set: bool,
) -> None:
    """Serve the HTTP API over the database (one worker; SIGTERM/SIGINT stop it)."""
    from partbuild.api.app import create_app
    from partbuild.api.service import Service  # here: `run` serves no HTTP and need not import it

    graph = read_graph(graph_path) if graph_path is not None else None
    sock = _listen(host, port)
    configure_logging()
    with sock, open_database(db_url, must_exist=False) as db:
        refuse_open_access(host, insecure, db)
        standby = db.read_only()
        if working_set and (replica or standby):
            raise BadInput(
                "--working-set folds the log and projects its store: not on a read replica nor a read-only database"
            )
        if replica:
            _refuse_an_unprojected_store(db)
        registration = Registration(db, working_set)
        live = _live_state(db, 0, registration) if working_set else None
        # On a hot standby the primary's servers write the snapshots and project the state store (it arrives
        # by replication); this one only reads, and answers writes with a 503 that says where to send them.
        # A replica folds nothing: it reads the store the others project.
        service = Service(db, graph=graph, live=live, snapshot_every=0 if standby else snapshot_every, replica=replica)
        projector = None if standby or replica else _projector(service.live, db, registration, snapshot_every)
        app = create_app(service)
        if replica:
            # What lives as long as the process (modules, the app, its routes: about 100,000 objects) is left
            # out of the collector's full passes, as a loaded state's records are: a replica's reads decode rows
            # into caches that trigger them, and each scanned it all (30 - 40 ms, a read now and then).
            settle_loaded_state()
        click.echo(f"partbuild API on {_url(sock)} (docs {_url(sock)}/docs), database {db_url}")
        if replica:
            click.echo(f"a read replica of the state store (at seq {service.reads.head_seq}): writes go elsewhere")
        elif standby:
            click.echo("the database is read-only (a hot standby?): serving reads; writes go to the primary")
        try:
            _serve_http(app, sock, on_stop=lambda: None)
        finally:
            if projector is not None:
                projector.stop()
            if live is not None:  # a working set of its own: saved, then closed
                live.stop_tailing()
                _save_the_working_set(live, [projector] if projector is not None else [])
                live.close()


def _refuse_an_unprojected_store(db: Database) -> None:
    """A replica needs a state store that a `serve` or `up` (or `db upgrade`) has projected: else exit 2."""
    if db.changes.watermark() == 0 or db.changes.records.watermark() == 0:
        raise BadInput(
            "the state store of this database is not projected yet: run `partbuild db upgrade`, or start a "
            "`partbuild serve` or `partbuild up` on it first, then the replica"
        )


class _EarlyStop:
    """A stop signal that comes before the API serves (the orchestrator may be building already): it stops
    what was started so far, and the API then starts and stops at once, so the process exits cleanly (0)."""

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self._stops: list[Callable[[], None]] = []
        on_stop_signal(self._stop)

    def _stop(self, signum: signal.Signals) -> None:
        logger.info("%s while starting: stopping", signum.name)
        self.stopping.set()
        for stop in list(self._stops):
            stop()

    def watch(self, stop: Callable[[], None]) -> None:
        """Call `stop` on a stop signal from now on (now, if one came already)."""
        self._stops.append(stop)
        if self.stopping.is_set():
            stop()


@click.command()
@db_option
@click.option("--graph", "graph_path", default=DEFAULT_GRAPH, show_default=True, help="Python file defining `graph`.")
@click.option("--warehouse", default="warehouse", show_default=True, help="Root directory or URI of built data.")
@host_option
@port_option
@insecure_option
@master_option
@spark_conf_option
@snapshot_every_option
@retain_days_option
@click.option(
    "--deliver-shards",
    default="all",
    show_default=True,
    help="Which shards of every webhook subscription this process delivers: all, none, a list (0,2), a part (k/n).",
)
@up_working_set_option
def up(
    db_url: str,
    graph_path: str,
    warehouse: str,
    host: str,
    port: int,
    insecure: bool,
    master: str | None,
    spark_conf: tuple[tuple[str, str], ...],
    snapshot_every: int,
    retain_days: int | None,
    deliver_shards: str,
    working_set: bool,
) -> None:
    """HTTP API and orchestrator in one process (SQLite + local Spark by default); SIGTERM/SIGINT stop both.

    On a stop signal the API shuts down and the orchestrator lets the job runs in
    flight finish and records their outcomes before the process exits.
    """
    from partbuild.api.app import create_app
    from partbuild.api.service import Service
    from partbuild.orchestrator.delivery.deliverer import ShardSelector
    from partbuild.orchestrator.loop import LoopSettings, Orchestrator
    from partbuild.orchestrator.spark import lazy_spark_session
    from partbuild.orchestrator.supervisor import Supervisor

    try:
        selector = None if deliver_shards == "none" else ShardSelector.parse(deliver_shards)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    graph = read_graph(graph_path)
    sock = _listen(host, port)
    configure_logging()
    spark = lazy_spark_session(master, conf=dict(spark_conf))  # started by the first job run
    early = _EarlyStop()
    with sock, open_database(db_url, must_exist=False) as db:
        refuse_open_access(host, insecure, db)
        # One state for the API and the orchestrator: loaded once, checkpointed once (on start and on stop).
        registration = Registration(db, working_set)
        live = _live_state(db, snapshot_every, registration)
        settings = LoopSettings(retention=_retention(retain_days))
        background = Supervisor(
            lambda: Orchestrator(db, graph, warehouse=warehouse, spark=spark, live=live, settings=settings)
        )
        early.watch(background.request_stop)
        service = Service(db, graph=graph, live=live, on_append=background.wake, health=lambda: background.health)
        app = create_app(service)
        followers = _followers(live, db, registration, selector, snapshot_every)
        click.echo(f"partbuild up: API on {_url(sock)}, orchestrator on {spark.describe}, {db_url}")
        try:
            _serve_http(app, sock, on_stop=background.request_stop, stopping=early.stopping)
        finally:
            logger.info("finishing the job runs in flight")
            background.request_stop()
            background.thread.join()
            for follower in followers:
                follower.stop()
            live.stop_tailing()
            _save_the_working_set(live, followers)
            live.close()


def _save_the_working_set(live: LiveState, followers: list[Projector | Deliverer]) -> None:
    """A working set's clean stop: its rows projected to the head, then the working set saved beside them (the
    next start folds from there instead of the whole log)."""
    if live.working is None:
        return
    from partbuild.state.store.checkpoints import save_working_set

    projector = next((follower for follower in followers if isinstance(follower, Projector)), None)
    if projector is not None:
        save_working_set(live, projector)


def _live_state(db: Database, snapshot_every: int, registration: Registration) -> LiveState:
    """The one state of `up` (or of `serve --working-set`): all of it (snapshotted), or its working set
    (state/store/cold_start.py)."""
    if not registration.working_set:
        return LiveState(db.log, snapshot_every=snapshot_every)
    return LiveState(db.log, load=registration.load(db.changes))


def _projector(live: LiveState, db: Database, registration: Registration, checkpoint_every: int) -> Projector:
    """The state store's projector of `live`, started, this process said to project while it runs
    (state/ops/projectors.py); a working set's evictions (and its checkpoints, every `checkpoint_every`
    events) follow each of its passes, which come more often (its reads wait for them)."""
    projector = Projector(live, db.changes, writer=registration.holder if live.working is not None else None)
    _say_who_else_projects(db, registration.holder)
    beat = Beat(lambda: registration.beat(live), BEAT_EVERY_S, end=registration.leave)
    if live.working is None:
        return projector.start(beat=beat)
    from partbuild.state.store.checkpoints import keep_working_set

    keep_working_set(live, projector, checkpoint_every=checkpoint_every)
    return projector.start(WORKING_SET_GAP_S, beat=beat)


def _say_who_else_projects(db: Database, holder: str) -> None:
    """Log the other processes projecting the database (each writes the rows a span at a time, in turn)."""
    others = db.projectors.others(holder, wall_clock_ms())
    for other in others:
        what = f"a working set from seq {other.head}" if other.working_set else "the whole state"
        logger.info("another process projects this database's state store: %s (%s)", other.holder, what)


def _followers(
    live: LiveState, db: Database, registration: Registration, selector: ShardSelector | None, checkpoint_every: int
) -> list[Projector | Deliverer]:
    """What follows the live state beside the API, started: the state store's projector (a working set's
    evictions after each of its passes), webhook delivery."""
    from partbuild.api.webhook_payloads import render as render_payload
    from partbuild.orchestrator.delivery.deliverer import Deliverer

    followers: list[Projector | Deliverer] = [_projector(live, db, registration, checkpoint_every)]
    if selector is not None:
        followers.append(Deliverer(live, db.deliveries, render_payload, selector=selector).start())
    return followers


@contextmanager
def _exit_2_if_the_bucket_is_rejected() -> Iterator[None]:
    """A bucket the log rejects (the namespace is split differently) is bad input: exit 2, one line."""
    from partbuild.orchestrator.buckets import BucketRejected

    try:
        yield
    except BucketRejected as exc:
        raise BadInput(f"the log rejected this worker's bucket: {exc}") from None


# The static bucketing options: a group member's buckets come from its group instead.
_STATIC_BUCKET_OPTIONS = {"bucket_total": "--bucket-total", "bucket_id": "--bucket-id", "round_robin": "--round-robin"}
# Exit status of a group member the group declared dead (missed heartbeats): distinct from 1 (failed), 2 (bad input).
DECLARED_DEAD_EXIT = 3


def group_options(command: Callable[..., None]) -> Callable[..., None]:
    """`run`'s worker-group options: --group, --buckets, --member-timeout."""
    options = [
        click.option(
            "--group",
            "group_name",
            envvar="PARTBUILD_GROUP",
            help=(
                "Join this worker group: share the buckets with the other members through a leader, "
                "rebalanced when members join or die (docs/worker-group.md). Env: PARTBUILD_GROUP."
            ),
        ),
        click.option(
            "--buckets",
            "group_buckets",
            type=PositiveInt(),
            default=12,
            show_default=True,
            envvar="PARTBUILD_GROUP_BUCKETS",
            help="Buckets of a new group (an existing group keeps its own). Env: PARTBUILD_GROUP_BUCKETS.",
        ),
        click.option(
            "--member-timeout",
            type=click.FloatRange(min=0.2),
            default=10,
            show_default=True,
            envvar="PARTBUILD_MEMBER_TIMEOUT",
            help="Seconds without a heartbeat after which a group member is dead. Env: PARTBUILD_MEMBER_TIMEOUT.",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _group_config(group_name: str | None, buckets: int, member_timeout: float) -> Any:
    """The GroupConfig of `run --group` (None without it); exit 2 when combined with a static bucket."""
    if group_name is None:
        return None
    from partbuild.orchestrator.group.steps import GroupConfig
    from partbuild.state.ops.members import check_group_name

    ctx = click.get_current_context()
    for name, option in _STATIC_BUCKET_OPTIONS.items():
        if ctx.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT):
            raise BadInput(f"--group and {option} exclude each other: a group member's buckets come from its group")
    try:
        check_group_name(group_name)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--group'") from None
    return GroupConfig(group_name, buckets=buckets, member_timeout_s=member_timeout)


@contextmanager
def _exit_3_if_declared_dead() -> Iterator[None]:
    """A group member declared dead stops: one line, exit 3 (its supervisor may start a new member)."""
    from partbuild.orchestrator.group.membership import MemberDeclaredDead

    try:
        yield
    except MemberDeclaredDead as exc:
        click.echo(f"Error: declared dead by the group: {exc}", err=True)
        raise SystemExit(DECLARED_DEAD_EXIT) from None


@click.command()
@db_option
@click.option("--graph", "graph_path", required=True, help="Python file defining `graph` (a Graph or a function).")
@click.option("--warehouse", default="warehouse", show_default=True, help="Root directory or URI of built data.")
@master_option
@spark_conf_option
@click.option(
    "--until-idle",
    is_flag=True,
    help=(
        "Exit once no want is active and no job run is in flight (with a bucket: once nothing in it can "
        "progress without the other buckets' workers)."
    ),
)
@click.option("--timeout", type=click.FloatRange(min=0), default=3600, show_default=True, help="With --until-idle.")
@click.option("--heartbeat-interval", type=click.FloatRange(min=0.05), default=5, show_default=True)
@click.option(
    "--heartbeat-timeout",
    type=click.FloatRange(min=0.1),
    default=30,
    show_default=True,
    help="Seconds without heartbeat after which a run is failed and retried.",
)
@snapshot_every_option
@retain_days_option
@bucketing_options
@group_options
@working_set_option
def run(
    db_url: str,
    graph_path: str,
    warehouse: str,
    master: str | None,
    spark_conf: tuple[tuple[str, str], ...],
    until_idle: bool,
    timeout: float,
    heartbeat_interval: float,
    heartbeat_timeout: float,
    snapshot_every: int,
    retain_days: int | None,
    bucket_total: int,
    bucket_id: int,
    round_robin: bool,
    bucket_ranges: tuple[str, ...],
    group_name: str | None,
    group_buckets: int,
    member_timeout: float,
    working_set: bool,
) -> None:
    """Run the orchestrator: turn wants into job runs on Spark until stopped (SIGTERM/SIGINT).

    With --group, join a worker group: decide only for the buckets this worker
    owns; exit 3 if the group declares it dead (its heartbeats stopped too long).
    """
    configure_logging()  # first: validating the bucketing options may log (ranges without round-robin)
    group = _group_config(group_name, group_buckets, member_timeout)
    bucketing = None if group is not None else bucketing_config(bucket_total, bucket_id, round_robin, bucket_ranges)
    graph = read_graph(graph_path)
    stop = threading.Event()
    with (
        open_database(db_url, must_exist=False) as db,
        _worker_exits(),
        _held_working_set(db, working_set, snapshot_every) as live,
    ):
        spark = _lazy_spark(graph, db, master, dict(spark_conf), shared=group is not None or bucketing is not None)
        from partbuild.orchestrator.loop import LoopSettings, Orchestrator  # after: a JVM starting early starts

        beats = {"heartbeat_interval_s": heartbeat_interval, "heartbeat_timeout_s": heartbeat_timeout}
        retention = _retention(retain_days)
        settings = LoopSettings(
            snapshot_every=snapshot_every, retention=retention, bucketing=bucketing, group=group, **beats
        )
        snapshots = None if live is not None else db.log.snapshots  # (a working set saves its own)
        _orchestrate(
            lambda: Orchestrator(
                db, graph, warehouse=warehouse, spark=spark, snapshots=snapshots, live=live, settings=settings
            ),
            until_idle,
            timeout,
            stop,
        )


def _orchestrate(make: Callable[[], Any], until_idle: bool, timeout: float, stop: threading.Event) -> None:
    """`run`'s orchestrator until stopped (or idle); a new one at once when the working set it decided on was
    loaded again (`StateLoadedAgain`: orchestrator/supervisor.py)."""
    from partbuild.orchestrator.supervisor import StateLoadedAgain

    current: list[Any] = []

    def request_stop(signum: signal.Signals) -> None:
        logger.info("%s: finishing the runs in flight", signum.name)
        stop.set()
        for orchestrator in current:
            orchestrator.wake()

    on_stop_signal(request_stop)
    while True:
        current[:] = [make()]
        try:
            if until_idle:
                _run_until_idle(current[-1], timeout, stop)
            else:
                current[-1].run(stop)
            return
        except StateLoadedAgain as exc:
            if until_idle:
                current[-1].close()  # (`run` closes itself)
            logger.warning("a new orchestrator starts: %s", exc)


@contextmanager
def _worker_exits() -> Iterator[None]:
    """A worker's exit codes: 2 when its bucket is refused, 3 when its group declares it dead."""
    with _exit_2_if_the_bucket_is_rejected(), _exit_3_if_declared_dead():
        yield


@contextmanager
def _held_working_set(db: Database, working_set: bool, checkpoint_every: int) -> Iterator[LiveState | None]:
    """`run --working-set`'s live state, its projector started (it evicts after each pass; other processes may
    project too); at the end (after the runs in flight, their outcomes folded) the projector stopped, the
    working set saved, the state closed. None without --working-set."""
    if not working_set:
        yield None
        return
    registration = Registration(db, True)
    live = _live_state(db, checkpoint_every, registration)
    projector = _projector(live, db, registration, checkpoint_every)
    try:
        yield live
    finally:
        projector.stop()
        _save_the_working_set(live, [projector])
        live.close()


def _lazy_spark(graph: Any, db: Any, master: str | None, conf: dict[str, str], *, shared: bool) -> Any:
    """The process's session, started by the first job run that uses it, or now in the background.

    Now when a job says it uses Spark and the log has anything in it: its JVM then starts while the
    orchestrator is imported, folds the log and decides, instead of after. Not for a worker that shares the
    work (a group member, a bucket): it may own none of it, and a JVM nobody uses takes the cores of those
    that build.
    """
    from partbuild.orchestrator.spark import lazy_spark_session

    spark = lazy_spark_session(master, conf=conf)
    if not shared and any(job.uses_spark for job in graph.jobs.values()) and db.log.head() > 0:
        spark.start_in_background()
    return spark


def _run_until_idle(orchestrator: Any, timeout: float, stop: threading.Event) -> None:
    """`run --until-idle`: step until idle, then a one-line summary; exit 1 when not idle in time."""
    idle = orchestrator.run_until_idle(timeout, stop=stop)
    orchestrator.close()
    counts = orchestrator.state.counts()
    render.console.print(
        f"log head seq {orchestrator.state.head_seq:,}; wants {render.nonzero(counts['wants'])}; "
        f"job runs {render.nonzero(counts['job_runs'])}"
    )
    if not idle and not stop.is_set():
        raise CommandFailed(f"not idle after {timeout:g} s")
