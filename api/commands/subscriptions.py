"""Webhook subscription commands: `subscriptions` (list, create, show, pause, resume, delete, reshard,
reset, dlq, replay, purge) and `deliver` (run delivery shards in this process)."""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any, get_args

import click
from rich.table import Table

from partbuild.api import render
from partbuild.api.commands.common import (
    BadInput,
    Target,
    as_of_option,
    configure_logging,
    connect,
    db_option,
    json_option,
    open_database,
    target_options,
    user_option,
)
from partbuild.api.commands.signals import on_stop_signal
from partbuild.api.models.subscriptions import (
    DeadLetterRequest,
    OffsetResetRequest,
    QueueName,
    ReshardSubscriptionRequest,
    RetryPolicyRequest,
    SubscriptionFilterRequest,
    SubscriptionOut,
    SubscriptionRequest,
)
from partbuild.state.fold.subscription_records import FORMATS, ORDERINGS

_COMMANDLINE = click.core.ParameterSource.COMMANDLINE


def _table(subs: list[SubscriptionOut]) -> Table:
    table = Table(
        "name", "status", "endpoint", "format", "shards", "lag", "lag s", "rq", "dlq", "delivered", "retried", "dead"
    )
    for sub in subs:
        table.add_row(
            sub.name,
            sub.status,
            sub.endpoint,
            f"{sub.format} by {sub.ordering}",
            str(sub.shard_count),
            str(sub.lag_events),
            f"{sub.lag_seconds:.1f}",
            str(sub.rq_messages),
            str(sub.dlq_messages),
            str(sub.delivered),
            str(sub.retried),
            str(sub.dead_lettered),
        )
    return table


def _as_of_note(as_of: int | None) -> str:
    return f"settings as of seq {as_of}; lag, queues and counters now" if as_of is not None else ""


def _list(target: Target, as_of: int | None, as_json: bool) -> None:
    with connect(target) as client:
        found = client.list_subscriptions(as_of_seq=as_of)
    if not found.subscriptions and not as_json:
        click.echo("no subscription" + (f" as of seq {as_of}" if as_of is not None else ""))
        return
    render.emit(found, as_json, lambda: render.noted(_table(found.subscriptions), _as_of_note(as_of)))


@click.group("subscriptions", invoke_without_command=True)
@target_options
@as_of_option
@json_option
@click.pass_context
def subscriptions_group(ctx: click.Context, /, **listing: Any) -> None:
    """Webhook subscriptions: endpoint, format, shards, lag, queues and counters (also 'subscriptions
    list'); subcommands below."""
    if ctx.invoked_subcommand is None:
        _list(**listing)
        return
    given = [p.opts[0] for p in ctx.command.params if ctx.get_parameter_source(p.name or "") is _COMMANDLINE]
    if given:
        raise click.UsageError(
            f"{', '.join(given)} before a subcommand: listing options go with 'partbuild subscriptions list', "
            "a subcommand's options after its name"
        )


@subscriptions_group.command("list")
@target_options
@as_of_option
@json_option
def subscriptions_list(target: Target, as_of: int | None, as_json: bool) -> None:
    """Every subscription that is not deleted (settings as of --as-of; where deliveries stand is now)."""
    _list(target, as_of, as_json)


