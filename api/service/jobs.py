"""Jobs and source datasets of the served graph: partition counts by state, the status grid, the job graph.

A job's partitions are the refs the log knows of its output patterns (refs with an
instance): the listing index keeps each pattern's refs sorted (`refs_matching`: one
pass over the refs under the pattern's literal prefix, then only the refs added
since), so a grid takes them in key order and bisects a key range. In the live
state each ref's grid state, the runs of equal state and the counts are kept per
node with each ref's canonical instance: a grid then costs the runs of its range,
the summary nothing, and when the head moves only the refs whose instance moved
(or were added, or had their checks run again) are looked up again (`_refreshed`),
so a grid of a log being written to stays cheap. As of a seq each ref of the range
is looked up in the past (from the live records' histories, `cell_states`): a
pass over the range each time. A read replica reads the cells the store keeps
(`state_cells`: one range scan), keeps them per watermark with the seq since which
each has held, and makes a grid or summary as of an earlier seq from those: only
the refs whose cell changed after that seq are looked up in their records' rows.

The job graph is drawn from the graph's declarations (job_declarations.py: each job's inputs asked about
sample partitions made from its patterns' typed fields, once per served graph; its checks and reactions; the
graph's schedules), merged with the edges the log shows: each job's inputs asked about one known partition of
it (its first ref in key order). Each job node counts its stale Live instances (built by another code version
than the served graph's: `StaleIndex.count`, kept per head). Without a graph, the jobs, their partitions and
edges are what the log's runs show (log_jobs.py), and a node's summary says so.
"""

from __future__ import annotations

import datetime as dt
import threading
from array import array
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import compress, count, repeat
from operator import attrgetter, eq, itemgetter, lt, or_, truth
from typing import Any, cast

from partbuild.api.errors import InvalidInput, NotFound
from partbuild.api.models.jobs import GraphEdgeOut, JobGraphOut, NodeKind, PartitionsSummaryOut
from partbuild.api.service.base import ServiceBase
from partbuild.api.service.job_declarations import (
    DeclaredGraph,
    declared_graph,
    producer_name,
    producers_read,
    schedules_out,
)
from partbuild.api.service.log_jobs import LogJobs, dataset_of
from partbuild.api.service.partitions import checked, wanted_by
from partbuild.api.service.wants import made_by_filter
from partbuild.orchestrator.graph import FIELD_TYPES, Graph, GraphError, Job, PartitionPattern
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.past import live_state
from partbuild.state.fold.records import Instance
from partbuild.state.fold.touched import changed_after
from partbuild.state.fold.view import StateView
from partbuild.state.queries.cells import GRID_STATES, TAINTED, cell_states
from partbuild.state.queries.staleness import is_stale
from partbuild.state.rules import grid
from partbuild.state.rules.grid import Cell, Month
from partbuild.state.store.reader import StoreNotReady, StoreReader
from partbuild.state.store.records import REF
from partbuild.state.store.stored import (
    HeldCells,
    StoredRecords,
    cells_as_of,
    grid_cells,
    held_cells,
    held_checks,
    prefetched,
    read_from_store,
    stored_checks,
    stored_of,
)


@dataclass(frozen=True)
class Node:
    """A job or a source dataset of the graph, by name."""

    name: str
    kind: NodeKind
    patterns: tuple[PartitionPattern, ...]


@dataclass(frozen=True)
class LiveCells:
    """A node's known refs with their grid states at one head seq, where each run of equal state starts, counts.

    Never changed once made (requests read it without a lock): the next head's is made from it (`_refreshed`).
    A live state's are tuples: the cyclic GC stops scanning a tuple of strings (and of their pairs) after its
    first pass, where every full collection walked lists the length of the node's refs (about 130 ms at 1M).
    """

    cells: Sequence[tuple[str, str]]
    starts: list[int]
    counts: dict[str, int]
    seq: int = 0
    # The live state they are of (another object: nothing carries over); None: read from the state store (a
    # read replica's, whose every read is a state of its own, its records decoded rows: none is kept, and
    # the store's changes tell what moved since).
    state: StateView | None = None
    refs: Sequence[str] = ()  # the node's refs they are aligned with (the listing's own sequence)
    dropped: int = 0  # the live state's `dropped_instances` as of `seq`: a retention since may change a cell
    # Each ref's canonical instance as of `seq`, for the pass that finds what moved, kept only by a state with no
    # record of what the fold touched (no projector drains one: a standby's, a server with no store).
    instances: tuple[Instance, ...] | None = None
    # A read replica's: the cells with the seq since which each has held (a grid as of an earlier seq from them).
    held: HeldCells | None = None


