"""Bucketing commands: `bucket` (which bucket a ref falls in), `buckets` and `reshard` (namespace layouts),
`config schema`, and `run`'s bucketing options."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import click

from partbuild.api import render, render_operations
from partbuild.api.commands.common import (
    Target,
    as_of_option,
    connect,
    json_option,
    target_options,
    user_option,
)
from partbuild.api.models.operations import ReshardRequest
from partbuild.state.rules.bucketing import (
    DEFAULT_NAMESPACE,
    BucketingConfig,
    BucketingConfigError,
    bucket,
    config_json_schema,
)

_DIGITS = re.compile(r"[0-9]+", re.ASCII)
_OUTPUT_CHUNK = 10_000  # lines per write: one echo per line would dominate on a million refs


class PositiveInt(click.ParamType):
    """ASCII digits only, at least 1: `int()` would also take "+5", " 5" and "1_0"."""

    name = "integer"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        elif isinstance(value, str) and _DIGITS.fullmatch(value):
            number = int(value)
        else:
            self.fail(f"{value!r} is not a positive integer", param, ctx)
        if number < 1:
            self.fail(f"{value!r} is not a positive integer", param, ctx)
        return number


def _stdin_lines() -> Iterator[str]:
    """Lines of stdin as UTF-8, only the "\\n" removed (a "\\r" stays part of the data)."""
    for number, line in enumerate(sys.stdin.buffer, start=1):
        try:
            yield line.removesuffix(b"\n").decode("utf-8")
        except UnicodeDecodeError:
            raise click.BadParameter(f"line {number} of stdin is not UTF-8", param_hint="'DATA'") from None


def _buckets(key: str, total: int, data: Iterable[str]) -> Iterator[str]:
    try:
        bucket(key, "", total)
    except ValueError as exc:  # a lone surrogate: a KEY that was not UTF-8 on the command line
        raise click.BadParameter(str(exc), param_hint="'KEY'") from None
    for index, item in enumerate(data, start=1):
        try:
            yield str(bucket(key, item, total))
        except ValueError as exc:
            raise click.BadParameter(f"#{index}: {exc}", param_hint="'DATA'") from None


# Unknown options are data: "-3" is a bad TOTAL and "-x" a DATA, not an option nobody defined.
@click.command("bucket", context_settings={"ignore_unknown_options": True})
@click.argument("key")
@click.argument("total", type=PositiveInt())
@click.argument("data", nargs=-1, required=True)
def bucket_command(key: str, total: int, data: tuple[str, ...]) -> None:
    """Print the bucket (1..TOTAL) of each DATA in namespace KEY, one line each, in order.

    `-` as the only DATA reads the data from stdin, one per line.
    """
    if "-" in data and len(data) > 1:
        raise click.BadParameter("'-' (read stdin) must be the only DATA", param_hint="'DATA'")
    items = _stdin_lines() if data == ("-",) else data
    chunk: list[str] = []
    for line in _buckets(key, total, items):
        chunk.append(line)
        if len(chunk) == _OUTPUT_CHUNK:
            click.echo("\n".join(chunk))
            chunk.clear()
    if chunk:
        click.echo("\n".join(chunk))


@click.command("buckets")
@target_options
@as_of_option
@json_option
def buckets_command(target: Target, as_of: int | None, as_json: bool) -> None:
    """How each bucketing namespace is split (fixed by its first sharded worker), and where round-robin stands."""
    with connect(target) as client:
        layouts = client.bucket_layouts(as_of)
    render.emit(layouts, as_json, lambda: render_operations.layouts_table(layouts))


@click.command("reshard")
@target_options
@click.option("--total", "bucket_total", type=PositiveInt(), required=True, help="The new number of buckets.")
@click.option("--namespace", default=DEFAULT_NAMESPACE, show_default=True, help="The bucketing namespace.")
@user_option
def reshard_buckets_command(target: Target, bucket_total: int, namespace: str, user: str) -> None:
    """Split a namespace's refs into --total buckets; workers still on the old total stop (their runs are rejected)."""
    with connect(target) as client:
        written = client.reshard(ReshardRequest(bucket_total=bucket_total, namespace=namespace), user)
    click.echo(f"namespace {namespace!r} is split into {bucket_total} buckets from seq {written.seq}")


@click.group("config")
def config_group() -> None:
    """Configuration reference."""


@config_group.command("schema")
def config_schema() -> None:
    """Print the JSON Schema of the bucketing settings (titles, descriptions, defaults, order)."""
    click.echo(json.dumps(config_json_schema(), indent=2))


# ----------------------------------------------------------------- `run`'s options

_OPTION_OF_FIELD = {
    "bucket_total": "--bucket-total",
    "bucket_id": "--bucket-id",
    "round_robin_bucket_execution": "--round-robin",
    "bucket_ranges": "--bucket-ranges",
}


def bucketing_options(command: Callable[..., None]) -> Callable[..., None]:
    """Add the bucketing options to a command; it receives them as one validated `bucketing` config."""
    options = [
        click.option(
            "--bucket-total",
            type=PositiveInt(),
            default=1,
            show_default=True,
            envvar="PARTBUILD_BUCKET_TOTAL",
            help=(
                "Buckets the refs are split into: this process decides only for the refs of its bucket. "
                "Env: PARTBUILD_BUCKET_TOTAL."
            ),
        ),
        click.option(
            "--bucket-id",
            type=PositiveInt(),
            default=1,
            show_default=True,
            envvar="PARTBUILD_BUCKET_ID",
            help="This process's bucket, 1..--bucket-total. Env: PARTBUILD_BUCKET_ID.",
        ),
        click.option(
            "--round-robin",
            is_flag=True,
            envvar="PARTBUILD_ROUND_ROBIN",
            help="Advance the bucket on each run instead of keeping --bucket-id. Env: PARTBUILD_ROUND_ROBIN.",
        ),
        click.option(
            "--bucket-ranges",
            multiple=True,
            metavar="RANGES",
            envvar="PARTBUILD_BUCKET_RANGES",
            help='Buckets round-robin may choose: "7", "3-5", "1-3,5,7-9"; repeatable. Env: PARTBUILD_BUCKET_RANGES.',
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def bucketing_config(
    bucket_total: int, bucket_id: int, round_robin: bool, bucket_ranges: tuple[str, ...]
) -> BucketingConfig:
    """The validated config of `run`'s options; a bad value is exit 2 with one line naming the option."""
    try:
        return BucketingConfig(
            bucket_total=bucket_total,
            bucket_id=bucket_id,
            round_robin_bucket_execution=round_robin,
            bucket_ranges=bucket_ranges or None,
        )
    except BucketingConfigError as exc:
        raise click.BadParameter(str(exc), param_hint=f"'{_OPTION_OF_FIELD[exc.field]}'") from None
