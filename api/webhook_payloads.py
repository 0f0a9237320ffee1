"""The bodies of webhook deliveries: one event of the log in a subscription's payload format.

Three formats:

- ``partbuild``: the API's own JSON (`/api/v1/events` shapes), plus the job run for job-run events and,
  for an event that records quality check results (a job-run outcome's `checks`), `check_results`:
  per checked instance its ref and each check with its result (passed, warning, failed, errored).
- ``cloudevents``: CloudEvents 1.0, structured JSON mode, with the ``partbuild`` payload as data
  (`type` is ``dev.partbuild.<event type>``; an outcome's check results ride in its data).
- ``openlineage``: OpenLineage run events, for job-run outcomes only; an outcome's check results are
  the ``dataQualityAssertions`` facet of its output datasets, and the checks recorded on what a
  successful run read (as of its event) the same facet among its inputs' input facets.

The delivery engine calls `render` holding the state's read lock, so the state may be newer than
the event (a run buffered at seq 10 may have succeeded since): what happened is read from the event,
names and refs from the state. Nothing here does I/O.

The formats are `FORMATS` of state/fold/subscription_records.py, each with its renderer in `_RENDERERS`;
which event types a format renders follows from the event registry (state/fold/registry.py):
every type for partbuild and cloudevents, the job-run events with a `run_phase` for openlineage.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

from cloudevents.core.bindings.http import to_structured
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent
from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.generated.data_quality_assertions_dataset import Assertion, DataQualityAssertionsDatasetFacet
from openlineage.client.generated.dataset_version_dataset import DatasetVersionDatasetFacet
from openlineage.client.generated.error_message_run import ErrorMessageRunFacet
from openlineage.client.generated.parent_run import Job as ParentJob
from openlineage.client.generated.parent_run import ParentRunFacet
from openlineage.client.generated.parent_run import Run as ParentRun
from openlineage.client.serde import Serde

from partbuild.api.models.runs import InstanceChecksOut
from partbuild.api.service.events import event_out
from partbuild.api.service.partitions import checks_out
from partbuild.api.service.runs import job_run_out
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.checks import CheckRow
from partbuild.state.fold.records import JobRun, Want
from partbuild.state.fold.registry import BY_NAME, JOB_RUN_EVENT_TYPES, ROWS
from partbuild.state.fold.subscription_records import FORMATS

JSON = "application/json"
CLOUDEVENTS_JSON = "application/cloudevents+json"
CLOUDEVENT_TYPE_PREFIX = "dev.partbuild."

# Who produced the OpenLineage events (the spec wants a URI; the client's default names itself).
PRODUCER = "https://github.com/partbuild/partbuild"
OPENLINEAGE_NAMESPACE = "partbuild"  # jobs and datasets (partition refs) live in one namespace
WANT_JOB_NAME = "want"  # a want is the parent run of the job runs that serve it
# Job runs run Python job functions (PySpark); the error facet requires a language.
PROGRAMMING_LANGUAGE = "PYTHON"
# Fixed forever: changing it would give every past run a new OpenLineage runId.
# uuid5(NAMESPACE_URL, "https://github.com/partbuild/partbuild#openlineage-run-ids").
RUN_ID_NAMESPACE = uuid.UUID("fcf15d17-0d8c-5197-a4a2-b36d01ac5672")

# OpenLineage run states of the job-run events that record a step of a run's life (their registry
# row's `run_phase`, named as RunState's members). A heartbeat says nothing new.
OPENLINEAGE_STATES: dict[str, RunState] = {
    row.name: RunState[row.run_phase] for row in ROWS if row.job_run and row.run_phase is not None
}


@dataclass(frozen=True)
class Rendered:
    """A delivery's body and its Content-Type."""

    body: bytes
    content_type: str


@dataclass(frozen=True)
class _Delivery:
    """What every format needs to know about one delivery."""

    subscription: str
    message_id: str
    seq: int
    event: pb.Event
    event_type: str
    ordering_key: str
    state: BuildState