@dataclass(frozen=True)
class GridView:
    """A grid answer: the node, its counts, its cells (bounded) or day rows, as of a seq."""

    summary: PartitionsSummaryOut  # of the key range (the whole job without one), before the state filter
    cells: list[Cell]
    months: list[Month] | None  # a day layout when the node's one field is a date and the span fits
    shown: int  # refs in the key range and state filter
    start: str | None
    end: str | None
    state: str | None
    # Single cells are labeled with the text after this (the node's one pattern's literal prefix: a month, a
    # year, an hour, a name), when that text is short; None: no labels (days are laid out by month instead).
    label_prefix: str | None = None
    stale: frozenset[str] = frozenset()  # refs of single cells whose readers get a stale instance


MAX_LABEL = 16  # a cell label's characters at most: longer keys are left to the cell's title


def label_prefix(node: Node, cells: list[Cell]) -> str | None:
    """The prefix whose rest labels each of `cells` (all single, each rest short), or None."""
    if len(node.patterns) != 1 or not cells or not all(cell.single for cell in cells):
        return None
    prefix = node.patterns[0].prefix
    if not all(cell.first.startswith(prefix) and len(cell.first) - len(prefix) <= MAX_LABEL for cell in cells):
        return None
    return prefix


CHECK_RESULTS = ("passed", "warning", "failed", "errored")


@dataclass(frozen=True)
class GridFilters:
    """What narrows a grid beyond its key range and state: a check (by name, by result), an error's text, who
    made the wants naming a partition; the filters of `GET /partitions`."""

    check: str | None = None
    check_result: str | None = None
    error: str | None = None
    made_by: str | None = None

    @property
    def narrows(self) -> bool:
        return any(value is not None for value in (self.check, self.check_result, self.error, self.made_by))


def _check_grid_filters(state: str | None, filters: GridFilters) -> bool:
    """A grid filter's value is one the grid knows: InvalidInput (a 422 page) otherwise, never ignored. Whether
    the filters narrow the cells (`GridFilters.narrows`)."""
    if state is not None and state not in GRID_STATES:
        raise InvalidInput(f"state must be one of {', '.join(GRID_STATES)}")
    if filters.check_result is not None and filters.check_result not in CHECK_RESULTS:
        raise InvalidInput(f"check_result must be one of {', '.join(CHECK_RESULTS)}")
    return filters.narrows


def narrowed_cells(
    state: StateView, cells: Sequence[tuple[str, str]], filters: GridFilters, held: tuple[HeldCells, int] | None = None
) -> list[tuple[str, str]]:
    """The cells whose instance (readers', else canonical) has a latest check of that name and result, whose
    note holds the error's text (any case), and that a want made by whom the filter names names: one lookup
    each, on the live records (as of a seq: theirs then). A read replica's check filter reads the store's
    cells instead where they held then: those it keeps (`held`, with where `cells` start in them: the cells
    made from them by `cells_as_of`), else the rows (`stored_checks`); only the rest, and the other filters,
    look up."""
    results, check, result = state.check_results, filters.check, filters.check_result
    text = filters.error.casefold() if filters.error is not None else None
    maker = made_by_filter(filters.made_by)  # InvalidInput for a malformed value
    by_checks, settled = check is not None or result is not None, text is None and maker is None
    if not by_checks:
        known = None
    elif held is not None:
        known = held_checks(state, *held, cells, check, result)
    else:
        known = stored_checks(state, cells, check, result)
    if known is None:
        candidates: list[tuple[tuple[str, str], bool | None]] = [(cell, None) for cell in cells]
    else:
        candidates = [(cell, verdict) for cell, verdict in zip(cells, known, strict=True) if verdict is not False]
    kept = []
    # A read replica's rows: the refs' (and their canonical instances') in batches, not a statement each.
    to_look_up = (ref for (ref, _), verdict in candidates if not (verdict and settled))
    refs = iter(prefetched(state, REF, to_look_up, chunk=500))
    for (ref, found), verdict in candidates:
        if verdict and settled:
            kept.append((ref, found))
            continue
        next(refs)
        instance = state.served_instance(ref) or state.canonical_instance(ref)
        if instance is None:
            continue
        if verdict is None and by_checks and not checked(results, instance.uuid, check, result):
            continue
        if text is not None and text not in (instance.note or "").casefold():
            continue
        if maker is not None and not wanted_by(state, ref, maker):
            continue
        kept.append((ref, found))
    return kept