@subscriptions_group.command("create")
@click.argument("name")
@click.argument("endpoint")
@click.option(
    "--event-type", "event_types", multiple=True, help="Deliver this event type (repeat); default: build events."
)
@click.option("--ref-prefix", "ref_prefixes", multiple=True, help="Only refs starting with this (repeat).")
@click.option("--ref-pattern", "ref_patterns", multiple=True, help="Only refs matching this glob (repeat).")
@click.option("--job", default="", help="Only job-run events of this job.")
@click.option("--root-want", default="", help="Only messages serving this root want.")
@click.option(
    "--ordering",
    type=click.Choice(ORDERINGS),
    default="partition_ref",
    show_default=True,
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="partbuild",
    show_default=True,
)
@click.option("--max-attempts", type=int, default=8, show_default=True, help="Deliveries before the DLQ.")
@click.option("--backoff-ms", type=int, default=500, show_default=True, help="First retry's wait (doubles).")
@click.option("--backoff-max-ms", type=int, default=60_000, show_default=True)
@click.option(
    "--max-age-ms", type=int, default=0, show_default=True, help="Dead-letter after failing this long (0: never)."
)
@click.option("--timeout-ms", type=int, default=10_000, show_default=True, help="One delivery's time limit.")
@click.option("--shards", "shard_count", type=int, default=1, show_default=True)
@click.option("--partitions", type=int, default=12, show_default=True, help="Main, RQ and DLQ partitions.")
@click.option(
    "--secret", envvar="PARTBUILD_WEBHOOK_SECRET", help="Signing secret (whsec_...); default: made and shown once."
)
@click.option(
    "--start-after-seq", type=int, default=None, help="Deliver events after this seq (0: all); default: new ones."
)
@target_options
@user_option
@json_option
def subscriptions_create(target: Target, user: str, as_json: bool, fmt: str, partitions: int, **given: Any) -> None:
    """Subscribe ENDPOINT (an http(s) URL) to the log's events under NAME."""
    retry = RetryPolicyRequest(
        max_attempts=given.pop("max_attempts"),
        backoff_initial_ms=given.pop("backoff_ms"),
        backoff_max_ms=given.pop("backoff_max_ms"),
        max_age_ms=given.pop("max_age_ms"),
        timeout_ms=given.pop("timeout_ms"),
    )
    flt = SubscriptionFilterRequest(
        event_types=list(given.pop("event_types")),
        ref_prefixes=list(given.pop("ref_prefixes")),
        ref_patterns=list(given.pop("ref_patterns")),
        job=given.pop("job"),
        root_want=given.pop("root_want"),
    )
    request = SubscriptionRequest(
        **given,
        filter=flt,
        retry=retry,
        format=fmt,
        main_partitions=partitions,
        rq_partitions=partitions,
        dlq_partitions=partitions,
    )
    with connect(target, must_exist=False) as client:
        created = client.create_subscription(request, user)
    shown = f"subscription {created.subscription.name} created at seq {created.seq}"
    if created.secret:
        shown += f"\nsigning secret (shown once): {created.secret}"
    render.emit(created, as_json, lambda: shown)


@subscriptions_group.command("show")
@click.argument("name")
@target_options
@as_of_option
@json_option
def subscriptions_show(target: Target, name: str, as_of: int | None, as_json: bool) -> None:
    """One subscription (settings as of --as-of; where its deliveries stand is now)."""
    with connect(target) as client:
        sub = client.get_subscription(name, as_of_seq=as_of)
    render.emit(sub, as_json, lambda: render.noted(_table([sub]), _as_of_note(as_of)))


def _change_command(action: str, doc: str) -> click.Command:
    @click.argument("name")
    @target_options
    @user_option
    @json_option
    def command(target: Target, name: str, user: str, as_json: bool) -> None:
        with connect(target) as client:
            written = getattr(client, f"{action}_subscription")(name, user)
        render.emit(written, as_json, lambda: f"subscription {name}: {action} at seq {written.seq}")

    command.__doc__ = doc
    return subscriptions_group.command(action)(command)


_change_command("pause", "Stop delivering NAME; offsets and queues stay.")
_change_command("resume", "Deliver NAME again from where it paused.")
_change_command("delete", "Delete NAME and its queues (its history stays in the log).")


@subscriptions_group.command("reshard")
@click.argument("name")
@click.option("--shards", "shard_count", type=int, required=True, help="The new shard count.")
@click.option("--main-partitions", type=int, default=0, help="Add a main storage topic of this size.")
@click.option("--rq-partitions", type=int, default=0, help="A new RQ storage topic's size (0: as needed).")
@click.option("--dlq-partitions", type=int, default=0, help="A new DLQ storage topic's size (0: as needed).")
@target_options
@user_option
@json_option
def subscriptions_reshard(target: Target, name: str, user: str, as_json: bool, **sizes: int) -> None:
    """Change NAME's shard count while it runs."""
    request = ReshardSubscriptionRequest(**sizes)
    with connect(target) as client:
        written = client.reshard_subscription(name, request, user)
    render.emit(written, as_json, lambda: f"subscription {name}: {request.shard_count} shard(s) from seq {written.seq}")


