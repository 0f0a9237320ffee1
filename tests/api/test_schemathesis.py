"""Schemathesis against the API's own OpenAPI document, served by a real uvicorn server.

The schema is loaded from the running server (`/openapi.json`), so what is tested is what a
client sees. The service is graph-less and seeded with wants (one with the id the document
gives as its example), observations (one of the example ref, so the taint example hits a Live
partition), a taint, two job runs and a worker group (named as the document's example), so reads
hit real data.

Each test is a run of schemathesis' own engine, the one behind
`st run --checks all --phases examples,coverage,fuzzing,stateful`:
- every check schemathesis has (`checks.enabled`): no 5xx; documented statuses, content types,
  headers and bodies; schema-valid requests accepted (2xx, or 404/409 where the state decides)
  and schema-violating ones refused; a 405 with `Allow` for every undeclared method; the stateful
  checks (use after free, resource availability); the auth checks have nothing to do (the API
  declares no security);
- the examples, coverage (boundary values, undeclared methods, missing and wrong-typed
  parameters) and fuzzing phases on every operation; then the stateful phase: sequences along
  the links schemathesis infers between operations (a created want's id read back, cancelled...).
Deterministic (`generation.deterministic`, one worker): the same cases every run, so a red run
reproduces. The engine rather than `@schema.parametrize()` and `as_state_machine()`: stateful
scenarios change the server, so the rules a scenario can take differ between scenarios, which a
bare Hypothesis state machine reports as `FlakyStrategyDefinition`; the engine expects it.

No operation and no check is excluded. `/metrics` answers Prometheus text and the document
declares its 200 without content, so the body checks have nothing to compare there.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import schemathesis

# `from_url` imports the OpenAPI loader lazily, and pytest rewrites schemathesis' modules as it imports them
# (`ast.parse`): in a test, with the server's threads running, CPython 3.11.7 may then raise "AST constructor
# recursion depth mismatch" (python/cpython#106905, fixed in 3.11.8), so they are imported here, at collection.
import schemathesis.specs.openapi.schemas
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import Status, events, from_schema

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.log.events import envelope

from groupapikit import append_group_history
from serverkit import ApiServer, graphless_api_server

API = "/api/v1"
EXAMPLE_REF = "agg/daily_clicks/date=2026-01-01"  # the Ref example of the document's request bodies
EXAMPLE_WANT_ID = "backfill-2026-01"  # the WantId example
EXAMPLE_GROUP = "workers"  # the group name example of /group/{name}
MAX_EXAMPLES = 50  # fuzzing cases per operation, and stateful scenarios; coverage cases come on top
PHASES = ("examples", "coverage", "fuzzing", "stateful")


def _created(response: httpx.Response) -> int:
    assert response.status_code == 201, response.text
    return int(response.json().get("seq") or response.json()["last_seq"])


@pytest.fixture(scope="module")
def seeded_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """A graph-less API server with wants, observations, a taint and two job runs in its log."""
    url = f"sqlite:///{tmp_path_factory.mktemp('schemathesis') / 'partbuild.db'}"
    with graphless_api_server(url) as api:
        client = api.client
        _created(
            client.post(f"{API}/wants", json={"refs": ["agg/weekly_clicks/week=2026-W01"], "want_id": EXAMPLE_WANT_ID})
        )
        batch = {"wants": [{"refs": [f"agg/seed/n={n}", "src/seed/a"], "comment": f"seed {n}"} for n in range(3)]}
        _created(client.post(f"{API}/wants/batch", json=batch))
        for ref in (EXAMPLE_REF, "src/seed/a", "src/seed/b", "src/seed/tainted"):
            _created(client.post(f"{API}/partitions/observe", json={"ref": ref, "location": f"/data/{ref}"}))
        _created(client.post(f"{API}/partitions/taint", json={"ref": "src/seed/tainted", "reason": "seed"}))
        # Job runs, as an orchestrator records them (the API has no write for them): one queued, one running.
        uuids = [client.get(f"{API}/partitions/canonical/agg/seed/n={n}").json()["uuid"] for n in range(2)]
        queued, running = "seed-run-queued", "seed-run-running"
        api.log.append(
            [
                envelope(pb.JobRunBuffer(job_run_id=queued, job_label="seed_job", instance_uuids=uuids[:1])),
                envelope(pb.JobRunBuffer(job_run_id=running, job_label="seed_job", instance_uuids=uuids[1:])),
                envelope(pb.JobRunHeartbeat(job_run_id=running)),
            ]
        )
        runs = client.get(f"{API}/job-runs", params={"min_seq": api.log.head()}).json()["items"]
        assert {run["state"] for run in runs} == {"queued", "running"}, runs
        # A worker group in its second epoch, with a hand-off in flight and heartbeat rows.
        append_group_history(api.service.db, int(time.time() * 1000), EXAMPLE_GROUP)
        assert client.get(f"{API}/group/{EXAMPLE_GROUP}", params={"min_seq": api.log.head()}).status_code == 200
        yield api


@dataclass
class Run:
    """What a schemathesis run found, and which operations (by label) each phase tested."""

    found: list[str] = field(default_factory=list)
    tested: dict[str, set[str]] = field(default_factory=dict)


def run_schemathesis(api: ApiServer, *phases: str) -> Run:
    """Run these phases of schemathesis with every check against the served document."""
    config = SchemathesisConfig.from_dict(
        {
            "seed": 0,
            "cache": {"enabled": False},  # nothing carried over from a previous run, nothing written here
            "workers": 1,
            "checks": {"enabled": True},
            "phases": {phase: {"enabled": phase in phases} for phase in PHASES},
            "generation": {"max-examples": MAX_EXAMPLES, "deterministic": True},
        }
    )
    schema = schemathesis.openapi.from_url(f"{api.url}/openapi.json", config=config)
    run = Run()
    for event in from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            if event.status != Status.SKIP:
                run.tested.setdefault(event.phase.value, set()).add(event.recorder.label)
            run.found += _failures(event)
        elif isinstance(event, events.NonFatalError):
            run.found.append(f"{event.label}: error: {event.info.title}: {event.info.message}")
        elif isinstance(event, events.FatalError):
            raise event.exception
        elif isinstance(event, events.EngineFinished):
            run.found += [f"{failure.operation}: {failure.title}: {failure.message}" for failure in event.failures]
    return run


def _failures(event: events.ScenarioFinished) -> list[str]:
    """Each failed check of a scenario: operation, what failed, and the curl command that shows it."""
    found = []
    for checks in event.recorder.checks.values():
        for check in checks:
            info: Any = check.failure_info
            if info is not None:
                failure = info.failure
                found.append(
                    f"{event.phase.value} {failure.operation}: {failure.title}\n{failure.message}\n{info.code_sample}"
                )
    return found


def test_every_operation_conforms_to_the_document(seeded_api: ApiServer) -> None:
    """Examples, coverage and fuzzing cases of each operation pass every check."""
    run = run_schemathesis(seeded_api, "examples", "coverage", "fuzzing")
    assert not run.found, "\n\n".join(run.found)
    document = seeded_api.client.get("/openapi.json").json()
    operations = {f"{method.upper()} {path}" for path, item in document["paths"].items() for method in item}
    assert run.tested["coverage"] == run.tested["fuzzing"] == operations


def test_stateful_sequences_conform_to_the_document(seeded_api: ApiServer) -> None:
    """Sequences of calls along the links between operations pass every check, the stateful ones too."""
    run = run_schemathesis(seeded_api, "stateful")
    assert not run.found, "\n\n".join(run.found)
    assert run.tested.get("stateful"), "no stateful scenario ran"
