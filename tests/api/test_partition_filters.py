"""Filters that answer "which" (issue 36 item 2) over HTTP and the CLI, on the golden log of issue 34: the
partitions whose latest checks failed (a named check, a result), whose note holds an error's text, that a want
made by someone names; as of any seq."""

from __future__ import annotations

import json

import pytest

from clikit import run_cli
from golden_outcomes import outcome_events
from httpkit import PARTITIONS, listed, problem
from serverkit import ApiServer


def refs(api_server: ApiServer, **params: object) -> list[str]:
    return listed(api_server.client, PARTITIONS, "ref", **params)


def test_partitions_filter_by_check_and_error_text_as_of_any_seq(
    api_server: ApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    api_server.log.append(outcome_events())
    api_server.service.refresh()
    assert refs(api_server, check="rows", check_result="failed") == ["d/3"]
    assert refs(api_server, check="rows") == ["d/2", "d/3"]  # its latest checks include it, any result
    assert refs(api_server, check_result="passed") == ["d/2"]
    assert refs(api_server, check="nonesuch") == []
    assert refs(api_server, error="file_footer") == ["d/4"]  # any case
    assert refs(api_server, error="batch of 2", state="live") == ["d/5", "d/6"]
    assert refs(api_server, check="rows", as_of_seq=4) == []  # the outcome that checked them came at seq 5
    assert refs(api_server, check="rows", check_result="failed", as_of_seq=5) == ["d/3"]
    wanted = [f"d/{n}" for n in range(1, 8)] + ["x/1", "y/1"]
    assert refs(api_server, made_by="user:ann") == wanted == refs(api_server, made_by="user")  # not raw/1
    assert refs(api_server, made_by="user:bob") == refs(api_server, made_by="reaction") == []
    assert refs(api_server, made_by="user:ann", as_of_seq=1) == ["d/1", "d/2", "d/3", "d/4"]
    problem(api_server.client.get(PARTITIONS, params={"made_by": "boss"}), 422, "made_by")
    problem(api_server.client.get(PARTITIONS, params={"check_result": "meh"}), 422, "check_result")
    problem(api_server.client.get(PARTITIONS, params={"error": ""}), 422, "error")
    code, out, _ = run_cli(
        capsys, "partitions", "--check", "rows", "--check-result", "failed", "--json", "--server", api_server.url
    )
    assert code == 0 and [item["ref"] for item in json.loads(out)["items"]] == ["d/3"]