class JobsService(ServiceBase):
    """Partition counts and grids of the graph's jobs and sources; the pattern-level job graph."""

    _counts_lock = threading.Lock()

    def partitions_summary(
        self, name: str, as_of_seq: int | None = None, min_seq: int | None = None
    ) -> PartitionsSummaryOut:
        caught_up = min_seq is None or min_seq <= self.reads.head_seq  # else catch up (or say why not) below
        if as_of_seq is not None and caught_up and (twin := self._twin_for(as_of_seq)) is not None:
            try:
                return twin.partitions_summary(name, as_of_seq)
            except StoreNotReady:  # its rows are being written again: from memory
                pass
        node = self._node(name) if self.graph is not None else None
        held = self._held_cells(name, node) if as_of_seq is not None else None
        with self._reading(min_seq, as_of_seq) as state:
            return self._summary(state, node or self._log_node(state, name), as_of_seq is None, held)

    def job_graph(self, as_of_seq: int | None = None, min_seq: int | None = None) -> JobGraphOut:
        """The served graph's jobs, sources, declared edges merged with the log's, checks, reactions, schedules;
        without a graph, what the log knows of them (see the module)."""
        graph = self.graph
        if graph is None:
            return self._log_graph(as_of_seq, min_seq)
        declared = self._declared(graph)
        nodes = _nodes(graph)
        with self._reading(min_seq, as_of_seq) as state:
            summaries = [self._summary(state, node, as_of_seq is None) for node in nodes]
            found = self._known_edges(graph, nodes, state, as_of_seq is None)
            edges = {edge: GraphEdgeOut(input=edge[0], output=edge[1], declared=True) for edge in declared.edges}
            for a, b in found:
                edges.setdefault((a, b), GraphEdgeOut(input=a, output=b)).in_log = True
            return JobGraphOut(
                as_of_seq=state.head_seq,
                graph_served=True,
                nodes=summaries,
                edges=list(edges.values()),
                checks=list(declared.checks),
                reactions=list(declared.reactions),
                schedules=schedules_out(graph, state, lambda ref: _resolved_name(graph, ref)),
            )

    def _log_graph(self, as_of_seq: int | None, min_seq: int | None) -> JobGraphOut:
        """The job graph without a graph: the jobs the log's runs name, the data they read, as of the seq."""
        with self._reading(min_seq, as_of_seq) as state:
            index = self._log_jobs(state)
            seq = state.head_seq
            nodes = [Node(name, kind, ()) for name, kind in index.nodes(seq)]
            return JobGraphOut(
                as_of_seq=seq,
                graph_served=False,
                nodes=[self._summary(state, node, as_of_seq is None) for node in nodes],
                edges=[GraphEdgeOut(input=a, output=b, in_log=True) for a, b in index.edges(seq)],
                schedules=schedules_out(None, state, lambda ref: _logged_producer(state, ref)),
            )

    def partitions_grid(
        self,
        name: str,
        start: str | None = None,
        end: str | None = None,
        state_filter: str | None = None,
        as_of_seq: int | None = None,
        filters: GridFilters = GridFilters(),
    ) -> GridView:
        """The status grid of a job or source (for the web page): its refs from `start` to `end` in key order;
        the filters of `GET /partitions` narrow it (a check, its result, an error's text), as of any seq."""
        narrowed = _check_grid_filters(state_filter, filters)
        if (stored := self._grid_from_store(name, start, end, state_filter, as_of_seq, filters)) is not None:
            return stored
        node = self._node(name) if self.graph is not None else None
        held = self._held_cells(name, node) if as_of_seq is not None else None
        with self._reading(None, as_of_seq) as state:
            node = node or self._log_node(state, name)
            refs = self._refs_of(node)
            low, high = grid.in_range(refs, start, end)
            live = self._live_cells(state, node) if as_of_seq is None else None
            checks_held: tuple[HeldCells, int] | None = None
            if live is not None and len(live.cells) == len(refs):  # every known ref has an instance now: aligned
                # Runs of the range from the cached ones: a page costs its runs, not its refs.
                merged = grid.runs_between(live.cells, live.starts, low, high)
                small = high - low <= grid.MAX_CELLS
                whole = small or state_filter is not None or narrowed or len(merged) > grid.MAX_CELLS
                cells = live.cells[low:high] if whole else []
                checks_held = None if live.held is None else (live.held, low)  # a replica's: its cells' checks
            elif held is not None and (kept := _held_then(held, state)) is not None:  # a replica's, as of a seq
                first, last = grid.in_range(held.refs, start, end)
                cells = cells_as_of(state, kept, first, last)  # from its cells held
                merged = list(grid.runs(cells))
                checks_held = (kept, first)
            else:
                cells = grid_cells(state, refs[low:high])
                merged = list(grid.runs(cells))
            if narrowed:
                cells = narrowed_cells(state, cells, filters, checks_held)
            counted: Counter[str] = Counter()
            for run in grid.runs(cells) if narrowed else merged:  # the legend: the filter's, or the key range's
                counted[run.state] += run.count
            counts = {name: counted[name] for name in GRID_STATES if counted[name]}
            summary = _summary_out(node, counts, state.head_seq, self._stale_count(state, node, as_of_seq is None))
            stale = self._stale_cells(state, cells)
        if state_filter is not None:
            cells = [cell for cell in cells if cell[1] == state_filter]
        if state_filter is not None or narrowed:
            shown, merged = len(cells), list(grid.runs(cells))
        else:
            shown = summary.total
        months = _months(node, cells) if state_filter is None and not narrowed and shown <= grid.MAX_CELLS else None
        if shown <= grid.MAX_CELLS:
            shape = [Cell(ref, ref, found, 1) for ref, found in cells]
        elif len(merged) <= grid.MAX_CELLS:
            shape = merged
        else:
            shape = grid.bounded(cells)
        labels = label_prefix(node, shape) if months is None else None
        return GridView(summary, shape, months, shown, start, end, state_filter, labels, stale)

    # ----------------------------------------------------------------- helpers

    def _grid_from_store(
        self,
        name: str,
        start: str | None,
        end: str | None,
        state_filter: str | None,
        as_of_seq: int | None,
        filters: GridFilters,
    ) -> GridView | None:
        """A folding server's grid as of a seq, or filtered by a check, from its twin replica once the store has the
        seq (`_store_twin`); None: from memory."""
        seq = self.reads.head_seq if as_of_seq is None else as_of_seq
        if (as_of_seq is None and not filters.narrows) or (twin := self._twin_for(seq)) is None:
            return None
        try:
            return twin.partitions_grid(name, start, end, state_filter, seq, filters)
        except StoreNotReady:  # its rows are being written again: from memory
            return None

    def _twin_for(self, seq: int) -> JobsService | None:
        """`_store_twin(seq)`, as what it is: a service of this class (None for a negative seq: refused below)."""
        return cast("JobsService | None", self._store_twin(seq)) if seq >= 0 else None

    def _stale_cells(self, state: StateView, cells: Sequence[tuple[str, str]]) -> frozenset[str]:
        """The refs whose readers get a stale instance: one still serving while its successor is built (new
        input data, a code change), or a Live one built by another code version than the served graph's.
        Only for a grid of single cells (`MAX_CELLS` at most): ranges carry no marks."""
        if len(cells) > grid.MAX_CELLS:
            return frozenset()
        found = set()
        for ref, _ in cells:
            served = state.served_instance(ref)
            canonical = state.canonical_instance(ref)
            if served is not None and canonical is not None and served.uuid != canonical.uuid:
                found.add(ref)  # out of date, serving until its successor goes Live
            elif served is not None and is_stale(state, served, self.code_versions):
                found.add(ref)
        return frozenset(found)

    def _node(self, name: str) -> Node:
        graph = self.graph
        assert graph is not None  # without one: `_log_node`
        job = graph.jobs.get(name)
        if job is not None:
            return _job_node(job)
        source = graph.sources.get(name)
        if source is not None:
            return Node(source.name, "source", (source.partition_pattern,))
        raise NotFound(f"no job or source dataset named {name!r} in the served graph")

    def _log_node(self, state: StateView, name: str) -> Node:
        """Job or source `name` as the log knows it as of the state's seq (no graph is served)."""
        kind = self._log_jobs(state).kind(name, state.head_seq)
        if kind is None:
            raise NotFound(
                f"no job or source data named {name!r} in the log as of seq {state.head_seq} "
                "(this server serves no graph: jobs are known by their runs)"
            )
        return Node(name, kind, ())

    def _log_jobs(self, state: StateView) -> LogJobs:
        """The index of the log's jobs, brought up to the live state (`state` or the one it is a past of)."""
        index: LogJobs = self.__dict__.setdefault("_log_jobs_index", LogJobs())
        live = live_state(state)
        if isinstance(live, StoredRecords):  # a read replica's: the runs created since, from the store's index
            index.follow(live, live.runs_created)
        else:
            index.update(live)
        return index

    def _declared(self, graph: Graph) -> DeclaredGraph:
        """What the served graph declares, found once (the graph never changes while served)."""
        with self._counts_lock:
            found = self.__dict__.get("_declared_graph")
        if found is None or found[0] is not graph:
            found = (graph, declared_graph(graph))  # outside the lock: the user's inputs functions run
            with self._counts_lock:
                self.__dict__["_declared_graph"] = found
        return found[1]

    def _known_edges(self, graph: Graph, nodes: list[Node], state: StateView, live: bool) -> list[tuple[str, str]]:
        """Each job's inputs asked about its first partition known as of the state's seq, resolved to producers."""
        edges: dict[tuple[str, str], None] = {}
        for node in nodes:
            if node.kind != "job":
                continue
            known = (r for r in self._refs_of(node) if live or state.canonical_instance(r) is not None)
            sample = next(known, None)
            for producer in producers_read(graph, sample) if sample is not None else ():
                edges[(producer, node.name)] = None
        return list(edges)

    def _refs_of(self, node: Node) -> Sequence[str]:
        """The node's known refs (every pattern's), sorted: the listing index's, as the live state holds them;
        without a graph, the log's (`LogJobs.refs`, brought up to date by `_log_node` or `_log_graph`)."""
        if not node.patterns:
            return self.__dict__["_log_jobs_index"].refs(node.name)
        lists = [self.listing.refs_matching(p.template, p.prefix, p.match) for p in node.patterns]
        # One pattern: the listing index's own list (never changed once handed out; `_refreshed` knows it).
        return lists[0] if len(lists) == 1 else sorted(ref for refs in lists for ref in refs)

    def _summary(self, state: StateView, node: Node, live: bool, held: LiveCells | None = None) -> PartitionsSummaryOut:
        if live:
            counts = self._live_cells(state, node).counts
        else:
            if (kept := _held_then(held, state)) is not None:
                cells = cells_as_of(state, kept, 0, len(kept.cells))
            else:
                cells = grid_cells(state, self._refs_of(node))
            counted = Counter(found for _, found in cells)
            counts = {name: counted[name] for name in GRID_STATES if counted[name]}
        return _summary_out(node, counts, state.head_seq, self._stale_count(state, node, live))

    def _stale_count(self, state: StateView, node: Node, live: bool) -> int | None:
        """How many of a job's Live instances are stale as of the state's seq (None: a source, or no graph);
        the live state's count is kept until the head moves."""
        current = self.code_versions.get(node.name) if node.kind == "job" else None
        if current is None:
            return None
        if not live:
            return self.stale_index.count(state, node.name, current, now=False)
        cache: dict[str, tuple[StateView | None, int, int]] = self.__dict__.setdefault("_stale_cache", {})
        last = cache.get(node.name)
        if last is not None and last[0] is _source(state) and last[1] == state.head_seq:
            return last[2]
        count = self.stale_index.count(state, node.name, current)
        cache[node.name] = (_source(state), state.head_seq, count)
        return count

    def _held_cells(self, name: str, node: Node | None) -> LiveCells | None:
        """A read replica's cells of a node at its store's watermark, with the seq since which each has held, for a
        read as of an earlier seq (read first: a read of the store binds one snapshot per thread at a time); None
        for a live state (its past is read from its memory), or when the node's refs are not all aligned."""
        if not isinstance(self.reads, StoreReader):
            return None
        with self._reading() as now:
            try:
                found = self._live_cells(now, node or self._log_node(now, name))
            except NotFound:  # the read as of the seq says so
                return None
        return found if len(found.cells) == len(found.refs) else None

    def _live_cells(self, state: StateView, node: Node) -> LiveCells:
        """Every known ref of `node` with its grid state in the live `state`, their runs and counts, kept until the
        head moves (a grid of the live state then costs its runs); the next head's from the last one's."""
        cache: dict[str, LiveCells] = self.__dict__.setdefault("_cells_cache", {})
        last = cache.get(node.name)
        if last is not None and last.seq == state.head_seq and last.state is _source(state):
            return last
        refs = self._refs_of(node)
        found = None
        if last is not None and last.seq < state.head_seq and last.state is _source(state):
            one = node.patterns[0] if len(node.patterns) == 1 else None  # none without a graph: the log's refs
            added = self.listing.added_to(one.template, last.refs) if one is not None else None
            if last.state is None:
                changed = self.db.changes.refs_changed(last.seq, state.head_seq, len(refs) // 2)
                found = None if changed is None else _refreshed_from_store(last, state, refs, added, changed)
            else:
                found = _refreshed(last, state, refs, added)
        if found is None:
            found = _counted_cells(state, refs)
        with self._counts_lock:
            newest = cache.get(node.name)
            if newest is None or newest.state is not found.state or newest.seq <= found.seq:
                cache[node.name] = found  # one head per node: an older one is never asked again
        return found


def _held_then(held: LiveCells | None, state: StateView) -> HeldCells | None:
    """`held`'s cells when they tell `state`'s seq: held at a watermark at or after it (the store may have moved
    on between the two reads, never back)."""
    return held.held if held is not None and held.held is not None and state.head_seq <= held.seq else None


def _source(state: StateView) -> StateView | None:
    """What kept answers about `state` are of: the live state itself, or None for the state store's rows (a read
    replica's, whose every read is a state of its own: not one to keep)."""
    return None if read_from_store(state) else state


def _counted_cells(state: StateView, refs: Sequence[str]) -> LiveCells:
    """A node's live cells from scratch: a lookup per ref (a read replica's: a range scan of the store's cells)."""
    held = held_cells(state, refs) if read_from_store(state) else None
    cells = held.cells if held is not None else cell_states(state, refs)
    counted = Counter(found for _, found in cells)
    counts = {name: counted[name] for name in GRID_STATES if counted[name]}
    if held is not None:
        return LiveCells(cells, grid.run_starts(cells), counts, state.head_seq, None, refs, held=held)
    dropped, tracked = live_state(state).dropped_instances, _instances_of(state, refs)
    return LiveCells(tuple(cells), grid.run_starts(cells), counts, state.head_seq, state, refs, dropped, tracked)


def _refreshed(
    last: LiveCells, state: StateView, refs: Sequence[str], added: list[str] | None = None
) -> LiveCells | None:
    """`last` brought to the state's head: only the refs whose cell may have changed are looked up again.

    A cell changes when its ref's canonical instance changes or a new one replaces it (the only way the pointer
    moves; either way the canonical instance's `updated_seq` is after `last.seq`: every change of a record sets
    it to the change's seq), when the instance's checks are run again (a `ChecksRerun` answered since), or, for a
    `tainted` cell, when its tainted predecessor goes (a retention since): those are looked up again, with the
    refs added since (`added`, sorted, when the listing index knows them). None when most refs are new (a lookup
    per ref is then as cheap).
    """
    splice = None
    if refs is not last.refs:  # refs were added: splice them in, in key order, then look them up below
        splice = _splice_of(last, refs, added)
        if splice is None:
            return None
        cells = splice.applied(last.cells, None)
    else:
        cells = list(last.cells)
    tracked = None
    if last.instances is not None:  # a fresh ref's slot reads as superseded: looked up
        tracked = splice.applied(last.instances, _NEW) if splice is not None else list(last.instances)
    moved = _moved(last, state, refs, splice, tracked)
    if last.counts.get(TAINTED) and live_state(state).dropped_instances != last.dropped:
        moved = sorted({*moved, *_tainted(last.cells, splice)})
    after = last.seq
    for uuid, _, answered in state.check_requests.values():  # rare: a scan
        instance = state.instances.get(uuid) if answered > after else None
        if instance is not None and not instance.superseded_seq:
            index = bisect_left(refs, instance.ref)
            if index < len(refs) and refs[index] == instance.ref:  # else another node's
                moved.append(index)
    counts = Counter(last.counts)
    changed = splice is not None
    for index in moved:
        ref, was = refs[index], cells[index]
        if was is not None:
            counts[was[1]] -= 1
        cells[index] = now = (ref, cell_states(state, (ref,))[0][1])
        if tracked is not None:
            tracked[index] = state.instances[state.canonical[ref]]
        counts[now[1]] += 1
        changed = changed or was != now
    kept = {name: counts[name] for name in GRID_STATES if counts[name] > 0}
    starts = _starts(cells, last, moved, splice) if changed else last.starts  # heartbeats only move no cell
    dropped = live_state(state).dropped_instances
    held = None if _tracks_touched(state) else tuple(tracked) if tracked is not None else _instances_of(state, refs)
    return LiveCells(tuple(cells), starts, kept, state.head_seq, state, refs, dropped, held)


def _tracks_touched(state: StateView) -> bool:
    """Whether the live state keeps a record of what its fold touched (a projector drains it)."""
    return isinstance(state, BuildState) and state.touched is not None


def _instances_of(state: StateView, refs: Sequence[str]) -> tuple[Instance, ...] | None:
    """Each ref's canonical instance, for a state with no record of what its fold touched; None for one with."""
    if _tracks_touched(state):
        return None
    return tuple(map(state.instances.__getitem__, map(state.canonical.__getitem__, refs)))


def _moved(
    last: LiveCells, state: StateView, refs: Sequence[str], splice: grid.Splice | None, tracked: list[Any] | None
) -> list[int]:
    """The indices of the refs whose canonical instance changed or was replaced since `last.seq`, and of the fresh
    ones (their first instance may be older than `last.seq`: the listing index takes refs in after the fold).

    From what the fold touched since (its record, kept while a projector of the state store drains it: the
    cost of the changes); else by C-level passes over the instances kept (`tracked`, spliced: updated or
    superseded since, or a fresh ref's slot), about 110 ms at 467,376 refs; else over every ref's canonical
    instance looked up (a grid not asked for longer than the records kept), about 400 ms."""
    found = set(splice.fresh_indices()) if splice is not None else set()
    changed = changed_after(state.touched, last.seq) if isinstance(state, BuildState) else None
    canonical, instances = state.canonical, state.instances
    if changed is None and tracked is not None:
        updated = map(lt, repeat(last.seq), map(_UPDATED_SEQ, tracked))
        found.update(compress(count(), map(or_, updated, map(truth, map(_SUPERSEDED_SEQ, tracked)))))
        return sorted(found)
    if changed is None:
        current = map(instances.__getitem__, map(canonical.__getitem__, refs))
        found.update(compress(count(), map(lt, repeat(last.seq), map(_UPDATED_SEQ, current))))
        return sorted(found)
    uuids, named = changed
    named.update(instance.ref for uuid in uuids if (instance := instances.get(uuid)) is not None)
    for ref in named:
        index = bisect_left(refs, ref)
        if index < len(refs) and refs[index] == ref:  # else another node's
            found.add(index)
    return sorted(found)


def _splice_of(last: LiveCells, refs: Sequence[str], added: list[str] | None) -> grid.Splice | None:
    """How `refs` (the node's refs now) add to `last.refs`: the refs added since (`added`, sorted, when the listing
    index knows them), spliced in; None when most refs are new or some went (cells from scratch are as cheap)."""
    fresh = added if added is not None else sorted(set(refs).difference(last.refs))
    if len(fresh) * 2 > len(refs) or len(refs) != len(last.refs) + len(fresh):
        return None
    return grid.Splice.of(last.refs, fresh)


def _starts(
    cells: list[tuple[str, str]], last: LiveCells, moved: Iterable[int], splice: grid.Splice | None
) -> list[int]:
    """Where the runs of `cells` start: `last`'s, moved past the fresh refs spliced in and set again around
    those and the moved cells (no pass over the cells)."""
    if splice is None:
        return grid.run_starts_after(cells, last.starts, moved)
    return grid.run_starts_spliced(cells, last.starts, splice, moved)


def _tainted(cells: Sequence[tuple[str, str]], splice: grid.Splice | None) -> Iterator[int]:
    """The indices of the `tainted` ones of `cells` (C-level passes), where they land after `splice`."""
    found = compress(count(), map(eq, map(_STATE, cells), repeat(TAINTED)))
    return found if splice is None else map(splice.moved, found)


_UPDATED_SEQ = attrgetter("updated_seq")
_SUPERSEDED_SEQ = attrgetter("superseded_seq")
_STATE = itemgetter(1)


class _New:
    """The instance slot of a ref just spliced in: it reads as superseded, so the ref is looked up."""

    superseded_seq = -1
    updated_seq = 0


_NEW = _New()


def _refreshed_from_store(
    last: LiveCells, state: StateView, refs: Sequence[str], added: list[str] | None, changed: set[str]
) -> LiveCells | None:
    """A replica's `last` cells brought to the store's watermark: the refs the store's changes name since (an
    instance created, one changing state, the canonical pointer moving), those whose checks were answered
    again since, and the `tainted` and fresh ones, their cells read again from the store's, in one batch;
    None as `_refreshed`."""
    stored = stored_of(state)
    if last.held is None or stored is None:
        return None
    old, splice = last.held, None
    if refs is not last.refs:
        splice = _splice_of(last, refs, added)  # a None cell is looked up: its seqs are filled then
        if splice is None:
            return None
        cells, checks = splice.applied(old.cells, None), splice.applied(old.checks, None)
        held = HeldCells(cells, splice.applied(old.since, 0), splice.applied(old.created, 0), checks)
        moved = set(splice.fresh_indices())
    else:
        held = HeldCells(list(old.cells), array("q", old.since), array("q", old.created), list(old.checks))
        moved = set()
    cells = held.cells
    # The fresh refs and the `tainted` ones are looked up again: the tainted found by a pass only when the counts
    # say there are any, so a watermark costs its changes.
    if last.counts.get(TAINTED):
        moved.update(_tainted(old.cells, splice))
    named = set(changed)
    for uuid, _, answered in state.check_requests.values():  # rare: a scan
        instance = state.instances.get(uuid) if answered > last.seq else None
        if instance is not None:
            named.add(instance.ref)
    for ref in named:
        index = bisect_left(refs, ref)
        if index < len(refs) and refs[index] == ref:  # else another node's
            moved.add(index)
    rows = stored.cells_of([refs[index] for index in sorted(moved)])
    counts = Counter(last.counts)
    for index in moved:
        was, row = cells[index], rows.get(refs[index])
        if row is None:
            return None  # a ref without an instance now: as from scratch
        if was is not None:
            counts[was[1]] -= 1
        now = GRID_STATES[row[1]]
        cells[index], held.since[index], held.created[index] = (refs[index], now), row[2], row[3]
        held.checks[index] = row[4]
        counts[now] += 1
    kept = {name: counts[name] for name in GRID_STATES if counts[name] > 0}
    return LiveCells(cells, _starts(cells, last, moved, splice), kept, state.head_seq, None, refs, held=held)


NO_GRAPH_NOTES = {
    "job": "no graph is served: its partitions are those the log's runs of it were buffered for",
    "source": "no graph is served: data the log's runs read that no run built, named after the refs' path",
}


def _summary_out(node: Node, counts: dict[str, int], seq: int, stale: int | None = None) -> PartitionsSummaryOut:
    return PartitionsSummaryOut(
        name=node.name,
        kind=node.kind,
        patterns=[pattern.template for pattern in node.patterns],
        total=sum(counts.values()),
        counts=counts,
        stale=stale,
        note=None if node.patterns else NO_GRAPH_NOTES[node.kind],
        as_of_seq=seq,
    )


def _job_node(job: Job) -> Node:
    return Node(job.label, "job", job.patterns)


def _nodes(graph: Graph) -> list[Node]:
    sources = [Node(s.name, "source", (s.partition_pattern,)) for s in graph.sources.values()]
    return sources + [_job_node(job) for job in graph.jobs.values()]


def _resolved_name(graph: Graph, ref: str) -> str | None:
    """The job or source producing `ref` in the served graph (None: none, or several)."""
    try:
        return producer_name(graph.resolve(ref).producer)
    except GraphError:
        return None


def _logged_producer(state: StateView, ref: str) -> str | None:
    """Without a graph: the job whose run built `ref`'s canonical instance as of the seq, else its data's name."""
    instance = state.canonical_instance(ref)
    run = state.job_runs.get(instance.built_by) if instance is not None and instance.built_by is not None else None
    return run.job_label if run is not None else dataset_of(ref)


def _months(node: Node, cells: Sequence[tuple[str, str]]) -> list[Month] | None:
    """The cells laid out by month when the node's one field is a date and each cell's ref has its day."""
    date_field = _only_date_field(node)
    if date_field is None:
        return None
    days = [_day(node, ref, date_field) for ref, _ in cells]
    known = [day for day in days if day is not None]
    return grid.day_layout(cells, known) if len(known) == len(days) else None


def _only_date_field(node: Node) -> str | None:
    """The one field of a one-pattern node, when it is a date (the grid then lays days out by month)."""
    if len(node.patterns) != 1 or len(node.patterns[0].fields) != 1:
        return None
    name, kind = next(iter(node.patterns[0].fields.items()))
    return name if kind is FIELD_TYPES["date"] else None


def _day(node: Node, ref: str, field: str) -> dt.date | None:
    fields = node.patterns[0].match(ref)
    return None if fields is None else fields[field]
