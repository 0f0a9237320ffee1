"""Human-readable output of the CLI: rich tables, grids and trees of the API models, JSON, progress.

Every ref, id and message is put in a `Text`, never in markup: refs may hold
square brackets that rich would otherwise read as styles.

A table prints one line per row, on a terminal and piped: a cell shows the first meaningful line of its
text (an error's first meaningful line, not its 30-line Java stack), cut with an ellipsis. Piped output
(200 columns) keeps every column, as a terminal does: rich narrows the free-text columns first (ids and
seqs are copied into the next command), and no column is narrowed below its header (rich would narrow
one to nothing and leave it out).
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click
from pydantic_core import to_jsonable_python
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from partbuild.orchestrator.errors import first_line  # plain Python: no Spark, nothing heavy

# Annotations only: the log's modules bring SQLAlchemy, which a `--server` read does not need, and a command
# builds the models of what it reads, not of every resource; rich.progress loads when a bar is shown.
if TYPE_CHECKING:
    from pydantic import BaseModel
    from rich.progress import Progress

    from partbuild.api.models.changes import ChangeOut
    from partbuild.api.models.common import PageOut
    from partbuild.api.models.partitions import (
        CheckResultOut,
        ChecksRequestedOut,
        InstanceOut,
        LineageNodeOut,
        LineageOut,
        RetentionReportOut,
        StaleOut,
    )
    from partbuild.api.models.runs import JobRunDetailOut, JobRunOut, RunLogLineOut
    from partbuild.api.models.wants import RefStatusOut, WantDetailOut, WantOut, WantTreeOut
    from partbuild.state.log.audit import AuditReport
    from partbuild.state.log.replay import Progress as ProgressCallback

# Piped output is read by scripts and people alike: never cut a digest to fit 80 columns.
console = Console(width=None if sys.stdout.isatty() else 200)
err_console = Console(stderr=True)
# Below this many events a progress bar only flickers.
PROGRESS_THRESHOLD = 50_000
_GOOD = {"live", "successful", "succeeded"}
_BAD = {"failed", "upstream_failed", "expired", "tainted", "gone"}
_BUSY = {"building", "upstream_building", "running", "queued", "up_for_retry", "dep_miss"}
MAX_REFS_SHOWN = 3
# A table cell's text at most: a row stays readable piped (200 columns) with a long error in it.
MAX_CELL = 120
# A failure's reason in `wants show` at most (a detail view: more than a table cell, still one line).
MAX_REASON = 500
# Columns of free text, narrowed first when a table is wider than the terminal; the others hold ids and seqs.
TEXT_COLUMNS = frozenset(
    {"REFS", "REF", "ERROR", "COMMENT", "NOTE", "SOURCE", "CONNECTOR", "CURSOR", "LAST WANT", "SHARING"}
)


def state_text(state: str | None) -> Text:
    """A state name, coloured by how it is going."""
    if state is None:
        return Text("(dropped)", style="dim")
    style = "green" if state in _GOOD else "red" if state in _BAD else "yellow" if state in _BUSY else ""
    return Text(state, style=style)


def when(ms: int | None) -> str:
    """Milliseconds since the epoch as UTC ISO time; '-' for unset."""
    if not ms:
        return "-"
    moment = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def refs_text(refs: list[str]) -> Text:
    """The first ref and how many more, on one line (a table row is one line)."""
    shown = refs[0] if refs else ""
    if len(refs) > 1:
        shown += f" (+{len(refs) - 1:,} more)"
    return Text(shown)


def one_line(text: str | None, limit: int = MAX_CELL) -> str:
    """The first meaningful line of `text` (of an error: not its stack), cut to `limit` with an ellipsis."""
    line = first_line(text) if text and ("\n" in text or "\r" in text) else (text or "").strip()
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _cell(value: RenderableType | None) -> RenderableType | None:
    """A table cell on one line: text cut by `one_line`, kept from wrapping (rich cuts it with "…" instead)."""
    if isinstance(value, str):
        value = Text(value)
    if not isinstance(value, Text):
        return value
    if "\n" in value.plain or "\r" in value.plain or len(value.plain) > MAX_CELL:
        value = Text(one_line(value.plain), style=value.style)
    else:
        value = value.copy()
    value.no_wrap, value.overflow = True, "ellipsis"
    return value


class _OneLineTable(Table):
    """A table whose every row is one line (each cell goes through `_cell`)."""

    def add_row(self, *renderables: RenderableType | None, style: Any = None, end_section: bool = False) -> None:
        super().add_row(*map(_cell, renderables), style=style, end_section=end_section)


def _table(*columns: str) -> Table:
    table = _OneLineTable(header_style="bold", pad_edge=False, box=None)
    for column in columns:
        # Ids and seqs are what people copy into the next command: the text columns are narrowed first.
        text = column in TEXT_COLUMNS
        header = Text(column, no_wrap=True, overflow="ellipsis")  # a header is one line too
        # min_width: rich narrows the text columns of a table wider than the terminal, and one narrowed to
        # nothing is not printed at all; each keeps at least its header's width.
        table.add_column(header, no_wrap=not text, overflow="ellipsis" if text else "fold", min_width=len(column))
    return table


def _grid(rows: Iterable[tuple[str, RenderableType | str | None]]) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for label, value in rows:
        if value is None or value == "":
            continue
        grid.add_row(label, value if not isinstance(value, str) else Text(value))
    return grid


def _joined(values: list[str]) -> str:
    return "\n".join(values)


# ----------------------------------------------------------------- wants


def wants_table(wants: list[WantOut]) -> Table:
    table = _table("WANT", "STATE", "REFS", "CREATED SEQ", "CREATED", "MADE BY", "PARENT")
    for want in wants:
        table.add_row(
            Text(want.want_id),
            state_text(want.state),
            refs_text(want.refs),
            str(want.created_seq),
            when(want.created_ms),
            Text(want.made_by),
            Text(want.parent_want_id or "-"),
        )
    return table


def want_detail(want: WantDetailOut) -> Group:
    """The want's fields, where each of its refs stands, and its derivative wants."""
    grid = _grid(
        [
            ("want", want.want_id),
            ("state", state_text(want.state)),
            ("created", f"seq {want.created_seq} at {when(want.created_ms)}"),
            ("updated", f"seq {want.updated_seq}"),
            ("data timestamp", when(want.data_timestamp_ms)),
            ("ttl", f"{want.ttl_seconds} s, expires {when(want.expires_at_ms)}" if want.ttl_seconds else None),
            ("sla", _sla(want) if want.sla_seconds else None),
            ("comment", want.comment),
            ("source", want.source),
            ("made by", want.made_by),
            ("cause", want.cause),
            ("progress", ", ".join(f"{state} {count}" for state, count in want.progress.items())),
            ("runs", _joined(want.runs[:10]) + (f"\n... {len(want.runs) - 10} more" if len(want.runs) > 10 else "")),
            ("parent", want.parent_want_id),
            ("root", want.root_want_id if want.root_want_id != want.want_id else None),
            ("satisfied by", _joined(want.satisfied_by)),
            ("cancel reason", want.cancel_reason),
            ("failed because", _failures_text(want)),
            ("as of seq", str(want.as_of_seq)),
        ]
    )
    refs = Tree(Text("refs", style="bold"))
    for status in want.refs_status:
        _ref_branch(refs, status)
    return Group(grid, refs, want_tree(want.tree))


