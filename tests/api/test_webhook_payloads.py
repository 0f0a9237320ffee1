"""Webhook payload formats: partbuild JSON, CloudEvents 1.0 and OpenLineage run events, from folded events."""

from __future__ import annotations

import base64
import copy
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cloudevents.core.formats.json import JSONFormat

from partbuild.api.service.events import event_out
from partbuild.api.webhook_payloads import (
    FORMATS,
    RUN_ID_NAMESPACE,
    cloudevent_source,
    render,
    renders,
)
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.log.events import envelope
from partbuild.state.rules.ids import instance_uuid

from foldkit import Story
from golden_log import check_events, checks_rerun_events
from openlineagekit import RUN_EVENT_URL, openlineage_errors

SUBSCRIPTION = "lineage hook/1"
MESSAGE_ID = "msg-0001"
GROUP = "out/x"
TYPES = ("want_create", "job_run_buffer", "job_run_success", "job_run_failure", "job_run_cancel")
OPENLINEAGE_TYPES = {
    "job_run_buffer": "START",
    "job_run_success": "COMPLETE",
    "job_run_failure": "FAIL",
    "job_run_cancel": "ABORT",
    "job_run_missing_deps": "FAIL",
}


class Built:
    """A story with one event of each kind; `seq_of[(type, run)]` finds them."""

    def __init__(self) -> None:
        s = Story()
        s.observe("src/a")
        self.source_uuid = s.uuid("src/a")
        s.want("w1", "out/x", "out/y")
        s.buffer("job-1", "out/x", label="build_x")
        s.succeed("job-1", [self.source_uuid])
        s.buffer("job-2", "out/y", label="build_y")
        s.fail("job-2", permanent=False, message="disk full")
        s.buffer("job-3", "out/y", label="build_y")
        s.ok(pb.JobRunCancel(job_run_id="job-3", reason="stopped by test"))
        s.buffer("job-4", "out/y", label="build_y")
        s.missing("job-4", "src/b")
        self.story = s

    def event(self, event_type: str) -> tuple[int, pb.Event]:
        """The first event of this type, with its seq."""
        for seq, event in enumerate(self.story.events, start=1):
            if event.WhichOneof("payload") == event_type:
                return seq, event
        raise AssertionError(f"no {event_type} event in the story")

    def render(self, format: str, event_type: str) -> tuple[pb.Event, Any]:
        seq, event = self.event(event_type)
        rendered = render(
            format,
            subscription=SUBSCRIPTION,
            message_id=MESSAGE_ID,
            seq=seq,
            event=event,
            ordering_key=GROUP,
            state=self.story.state,
        )
        return event, rendered


@pytest.fixture(scope="module")
def built() -> Built:
    return Built()


def _time_ms(text: str) -> int:
    moment = datetime.fromisoformat(text)
    assert moment.utcoffset() == timedelta(0)
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)


# ----------------------------------------------------------------- partbuild


@pytest.mark.parametrize("event_type", TYPES)
def test_partbuild_payload_is_the_api_event_shape_with_the_delivery_ids(built: Built, event_type: str) -> None:
    event, rendered = built.render("partbuild", event_type)
    assert rendered.content_type == "application/json"
    payload = json.loads(rendered.body)
    seq, _ = built.event(event_type)
    assert payload["subscription"] == SUBSCRIPTION and payload["message_id"] == MESSAGE_ID
    assert payload["seq"] == seq and payload["group"] == GROUP and payload["event_type"] == event_type
    assert payload["event"] == event_out(event)
    if event_type == "want_create":
        assert "job_run" not in payload
    else:
        run_id = getattr(event, event_type).job_run_id
        assert payload["job_run"]["job_run_id"] == run_id
        assert payload["job_run"]["refs"] == [
            built.story.state.instances[built.story.state.job_runs[run_id].instance_uuids[0]].ref
        ]


def test_partbuild_job_run_shows_the_failure_the_api_shows(built: Built) -> None:
    _, rendered = built.render("partbuild", "job_run_failure")
    run = json.loads(rendered.body)["job_run"]
    assert run["state"] == "failed" and run["error_message"] == "disk full" and run["job_label"] == "build_y"


SECRETS = [b"tenant-42/secret-object\x00\xff", b"resume-token-SECRET", b"split-SECRET", b"hint-SECRET"]


