"""The web UI's routes: server-rendered pages over the `Service`, and the form posts.

Pages (GET, all honour `?as_of=N` / `?as_of_time=ISO` and `?fragment=main`):
`/` overview, `/wants` (+ want form; filters `state`, `ref`, `made_by`), `/wants/{id}`, `/partitions`,
`/partition?ref=`, `/instances/{uuid}` (lineage graph: static/lineage.js draws `GET /api/v1/instances/{uuid}/lineage`
with dagre), `/runs`, `/runs/{id}`, `/events`, `/changes?from=A&to=B` (what changed between two seqs),
`/audit`, `/automation` (schedules, their ticks and wants), `/jobs` (the job graph, drawn by static/lineage.js),
`/jobs/{name}` (its partition grid), `/system` (worker groups, bucketing, sources, subscriptions). Posts:
`/actions/want`, `/actions/cancel-want`, `/actions/cancel-run`, `/actions/taint`, `/actions/schedule` (pause,
resume, tick now), `/actions/bulk` (bulk.py: preview, then run) (CSRF double-submit, writers only).

Stable hooks for browser tests (ids and data-testid):
- every page: `#main`, `[data-testid=time-travel-banner][data-as-of]` when time travelling,
  `#time-travel` (form, `as-of-input`), `nav-*` links, `identity`; `body[data-live=on|off]`;
  regions refreshed live carry `data-live-id`.
- lists: `wants-list`/`want-row[data-want-id][data-made-by]` (above it, unfiltered, `people-wants` of the same
  rows: wants people asked for; the filter's `made-by-filter`), `partitions-list`/`partition-row[data-ref]`,
  `runs-list`/`run-row[data-run-id]`, `events-list`/`event-row[data-seq][data-type]`,
  `rejected-list`/`rejected-row`, `groups-list`, `buckets-list`, `sources-list`,
  `subscriptions-list`, overview `counts`/`count[data-kind][data-state]`, `in-flight`,
  `failures`, `past-sla`; `next-page` links; state badges `.state[data-state]`.
- want page: `want-state`, `refs-status`/`ref-status[data-ref]`, `#want-tree` (`want-tree`) of
  `want-tree-node[data-want-id][data-state]` nested in `ul`.
- ref page: `canonical-instance[data-uuid]`, `timeline`/`timeline-item[data-uuid][data-state]`.
- instance page: `provenance`, `#lineage` (`data-uuid`, `data-as-of`, `data-direction`, `data-depth`),
  `#lineage-status[data-state=pending|drawn|error]` (`data-nodes`, `data-edges`, `data-ms` once drawn),
  `#lineage-graph` (svg) of `g[data-testid=lineage-node][data-uuid][data-ref][data-state]` (each an
  `a` to the instance page) and `path[data-testid=lineage-edge][data-input][data-output]`;
  `lineage-controls` (`lineage-direction`, `lineage-depth`), `lineage-table`/`lineage-row`; a node with
  checks has `data-check` (its worst result) and a badge `g[data-testid=lineage-check][data-result]`;
  `instance-checks` holds `checks-table`/`check-row[data-name][data-result][data-seq]` or `no-checks`;
  `instance-code-version`, and `stale-badge` by the state (also in a `partition-row`) when it is stale.
- changes page: `changes-list`/`change-row[data-seq][data-kind][data-id]` (`.state[data-state]` of
  `from`/`to`); the banner's `time-travel-changes` link (from its seq to the head).
- run page: `run-state`, `run-timeline`, `run-outputs`/`output-row`, `run-inputs`, `run-error`,
  `run-checks` (a `checks-table` per output its outcome checked), `run-logs` (`run-log-line`s, `run-log-status`).
- automation page: `schedules-list`/`schedule-row[data-schedule][data-paused]` (`schedule-state`,
  `schedule-wants` of `want-link`s, `schedule-error`), `schedule-form` (`schedule-pause`, `schedule-resume`,
  `schedule-trigger`).
- job graph: `#lineage[data-kind=graph]` as on the instance page, nodes `lineage-node[data-uuid=NAME]`
  with `data-counts`; `job-graph-table`/`job-node-row[data-name]` with `node-count[data-state]` and a grid link.
- grid: `grid-legend`/`legend-item[data-state][data-count]`, `grid-cells` of `grid-cell[data-ref][data-state]`
  (a range: `data-first`, `data-last`, `data-count`, a zoom link), `grid-months`/`grid-month[data-year][data-month]`
  of `grid-cell` (a day with no instance: `data-state=none`), `grid-filter` (state, start, end); writers get
  `#bulk-form` (`bulk-scope-refs`, `bulk-scope-filter`, `bulk-count[data-count]`, `bulk-select-mode`,
  `bulk-select-all`, `bulk-clear`, `bulk-action`, `bulk-reason`, `bulk-review`; selected cells `.selected`), and
  after an action `bulk-done[data-action][data-acted-on]`.
- bulk confirmation (`POST /actions/bulk`): `bulk-preview[data-action][data-selected][data-acted-on]`,
  `bulk-confirm`, `bulk-back`, `bulk-nothing`; a ref page's `#rebuild-form` (`retry-button` or `rebuild-button`).
- forms: `#want-form` (`want-ref`, `want-refs`, `want-pattern`, `want-start`, `want-end`,
  `want-preview-button`, `want-submit`, `want-preview[data-count]`), `#cancel-want-form`,
  `#cancel-run-form`, `#taint-form`; errors `form-error`; error pages `error-status`.
"""

