"""The API's document and its routes: every documented operation has an HTTP test, every route a declaration.

`COVERED` names, for each operation of the OpenAPI document, the test module of this folder
and the test in it that exercises the operation over HTTP; a test fails when an operation has
none, is named twice, or the table names a test that does not exist.
"""

from __future__ import annotations

import ast
from pathlib import Path

import httpx

from partbuild.api.app import create_app
from partbuild.api.routes import METRICS_RESOURCE, resource_routers
from partbuild.api.surface import OPERATIONS, RESOURCES

from httpkit import api_routes, ok
from serverkit import ApiServer

TESTS = Path(__file__).resolve().parents[1]
WEB_PACKAGE = "partbuild.api.web."

# For each test module of this folder: the operations of the document it exercises over HTTP, and its test.
COVERED: dict[str, dict[str, str]] = {
    "api/test_wants.py": {
        "POST /api/v1/wants": "test_create_want_and_get_it",
        "POST /api/v1/wants/batch": "test_batch_of_wants_is_one_append",
        "POST /api/v1/wants/batch/validate": "test_validate_batch_checks_as_create_would_and_records_nothing",
        "GET /api/v1/wants": "test_list_wants_by_state_ref_and_root",
        "GET /api/v1/wants/{want_id}": "test_create_want_and_get_it",
        "POST /api/v1/wants/{want_id}/cancel": "test_cancel_want_then_cancel_again_conflicts",
    },
    "api/test_code_versions.py": {
        "GET /api/v1/jobs/{job}/stale": "test_a_new_version_of_the_weekly_marks_every_live_weekly_stale_and_no_daily",
    },
    "api/test_partitions.py": {
        "GET /api/v1/partitions": "test_list_partitions_by_prefix_and_state_with_cursor_paging",
        "GET /api/v1/partitions/canonical/{ref}": "test_observe_then_canonical_history_and_instance_as_of_seq",
        "GET /api/v1/partitions/history/{ref}": "test_observe_then_canonical_history_and_instance_as_of_seq",
        "POST /api/v1/partitions/taint": "test_taint_then_taint_again_conflicts",
        "POST /api/v1/partitions/observe": "test_observe_then_canonical_history_and_instance_as_of_seq",
        "GET /api/v1/instances/{uuid}": "test_observe_then_canonical_history_and_instance_as_of_seq",
        "POST /api/v1/instances/{uuid}/checks": (
            "test_checks_run_again_on_request_pending_until_answered_and_a_blocking_failure_taints"
        ),
        "POST /api/v1/retention": "test_retention_previews_then_drops_superseded_instances",
    },
    "e2e/test_api_w1.py": {
        "GET /api/v1/instances/{uuid}/lineage": "test_w1_weekly_wants_build_over_http",
        "GET /api/v1/job-runs": "test_w1_weekly_wants_build_over_http",
        "GET /api/v1/job-runs/{job_run_id}": "test_w1_weekly_wants_build_over_http",
    },
    "api/test_bulk.py": {
        "POST /api/v1/bulk": "test_a_bulk_want_is_one_request_and_one_want_and_over_the_limit_nothing_is_recorded",
    },
    "api/test_runs.py": {
        "POST /api/v1/job-runs/{job_run_id}/cancel": "test_cancel_job_run_then_cancel_again_conflicts",
        "GET /api/v1/job-runs/{job_run_id}/logs": "test_job_run_logs_are_paged_and_followed_while_the_run_is_active",
    },
    "api/test_events.py": {
        "GET /api/v1/events": "test_events_are_the_raw_log_paged_by_seq",
    },
    "api/test_changes.py": {
        "GET /api/v1/changes": "test_changes_of_a_taint_and_its_new_data_paged",
    },
    "api/test_audit.py": {
        "POST /api/v1/audit": "test_audit_digest_is_stable_and_lists_rejected_events",
    },
    "api/test_operations.py": {
        "POST /api/v1/buckets/layout": "test_reshard_then_bucket_layouts_as_of_any_seq",
        "GET /api/v1/buckets": "test_reshard_then_bucket_layouts_as_of_any_seq",
        "GET /api/v1/counts": "test_counts_say_how_many_waiting_instances_no_active_want_needs",
        "GET /healthz": "test_healthz_and_metrics",
        "GET /metrics": "test_healthz_and_metrics",
    },
    "api/test_groups.py": {
        "GET /api/v1/groups": "test_worker_group_ownership_as_of_any_seq_and_heartbeats_now",
        "GET /api/v1/group/{name}": "test_worker_group_ownership_as_of_any_seq_and_heartbeats_now",
    },
    "api/test_automation.py": {
        "GET /api/v1/automation": "test_schedules_show_their_ticks_and_next_time_and_pausing_follows_the_folds_rules",
        "POST /api/v1/automation/schedules/{name}/pause": (
            "test_schedules_show_their_ticks_and_next_time_and_pausing_follows_the_folds_rules"
        ),
        "POST /api/v1/automation/schedules/{name}/resume": (
            "test_schedules_show_their_ticks_and_next_time_and_pausing_follows_the_folds_rules"
        ),
        "POST /api/v1/automation/schedules/{name}/trigger": (
            "test_a_tick_by_hand_wants_now_and_leaves_the_schedules_times_alone"
        ),
    },
    "api/test_jobs.py": {
        "GET /api/v1/jobs/{name}/partitions/summary": "test_summary_counts_what_the_partitions_list_reports",
        "GET /api/v1/graph": "test_the_graph_has_three_nodes_two_edges_and_the_summaries_counts",
    },
    "api/test_sources.py": {
        "GET /api/v1/sources": "test_sources_show_scans_redacted_and_a_scan_request_makes_a_pass_due",
        "POST /api/v1/sources/{name}/scan": "test_sources_show_scans_redacted_and_a_scan_request_makes_a_pass_due",
    },
    "api/test_subscriptions.py": {
        "POST /api/v1/subscriptions": "test_subscription_lifecycle_over_http_never_shows_the_secret",
        "GET /api/v1/subscriptions": "test_subscription_lifecycle_over_http_never_shows_the_secret",
        "GET /api/v1/subscriptions/{name}": "test_subscription_lifecycle_over_http_never_shows_the_secret",
        "POST /api/v1/subscriptions/{name}/pause": "test_subscription_lifecycle_over_http_never_shows_the_secret",
        "POST /api/v1/subscriptions/{name}/resume": "test_subscription_lifecycle_over_http_never_shows_the_secret",
        "DELETE /api/v1/subscriptions/{name}": "test_subscription_lifecycle_over_http_never_shows_the_secret",
        "POST /api/v1/subscriptions/{name}/shards": "test_subscription_reshard_and_offsets_follow_the_fold",
        "POST /api/v1/subscriptions/{name}/offsets": "test_subscription_reshard_and_offsets_follow_the_fold",
        "GET /api/v1/subscriptions/{name}/dlq": "test_subscription_dead_letter_routes",
        "POST /api/v1/subscriptions/{name}/dlq/replay": "test_subscription_dead_letter_routes",
        "POST /api/v1/subscriptions/{name}/dlq/purge": "test_subscription_dead_letter_routes",
    },
}


