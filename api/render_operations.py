"""The CLI's tables of operations: bucket layouts, worker groups, source datasets and their scans."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from partbuild.api.render import MAX_CELL, _grid, _table, one_line, when

if TYPE_CHECKING:
    from partbuild.api.models.groups import GroupOut, GroupShareOut, GroupSummaryOut, MemberHeartbeatOut
    from partbuild.api.models.operations import BucketLayoutOut
    from partbuild.api.models.sources import ScanKeyRangeOut, SourceOut, SourceScanOut


def layouts_table(layouts: list[BucketLayoutOut]) -> Table:
    table = _table("namespace", "buckets", "since seq", "last round-robin bucket")
    for layout in layouts:
        last = layout.last_round_robin_bucket
        table.add_row(
            layout.namespace, str(layout.bucket_total), str(layout.since_seq), "" if last is None else str(last)
        )
    return table


# ----------------------------------------------------------------- worker groups


def groups_table(groups: list[GroupSummaryOut]) -> Table:
    table = _table("GROUP", "NAMESPACE", "BUCKETS", "EPOCH", "EPOCH ID", "SINCE SEQ", "LEADER", "MEMBERS", "UNOWNED")
    for group in groups:
        table.add_row(
            Text(group.name),
            Text(group.namespace),
            str(group.bucket_total),
            str(group.epoch.number),
            Text(group.epoch.epoch_id),
            str(group.epoch.seq),
            Text(group.leader_task_id),
            str(group.members),
            str(group.buckets_without_owner),
        )
    return table


def sources_table(sources: list[SourceOut]) -> Table:
    """One row a source: how it is found, its scan's pass and cursor (redacted), counts, the last error."""
    table = _table(
        "SOURCE", "FOUND BY", "CONNECTOR", "PASS", "STATE", "CURSOR", "ITEMS", "PARTITIONS", "ERRORS", "ERROR",
        "LAST PASS DONE",
    )  # fmt: skip
    for source in sources:
        discovery = source.discovery
        connector = "-"
        if discovery is not None:
            tag = discovery.connector.tag
            connector = discovery.connector.class_name + (f" ({tag})" if tag else "")
        table.add_row(Text(source.name), source.found_by or "(log only)", Text(connector), *_scan_cells(source.scan))
    return table


def _scan_cells(scan: SourceScanOut | None) -> tuple[str | Text, ...]:
    if scan is None:
        return ("-", Text("not scanned", style="dim"), "-", "-", "-", "-", "-", "-")
    state = Text("done", style="green") if scan.pass_done else Text("running", style="yellow")
    error = scan.last_error
    error_text = Text("-")
    if error is not None:
        kind = "retryable" if error.retryable else "permanent"
        error_text = Text(f"{one_line(error.message, MAX_CELL // 2)} ({kind}, {when(error.at_ms)})", style="red")
    return (
        str(scan.pass_number),
        state,
        Text(_cursor_text(scan.shards)),
        f"{scan.pass_items:,}/{scan.items_total:,}",
        f"{scan.pass_partitions:,}/{scan.partitions_total:,}",
        str(scan.errors_total),
        error_text,
        when(scan.last_pass_done_ms),
    )


def _cursor_text(shards: list[ScanKeyRangeOut]) -> str:
    """One shard's cursor (redacted), or how many of the pass's shards are done."""
    if len(shards) == 1:
        return shards[0].cursor
    return f"{sum(shard.done for shard in shards)}/{len(shards)} shards done" if shards else "-"


def _heartbeat_cells(beat: MemberHeartbeatOut | None) -> tuple[Text, str, str, Text]:
    """Host, pid, last heartbeat with its age, and liveness; a member without a row is shown as such."""
    if beat is None:
        return Text("-"), "-", "-", Text("no row", style="red")
    last = f"{when(beat.last_heartbeat_ms)} ({beat.age_ms / 1000:.1f} s ago)"
    live = Text("live", style="green") if beat.live else Text("dead", style="red")
    return Text(beat.host), str(beat.pid), last, live


def _shares_text(shares: list[GroupShareOut]) -> Text:
    parts = [f"{s.bucket}->{s.target}{' (picked up)' if s.picked_up else ''}" for s in shares]
    return Text(", ".join(parts) or "-")


def group_detail(group: GroupOut) -> Group:
    """The epoch and leader, a table of members (ownership as of the seq, heartbeats now), pending hand-offs."""
    grid = _grid(
        [
            ("group", group.name),
            ("namespace", f"{group.namespace} in {group.bucket_total} buckets (since seq {group.created_seq})"),
            ("epoch", f"#{group.epoch.number} {group.epoch.epoch_id} (seq {group.epoch.seq})"),
            ("leader", group.leader_task_id),
            ("as of seq", str(group.as_of_seq)),
            ("heartbeats", f"now ({when(group.now_ms)}), live within {group.member_timeout_s:g} s"),
        ]
    )
    from partbuild.state.rules.group import format_buckets  # here: it brings the events' protobuf

    members = _table("TASK", "ROLE", "OWNED", "LOAD", "SHARING", "HOST", "PID", "LAST HEARTBEAT", "LIVE")
    for member in group.members:
        members.add_row(
            Text(member.task_id),
            "leader" if member.leader else "member",
            format_buckets(member.owned, limit=64),
            str(member.load),
            _shares_text(member.share),
            *_heartbeat_cells(member.heartbeat),
        )
    parts: list[RenderableType] = [grid, Text(""), members]
    if group.buckets_without_owner:
        pending = _table("BUCKET WITHOUT OWNER", "FROM", "TO")
        for bucket in group.buckets_without_owner:
            pending.add_row(str(bucket.bucket), Text(bucket.from_task or "-"), Text(bucket.to_task or "-"))
        parts += [Text(""), pending]
    if group.other_heartbeats:
        others = _table("NOT A MEMBER", "HOST", "PID", "LAST HEARTBEAT", "LIVE")
        for row in group.other_heartbeats:
            others.add_row(Text(row.task_id), *_heartbeat_cells(row.heartbeat))
        parts += [Text(""), others]
    return Group(*parts)