def _failures_text(want: WantDetailOut) -> str | None:
    """Each partition that failed the want (what it failed upstream of, its check), its error's line under it."""
    lines = []
    for failure in want.failures:
        line = f"{failure.ref} {failure.state}"
        line += f", upstream of {failure.via}" if failure.via else ""
        line += f", check {failure.check}" if failure.check else ""
        reason = one_line(failure.reason, MAX_REASON) or "no reason recorded"
        lines += [f"{line} (instance {failure.instance_uuid})", f"  {reason}"]
    return "\n".join(lines) or None


def _sla(want: WantDetailOut) -> str:
    breached = " (breached)" if want.sla_breached else ""
    return f"{want.sla_seconds} s, due {when(want.sla_deadline_ms)}{breached}"


def _ref_label(status: RefStatusOut) -> Text:
    label = Text(status.ref)
    label.append("  ")
    label.append_text(state_text(status.state) if status.state else Text("no instance", style="dim"))
    if status.waiting_on:
        label.append("  waits for", style="dim")
    return label


def _ref_branch(parent: Tree, status: RefStatusOut) -> None:
    branch = parent.add(_ref_label(status))
    for upstream in status.waiting_on:
        _ref_branch(branch, upstream)


def want_tree(tree: WantTreeOut) -> Tree:
    """The want and its derivative wants (created for missing upstream data) as a tree."""
    root = Tree(Text("derivative wants", style="bold"))
    _want_branch(root, tree)
    return root