def renders(format: str, event_type: str) -> bool:
    """Whether `format` has a payload for events of `event_type` (a name of `Event.payload`)."""
    _check_format(format)
    if format == "openlineage":
        return event_type in OPENLINEAGE_STATES
    return event_type in BY_NAME  # partbuild and cloudevents: every event type


def render(
    format: str,
    *,
    subscription: str,
    message_id: str,
    seq: int,
    event: pb.Event,
    ordering_key: str,
    state: BuildState,
) -> Rendered | None:
    """The body of one delivery of `event` (at `seq`) in `format`; None if the format has none for it."""
    _check_format(format)
    event_type = event.WhichOneof("payload")
    if event_type is None or not renders(format, event_type):
        return None
    delivery = _Delivery(subscription, message_id, seq, event, event_type, ordering_key, state)
    return _RENDERERS[format](delivery)


def _check_format(format: str) -> None:
    if format not in FORMATS:
        raise ValueError(f"unknown payload format {format!r}: expected one of {', '.join(FORMATS)}")


# ----------------------------------------------------------------- partbuild


def _partbuild_payload(delivery: _Delivery) -> dict[str, Any]:
    """The API's event answer with the delivery's ids; bytes fields stay redacted (event_out does it)."""
    payload: dict[str, Any] = {
        "subscription": delivery.subscription,
        "message_id": delivery.message_id,
        "seq": delivery.seq,
        "event_type": delivery.event_type,
        "group": delivery.ordering_key,
        "event": event_out(delivery.event),
    }
    if delivery.event_type in JOB_RUN_EVENT_TYPES:  # the run it names, as the API shows it
        run = _job_run(delivery)
        # None when the state does not know the run (the fold rejected the buffer).
        payload["job_run"] = job_run_out(delivery.state, run).model_dump(mode="json") if run else None
    checks = event_checks(delivery.event, delivery.event_type)
    if checks:
        payload["check_results"] = [_instance_checks(delivery, checked).model_dump(mode="json") for checked in checks]
    return payload


def event_checks(event: pb.Event, event_type: str) -> Sequence[pb.InstanceChecks]:
    """The check results an event records: its payload's `checks` (job-run outcomes, a checks rerun), else none."""
    payload = getattr(event, event_type)
    field = payload.DESCRIPTOR.fields_by_name.get("checks")
    if field is None or field.message_type is not pb.InstanceChecks.DESCRIPTOR:
        return ()
    if not field.is_repeated:  # ChecksRerun: one instance's results, unset when the rerun skipped
        return (payload.checks,) if payload.HasField("checks") else ()
    return payload.checks  # type: ignore[no-any-return]


def _instance_checks(delivery: _Delivery, checked: pb.InstanceChecks) -> InstanceChecksOut:
    """One instance's checks as the API shows them, recorded at the delivery's seq."""
    instance = delivery.state.instances.get(checked.instance_uuid)
    ref = instance.ref if instance is not None else None
    checks = checks_out((delivery.seq, check_rows(checked.results)))
    return InstanceChecksOut(instance_uuid=checked.instance_uuid, ref=ref, checks=checks)


def check_rows(results: Sequence[pb.CheckResult]) -> tuple[CheckRow, ...]:
    """An event's check results as the fold records them (state/fold/checks.py's rows, a duration only when set)."""
    rows: list[CheckRow] = []
    for r in results:
        row = (r.name, r.passed, r.blocking, r.errored, r.description, tuple(sorted(r.metrics.items())))
        rows.append((*row, r.duration_ms) if r.duration_ms else row)  # type: ignore[arg-type]
    return tuple(rows)


def _render_partbuild(delivery: _Delivery) -> Rendered:
    return Rendered(_json_bytes(_partbuild_payload(delivery)), JSON)