def _defined(module: str) -> set[str]:
    """The top-level functions of a test module (a path under tests/), read: test modules never import each other."""
    return {node.name for node in ast.parse((TESTS / module).read_text()).body if isinstance(node, ast.FunctionDef)}


def test_openapi_document_operations_are_all_covered(shared_client: httpx.Client) -> None:
    """Every operation the server documents has a test named here, and the table names real tests."""
    document = ok(shared_client.get("/openapi.json"))
    operations = [f"{method.upper()} {path}" for path, item in document["paths"].items() for method in item]
    covered = [operation for tests in COVERED.values() for operation in tests]
    assert sorted(operations) == sorted(covered)
    named = [(module, test) for module, tests in COVERED.items() for test in tests.values()]
    assert [(module, test) for module, test in named if test not in _defined(module)] == []


def test_docs_page_is_html(shared_client: httpx.Client) -> None:
    """/docs is the interactive documentation over the served document."""
    response = shared_client.get("/docs")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    assert "swagger" in response.text.lower() and "/openapi.json" in response.text


def test_each_resource_has_one_router_serving_exactly_its_declared_operations() -> None:
    """A router per resource, in the resources' order, tagged with its tag; its routes are its declarations."""
    routers = resource_routers()
    assert [router.tags for router in routers] == [[resource.tag] for resource in RESOURCES.values()]
    for router, name in zip(routers, RESOURCES, strict=True):
        served = [(method, route.path) for route in api_routes(router.routes) for method in route.methods]
        declared = [(op.method, op.route) for op in OPERATIONS.values() if op.resource == name]
        extra = [("GET", "/metrics")] if name == METRICS_RESOURCE else []
        assert served == declared + extra, name
    assert {op.resource for op in OPERATIONS.values()} == set(RESOURCES)


def test_every_api_route_of_the_app_comes_from_a_declaration(shared: ApiServer) -> None:
    """The app serves each declared operation once, under its resource's tag, and no other API route but /metrics."""
    app = create_app(shared.service)
    routes = [route for route in api_routes(app.routes) if not route.endpoint.__module__.startswith(WEB_PACKAGE)]
    by_name = {route.name: route for route in routes}
    assert len(by_name) == len(routes) and set(by_name) == {*OPERATIONS, "metrics"}
    for name, operation in OPERATIONS.items():
        route = by_name[name]
        assert (route.methods, route.path) == ({operation.method}, operation.route)
        assert route.tags == [RESOURCES[operation.resource].tag]