def _want_branch(parent: Tree, node: WantTreeOut) -> None:
    label = Text(node.want_id)
    label.append("  ")
    label.append_text(state_text(node.state))
    label.append("  " + ", ".join(node.refs[:MAX_REFS_SHOWN]), style="dim")
    if len(node.refs) > MAX_REFS_SHOWN:
        label.append(f" (+{len(node.refs) - MAX_REFS_SHOWN} more)", style="dim")
    branch = parent.add(label)
    for child in node.children:
        _want_branch(branch, child)


# ----------------------------------------------------------------- partitions


def instances_table(instances: list[InstanceOut]) -> Table:
    table = _table("REF", "STATE", "UUID", "BUILT BY", "ROWS", "UPDATED SEQ")
    for instance in instances:
        table.add_row(
            Text(instance.ref),
            state_text(instance.state) + (" (stale)" if instance.stale else ""),
            instance.uuid,
            Text(instance.built_by or "-"),
            f"{instance.row_count:,}",
            str(instance.updated_seq),
        )
    return table


def history_table(instances: list[InstanceOut]) -> Table:
    table = _table("UUID", "STATE", "CANONICAL", "CREATED SEQ", "SUPERSEDED SEQ", "BUILT BY", "NOTE")
    for instance in instances:
        table.add_row(
            instance.uuid,
            state_text(instance.state),
            "yes" if instance.canonical else "no",
            str(instance.created_seq),
            str(instance.superseded_seq or "-"),
            Text(instance.built_by or "-"),
            Text(instance.note or ""),
        )
    return table


def instance_grid(instance: InstanceOut) -> Table:
    metadata = "\n".join(f"{key}={value}" for key, value in sorted(instance.metadata.items()))
    return _grid(
        [
            ("ref", instance.ref),
            ("uuid", instance.uuid),
            ("state", state_text(instance.state)),
            ("canonical", "yes" if instance.canonical else f"no (superseded at seq {instance.superseded_seq})"),
            ("serving", _serving(instance)),
            ("created seq", str(instance.created_seq)),
            ("updated seq", str(instance.updated_seq)),
            ("previous", instance.previous_uuid),
            ("built by", instance.built_by),
            ("attempts", _joined(instance.attempts)),
            ("location", instance.location),
            ("rows", f"{instance.row_count:,}" if instance.row_count else None),
            ("bytes", f"{instance.byte_count:,}" if instance.byte_count else None),
            ("metadata", metadata),
            ("version", _version(instance)),
            ("code version", _code_version(instance)),
            ("inputs", _joined(instance.inputs)),
            ("consumers", _joined(instance.consumers)),
            ("waiting on", _joined(instance.waiting_on)),
            ("note", instance.note),
            ("checks", _checks_text(instance.checks)),
        ]
    )


def _serving(instance: InstanceOut) -> str | None:
    """Whether readers get it, and for a stale one still read, the successor it waits for."""
    successor = instance.successor
    if successor is None:
        return "yes" if instance.serving else None
    waiting = f": {one_line(successor.note)}" if successor.note else ""
    return f"yes, stale: until its successor {successor.uuid} ({successor.state}{waiting}) goes Live"


def _checks_text(checks: list[CheckResultOut]) -> str | None:
    """One line per check: passed, failed (blocking), warning (a non-blocking failure) or errored."""
    lines = []
    for check in checks:
        status = check.result
        metrics = " ".join(f"{key}={value:g}" for key, value in sorted(check.metrics.items()))
        kind = "blocking" if check.blocking else "non-blocking"
        shown = f"{status} {check.name} ({kind}, seq {check.seq})"
        lines.append(
            shown + (f": {check.description}" if check.description else "") + (f" [{metrics}]" if metrics else "")
        )
    return "\n".join(lines) or None