from __future__ import annotations

from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import HTMLResponse, RedirectResponse, Response

from partbuild.api.errors import TITLES, ApiError, InvalidInput
from partbuild.api.models.partitions import MAX_LINEAGE_DEPTH
from partbuild.api.models.wants import MADE_BY_KINDS
from partbuild.api.service import Service
from partbuild.api.service.jobs import CHECK_RESULTS, GRID_STATES, GridFilters
from partbuild.api.web import identity as seam
from partbuild.api.web import views
from partbuild.api.web.event_view import EVENT_TYPES, events_page
from partbuild.api.web.forms import FormInvalid, WantForm, grid_selection, patterns
from partbuild.api.web.security import secure
from partbuild.api.web.templating import PageContext, page_for, render_page
from partbuild.state.fold.records import InstanceState, JobRunState, WantState

router = APIRouter(include_in_schema=False)
HISTORY_SHOWN = 200
PEOPLE_SHOWN = 10  # wants people asked for, above the list of all wants
REFS_SHOWN = 500


def _names(enum: Any) -> list[str]:
    return [member.name.lower() for member in enum]


def service_of(request: Request) -> Service:
    return request.app.state.service


def serve_page(request: Request, build: Callable[[PageContext, Service], HTMLResponse]) -> HTMLResponse:
    """Render a page with `build`; an API error becomes an error page with the API's status and message."""
    service = service_of(request)
    try:
        page = page_for(request, service)
        return build(page, service)
    except ApiError as exc:
        return error_page(request, service, exc.status, str(exc))


def error_page(request: Request, service: Service, status: int, message: str, **data: Any) -> HTMLResponse:
    """An error page (without time travel: the error may be the time travel itself)."""
    page = PageContext(request, seam.identity_or_none(request), None, service.reads.head_seq)
    data.setdefault("form", None)
    data.setdefault("back", None)
    return render_page(page, "error.html", status, status=status, title=http_title(status), message=message, **data)


def http_title(status: int) -> str:
    try:
        return TITLES.get(status) or HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def _query(request: Request, *names: str) -> dict[str, str]:
    return {name: request.query_params.get(name, "").strip() for name in names}


def _state_name(value: str, allowed: list[str]) -> str | None:
    """A state filter: None when not given; InvalidInput for a state the list does not have (never ignored)."""
    if not value:
        return None
    if value not in allowed:
        raise InvalidInput(f"state must be one of {', '.join(allowed)}, got {value[:40]!r}")
    return value


@router.get("/", response_class=HTMLResponse)
def overview_page(request: Request) -> HTMLResponse:
    return serve_page(
        request, lambda page, service: render_page(page, "overview.html", view=views.overview(service, page.as_of))
    )


@router.get("/wants", response_class=HTMLResponse)
def wants_page(request: Request) -> HTMLResponse:
    """Wants newest first, filtered; unfiltered, the first page shows the wants people asked for above them all."""
    filters = _query(request, "state", "ref", "made_by")

    def build(page: PageContext, service: Service) -> HTMLResponse:
        before = views.seq_cursor(request.query_params.get("before"))
        state = _state_name(filters["state"], _names(WantState))
        made_by, ref = filters["made_by"] or None, filters["ref"] or None
        listing = views.wants_listing(service, page.as_of, state, ref, before, made_by)
        people = None  # automation may make hundreds of wants: a person's are not buried under them
        if before is None and not any(filters.values()):
            people = views.wants_listing(service, page.as_of, None, None, None, "user", PEOPLE_SHOWN)
        return render_page(
            page,
            "wants.html",
            listing=listing,
            people=people,
            made_by_kinds=MADE_BY_KINDS,
            filters=filters,
            want_states=_names(WantState),
            form=WantForm(),
            patterns=patterns(service.graph),
        )

    return serve_page(request, build)


