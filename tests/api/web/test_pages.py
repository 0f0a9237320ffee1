"""The web UI (api/web/) over a real Service on a real SQLite file, through Starlette's TestClient.

One module-scoped app over a small state built with events (no Spark): a raw partition observed, a
daily built from it by a job run (a passed and a warning check), a want with a derivative want, a failed
run, a ref and a comment holding markup, then a taint of the daily. Every page renders, time travel shows
the state before the taint, markup renders as text, headers are set, and the forms refuse what they must.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

import pytest
from fastapi.testclient import TestClient

from partbuild.api.app import create_app
from partbuild.api.models.partitions import TaintRequest
from partbuild.api.models.subscriptions import SubscriptionRequest
from partbuild.api.models.wants import WantRequest
from partbuild.api.service import Service
from partbuild.api.web.security import SECURITY_HEADERS
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.log.events import envelope, from_job_run, manual

RAW = "raw/clicks/date=2026-01-01"
DAILY = "agg/daily_clicks/date=2026-01-01"
EVIL = "evil/<script>alert(1)</script>"
COMMENT = "<b>weekly</b> report & more"
ROWS_PASSED = pb.CheckResult(name="rows_nonzero", passed=True, blocking=True, description="<b>5</b> rows")


@dataclass
class World:
    client: TestClient
    service: Service
    raw_uuid: str
    daily_uuid: str
    before_taint: int
    taint_seq: int


def _append(service: Service, payload: object, source: pb.EventSource | None = None) -> int:
    result = service.log.append([envelope(payload, source=source or manual("test"), timestamp_ms=service.clock())])
    service.refresh()
    return result.last_seq


def _build_state(service: Service) -> tuple[str, str, int, int]:
    """The story every test reads; returns the raw and daily UUIDs, the seq before the taint and the taint's."""
    _append(service, pb.PartitionObserved(partition_ref=RAW, location="/data/raw"))
    raw_uuid = service.state.canonical[RAW]
    service.create_want(WantRequest(refs=[DAILY], want_id="want-root", comment=COMMENT, sla_seconds=1))
    derivative = pb.WantCreate(want_id="want-child", partition_refs=[RAW], parent_want_id="want-root")
    _append(service, derivative, from_job_run("run-0"))
    daily_uuid = service.state.canonical[DAILY]
    _append(service, pb.JobRunBuffer(job_run_id="run-1", job_label="daily_clicks", instance_uuids=[daily_uuid]))
    warned = pb.CheckResult(name="url_not_null", blocking=False, description="2 null urls", metrics={"nulls": 2})
    checked = pb.InstanceChecks(instance_uuid=daily_uuid, results=[ROWS_PASSED, warned])
    _append(service, pb.JobRunSuccess(job_run_id="run-1", input_instance_uuids=[raw_uuid], checks=[checked]))
    service.create_want(WantRequest(refs=[EVIL, "other/x"], want_id="want-evil"))
    failing = [service.state.canonical["other/x"]]
    _append(service, pb.JobRunBuffer(job_run_id="run-2", job_label="other", instance_uuids=failing))
    failure = pb.JobRunFailure(job_run_id="run-2", error_class=pb.ERROR_CLASS_PERMANENT, message="<i>boom</i>")
    _append(service, failure)
    before = service.live.head_seq
    time.sleep(0.005)  # the taint is recorded a later millisecond: `as_of_time` of `before` must not include it
    taint = service.taint(TaintRequest(ref=DAILY, reason="late clicks"))
    return raw_uuid, daily_uuid, before, taint.seq


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    path: Path = tmp_path_factory.mktemp("web") / "partbuild.db"
    with Database.open(f"sqlite:///{path}", auto_upgrade=True) as db:
        service = Service(db)
        raw_uuid, daily_uuid, before, taint_seq = _build_state(service)
        with TestClient(create_app(service)) as client:
            yield World(client, service, raw_uuid, daily_uuid, before, taint_seq)


def _get(world: World, url: str, status: int = 200) -> str:
    response = world.client.get(url)
    assert response.status_code == status, (url, response.text[:2000])
    assert response.headers["content-type"].startswith("text/html")
    for name, value in SECURITY_HEADERS.items():
        assert response.headers[name] == value, (url, name)
    return response.text


def _csrf(world: World) -> str:
    html = _get(world, "/wants")
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None and world.client.cookies.get("partbuild_csrf") == found.group(1)
    return found.group(1)