@subscriptions_group.command("reset")
@click.argument("name")
@click.option("--queue", type=click.Choice(get_args(QueueName)), default="main", show_default=True)
@click.option("--to-seq", type=int, default=None, help="The next event handled is the first after this seq.")
@click.option(
    "--to-time", type=click.DateTime(), default=None, help="...after the last event recorded before this time."
)
@target_options
@user_option
@json_option
def subscriptions_reset(
    target: Target, name: str, queue: str, to_seq: int | None, to_time: datetime | None, user: str, as_json: bool
) -> None:
    """Rewind or fast-forward NAME's main topic; fast-forward its RQ or DLQ."""
    to_time_ms = int(to_time.timestamp() * 1000) if to_time is not None else None
    target = {"to_seq": to_seq} if to_seq is not None else {"to_time_ms": to_time_ms} if to_time_ms is not None else {}
    request = OffsetResetRequest(queue=queue, **target)  # type: ignore[arg-type]
    with connect(target) as client:
        written = client.reset_subscription_offset(name, request, user)
    render.emit(written, as_json, lambda: f"subscription {name}: {queue} reset at seq {written.seq}")


@subscriptions_group.command("dlq")
@click.argument("name")
@click.option("--after-seq", type=int, default=-1, help="Messages of events after this seq.")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True)
@target_options
@json_option
def subscriptions_dlq(target: Target, name: str, after_seq: int, limit: int, as_json: bool) -> None:
    """NAME's dead letters, in event order."""
    with connect(target) as client:
        found = client.list_dead_letters(name, after_seq, limit)

    def table() -> Table | str:
        if not found.messages:
            return "no dead letter"
        shown = Table("seq", "event", "group", "attempts", "status", "error", "message id")
        for dl in found.messages:
            shown.add_row(
                str(dl.seq),
                dl.event_type or "?",
                dl.group,
                str(dl.attempts),
                str(dl.last_status),
                dl.last_error,
                dl.message_id,
            )
        return shown

    render.emit(found, as_json, table)


def _dlq_action(action: str, doc: str) -> click.Command:
    @click.argument("name")
    @click.option("--group", default=None, help="Only this ordering group's dead letters.")
    @target_options
    @user_option
    @json_option
    def command(target: Target, name: str, group: str | None, user: str, as_json: bool) -> None:
        with connect(target) as client:
            moved = getattr(client, f"{action}_dead_letters")(name, DeadLetterRequest(group=group), user)
        verb = "replayed" if action == "replay" else "purged"
        render.emit(moved, as_json, lambda: f"subscription {name}: {moved.moved} dead letter(s) {verb}")

    command.__doc__ = doc
    return subscriptions_group.command(action)(command)


_dlq_action("replay", "Deliver NAME's dead letters again, each group's in order.")
_dlq_action("purge", "Drop NAME's dead letters.")


@click.command("deliver")
@db_option
@click.option("--shards", default="all", show_default=True, help="Which shards: all, a list like 0,2, or a part k/n.")
def deliver(db_url: str, shards: str) -> None:
    """Deliver subscriptions' events from this process (its shards; SIGTERM/SIGINT stop it)."""
    from partbuild.api.webhook_payloads import render as render_payload
    from partbuild.orchestrator.delivery.deliverer import Deliverer, ShardSelector
    from partbuild.state.log.live import LiveState

    try:
        selector = ShardSelector.parse(shards)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    stop = threading.Event()
    on_stop_signal(lambda _signum: stop.set())
    configure_logging()  # a failing endpoint or a fenced step is logged, as in `up`
    with open_database(db_url, must_exist=False) as db:
        live = LiveState(db.log)
        live.start_tailing()
        deliverer = Deliverer(live, db.deliveries, render_payload, selector=selector).start()
        click.echo(f"partbuild deliver: shards {shards} of every subscription, {db.describe()}")
        try:
            stop.wait()
        finally:
            deliverer.stop()
            live.close()
