"""What the list pages show, read from the state as of a seq: bounded pages, newest first.

The API's lists start at the oldest item and know only the head of the log; a
page of the UI starts at the newest and may look at the past. Both walk the
same creation-order indexes (`service.listing`), so a page costs its size plus
the items a filter skips, and that is capped (`SCAN_BUDGET`): a page that hit
the cap says where it stopped and links on from there, instead of scanning a
million records.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import islice, takewhile
from typing import Any

from partbuild.api.errors import InvalidInput, NotFound
from partbuild.api.models.common import MAX_SAFE_INT, parse_digits
from partbuild.api.models.partitions import InstanceOut
from partbuild.api.models.runs import JobRunDetailOut, JobRunOut
from partbuild.api.models.wants import WantOut
from partbuild.api.service import Service
from partbuild.api.service.runs import job_run_out
from partbuild.api.service.wants import made_by_filter, want_out
from partbuild.state.fold.records import ACTIVE_RUN_STATES, TERMINAL_WANT_STATES, InstanceState, JobRunState, WantState
from partbuild.state.queries.wanted import WaitingCount, is_unwanted, waiting_counts

PAGE = 50
SCAN_BUDGET = 20_000
RECENT = 10  # rows of each overview table


@dataclass
class Listing:
    """One page of a list: its items and the cursor of the next page (None: the last one)."""

    items: list[Any] = field(default_factory=list)
    next_cursor: str | None = None
    scanned_out: bool = False  # the page stopped at SCAN_BUDGET, not at the end of the list


def _take(keyed: Iterable[tuple[str, Any]], keep: Callable[[Any], bool], limit: int = PAGE) -> Listing:
    """Up to `limit` kept items of (cursor key, item) pairs, looking at no more than SCAN_BUDGET of them."""
    page = Listing()
    key = None
    for scanned, (key, item) in enumerate(keyed, 1):
        if keep(item):
            page.items.append(item)
            if len(page.items) == limit:
                page.next_cursor = key
                return page
        if scanned == SCAN_BUDGET:
            page.next_cursor, page.scanned_out = key, True
            return page
    return page


def seq_cursor(text: str | None) -> int | None:
    """A `before` cursor of the newest-first lists: a seq, or None for the newest page."""
    return seq_param(text, "cursor")


def seq_param(text: str | None, name: str) -> int | None:
    """A seq given in the query as `name` (None: not given); InvalidInput for anything but digits up to 2^53 - 1."""
    return query_int(text, name, noun="a seq, an integer") if text else None


def query_int(text: str, name: str, maximum: int = MAX_SAFE_INT, noun: str = "an integer") -> int:
    """A page's integer query parameter: ASCII digits up to `maximum` (never past SQL's integers), else InvalidInput."""
    try:
        return parse_digits(text, name, maximum, noun)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from None


def wants_listing(
    service: Service,
    as_of: int | None,
    state_name: str | None,
    ref: str | None,
    before: int | None,
    made_by: str | None = None,
    limit: int = PAGE,
) -> Listing:
    """Wants newest first, by state, ref and who made them (`made_by`, as the API's filter), as of a seq."""
    wanted = WantState[state_name.upper()] if state_name else None
    maker = made_by_filter(made_by)  # InvalidInput for an unknown kind: never ignored
    with service.reading(as_of) as state:
        causes = state.want_causes
        now = service.clock() if as_of is None else state.clock_ms
        if ref:
            mentioning = (state.wants[i] for i in reversed(state.wants_by_ref.get(ref, ())))
            keyed: Iterable[tuple[str, Any]] = (
                (str(w.created_seq), w) for w in mentioning if before is None or w.created_seq < before
            )
        else:
            order = service.listing.wants
            keyed = ((str(seq), state.wants[i]) for seq, i in order.newest(state.head_seq, before))
        page = _take(
            keyed,
            lambda want: (wanted is None or want.state == wanted) and (maker is None or maker(want, causes)),
            limit,
        )
        page.items = [want_out(want, now, causes) for want in page.items]
    return page


def runs_listing(
    service: Service, as_of: int | None, state_name: str | None, job: str | None, before: int | None
) -> Listing:
    """Job runs newest first, by state and job, as of a seq."""
    wanted = JobRunState[state_name.upper()] if state_name else None
    order = service.listing.runs
    with service.reading(as_of) as state:
        keyed = ((str(seq), state.job_runs[i]) for seq, i in order.newest(state.head_seq, before))
        page = _take(keyed, lambda run: (wanted is None or run.state == wanted) and (not job or run.job_label == job))
        page.items = [job_run_out(state, run) for run in page.items]
    return page


def partitions_listing(
    service: Service,
    as_of: int | None,
    prefix: str,
    state_name: str | None,
    after: str | None,
    *,
    unwanted: bool = False,
) -> Listing:
    """Canonical instances by ref under a prefix, in one state (and, with `unwanted`, waiting with no active want
    naming the ref), as of a seq (refs in sorted order)."""
    wanted = InstanceState[state_name.upper()] if state_name else None
    with service.reading(as_of) as state:
        listing = service.listing
        after = after or None
        offered = (
            listing.refs_from(prefix, after) if as_of is None else listing.refs_as_of(state.head_seq, prefix, after)
        )
        refs = takewhile(lambda ref: ref.startswith(prefix), offered)
        # A ref the state does not know yet (time travel) is skipped: its instance came later.
        keyed = ((ref, state.canonical_instance(ref)) for ref in refs)
        page = _take(
            keyed,
            lambda i: (
                i is not None and (wanted is None or i.state == wanted) and (not unwanted or is_unwanted(state, i))
            ),
        )
        page.items = [service.instance_answer(state, instance) for instance in page.items]
    return page


def job_run_detail(service: Service, run_id: str, as_of: int | None) -> tuple[JobRunDetailOut, list[InstanceOut]]:
    """A job run and the instances it was to build (those still held), as of a seq."""
    run = service.job_run(run_id, as_of_seq=as_of)
    built = []
    for uuid in run.instance_uuids[:PAGE]:
        try:
            built.append(service.instance(uuid, as_of_seq=as_of))
        except NotFound:
            continue  # dropped by retention
    return run, built


@dataclass
class Overview:
    """The overview page's numbers and short tables."""

    head_seq: int
    counts: dict[str, dict[str, int]]
    in_flight: list[tuple[JobRunOut, int]]  # with elapsed ms
    failures: list[JobRunOut]
    past_sla: list[WantOut]
    clock_ms: int
    waiting: dict[str, WaitingCount]  # per waiting instance state: how many an active want needs


def overview(service: Service, as_of: int | None) -> Overview:
    """Counts by state, runs in flight, recent failures and wants past their SLA, as of a seq."""
    with service.reading(as_of) as state:
        now = service.clock() if as_of is None else state.clock_ms
        active = islice((state.job_runs[i] for i in state.active_run_ids), RECENT)
        in_flight = [(job_run_out(state, run), max(0, now - run.created_ms)) for run in active]
        runs = service.listing.runs
        newest_runs = (state.job_runs[i] for _, i in runs.newest(state.head_seq, None))
        failed = _take(((r.job_run_id, r) for r in newest_runs), lambda r: r.state == JobRunState.FAILED, RECENT)
        wants = service.listing.wants
        newest_wants = (state.wants[i] for _, i in wants.newest(state.head_seq, None))

        def late(want: Any) -> bool:
            deadline = want.sla_deadline_ms
            return deadline is not None and want.state not in TERMINAL_WANT_STATES and now > deadline

        breached = _take(((w.want_id, w) for w in newest_wants), late, RECENT)
        counts = state.counts()
        return Overview(
            head_seq=state.head_seq,
            counts=counts,
            in_flight=in_flight,
            failures=[job_run_out(state, run) for run in failed.items],
            past_sla=[want_out(want, now, state.want_causes) for want in breached.items],
            clock_ms=now,
            waiting=waiting_counts(state, counts["instances"]),
        )


def active_run(state_name: str) -> bool:
    """Whether a job run in this state may still be canceled."""
    return JobRunState[state_name.upper()] in ACTIVE_RUN_STATES


def active_want(state_name: str) -> bool:
    """Whether a want in this state may still be canceled."""
    return WantState[state_name.upper()] not in TERMINAL_WANT_STATES