def _json_bytes(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _job_run(delivery: _Delivery) -> JobRun | None:
    run_id = getattr(delivery.event, delivery.event_type).job_run_id
    return delivery.state.job_runs.get(run_id)


# ----------------------------------------------------------------- cloudevents


def cloudevent_source(subscription: str) -> str:
    """The CloudEvents `source`: a URN per subscription (percent-encoded, so any name is a valid URI).

    A URN rather than the server's URL: partbuild does not know the address it is reached at,
    and `source` + `id` must stay unique and stable across restarts and hosts.
    """
    return f"urn:partbuild:subscription:{quote(subscription, safe='')}"


def _render_cloudevents(delivery: _Delivery) -> Rendered:
    """CloudEvents 1.0 structured JSON; the SDK checks the required attributes and formats `time`."""
    attributes: dict[str, Any] = {
        "specversion": "1.0",
        "id": delivery.message_id,
        "source": cloudevent_source(delivery.subscription),
        "type": CLOUDEVENT_TYPE_PREFIX + delivery.event_type,
        "subject": delivery.ordering_key,
        "time": _event_time(delivery.event),
        "datacontenttype": JSON,
    }
    message = to_structured(CloudEvent(attributes, _partbuild_payload(delivery)), JSONFormat())
    return Rendered(message.body, CLOUDEVENTS_JSON)


def _event_time(event: pb.Event) -> datetime:
    # Integer milliseconds, no float rounding.
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=event.timestamp_ms)


# ----------------------------------------------------------------- openlineage


def openlineage_run_id(job_run_id: str) -> str:
    """A job run's OpenLineage runId: its id if that is a UUID, else a UUID5 of it."""
    return _as_uuid("job_run", job_run_id)


def openlineage_want_run_id(want_id: str) -> str:
    """The runId of a want seen as the parent run of the job runs that serve it."""
    return _as_uuid("want", want_id)


def _as_uuid(kind: str, key: str) -> str:
    try:
        return str(uuid.UUID(key))
    except ValueError:
        # The kind keeps a want and a job run with the same id apart.
        return str(uuid.uuid5(RUN_ID_NAMESPACE, f"{kind}:{key}"))


def _render_openlineage(delivery: _Delivery) -> Rendered | None:
    """An OpenLineage RunEvent; None when the state does not know the run (no job name to give)."""
    run = _job_run(delivery)
    if run is None:
        return None
    state = delivery.state
    outputs = _refs_with_uuids(state, run.instance_uuids)
    facets: dict[str, Any] = {}
    parent = _parent_want(state, run, [ref for ref, _ in outputs])
    if parent is not None:
        facets["parent"] = ParentRunFacet(
            run=ParentRun(runId=openlineage_want_run_id(parent.want_id)),
            job=ParentJob(namespace=OPENLINEAGE_NAMESPACE, name=WANT_JOB_NAME),
            producer=PRODUCER,
        )
    error = _error_message(delivery.event, delivery.event_type)
    if error is not None:
        facets["errorMessage"] = ErrorMessageRunFacet(
            message=error, programmingLanguage=PROGRAMMING_LANGUAGE, producer=PRODUCER
        )
    inputs = _success_inputs(delivery.event.job_run_success) if delivery.event_type == "job_run_success" else []
    recorded = event_checks(delivery.event, delivery.event_type)
    checked = {each.instance_uuid: check_rows(each.results) for each in recorded}
    ol_event = RunEvent(
        eventType=OPENLINEAGE_STATES[delivery.event_type],
        eventTime=_event_time(delivery.event).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        run=Run(runId=openlineage_run_id(run.job_run_id), facets=facets),
        job=Job(namespace=OPENLINEAGE_NAMESPACE, name=run.job_label),
        inputs=[_input_dataset(delivery, ref, uid) for ref, uid in _refs_with_uuids(state, inputs)],
        outputs=[_dataset(OutputDataset, ref, uid, _assertions(checked.get(uid, ()))) for ref, uid in outputs],
        producer=PRODUCER,
    )
    return Rendered(Serde.to_json(ol_event).encode("utf-8"), JSON)