def test_every_page_renders_its_key_content(world: World) -> None:
    pages = {
        "/": ['data-testid="counts"', 'data-run-id="run-2"', "&lt;i&gt;boom&lt;/i&gt;"],
        "/wants": ['data-testid="wants-list"', 'data-want-id="want-evil"', 'id="want-form"'],
        "/wants/want-root": ['data-testid="want-tree"', 'data-want-id="want-child"', f'data-ref="{DAILY}"'],
        "/partitions": ['data-testid="partitions-list"', f'data-ref="{RAW}"'],
        "/partitions?prefix=agg/&state=missing": [f'data-ref="{DAILY}"'],
        f"/partition?ref={DAILY}": ['data-testid="timeline"', f'data-uuid="{world.daily_uuid}"', "tainted"],
        f"/instances/{world.daily_uuid}": ['id="lineage-graph"', f'data-uuid="{world.raw_uuid}"', "/runs/run-1"],
        "/runs": ['data-run-id="run-1"', 'data-run-id="run-2"'],
        "/runs/run-1": [
            'data-testid="run-outputs"',
            f'data-uuid="{world.daily_uuid}"',
            "succeeded",
            'data-logs-url="/api/v1/job-runs/run-1/logs" data-follow="off"',
            '<script src="/static/run_logs.js" defer></script>',
        ],
        "/events": ['data-testid="events-list"', f'data-seq="{world.taint_seq}"', 'data-type="partition_taint"'],
        "/events?type=want_create&want=want-child": ['data-type="want_create"'],
        "/system": ['data-testid="groups-list"', 'data-testid="sources-list"', 'data-testid="subscriptions-list"'],
        "/audit?replay=1": ['data-testid="audit-digest"', 'data-testid="rejected-list"'],
    }
    for url, expected in pages.items():
        html = _get(world, url)
        for text in expected:
            assert text in html, (url, text)
    # The failed want-evil and the successful want-root are over: their refs' Missing instances wait for nothing.
    unwanted_count = world.service.counts().waiting["missing"].unwanted
    assert unwanted_count >= 2
    assert f'data-testid="unwanted" data-state="missing" data-unwanted="{unwanted_count}"' in _get(world, "/")
    unwanted = _get(world, "/partitions?unwanted=1")
    assert f'data-ref="{DAILY}"' in unwanted and 'data-ref="evil/' in unwanted and f'data-ref="{RAW}"' not in unwanted
    filtered = _get(world, f"/events?ref={RAW}")
    assert 'data-type="partition_taint"' not in filtered and 'data-type="partition_observed"' in filtered


def test_pages_name_their_icon_so_browsers_fetch_no_favicon(world: World) -> None:
    """Without an icon link a browser asks /favicon.ico on every page: a 404 in its console each time."""
    for url, status in [("/", 200), ("/signin", 200), ("/wants/nope", 404)]:
        assert '<link rel="icon" href="data:,">' in _get(world, url, status), url


def test_missing_things_are_404_pages(world: World) -> None:
    assert "no want" in _get(world, "/wants/nope", 404)
    assert "no partition instance" in _get(world, "/instances/nope", 404)
    assert "must be a seq" in _get(world, "/?as_of=x", 422)
    assert "after" in _get(world, f"/?as_of={world.taint_seq + 1000}", 409)


def test_instance_and_run_pages_show_the_checks_as_of_a_seq(world: World) -> None:
    """Issue 24: the daily's checks table (a warning among them) on its page and its run's; none before its run."""
    html = _get(world, f"/instances/{world.daily_uuid}")
    rows = re.findall(r'data-testid="check-row" data-name="([^"]+)" data-result="([^"]+)" data-seq="(\d+)"', html)
    success_seq = int(rows[0][2])
    assert rows == [("rows_nonzero", "passed", str(success_seq)), ("url_not_null", "warning", str(success_seq))]
    assert "&lt;b&gt;5&lt;/b&gt; rows" in html and 'data-key="nulls">nulls=2</code>' in html
    assert 'data-testid="no-checks"' not in html
    run = _get(world, "/runs/run-1")
    assert 'data-testid="run-checks"' in run and 'data-name="url_not_null" data-result="warning"' in run
    before = _get(world, f"/instances/{world.daily_uuid}?as_of={success_seq - 1}")
    assert 'data-testid="check-row"' not in before and f"No checks recorded as of seq {success_seq - 1}" in before
    assert 'data-testid="run-checks"' not in _get(world, f"/runs/run-1?as_of={success_seq - 1}")
    assert 'data-testid="run-checks"' not in _get(world, "/runs/run-2")