def _run_checks_text(run: JobRunDetailOut) -> str | None:
    """The checks the run's outcome recorded, under the ref and instance of each output they checked."""
    parts = [f"{each.ref} ({each.instance_uuid}):\n{_checks_text(each.checks) or ''}" for each in run.checks]
    return "\n".join(parts) or None


def checks_requested_text(requested: ChecksRequestedOut) -> str:
    """A checks request recorded, and where to see its answer."""
    return (
        f"checks of instance {requested.instance_uuid} requested at seq {requested.seq} "
        f"(request {requested.request_id}); an orchestrator runs them and records the results"
    )


def checks_answered_text(requested: ChecksRequestedOut, instance: InstanceOut) -> str:
    """A checks request answered: the instance's state now and its checks (none if the rerun skipped)."""
    answered = next(r.answered_seq for r in instance.checks_requests if r.request_id == requested.request_id)
    fresh = [check for check in instance.checks if check.seq == answered]
    lines = [
        f"checks of {instance.ref} ({instance.uuid}) run again at seq {answered}: the instance is {instance.state}"
    ]
    if instance.state == "tainted" and instance.note:
        lines.append(f"tainted: {instance.note}")
    lines.append(_checks_text(fresh) or "no check ran (the rerun skipped)")
    return "\n".join(lines)


def lineage_tree(lineage: LineageOut, direction: str) -> Tree:
    """The root instance with its inputs (upstream) and/or consumers (downstream) as branches."""
    nodes = {node.uuid: node for node in lineage.nodes}
    inputs: dict[str, list[str]] = defaultdict(list)
    consumers: dict[str, list[str]] = defaultdict(list)
    for edge in lineage.edges:
        inputs[edge.output].append(edge.input)
        consumers[edge.input].append(edge.output)
    tree = Tree(_node_label(nodes.get(lineage.root), lineage.root))
    for name, links in (("upstream", inputs), ("downstream", consumers)):
        if direction in (name, "both") and links.get(lineage.root):
            branch = tree.add(Text(f"{name} ({'inputs' if name == 'upstream' else 'consumers'})", style="bold"))
            _lineage_branch(branch, lineage.root, links, nodes, {lineage.root})
    return tree


def _lineage_branch(
    parent: Tree, uuid: str, links: dict[str, list[str]], nodes: dict[str, LineageNodeOut], seen: set[str]
) -> None:
    for other in links.get(uuid, ()):
        label = _node_label(nodes.get(other), other)
        if other in seen:  # a diamond: show the node once in full
            parent.add(label.append(" (shown above)", style="dim"))
            continue
        seen.add(other)
        _lineage_branch(parent.add(label), other, links, nodes, seen)


_CHECK_STYLES = {"passed": "green", "warning": "yellow", "failed": "red", "errored": "red"}


def _node_label(node: LineageNodeOut | None, uuid: str) -> Text:
    label = Text(node.ref if node and node.ref else "(dropped by retention)")
    label.append("  ")
    label.append_text(state_text(node.state if node else None))
    if node and node.check_result:
        label.append(f"  checks {node.check_result}", style=_CHECK_STYLES[node.check_result])
    label.append(f"  {uuid}", style="dim")
    if node and node.built_by:
        label.append(f"  built by {node.built_by}", style="dim")
    return label


# ----------------------------------------------------------------- job runs


def runs_table(runs: list[JobRunOut]) -> Table:
    table = _table("JOB RUN", "JOB", "STATE", "ATTEMPT", "REFS", "CREATED SEQ", "ERROR")
    for run in runs:
        table.add_row(
            Text(run.job_run_id),
            Text(run.job_label),
            state_text(run.state),
            str(run.attempt),
            refs_text(run.refs),
            str(run.created_seq),
            Text(_run_error(run)),
        )
    return table


