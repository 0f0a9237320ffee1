"""Every integer a request can carry is bounded within SQL's 64-bit integers, over the whole declared surface.

Issue 35, item 6: `GET /job-runs/{id}/logs?after=69934526627786916888576` reached SQLite and answered 500
(`OverflowError: Python int too large to convert to SQLite INTEGER`). Walked here, so a new route or field
cannot forget its bound:
- the served OpenAPI document: every integer of every operation's parameters (query, path, header) and of
  its request body, through `$ref`s, `anyOf`, arrays and maps, has a `minimum` and a `maximum` within
  -2^63 .. 2^63 - 1;
- every route of the app (`app.routes`), the web pages outside the document included: the same, from the
  document FastAPI would write for all of them;
- every request body model (and the models nested in it) is strict: "10" is no integer.
Then the bug itself: the overflowing `after` is a 422 naming it, over HTTP and through the CLI, and a
line number at the bound is read (an empty page).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from pydantic import BaseModel

from partbuild.api.app import create_app
from partbuild.api.models.common import MAX_SAFE_INT, MAX_SQL_INT, StrictRequest
from partbuild.api.service import Service
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.log.events import envelope

from clikit import run_cli
from httpkit import API, api_routes, canonical, head_seq, ok, problem, want
from serverkit import ApiServer

MIN_SQL_INT = -(2**63)
LOWER = ("minimum", "exclusiveMinimum", "ge", "gt")  # the served document says minimum; FastAPI's raw one, ge too
UPPER = ("maximum", "exclusiveMaximum", "le", "lt")
RUN = "bounds-run"


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FastAPI]:
    """The app as `serve` builds it, over a graph-less service on a real SQLite file."""
    url = f"sqlite:///{tmp_path_factory.mktemp('bounds') / 'partbuild.db'}"
    with Database.open(url, auto_upgrade=True) as db:
        yield create_app(Service(db))


def integers(node: Any, where: str, schemas: dict[str, Any], seen: frozenset[str] = frozenset()) -> Iterator[tuple]:
    """(where, schema) of every integer schema under `node`, following `$ref`s into `schemas` (each once a path)."""
    if isinstance(node, list):
        for index, item in enumerate(node):
            yield from integers(item, f"{where}/{index}", schemas, seen)
        return
    if not isinstance(node, dict):
        return
    reference = node.get("$ref")
    if isinstance(reference, str):
        name = reference.rsplit("/", 1)[1]
        if name not in seen:
            yield from integers(schemas[name], f"{where}->{name}", schemas, seen | {name})
        return
    if node.get("type") == "integer" or (isinstance(node.get("type"), list) and "integer" in node["type"]):
        yield where, node
    for key, value in node.items():
        if key not in ("examples", "example", "default", "enum", "const"):  # values, not schemas
            yield from integers(value, f"{where}/{key}", schemas, seen)


def request_integers(document: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every integer schema of what a request carries: each operation's parameters and request body."""
    schemas = document.get("components", {}).get("schemas", {})
    found: list[tuple[str, dict[str, Any]]] = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            for parameter in operation.get("parameters", []):
                where = f"{method.upper()} {path} {parameter['in']} {parameter['name']}"
                found += integers(parameter.get("schema", {}), where, schemas)
            for media, content in operation.get("requestBody", {}).get("content", {}).items():
                found += integers(content.get("schema", {}), f"{method.upper()} {path} body ({media})", schemas)
    return found