def _dataset(kind: Callable[..., Any], ref: str, instance_uuid: str, checks: Any = None) -> Any:
    """A partition ref as a dataset; the instance UUID is its version (a rebuild is a new one).

    An output's `checks` (its `dataQualityAssertions` facet) are among its dataset facets: the dataset
    version is the instance they checked.
    """
    facets: dict[str, Any] = {"version": DatasetVersionDatasetFacet(datasetVersion=instance_uuid, producer=PRODUCER)}
    if checks is not None:
        facets["dataQualityAssertions"] = checks
    return kind(namespace=OPENLINEAGE_NAMESPACE, name=ref, facets=facets)


def _input_dataset(delivery: _Delivery, ref: str, instance_uuid: str) -> Any:
    """An input, with the checks recorded on it by the event's seq as an input facet (the state may be newer)."""
    recorded = [entry for entry in delivery.state.check_results.get(instance_uuid, ()) if entry[0] <= delivery.seq]
    dataset = _dataset(InputDataset, ref, instance_uuid)
    if recorded:
        dataset.inputFacets = {"dataQualityAssertions": _assertions(recorded[-1][1])}
    return dataset


def _assertions(rows: Sequence[CheckRow]) -> DataQualityAssertionsDatasetFacet | None:
    """Checks as OpenLineage assertions: the check's name, success (passed; an errored check never succeeds),
    severity (error: blocking; warn: not), its description and metrics (as `actual`); None for no checks.

    No column: a check's result does not say which columns it looked at.
    """
    if not rows:
        return None
    assertions = [
        Assertion(
            assertion=name,
            success=passed and not errored,
            severity="error" if blocking else "warn",
            description=description or None,
            actual=" ".join(f"{key}={value:g}" for key, value in metrics) or None,
        )
        for name, passed, blocking, errored, description, metrics, *_ in rows
    ]
    return DataQualityAssertionsDatasetFacet(assertions=assertions, producer=PRODUCER)


def _refs_with_uuids(state: BuildState, uuids: Iterable[str]) -> list[tuple[str, str]]:
    """(ref, uuid) of each instance the state still holds (retention may have dropped some)."""
    found = (state.instances.get(uid) for uid in uuids)
    return [(instance.ref, instance.uuid) for instance in found if instance is not None]


def _success_inputs(success: pb.JobRunSuccess) -> list[str]:
    """What a successful run read, from its event: run-level and per-output inputs, once each."""
    read = dict.fromkeys(success.input_instance_uuids)
    for output in success.outputs:
        read.update(dict.fromkeys(output.input_instance_uuids))
    return list(read)


def _error_message(event: pb.Event, event_type: str) -> str | None:
    if event_type == "job_run_failure":
        return event.job_run_failure.message or "failed"
    if event_type == "job_run_missing_deps":
        return "missing inputs: " + ", ".join(event.job_run_missing_deps.missing_refs)
    return None


def _parent_want(state: BuildState, run: JobRun, refs: list[str]) -> Want | None:
    """The want a run serves: an active want naming one of its refs, else the newest one made before it.

    Active first because that is whom the run is for right now; once the run succeeded its wants
    are terminal, and the newest want not younger than the run is the likeliest reason it ran.
    """
    for ref in refs:
        for want in state.active_wants_for_ref(ref):
            return want
    candidates = [state.wants[want_id] for ref in refs for want_id in state.wants_by_ref.get(ref, ())]
    older = [want for want in candidates if want.created_seq <= run.created_seq]
    chosen = older or candidates
    return max(chosen, key=lambda want: want.created_seq) if chosen else None


_RENDERERS: dict[str, Callable[[_Delivery], Rendered | None]] = {
    "partbuild": _render_partbuild,
    "cloudevents": _render_cloudevents,
    "openlineage": _render_openlineage,
}