def _scan_event(**extra: Any) -> pb.Event:
    progress = pb.SourceScanProgress(
        source="clicks",
        pass_number=1,
        after_key=SECRETS[0],
        last_key=SECRETS[0] + b"z",
        resume_token=SECRETS[1],
        split_hint=SECRETS[3],
        **extra,
    )
    return envelope(progress, timestamp_ms=5_000)


def _assert_no_raw_bytes(event: pb.Event) -> None:
    for format in ("partbuild", "cloudevents"):
        rendered = render(
            format, subscription="s", message_id="m", seq=9, event=event, ordering_key="clicks", state=Story().state
        )
        assert rendered is not None
        for secret in SECRETS:
            for form in (secret, base64.b64encode(secret), secret.decode("latin-1").encode("unicode_escape")):
                assert form not in rendered.body, (format, form)
        shown = json.loads(rendered.body)
        scan = (shown["data"] if format == "cloudevents" else shown)["event"]["source_scan_progress"]
        assert scan["after_key"].startswith("ItemKey(len=") and scan["resume_token"].startswith("ResumeToken(len=")


def test_partbuild_payload_of_a_scan_never_carries_raw_connector_bytes() -> None:
    _assert_no_raw_bytes(_scan_event())


def test_partbuild_payload_of_a_scan_with_split_keys_never_carries_raw_bytes() -> None:
    _assert_no_raw_bytes(_scan_event(split_keys=[SECRETS[2]]))


# ----------------------------------------------------------------- cloudevents


@pytest.mark.parametrize("event_type", TYPES)
def test_cloudevents_structured_json_carries_the_partbuild_payload(built: Built, event_type: str) -> None:
    event, rendered = built.render("cloudevents", event_type)
    assert rendered.content_type == "application/cloudevents+json"
    envelope_ = json.loads(rendered.body)
    assert envelope_["specversion"] == "1.0"
    assert envelope_["id"] == MESSAGE_ID and envelope_["subject"] == GROUP
    assert envelope_["source"] == "urn:partbuild:subscription:lineage%20hook%2F1"
    assert envelope_["type"] == f"dev.partbuild.{event_type}"
    assert envelope_["datacontenttype"] == "application/json"
    assert _time_ms(envelope_["time"]) == event.timestamp_ms
    _, plain = built.render("partbuild", event_type)
    assert envelope_["data"] == json.loads(plain.body)


@pytest.mark.parametrize("event_type", TYPES)
def test_cloudevents_obey_the_spec_rules_the_sdk_checks_on_reading(built: Built, event_type: str) -> None:
    """Required attributes are non-empty strings and known attributes have their types (SDK's reader)."""
    _, rendered = built.render("cloudevents", event_type)
    event = JSONFormat().read(None, rendered.body)
    assert event.get_specversion() == "1.0" and event.get_id() == MESSAGE_ID
    assert event.get_time() is not None and event.get_time().tzinfo is not None
    # No extension attributes: every top-level member is a CloudEvents 1.0 context attribute or data.
    allowed = {"specversion", "id", "source", "type", "subject", "time", "datacontenttype", "data"}
    assert set(json.loads(rendered.body)) == allowed


@pytest.mark.parametrize("name", ["a", "with space", "slash/and?query#frag", "ünïcode"])
def test_cloudevent_source_is_an_absolute_urn_for_any_subscription_name(name: str) -> None:
    source = cloudevent_source(name)
    scheme, _, rest = source.partition(":")
    assert scheme == "urn" and rest.startswith("partbuild:subscription:")
    assert all(c.isascii() and not c.isspace() and c not in "?#" for c in source)


# ----------------------------------------------------------------- openlineage


@pytest.mark.parametrize("event_type", list(OPENLINEAGE_TYPES))
def test_openlineage_run_events_validate_against_the_spec(built: Built, event_type: str) -> None:
    event, rendered = built.render("openlineage", event_type)
    assert rendered.content_type == "application/json"
    payload = json.loads(rendered.body)
    assert openlineage_errors(payload) == []
    assert payload["schemaURL"] == RUN_EVENT_URL
    assert payload["eventType"] == OPENLINEAGE_TYPES[event_type]
    assert _time_ms(payload["eventTime"]) == event.timestamp_ms
    run_id = getattr(event, event_type).job_run_id
    assert payload["run"]["runId"] == str(uuid.uuid5(RUN_ID_NAMESPACE, f"job_run:{run_id}"))
    assert payload["job"] == {
        "namespace": "partbuild",
        "name": built.story.state.job_runs[run_id].job_label,
        "facets": {},
    }
    assert payload["producer"] == "https://github.com/partbuild/partbuild"