def test_time_travel_shows_the_state_before_the_taint(world: World) -> None:
    now = _get(world, f"/partition?ref={DAILY}")
    assert 'data-testid="time-travel-banner"' not in now and 'data-state="tainted"' in now
    past = _get(world, f"/partition?ref={DAILY}&as_of={world.before_taint}")
    assert f'data-as-of="{world.before_taint}"' in past and f"As of seq {world.before_taint}" in past
    assert 'data-state="tainted"' not in past and 'data-state="live"' in past
    assert f"/instances/{world.daily_uuid}?as_of={world.before_taint}" in past  # links keep the time travel
    assert 'id="taint-form"' not in past  # the past cannot be changed
    by_time = _get(world, "/wants/want-root?" + urlencode({"as_of_time": _recorded_iso(world, world.before_taint)}))
    assert f'data-as-of="{world.before_taint}"' in by_time
    early = _get(world, "/?as_of=1")
    assert 'data-kind="wants"' not in early and 'data-kind="instances" data-state="live"' in early


def test_an_instance_s_inputs_are_shown_by_ref_whichever_way_its_graph_is_drawn(world: World) -> None:
    for query in ("", "?direction=downstream", "?depth=0"):
        html = _get(world, f"/instances/{world.daily_uuid}{query}")
        inputs = re.search(r'data-testid="instance-inputs">(.*?)</dd>', html, re.S)
        assert inputs is not None and f'data-testid="instance-link">{RAW}</a>' in inputs.group(1), (query, inputs)


def test_a_want_page_shows_its_progress_and_runs_as_of_a_seq(world: World) -> None:
    def progress(html: str) -> dict[str, str]:
        return dict(re.findall(r'data-testid="progress-count" data-state="([^"]+)">.*?</span> (\d+)</span>', html))

    before = _get(world, f"/wants/want-root?as_of={world.before_taint}")
    assert progress(before) == {"live": "1"} and 'data-testid="want-runs"' in before and "/runs/run-1" in before
    now = _get(world, "/wants/want-root")  # the taint replaced the daily with a new, unbuilt instance
    assert progress(now) == {"missing": "1"} and 'data-testid="want-runs"' not in now
    detail = world.service.want("want-root", as_of_seq=world.before_taint)
    assert (detail.progress, detail.runs) == ({"live": 1}, ["run-1"])