@router.get("/wants/{want_id}", response_class=HTMLResponse)
def want_page(request: Request, want_id: str) -> HTMLResponse:
    def build(page: PageContext, service: Service) -> HTMLResponse:
        want = service.want(want_id, as_of_seq=page.as_of)
        cancelable = views.active_want(want.state)
        return render_page(page, "want.html", want=want, shown_refs=REFS_SHOWN, cancelable=cancelable)

    return serve_page(request, build)


@router.get("/partitions", response_class=HTMLResponse)
def partitions_page(request: Request) -> HTMLResponse:
    filters = _query(request, "prefix", "state", "unwanted")

    def build(page: PageContext, service: Service) -> HTMLResponse:
        state = _state_name(filters["state"], _names(InstanceState))
        after = request.query_params.get("after")
        unwanted = filters["unwanted"] not in ("", "0")
        listing = views.partitions_listing(service, page.as_of, filters["prefix"], state, after, unwanted=unwanted)
        return render_page(
            page, "partitions.html", listing=listing, filters=filters, instance_states=_names(InstanceState)
        )

    return serve_page(request, build)


@router.get("/partition", response_class=HTMLResponse)
def ref_page(request: Request, ref: str = "") -> HTMLResponse:
    def build(page: PageContext, service: Service) -> HTMLResponse:
        history = service.history(ref, as_of_seq=page.as_of)
        more = max(0, len(history) - HISTORY_SHOWN)
        return render_page(page, "ref.html", ref=ref, history=history[:HISTORY_SHOWN], more=more)

    return serve_page(request, build)


@router.get("/instances/{uuid}", response_class=HTMLResponse)
def instance_page(request: Request, uuid: str, direction: str = "upstream", depth: str = "2") -> HTMLResponse:
    def build(page: PageContext, service: Service) -> HTMLResponse:
        instance = service.instance(uuid, as_of_seq=page.as_of)
        chosen = direction.strip() or "upstream"
        if chosen not in DIRECTIONS:
            raise InvalidInput(f"direction must be one of {', '.join(DIRECTIONS)}, got {chosen[:40]!r}")
        hops = views.query_int(depth.strip() or "2", "depth", MAX_LINEAGE_DEPTH)
        graph = service.lineage(uuid, direction=chosen, depth=hops, as_of_seq=page.as_of)  # type: ignore[arg-type]
        # Inputs are shown by ref: the graph drawn upstream names them; otherwise one hop up does.
        upstream = graph if chosen != "downstream" and hops >= 1 else None
        upstream = upstream or service.lineage(uuid, direction="upstream", depth=1, as_of_seq=page.as_of)
        input_refs = {node.uuid: node.ref for node in upstream.nodes if node.ref is not None}
        lineage = {
            "direction": chosen,
            "depth": hops,
            "as_of_seq": graph.as_of_seq,
            "nodes": graph.nodes[:LINEAGE_LISTED],
            "edges": graph.edges,
        }
        return render_page(
            page,
            "instance.html",
            instance=instance,
            lineage=lineage,
            max_depth=MAX_LINEAGE_DEPTH,
            input_refs=input_refs,
        )

    return serve_page(request, build)


LINEAGE_LISTED = 1_000
DIRECTIONS = ("upstream", "downstream", "both")


@router.get("/runs", response_class=HTMLResponse)
def runs_page(request: Request) -> HTMLResponse:
    filters = _query(request, "state", "job")

    def build(page: PageContext, service: Service) -> HTMLResponse:
        before = views.seq_cursor(request.query_params.get("before"))
        state = _state_name(filters["state"], _names(JobRunState))
        listing = views.runs_listing(service, page.as_of, state, filters["job"] or None, before)
        return render_page(page, "runs.html", listing=listing, filters=filters, run_states=_names(JobRunState))

    return serve_page(request, build)


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(request: Request, run_id: str) -> HTMLResponse:
    def build(page: PageContext, service: Service) -> HTMLResponse:
        run, outputs = views.job_run_detail(service, run_id, page.as_of)
        active = views.active_run(run.state)
        now = service.clock() if page.as_of is None else run.updated_ms
        duration = (now if active else run.updated_ms) - run.created_ms
        return render_page(page, "run.html", run=run, outputs=outputs, active=active, duration_ms=max(0, duration))

    return serve_page(request, build)