def test_openlineage_outputs_are_partitions_versioned_by_instance(built: Built) -> None:
    _, rendered = built.render("openlineage", "job_run_success")
    payload = json.loads(rendered.body)
    (output,) = payload["outputs"]
    assert (output["namespace"], output["name"]) == ("partbuild", "out/x")
    assert output["facets"]["version"]["datasetVersion"] == built.story.uuid("out/x")
    (read,) = payload["inputs"]
    assert read["name"] == "src/a" and read["facets"]["version"]["datasetVersion"] == built.source_uuid


def test_openlineage_start_has_no_inputs_yet_and_the_want_as_parent(built: Built) -> None:
    _, rendered = built.render("openlineage", "job_run_buffer")
    payload = json.loads(rendered.body)
    assert payload["inputs"] == []
    parent = payload["run"]["facets"]["parent"]
    assert (parent["job"]["namespace"], parent["job"]["name"]) == ("partbuild", "want")
    assert parent["run"]["runId"] == str(uuid.uuid5(RUN_ID_NAMESPACE, "want:w1"))


def test_openlineage_runs_of_one_job_share_a_run_id_across_events(built: Built) -> None:
    started = json.loads(built.render("openlineage", "job_run_buffer")[1].body)
    completed = json.loads(built.render("openlineage", "job_run_success")[1].body)
    assert started["run"]["runId"] == completed["run"]["runId"]


@pytest.mark.parametrize(
    ("event_type", "message"), [("job_run_failure", "disk full"), ("job_run_missing_deps", "src/b")]
)
def test_openlineage_failures_carry_an_error_message(built: Built, event_type: str, message: str) -> None:
    payload = json.loads(built.render("openlineage", event_type)[1].body)
    facet = payload["run"]["facets"]["errorMessage"]
    assert message in facet["message"] and facet["programmingLanguage"] == "PYTHON"


def test_openlineage_cancel_is_an_abort_without_an_error(built: Built) -> None:
    payload = json.loads(built.render("openlineage", "job_run_cancel")[1].body)
    assert payload["eventType"] == "ABORT" and "errorMessage" not in payload["run"]["facets"]


def test_openlineage_keeps_a_job_run_id_that_is_already_a_uuid() -> None:
    s = Story()
    s.want("w", "out/z")
    run_id = str(uuid.UUID(int=0x1234))
    s.buffer(run_id, "out/z")
    rendered = render(
        "openlineage", subscription="s", message_id="m", seq=2, event=s.events[-1], ordering_key="g", state=s.state
    )
    assert rendered is not None and json.loads(rendered.body)["run"]["runId"] == run_id


def test_openlineage_has_nothing_for_other_event_types(built: Built) -> None:
    _, rendered = built.render("openlineage", "want_create")
    assert rendered is None
    assert not renders("openlineage", "want_create") and not renders("openlineage", "partition_observed")
    assert not renders("openlineage", "job_run_heartbeat")
    assert all(renders("openlineage", event_type) for event_type in OPENLINEAGE_TYPES)


BROKEN: dict[str, Any] = {
    "bogus event type": lambda p: p.update(eventType="BOGUS"),
    "missing runId": lambda p: p["run"].pop("runId"),
    "runId not a uuid": lambda p: p["run"].update(runId="job-1"),
    "eventTime not a date-time": lambda p: p.update(eventTime="yesterday"),
    "parent without job": lambda p: p["run"]["facets"]["parent"].pop("job"),
    "error without language": lambda p: p["run"]["facets"]["errorMessage"].pop("programmingLanguage"),
    "version facet without version": lambda p: p["outputs"][0]["facets"]["version"].pop("datasetVersion"),
    "facet without producer": lambda p: p["outputs"][0]["facets"]["version"].pop("_producer"),
}


@pytest.mark.parametrize("breakage", list(BROKEN))
def test_openlineage_validation_rejects_broken_payloads(built: Built, breakage: str) -> None:
    payload = json.loads(built.render("openlineage", "job_run_failure")[1].body)
    assert openlineage_errors(payload) == []
    broken = copy.deepcopy(payload)
    BROKEN[breakage](broken)
    assert openlineage_errors(broken), breakage