def test_the_timeline_keeps_its_words_apart(world: World) -> None:
    html = _get(world, f"/partition?ref={DAILY}")
    items = re.findall(r'<li class="timeline-item".*?</li>', html, re.S)
    text = [re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", item)) for item in items]  # as a browser spaces it
    tainted = next(line for line in text if "tainted" in line)
    assert re.search(r"superseded at seq \d+ built by run-1 late clicks", tainted), tainted
    squeezed = [re.sub(r"<[^>]+>", "", item) for item in items]  # no tag may be all that separates two words
    assert not any(re.search(r"\d+built by|run-1late", line) for line in squeezed), squeezed


def _recorded_iso(world: World, seq: int) -> str:
    (row,) = world.service.log.read(seq - 1, 1)
    return dt.datetime.fromtimestamp(row.recorded_at_ms / 1000, dt.UTC).isoformat(timespec="milliseconds")


def test_markup_in_refs_and_comments_renders_as_text(world: World) -> None:
    for url in ["/wants/want-evil", "/partitions?prefix=evil/", "/wants", "/events"]:
        html = _get(world, url)
        assert "<script>alert" not in html, url
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html, url
    assert "&lt;b&gt;weekly&lt;/b&gt; report &amp; more" in _get(world, "/wants/want-root")
    assert "<script>" not in _get(world, "/partition", 404).split("</head>")[1]


def test_static_files_are_served_with_the_headers(world: World) -> None:
    for path in ["/static/app.css", "/static/live.js", "/static/lineage.js", "/static/vendor/dagre-3.1.3.min.js"]:
        response = world.client.get(path)
        assert response.status_code == 200 and response.headers["X-Content-Type-Options"] == "nosniff", path


def test_fragment_is_the_main_block_only(world: World) -> None:
    html = _get(world, "/wants?fragment=main")
    assert "<html" not in html and 'data-live-id="wants"' in html


def test_form_without_csrf_is_refused_and_appends_nothing(world: World) -> None:
    _csrf(world)
    head = world.service.log.head()
    for data in [{"mode": "one", "ref": "x/no-csrf"}, {"mode": "one", "ref": "x/no-csrf", "csrf": "wrong" * 10}]:
        response = world.client.post("/actions/want", data=data)
        assert response.status_code == 403 and "CSRF" in response.text
    assert world.service.log.head() == head


def test_want_form_previews_then_appends_the_want(world: World) -> None:
    token = _csrf(world)
    form = {"csrf": token, "mode": "range", "pattern": "agg/daily_clicks/date={date:date}", "comment": "backfill"}
    form |= {"start": "2026-01-02", "end": "2026-01-08"}
    head = world.service.log.head()
    preview = world.client.post("/actions/want", data=form | {"action": "preview"})
    assert preview.status_code == 200 and 'data-count="7"' in preview.text
    assert world.service.log.head() == head
    created = world.client.post("/actions/want", data=form | {"action": "want"}, follow_redirects=False)
    assert created.status_code == 303, created.text
    want_id = created.headers["location"].rsplit("/", 1)[1]
    want = world.service.want(want_id)
    assert len(want.refs) == 7 and want.comment == "backfill" and world.service.log.head() == head + 1


def test_form_errors_show_the_api_message(world: World) -> None:
    token = _csrf(world)
    bad = world.client.post("/actions/want", data={"csrf": token, "mode": "one", "ref": "x\ny"})
    assert bad.status_code == 422 and 'data-testid="form-error"' in bad.text
    again = world.client.post("/actions/cancel-want", data={"csrf": token, "want_id": "nope"})
    assert again.status_code == 404 and "no want" in again.text
    taint = world.client.post("/actions/taint", data={"csrf": token, "ref": DAILY})
    assert taint.status_code == 409 and "tainted" in taint.text


def test_cancel_and_taint_forms_append_their_events(world: World) -> None:
    token, service = _csrf(world), world.service
    service.create_want(WantRequest(refs=["forms/a"], want_id="want-forms"))
    run_uuids = [service.state.canonical["forms/a"]]
    _append(service, pb.JobRunBuffer(job_run_id="run-forms", job_label="forms", instance_uuids=run_uuids))
    _append(service, pb.PartitionObserved(partition_ref="forms/raw", location="/data/forms"))
    posts = [
        ("/actions/cancel-run", {"job_run_id": "run-forms", "reason": "stop"}, "/runs/run-forms", "job_run_cancel"),
        ("/actions/cancel-want", {"want_id": "want-forms", "reason": "no"}, "/wants/want-forms", "want_cancel"),
        ("/actions/taint", {"ref": "forms/raw", "reason": "bad"}, "/partition?ref=forms%2Fraw", "partition_taint"),
    ]
    for path, data, location, event_type in posts:
        head = service.log.head()
        response = world.client.post(path, data=data | {"csrf": token}, follow_redirects=False)
        assert (response.status_code, response.headers["location"]) == (303, location), response.text
        (row,) = service.log.read(head, 10)
        assert row.event_type == event_type
    assert service.want("want-forms").state == "canceled" and service.job_run("run-forms").state == "canceled"
    assert service.canonical("forms/raw").previous_uuid is not None
    # The run's instance is canceled, a fresh one replaced it; the pages show both, each in its state.
    (canceled,) = run_uuids
    assert service.canonical("forms/a").previous_uuid == canceled
    assert 'class="state state-canceled"' in _get(world, f"/instances/{canceled}")
    assert f'data-uuid="{canceled}" data-state="canceled"' in _get(world, "/partition?ref=forms%2Fa")
    assert f'data-uuid="{canceled}" data-state="canceled"' in _get(world, "/runs/run-forms")
    assert 'data-kind="instances" data-state="canceled"' in _get(world, "/")
    assert "forms/a" not in _get(world, "/partitions?state=canceled")  # a filter on current instances


def test_time_travel_reads_runs_wants_and_subscriptions_through_the_service(world: World) -> None:
    """As of a seq the run page shows the run queued, the want page its tree then, the lists only what
    existed, and the system page each subscription's settings then."""
    service = world.service
    run = service.job_run("run-1")
    queued = _get(world, f"/runs/run-1?as_of={run.created_seq}")
    assert re.search(r'data-testid="run-state"><span [^>]*data-state="queued"', queued)
    assert re.search(r'data-testid="run-state"><span [^>]*data-state="succeeded"', _get(world, "/runs/run-1"))
    assert f'data-uuid="{world.daily_uuid}"' in queued  # its output, as it was then
    assert "no job run &#39;run-1&#39; as of seq" in _get(world, f"/runs/run-1?as_of={run.created_seq - 1}", 404)
    runs_then = _get(world, f"/runs?as_of={run.created_seq}")
    assert 'data-run-id="run-1"' in runs_then and 'data-run-id="run-2"' not in runs_then
    child = service.want("want-child").created_seq
    before_child = _get(world, f"/wants/want-root?as_of={child - 1}")
    assert 'data-want-id="want-child"' not in before_child and 'data-testid="want-tree"' in before_child
    assert 'data-want-id="want-child"' in _get(world, f"/wants/want-root?as_of={child}")
    assert 'data-want-id="want-child"' not in _get(world, f"/wants?as_of={child - 1}")
    assert re.findall(r'data-testid="partition-row" data-ref="([^"]+)"', _get(world, "/partitions?as_of=1")) == [RAW]

    created = service.create_subscription(SubscriptionRequest(name="web-hooks", endpoint="http://127.0.0.1:9/h")).seq
    service.pause_subscription("web-hooks")
    row = r'data-subscription="web-hooks">.*?data-state="(\w+)"'
    assert re.findall(row, _get(world, f"/system?as_of={created}")) == ["active"]
    assert re.findall(row, _get(world, "/system")) == ["paused"]
    assert re.findall(row, _get(world, f"/system?as_of={created - 1}")) == []


def test_changes_page_lists_what_the_taint_changed_and_the_banner_links_to_it(world: World) -> None:
    before, taint = world.before_taint, world.taint_seq
    past = _get(world, f"/?as_of={before}")
    assert f'href="/changes?from={before}&amp;to={world.service.live.head_seq}"' in past
    assert 'data-testid="time-travel-changes"' not in _get(world, "/")
    html = _get(world, f"/changes?from={before}&to={taint}")
    rows = re.findall(r'data-testid="change-row" data-seq="(\d+)" data-kind="(\w+)" data-id="([^"]+)"', html)
    (new_daily,) = [uuid for uuid, i in world.service.state.instances.items() if i.previous_uuid == world.daily_uuid]
    # want-root was Successful already: a want that ended does not change with its refs.
    assert rows == [
        (str(taint), "instance_created", new_daily),
        (str(taint), "instance_state", world.daily_uuid),
        (str(taint), "canonical_moved", DAILY),
    ]
    assert 'data-state="tainted"' in html and f"/instances/{world.daily_uuid}?as_of={taint}" in html
    paged = _get(world, f"/changes?from=0&to={taint}")
    assert paged.count('data-testid="change-row"') > 10 and 'data-testid="next-page"' not in paged
    assert "from must be a seq" in _get(world, "/changes", 422)
    assert "to must be a seq" in _get(world, "/changes?from=1&to=x", 422)
    assert "Nothing changed after seq" in _get(world, f"/changes?from={taint}&to={taint}", 200)
    assert "must not be after" in _get(world, f"/changes?from={taint}&to={taint - 1}", 422)
    assert "after the log head" in _get(world, f"/changes?from=1&to={taint + 1000}", 409)


def test_a_run_pages_outputs_checks_and_inputs_are_live_regions_that_follow_the_run(world: World) -> None:
    """Issue 36: static/live.js swaps the regions marked data-live-id with the fragment's; the outputs table was
    outside them, so a page opened mid-run kept its outputs at "building" after the badge said succeeded."""
    success_seq = int(re.findall(r'data-seq="(\d+)"', _get(world, f"/instances/{world.daily_uuid}"))[0])
    during = _get(world, f"/runs/run-1?as_of={success_seq - 1}&fragment=main")
    after = _get(world, "/runs/run-1?fragment=main")

    def live_region(html: str) -> str:
        (region,) = re.findall(r'<section id="run-results" data-live-id="run-results">(.*?)</section>', html, re.S)
        return region

    def output_states(html: str) -> list[str]:
        return re.findall(r'data-testid="output-row" data-uuid="[^"]+" data-state="([^"]+)"', live_region(html))

    assert output_states(during) == ["building"] and output_states(after) == ["tainted"]  # built, then tainted
    assert 'data-testid="run-checks"' in live_region(after) and 'data-testid="run-inputs"' in live_region(after)