@router.get("/events", response_class=HTMLResponse)
def events_log_page(request: Request) -> HTMLResponse:
    filters = _query(request, "type", "ref", "want", "run")

    def build(page: PageContext, service: Service) -> HTMLResponse:
        before = views.seq_cursor(request.query_params.get("before"))
        found = events_page(service, page.as_of, filters, before)
        return render_page(page, "events.html", events=found, filters=filters, event_types=EVENT_TYPES)

    return serve_page(request, build)


CHANGES_SHOWN = 500


@router.get("/changes", response_class=HTMLResponse)
def changes_page(request: Request) -> HTMLResponse:
    """What changed after `from` up to `to` (default: the head), a page of changes at a time (`after`)."""

    def build(page: PageContext, service: Service) -> HTMLResponse:
        first = views.seq_param(request.query_params.get("from"), "from")
        if first is None:
            raise InvalidInput("from must be a seq (a non-negative integer): the changes after it are shown")
        last = views.seq_param(request.query_params.get("to"), "to")
        after = request.query_params.get("after") or None
        found = service.changes(first, last, cursor=after, limit=CHANGES_SHOWN)
        return render_page(page, "changes.html", changes=found, first=first, last=found.as_of_seq)

    return serve_page(request, build)


@router.get("/audit", response_class=HTMLResponse)
def audit_page(request: Request) -> HTMLResponse:
    def build(page: PageContext, service: Service) -> HTMLResponse:
        report = service.audit(rejected_limit=0, as_of_seq=page.as_of) if request.query_params.get("replay") else None
        with service.reading(page.as_of) as state:
            rejected = state.rejections[-100:][::-1]
            total, seq = len(state.rejections), state.head_seq
        return render_page(page, "audit.html", report=report, rejected=rejected, rejected_total=total, state_seq=seq)

    return serve_page(request, build)


@router.get("/automation", response_class=HTMLResponse)
def automation_page(request: Request) -> HTMLResponse:
    def build(page: PageContext, service: Service) -> HTMLResponse:
        automation = service.automation(as_of_seq=page.as_of)
        return render_page(page, "automation.html", schedules=automation.schedules, reactions=automation.reactions)

    return serve_page(request, build)


@router.get("/system", response_class=HTMLResponse)
def system_page(request: Request) -> HTMLResponse:
    def build(page: PageContext, service: Service) -> HTMLResponse:
        return render_page(
            page,
            "system.html",
            groups=service.groups(as_of_seq=page.as_of),
            buckets=service.bucket_layouts(as_of_seq=page.as_of),
            sources=service.sources(as_of_seq=page.as_of),
            # Their settings as of the page's seq; where their deliveries stand is now (not in the log).
            subscriptions=service.list_subscriptions(as_of_seq=page.as_of).subscriptions,
        )

    return serve_page(request, build)


def redirect(path: str) -> Response:
    """After a successful post, show what changed (303: the browser GETs it)."""
    return secure(RedirectResponse(path, status_code=303))


async def in_thread(function: Callable[..., Any], *args: Any) -> Any:
    """Service calls block (the database, the write lock): never on the event loop."""
    return await run_in_threadpool(function, *args)


def form_failure(request: Request, exc: ApiError | FormInvalid, **data: Any) -> HTMLResponse:
    status = exc.status if isinstance(exc, ApiError) else 422
    return error_page(request, service_of(request), status, str(exc), **data)


@router.get("/jobs", response_class=HTMLResponse)
def job_graph_page(request: Request) -> HTMLResponse:
    """The served graph's jobs and sources (drawn by static/lineage.js from `GET /api/v1/graph`), with counts."""

    def build(page: PageContext, service: Service) -> HTMLResponse:
        return render_page(page, "jobs.html", graph=service.job_graph(as_of_seq=page.as_of))

    return serve_page(request, build)


@router.get("/jobs/{name}", response_class=HTMLResponse)
def job_grid_page(request: Request, name: str) -> HTMLResponse:
    """A job's (or source's) partition status grid, filtered by state and key range (`start`, `end`)."""
    filters = _query(request, "state", "start", "end", "check", "check_result", "error", "made_by")

    def build(page: PageContext, service: Service) -> HTMLResponse:
        view = service.partitions_grid(
            name,
            filters["start"] or None,
            filters["end"] or None,
            filters["state"] or None,
            as_of_seq=page.as_of,
            filters=GridFilters(*(filters[name] or None for name in ("check", "check_result", "error", "made_by"))),
        )
        bulk = grid_selection(service.graph, name, filters)
        return render_page(
            page, "job_grid.html", view=view, filters=filters, grid_states=GRID_STATES, bulk=bulk, results=CHECK_RESULTS
        )

    return serve_page(request, build)