# ----------------------------------------------------------------- formats


def test_unknown_format_names_the_allowed_ones(built: Built) -> None:
    _, event = built.event("want_create")
    with pytest.raises(ValueError, match="partbuild, cloudevents, openlineage"):
        render("xml", subscription="s", message_id="m", seq=1, event=event, ordering_key="g", state=built.story.state)
    with pytest.raises(ValueError, match="unknown payload format 'xml'"):
        renders("xml", "want_create")


def test_partbuild_and_cloudevents_render_every_event_type() -> None:
    assert FORMATS == ("partbuild", "cloudevents", "openlineage")
    for event_type in ("want_create", "partition_taint", "partition_observed", "source_scan_progress"):
        assert renders("partbuild", event_type) and renders("cloudevents", event_type)
    assert not renders("partbuild", "no_such_event")


def test_an_event_without_payload_renders_nothing() -> None:
    for format in FORMATS:
        assert (
            render(
                format, subscription="s", message_id="m", seq=1, event=pb.Event(), ordering_key="g", state=Story().state
            )
            is None
        )


# ----------------------------------------------------------------- check results (issue 24)


class Checked:
    """The checks golden log folded (r1's success with a warning at seq 5, r2's errored check at 7, r3's blocking
    failure at 11, r4's pass at 17), then a weekly built from d/1 and d/3 whose check passed (r5)."""

    def __init__(self) -> None:
        self.state = BuildState()
        self.events: list[pb.Event] = []
        for event in check_events():
            self._apply(event)
        self.d1, self.d3 = self.state.canonical["d/1"], self.state.canonical["d/3"]
        wanted = self._apply(envelope(pb.WantCreate(want_id="wk", partition_refs=["wk/1"])))
        self.weekly = instance_uuid(wanted, "wk/1")
        self._apply(envelope(pb.JobRunBuffer(job_run_id="r5", job_label="wk", instance_uuids=[self.weekly])))
        total = pb.CheckResult(name="total_matches", passed=True, blocking=True, metrics={"total": 12})
        checks = [pb.InstanceChecks(instance_uuid=self.weekly, results=[total])]
        success = pb.JobRunSuccess(job_run_id="r5", input_instance_uuids=[self.d1, self.d3], checks=checks)
        self.weekly_seq = self._apply(envelope(success))

    def _apply(self, event: pb.Event) -> int:
        self.events.append(event)
        self.state.apply(len(self.events), event)
        return len(self.events)

    def render(self, format: str, seq: int) -> Any:
        event = self.events[seq - 1]
        rendered = render(
            format, subscription="s", message_id="m", seq=seq, event=event, ordering_key="d/1", state=self.state
        )
        assert rendered is not None
        return json.loads(rendered.body)


@pytest.fixture(scope="module")
def checked() -> Checked:
    return Checked()


def test_partbuild_payload_of_an_outcome_carries_its_check_results_as_the_api_shows_them(checked: Checked) -> None:
    payload = checked.render("partbuild", 5)
    assert payload["event_type"] == "job_run_success"
    assert payload["check_results"] == [
        {
            "instance_uuid": checked.d1,
            "ref": "d/1",
            "checks": [
                {
                    "name": "rows_nonzero",
                    "result": "passed",
                    "passed": True,
                    "blocking": True,
                    "errored": False,
                    "description": "rows_nonzero said True",
                    "metrics": {"rows": 5.0},
                    "seq": 5,
                    "duration_ms": None,
                },
                {
                    "name": "url_not_null",
                    "result": "warning",
                    "passed": False,
                    "blocking": False,
                    "errored": False,
                    "description": "url_not_null said False",
                    "metrics": {"nulls": 2.0},
                    "seq": 5,
                    "duration_ms": None,
                },
            ],
        }
    ]
    for seq, results in [(7, ["errored"]), (11, ["failed", "passed"])]:
        failure = checked.render("partbuild", seq)
        assert failure["event_type"] == "job_run_failure"
        assert [c["result"] for c in failure["check_results"][0]["checks"]] == results
        # The same as the API's job-run answer gives for the run.
        assert failure["check_results"] == failure["job_run"]["checks"]
    for seq in (2, 3, 4):  # a want, a buffer, a heartbeat: no checks recorded
        assert "check_results" not in checked.render("partbuild", seq)