def _run_error(run: JobRunOut) -> str:
    if run.missing_refs:
        return f"missing {len(run.missing_refs)} input(s)"
    if run.error_class or run.error_message:
        # Its first meaningful line: what broke, not py4j's "An error occurred while calling o1.parquet."
        split = " (split: each output retried alone)" if run.split else ""
        return f"{run.error_class or 'error'}{split}: {first_line(run.error_message)}".strip()
    if run.failed_outputs:
        return f"{len(run.failed_outputs)} of {len(run.instance_uuids)} outputs failed on their own"
    return run.cancel_reason or ""


def run_grid(run: JobRunDetailOut) -> Table:
    return _grid(
        [
            ("job run", run.job_run_id),
            ("job", run.job_label),
            ("state", state_text(run.state)),
            ("attempt", str(run.attempt)),
            ("created", f"seq {run.created_seq} at {when(run.created_ms)}"),
            ("updated", f"seq {run.updated_seq} at {when(run.updated_ms)}"),
            ("last heartbeat", when(run.last_heartbeat_ms) if run.last_heartbeat_ms else None),
            ("refs", _joined(run.refs)),
            ("instances", _joined(run.instance_uuids)),
            ("inputs", _joined(run.inputs)),
            ("error", f"{run.error_class or ''} {run.error_message or ''}".strip()),
            ("retry after", when(run.retry_after_ms) if run.retry_after_ms else None),
            ("missing inputs", _joined(run.missing_refs)),
            ("cancel reason", run.cancel_reason),
            ("checks", _run_checks_text(run)),
            ("as of seq", str(run.as_of_seq)),
        ]
    )


# ----------------------------------------------------------------- replay report


def report_grid(report: AuditReport) -> Table:
    """What `partbuild replay` prints: head, digest, replay speed, counts, rejected events, verification."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row("log head seq", f"{report.head_seq:,}")
    if report.state_seq != report.head_seq:
        grid.add_row("state as of seq", f"{report.state_seq:,}")
    grid.add_row("digest", f"sha256:{report.digest}")
    source = f"snapshot at seq {report.snapshot_seq:,} + " if report.snapshot_seq else ""
    grid.add_row(
        "replayed",
        f"{source}{report.replayed_events:,} events in {report.seconds:.2f} s "
        f"({report.events_per_second:,.0f} events/s)",
    )
    for kind, counts in report.counts.items():
        grid.add_row(kind.replace("_", " "), nonzero(counts))
    grid.add_row("rejected events", f"{report.rejected_total:,}")
    for rejected in report.rejected:
        grid.add_row("", f"seq {rejected.seq}  {rejected.event_type}: {rejected.reason}")
    if report.verified is not None:
        grid.add_row("verify", "ok: full replay from seq 0 matches" if report.verified else "FAILED")
    if report.snapshot_saved_at is not None:
        grid.add_row("snapshot", f"saved at seq {report.snapshot_saved_at:,}")
    return grid


def retention_text(report: RetentionReportOut) -> str:
    """What retention dropped, or on a dry run would drop."""
    if not report.dropped:
        return "no instance was superseded long enough ago to drop"
    verb = "would drop" if report.dry_run else f"dropped at seq {report.seq}"
    shown = "\n".join(f"  {uuid}" for uuid in report.instances)
    more = f"\n  (+{report.dropped - len(report.instances):,} more)" if report.dropped > len(report.instances) else ""
    return f"{verb}: {report.dropped:,} instance(s) superseded before seq {report.cutoff_seq}\n{shown}{more}"


def nonzero(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {n:,}" for name, n in counts.items() if n) or "none"


# ----------------------------------------------------------------- changes


def changes_table(changes: list[ChangeOut]) -> Table:
    """One change a row: a canonical move shows the UUIDs it moved from and to, the others the states."""
    table = _table("SEQ", "KIND", "ID", "REF", "FROM", "TO")
    for change in changes:
        if change.kind == "canonical_moved":
            before, after = Text(change.from_uuid or "(none)"), Text(change.to_uuid or "")
        else:
            before = state_text(change.from_state) if change.from_state else Text("(new)", style="dim")
            after = state_text(change.to_state)
        table.add_row(str(change.seq), change.kind, Text(change.id), Text(change.ref or ""), before, after)
    return table


# ----------------------------------------------------------------- printing and progress


def emit(value: BaseModel | list[Any], as_json: bool, human: Callable[[], RenderableType | str]) -> None:
    """The API's JSON with --json (the same in --db and --server mode), else the human rendering."""
    if as_json:
        click.echo(json.dumps(to_jsonable_python(value), indent=2))
    else:
        console.print(human())