def unbounded(found: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Those without a lower and an upper bound within SQL's 64-bit signed integers, with why."""
    wrong = []
    for where, schema in found:
        lower = [schema[key] for key in LOWER if key in schema]
        upper = [schema[key] for key in UPPER if key in schema]
        if not lower or not upper:
            wrong.append(f"{where}: no {'minimum' if not lower else 'maximum'} ({schema})")
        elif min(lower) < MIN_SQL_INT or max(upper) > MAX_SQL_INT:
            wrong.append(f"{where}: bounds {lower} .. {upper} are past SQL's 64-bit integers")
    return wrong


def test_every_integer_of_the_served_document_is_bounded_for_sql(app: FastAPI) -> None:
    """Parameters and request bodies of every documented operation: each integer has a minimum and a maximum."""
    found = request_integers(app.openapi())
    assert not unbounded(found), "\n".join(unbounded(found))
    names = {where.split(" ")[3].split("/")[0] for where, _ in found if " query " in where}
    # The walk reaches what it must: the integer of the bug, the common ones, and body fields behind $refs.
    assert {"after", "limit", "as_of_seq", "min_seq", "depth", "after_seq", "from_seq"} <= names, names
    assert any("WantRequest/properties/ttl_seconds" in where for where, _ in found)
    assert any("RetryPolicyRequest/properties/max_age_ms" in where for where, _ in found)  # nested two deep
    assert len(found) > 60, len(found)


def shown(route: APIRoute) -> APIRoute:
    """A copy of `route` that a document would list (the web pages are left out of the served one)."""
    listed = copy.copy(route)
    listed.include_in_schema = True
    return listed


def test_every_route_of_the_app_bounds_its_integers(app: FastAPI) -> None:
    """Every route the app serves, web pages and form posts included: no integer parameter without bounds."""
    routes = list(api_routes(app.routes))
    hidden = [route for route in routes if not route.include_in_schema]
    assert {"/wants", "/instances/{uuid}", "/actions/want"} <= {route.path for route in hidden}
    document = get_openapi(title="every route", version="0", routes=[shown(route) for route in routes])
    assert len(document["paths"]) == len({route.path for route in routes})
    found = request_integers(document)
    assert not unbounded(found), "\n".join(unbounded(found))
    assert len(found) >= len(request_integers(app.openapi()))


def body_models(annotation: Any) -> Iterator[type[BaseModel]]:
    """The pydantic models an annotation names (through Optional, lists, Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        for field in annotation.model_fields.values():
            yield from body_models(field.annotation)
    for argument in getattr(annotation, "__args__", ()) or ():
        yield from body_models(argument)


def test_every_request_body_model_is_strict(app: FastAPI) -> None:
    """Every body a route takes, and every model in it, is a StrictRequest: "10" is no integer, true no number."""
    models: dict[str, type[BaseModel]] = {}
    for route in api_routes(app.routes):
        for parameter in route.dependant.body_params:
            for model in body_models(parameter.field_info.annotation):
                models[model.__name__] = model
    assert {"WantRequest", "WantBatchRequest", "RetryPolicyRequest", "ObserveRequest"} <= set(models)
    for name, model in models.items():
        assert issubclass(model, StrictRequest), f"{name} is not a StrictRequest"
        assert model.model_config.get("strict") is True and model.model_config.get("extra") == "forbid", name


@pytest.fixture
def run_server(api_server: ApiServer) -> ApiServer:
    """A server whose log holds a queued job run (a run's lines are read from SQL: the overflow reached it)."""
    want(api_server.client, ["bounds/a"])
    uuid = canonical(api_server.client, "bounds/a")["uuid"]
    api_server.log.append([envelope(pb.JobRunBuffer(job_run_id=RUN, job_label="j", instance_uuids=[uuid]))])
    return api_server


@pytest.mark.parametrize("after", ["69934526627786916888576", str(MAX_SQL_INT + 1), str(MAX_SAFE_INT + 1)])
def test_a_log_line_number_past_the_bound_is_a_422_naming_after(run_server: ApiServer, after: str) -> None:
    """The issue's request, and one past SQL's integers, and one past the document's maximum: a 422, never a 500."""
    client = run_server.client
    ok(client.get(f"{API}/job-runs/{RUN}/logs"))  # the run exists: its lines are read
    before = head_seq(client)
    problem(client.get(f"{API}/job-runs/{RUN}/logs", params={"after": after}), 422, "query.after", str(MAX_SAFE_INT))
    assert head_seq(client) == before


def test_a_log_line_number_at_the_bound_reads_an_empty_page(run_server: ApiServer) -> None:
    """At the documented maximum the query reaches SQL and answers: no lines above it."""
    page = ok(run_server.client.get(f"{API}/job-runs/{RUN}/logs", params={"after": MAX_SAFE_INT}))
    assert (page["lines"], page["next_after"]) == ([], MAX_SAFE_INT)


def test_the_cli_refuses_a_line_number_past_the_bound_in_one_line(
    run_server: ApiServer, sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`runs logs --after` past the bound: exit 2 with one line, over HTTP and on the database (the server's) alike."""
    for target in (["--server", run_server.url], ["--db", sqlite_url]):
        code, _, err = run_cli(capsys, "runs", "logs", RUN, "--after", "69934526627786916888576", *target)
        assert code == 2 and err.count("\n") == 1 and "--after" in err, err