def test_a_checks_rerun_carries_its_one_instance_s_results_and_a_skipped_one_none() -> None:
    state, events = BuildState(), checks_rerun_events()
    for seq, event in enumerate(events, 1):
        state.apply(seq, event)

    def rendered(seq: int) -> Any:
        event = events[seq - 1]
        body = render(
            "partbuild", subscription="s", message_id="m", seq=seq, event=event, ordering_key="d/1", state=state
        )
        assert body is not None
        return json.loads(body.body)

    passed, failed = rendered(8), rendered(14)  # the golden log's passing and failing reruns of d/1
    assert passed["event_type"] == "checks_rerun"
    (checked,) = passed["check_results"]
    assert (checked["ref"], [c["result"] for c in checked["checks"]]) == ("d/1", ["passed"])
    assert [c["result"] for c in failed["check_results"][0]["checks"]] == ["failed"]
    assert "check_results" not in rendered(11)  # skipped: the job declares no checks


def test_cloudevents_of_an_outcome_carry_its_check_results_in_their_data(checked: Checked) -> None:
    envelope_ = checked.render("cloudevents", 5)
    assert envelope_["type"] == "dev.partbuild.job_run_success"
    assert envelope_["data"]["check_results"] == checked.render("partbuild", 5)["check_results"]


def _assertions(dataset: dict[str, Any], where: str = "facets") -> list[dict[str, Any]]:
    facet = dataset[where]["dataQualityAssertions"]
    assert facet["_producer"] == "https://github.com/partbuild/partbuild"
    return facet["assertions"]  # type: ignore[no-any-return]


def test_openlineage_outputs_carry_their_checks_as_data_quality_assertions(checked: Checked) -> None:
    success = checked.render("openlineage", 5)
    assert openlineage_errors(success) == []
    (output,) = success["outputs"]
    assert output["name"] == "d/1" and _assertions(output) == [
        {
            "assertion": "rows_nonzero",
            "success": True,
            "severity": "error",
            "description": "rows_nonzero said True",
            "actual": "rows=5",
            "params": {},
        },
        {
            "assertion": "url_not_null",
            "success": False,
            "severity": "warn",
            "description": "url_not_null said False",
            "actual": "nulls=2",
            "params": {},
        },
    ]
    errored, failed = checked.render("openlineage", 7), checked.render("openlineage", 11)
    assert openlineage_errors(errored) == openlineage_errors(failed) == []
    assert [(a["assertion"], a["success"]) for a in _assertions(errored["outputs"][0])] == [("rows_nonzero", False)]
    assert [(a["success"], a["severity"]) for a in _assertions(failed["outputs"][0])] == [
        (False, "error"),
        (True, "warn"),
    ]
    buffered = checked.render("openlineage", 3)
    assert "dataQualityAssertions" not in buffered["outputs"][0]["facets"]


def test_openlineage_inputs_carry_the_checks_recorded_on_them_as_an_input_facet(checked: Checked) -> None:
    weekly = checked.render("openlineage", checked.weekly_seq)
    assert openlineage_errors(weekly) == []
    inputs = {dataset["name"]: dataset for dataset in weekly["inputs"]}
    assert [(a["assertion"], a["success"]) for a in _assertions(inputs["d/1"], "inputFacets")] == [
        ("rows_nonzero", True),
        ("url_not_null", False),
    ]
    assert [a["actual"] for a in _assertions(inputs["d/3"], "inputFacets")] == ["rows=7"]
    assert [a["actual"] for a in _assertions(weekly["outputs"][0])] == ["total=12"]
    assert "dataQualityAssertions" not in weekly["outputs"][0].get("inputFacets", {})


def test_openlineage_validation_rejects_a_broken_assertion(checked: Checked) -> None:
    payload = checked.render("openlineage", 5)
    for breakage in ("success", "assertion"):
        broken = copy.deepcopy(payload)
        broken["outputs"][0]["facets"]["dataQualityAssertions"]["assertions"][0].pop(breakage)
        assert openlineage_errors(broken), breakage
    broken = copy.deepcopy(payload)
    broken["outputs"][0]["facets"]["dataQualityAssertions"]["assertions"][1]["success"] = "no"
    assert openlineage_errors(broken)