def noted(shown: RenderableType, note: str) -> RenderableType:
    """`shown`, with a dim note in parentheses under it when there is one."""
    return Group(shown, Text(f"({note})", style="dim")) if note else shown


def emit_page(
    page: PageOut[Any], as_json: bool, table: Callable[[list[Any]], Table], noun: str, as_of: int | None = None
) -> None:
    """A page as JSON, or as a table with a hint for the next page (and the seq, when asked as of one)."""
    when = f" as of seq {page.as_of_seq}" if as_of is not None else ""
    if as_json:
        emit(page, True, str)
    elif not page.items:
        console.print(f"no {noun}{when}")
    else:
        console.print(table(page.items))
        if page.next_cursor is not None:
            more = f" --as-of {as_of}" if as_of is not None else ""
            console.print(f"(more: --cursor {page.next_cursor}{more}, or --all)", style="dim", highlight=False)
        if when:
            console.print(f"({noun}{when})", style="dim", highlight=False)


@contextmanager
def counter(description: str) -> Iterator[Callable[[int], None]]:
    """How many items so far, on a terminal only."""
    if not err_console.is_terminal:
        yield lambda _: None
        return
    from rich.progress import Progress, TextColumn

    columns = (TextColumn(description), TextColumn("{task.completed:,}"))
    with Progress(*columns, console=err_console, transient=True) as bar:
        task = bar.add_task(description, total=None)
        yield lambda done: bar.update(task, completed=done)


@contextmanager
def progress(description: str, start: int, end: int) -> Iterator[ProgressCallback | None]:
    """A progress bar over seqs start..end on a terminal, for long work only."""
    total = end - start
    if total < PROGRESS_THRESHOLD or not err_console.is_terminal:
        yield None
        return
    with progress_bar(description) as bar:
        task = bar.add_task(description, total=total)
        yield lambda seq: bar.update(task, completed=seq - start)


def progress_bar(description: str, *, show: bool = True) -> Progress:
    """A transient bar with count and time left on stderr, shown only on a terminal."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn(description), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    return Progress(*columns, console=err_console, transient=True, disable=not (show and err_console.is_terminal))


def _code_version(instance: InstanceOut) -> str | None:
    """The code version that built it, "(stale)" when the served graph's job has another."""
    if instance.code_version is None:
        return None
    return f"{instance.code_version} (stale: its job's code changed)" if instance.stale else instance.code_version


def stale_table(answer: StaleOut) -> Table:
    """A job's stale Live instances, with the version each was built by."""
    table = _table("REF", "UUID", "BUILT BY", "CODE VERSION")
    for instance in answer.instances:
        table.add_row(Text(instance.ref), instance.uuid, Text(instance.built_by or "-"), instance.code_version or "-")
    return table


def _version(instance: InstanceOut) -> str | None:
    """`<version> (strong|weak)` of observed source data whose source reports versions."""
    if instance.version is None:
        return None
    return f"{instance.version.value} ({'strong' if instance.version.strong else 'weak'})"


def run_log_line(line: RunLogLineOut) -> str:
    """One run-log line as `runs logs` prints it: number, UTC time, level, text (plain: no markup)."""
    when = dt.datetime.fromtimestamp(line.time_ms / 1000, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    return f"{line.line_no:>6} {when} {line.level:<8} {line.text}"


def summary_text(summary: Any) -> str:
    """A job's (or source's) partitions by state: `name (job): 12 partitions — live 10, failed 2`."""
    counts = ", ".join(f"{state} {count}" for state, count in summary.counts.items()) or "none known"
    return f"{summary.name} ({summary.kind}, {' '.join(summary.patterns)}): {summary.total} partitions: {counts}"


def job_graph_text(found: Any) -> str:
    """The job graph: a line per node with its counts, then a line per edge."""
    lines = [summary_text(node) for node in found.nodes]
    lines += [f"{edge.input} -> {edge.output}" for edge in found.edges] or ["(no dependencies known)"]
    return "\n".join([*lines, f"(as of seq {found.as_of_seq})"])
