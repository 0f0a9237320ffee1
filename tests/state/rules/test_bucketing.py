"""Bucketing: the bucket function, its configuration, round-robin selection, and the CLI commands."""

from __future__ import annotations

import hashlib
import hmac
import io
import itertools
import json
import logging
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partbuild.api.cli import main
from partbuild.orchestrator.identity import WORKER_ID
from partbuild.state.log.replay import load_state
from partbuild.state.rules.bucketing import (
    BucketingConfig,
    BucketingConfigError,
    apply_round_robin_bucketing,
    bucket,
    config_json_schema,
    next_bucket_id,
)

from bucketkit import GITHUB_KEY, SPEC_VECTORS, reference
from clikit import run_cli

reference_bucket = reference
KEY = GITHUB_KEY
VECTORS = SPEC_VECTORS  # the Bucketing spec v1.0's test vectors: (data, bucket_total, bucket)


# ----------------------------------------------------------------- the bucket function


@pytest.mark.parametrize(("data", "total", "expected"), VECTORS)
def test_seed_vectors(data: str, total: int, expected: int) -> None:
    assert bucket(KEY, data, total) == expected


# Long keys (over MD5's 64-byte block, which HMAC hashes first) and 4 KiB data of any Unicode text.
_keys = st.text() | st.text(min_size=1).map(lambda s: (s * 100)[:100])
_data = st.text(max_size=64) | st.text(min_size=1).map(lambda s: (s * 4096)[:4096])


@settings(max_examples=150, deadline=None)
@given(key=_keys, data=_data)
def test_bucket_equals_the_reference_for_any_text_and_every_total_to_1000(key: str, data: str) -> None:
    digest = int(hmac.new(key.encode(), data.encode(), hashlib.md5).hexdigest()[:8], 16)
    assert [bucket(key, data, total) for total in range(1, 1001)] == [digest % t + 1 for t in range(1, 1001)]


def test_non_ascii_and_large_totals() -> None:
    for key, data in [("ключ", "agg/événements/site=Zürich"), ("🔑", "日本/データ"), ("k" * 65, "x" * 4096)]:
        for total in (1, 2**31, 2**32, 2**32 + 1, 10**20):
            assert bucket(key, data, total) == reference_bucket(key, data, total)
    assert bucket(KEY, "anything", 1) == 1


def test_changing_the_key_changes_assignments() -> None:
    refs = [f"agg/daily_clicks/date=2026-01-{day:02d}" for day in range(1, 29)]
    first = [bucket("partbuild/a", ref, 10) for ref in refs]
    second = [bucket("partbuild/b", ref, 10) for ref in refs]
    assert first != second
    assert sum(a != b for a, b in zip(first, second, strict=True)) > len(refs) // 2


def test_lone_surrogates_are_a_clear_value_error() -> None:
    with pytest.raises(
        ValueError, match=r"bucket data is not valid Unicode text: lone surrogate '\\udcff' at position 2"
    ):
        bucket(KEY, "ab\udcff", 3)
    with pytest.raises(ValueError, match="bucket key is not valid Unicode text"):
        bucket("\ud800", "ab", 3)


def test_non_text_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="bucket data must be a str, got bytes"):
        bucket(KEY, b"facebook/react", 12)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="bucket key must be a str, got NoneType"):
        bucket(None, "facebook/react", 12)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("total", "error"), [(0, ValueError), (-1, ValueError), ("3", TypeError), (True, TypeError), (2.0, TypeError)]
)
def test_bad_totals(total: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="bucket_total"):
        bucket(KEY, "x", total)


# ----------------------------------------------------------------- configuration


def test_defaults_process_everything() -> None:
    config = BucketingConfig()
    assert (config.bucket_total, config.bucket_id, config.round_robin_bucket_execution) == (1, 1, False)
    assert config.bucket_ranges is None
    assert all(config.contains(KEY, data) for data, _, _ in VECTORS)
    assert BucketingConfig.from_mapping({}) == config


@pytest.mark.parametrize(
    ("values", "field", "message"),
    [
        ({"bucket_total": 0}, "bucket_total", "bucket_total: 0 is not at least 1"),
        ({"bucket_total": -3}, "bucket_total", "bucket_total: -3 is not at least 1"),
        ({"bucket_total": "10"}, "bucket_total", "bucket_total: '10' is not an integer"),
        ({"bucket_total": True}, "bucket_total", "bucket_total: True is not an integer"),
        ({"bucket_total": 4.0}, "bucket_total", "bucket_total: 4.0 is not an integer"),
        ({"bucket_id": 0}, "bucket_id", "bucket_id: 0 is not within [1, bucket_total=1]"),
        ({"bucket_total": 3, "bucket_id": 4}, "bucket_id", "bucket_id: 4 is not within [1, bucket_total=3]"),
        ({"bucket_id": "1"}, "bucket_id", "bucket_id: '1' is not an integer"),
        ({"round_robin_bucket_execution": 1}, "round_robin_bucket_execution", "1 is not a boolean"),
        ({"round_robin_bucket_execution": "true"}, "round_robin_bucket_execution", "'true' is not a boolean"),
        ({"bucket_ranges": ""}, "bucket_ranges", "bucket_ranges: '' names no bucket"),
        ({"bucket_ranges": " , "}, "bucket_ranges", "names no bucket"),
        ({"bucket_ranges": []}, "bucket_ranges", "[] names no bucket"),
        ({"bucket_total": 6, "bucket_ranges": "2-x"}, "bucket_ranges", "'2-x' is not a bucket number or a range"),
        ({"bucket_total": 6, "bucket_ranges": "1.5"}, "bucket_ranges", "'1.5' is not a bucket number"),
        ({"bucket_total": 6, "bucket_ranges": "-1"}, "bucket_ranges", "'-1' is not a bucket number"),
        ({"bucket_total": 6, "bucket_ranges": "1-2-3"}, "bucket_ranges", "'1-2-3' is not a bucket number"),
        ({"bucket_total": 6, "bucket_ranges": "٣"}, "bucket_ranges", "is not a bucket number"),
        ({"bucket_total": 6, "bucket_ranges": "0"}, "bucket_ranges", "0 in '0' is not within [1, bucket_total=6]"),
        ({"bucket_total": 6, "bucket_ranges": ["1-3", "5-7"]}, "bucket_ranges", "7 in '5-7' is not within"),
        ({"bucket_total": 6, "bucket_ranges": "5-3"}, "bucket_ranges", "bucket_ranges: '5-3' starts after it ends"),
        ({"bucket_total": 6, "bucket_ranges": 5}, "bucket_ranges", "5 is not a string or a list of strings"),
        ({"bucket_total": 6, "bucket_ranges": ["1", 2]}, "bucket_ranges", "is not a string or a list of strings"),
        ({"bucket_count": 6}, "bucket_count", "bucket_count: is not a bucketing setting"),
    ],
)
def test_validation_names_the_field_and_value(values: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(BucketingConfigError, match=None) as raised:
        BucketingConfig.from_mapping(values)
    assert raised.value.field == field
    assert message in str(raised.value)
    assert isinstance(raised.value, ValueError)


@pytest.mark.parametrize(
    ("ranges", "eligible"),
    [
        ("7", (7,)),
        ("3-5", (3, 4, 5)),
        ("1-3,5,7-9", (1, 2, 3, 5, 7, 8, 9)),
        (["1-3", "5", "7-9"], (1, 2, 3, 5, 7, 8, 9)),
        ([" 2 - 3 ", "3,2", "5,"], (2, 3, 5)),
        ("4-4", (4,)),
    ],
)
def test_ranges_forms(ranges: str | list[str], eligible: tuple[int, ...]) -> None:
    config = BucketingConfig(bucket_total=9, round_robin_bucket_execution=True, bucket_ranges=ranges)
    assert config.eligible_buckets() == eligible
    assert hash(config)  # a list is kept as a tuple: the config stays hashable


def test_ranges_without_round_robin_are_logged_and_ignored(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="partbuild.bucketing"):
        config = BucketingConfig(bucket_total=6, bucket_id=4, bucket_ranges="2-3,5")
    assert [r.getMessage() for r in caplog.records] == [
        "bucket_ranges '2-3,5' ignored: round robin bucket execution is off"
    ]
    assert caplog.records[0].levelno == logging.INFO
    assert apply_round_robin_bucketing(config, 2) == (config, 2)  # the configured bucket_id, as-is


# ----------------------------------------------------------------- round robin


def _cycle(config: BucketingConfig, last: int | None, runs: int) -> list[int]:
    chosen = []
    for _ in range(runs):
        config, last = apply_round_robin_bucketing(config, last)
        assert last is not None and config.bucket_id == last
        chosen.append(last)
    return chosen


@pytest.mark.parametrize("total", [1, 2, 5, 12])
def test_round_robin_cycles_through_every_bucket(total: int) -> None:
    config = BucketingConfig(bucket_total=total, round_robin_bucket_execution=True)
    assert _cycle(config, None, 2 * total) == [*range(1, total + 1)] * 2  # no state: first is 1
    for last in range(1, total + 1):
        assert next_bucket_id(config, last) == last % total + 1


@pytest.mark.parametrize("start", [None, 1, 2, 3, 4, 5, 6, 7, 100])
def test_round_robin_with_ranges_cycles_2_3_5_from_any_state(start: int | None) -> None:
    config = BucketingConfig(bucket_total=6, round_robin_bucket_execution=True, bucket_ranges="2-3,5")
    chosen = _cycle(config, start, 7)
    assert set(chosen) == {2, 3, 5}
    assert all(after == {2: 3, 3: 5, 5: 2}[before] for before, after in itertools.pairwise(chosen))
    if start is None:
        assert chosen[0] == 2  # no state: the smallest eligible bucket
    assert chosen[0] == {1: 2, 2: 3, 3: 5, 4: 5}.get(start or 0, 2)


def test_round_robin_logs_the_chosen_bucket(caplog: pytest.LogCaptureFixture) -> None:
    config = BucketingConfig(bucket_total=4, round_robin_bucket_execution=True)
    with caplog.at_level(logging.INFO, logger="partbuild.bucketing"):
        updated, last = apply_round_robin_bucketing(config, 2)
    assert (updated.bucket_id, last) == (3, 3)
    assert [r.getMessage() for r in caplog.records] == ["Using round robin bucket execution. Bucket id: 3"]


@pytest.mark.parametrize("last", [0, -1, "2", True])
def test_round_robin_refuses_a_bad_last_bucket(last: Any) -> None:
    config = BucketingConfig(bucket_total=4, round_robin_bucket_execution=True)
    with pytest.raises(ValueError, match="last executed bucket id must be a positive integer"):
        next_bucket_id(config, last)


# ----------------------------------------------------------------- the JSON Schema

# The Bucketing spec's spec.json excerpt, verbatim; bucket_ranges also carries the spec's examples.
SEED_SCHEMA = {
    "type": "object",
    "properties": {
        "round_robin_bucket_execution": {
            "type": "boolean",
            "title": "Round Robin Bucket Execution",
            "description": "Enable round-robin execution of buckets. When enabled, the connector processes one "
            "bucket per run, automatically advancing the bucket between runs via state.",
            "default": False,
            "order": 10,
        },
        "bucket_total": {
            "type": "integer",
            "title": "Total Number of Buckets",
            "description": "Total number of buckets to partition entities for parallel processing. bucket_id "
            "should be less than or equal to this number.",
            "minimum": 1,
            "default": 1,
            "order": 11,
        },
        "bucket_id": {
            "type": "integer",
            "title": "Bucket Number",
            "description": "Bucket number for partitioning and parallel processing. Used to distribute entities "
            "across multiple sync instances.",
            "minimum": 1,
            "default": 1,
            "order": 12,
        },
        "bucket_ranges": {
            "type": "array",
            "items": {"type": "string"},
            "title": "Bucket Ranges",
            "description": "Optional list of bucket ranges for round-robin execution (e.g., ['1-3', '5-7']). "
            "Only used when round_robin_bucket_execution is enabled.",
            "order": 13,
        },
    },
}


def test_schema_matches_the_seed_field_by_field() -> None:
    schema = config_json_schema()
    assert schema.keys() == SEED_SCHEMA.keys() and schema["type"] == "object"
    assert list(schema["properties"]) == list(SEED_SCHEMA["properties"])  # the spec's order
    for name, expected in SEED_SCHEMA["properties"].items():
        found = dict(schema["properties"][name])
        if name == "bucket_ranges":
            assert found.pop("examples") == [["1-3", "5", "7-9"]]
            assert "default" not in found  # absent: all buckets
        assert found == expected, name
    text = json.dumps(schema)
    assert not any(word in text for word in ('"oneOf"', '"anyOf"', '"allOf"', "dependentRequired", "$data"))


def test_config_schema_command_prints_it(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "config", "schema")
    assert (code, err) == (0, "")
    assert json.loads(out) == config_json_schema()


# ----------------------------------------------------------------- `partbuild bucket`


def test_bucket_command_prints_one_line_per_data_in_order(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "bucket", KEY, "12", "facebook/react", "vercel/next.js", "torvalds/linux")
    assert (code, out, err) == (0, "9\n7\n9\n", "")
    code, out, _ = run_cli(capsys, "bucket", "ключ", "1000", "données/é", "", "-x")
    assert out.splitlines() == [
        str(reference_bucket("ключ", "données/é", 1000)),
        str(reference_bucket("ключ", "", 1000)),
        str(reference_bucket("ключ", "-x", 1000)),  # an unknown option is data
    ]


def test_bucket_command_reads_stdin(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    lines = [data for data, total, _ in VECTORS if total == 10] + ["", " spaced ", "crlf\r", "é"]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("\n".join(lines).encode() + b"\n")))
    code, out, err = run_cli(capsys, "bucket", KEY, "10", "-")
    assert (code, err) == (0, "")
    # Only the newline is stripped: spaces and a carriage return are part of the data.
    assert out.splitlines() == [str(reference_bucket(KEY, line, 10)) for line in lines]
    assert out.splitlines()[:4] == ["6", "4", "8", "7"]


def test_bucket_command_stdin_without_final_newline(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"openai/gpt\nopenai/evals")))
    assert run_cli(capsys, "bucket", KEY, "7", "-")[1] == "3\n1\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"ok\n\xff\n")))
    code, _, err = run_cli(capsys, "bucket", KEY, "7", "-")
    assert code == 2 and err.count("\n") == 1 and "line 2 of stdin is not UTF-8" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["bucket", KEY, "0", "x"], "Invalid value for 'TOTAL': '0' is not a positive integer"),
        (["bucket", KEY, "-3", "x"], "'-3' is not a positive integer"),
        (["bucket", KEY, "+3", "x"], "'+3' is not a positive integer"),
        (["bucket", KEY, "1_0", "x"], "'1_0' is not a positive integer"),
        (["bucket", KEY, "ten", "x"], "'ten' is not a positive integer"),
        (["bucket", KEY, "10"], "Missing argument 'DATA...'"),
        (["bucket", KEY], "Missing argument 'TOTAL'"),
        (["bucket", KEY, "10", "a", "-"], "'-' (read stdin) must be the only DATA"),
        (["bucket", KEY, "10", "-", "-"], "'-' (read stdin) must be the only DATA"),
        (["bucket", KEY, "10", "ok", "bad\udcff"], "#2: bucket data is not valid Unicode text"),
        (["bucket", "bad\udcff", "10", "ok"], "Invalid value for 'KEY': bucket key is not valid Unicode text"),
    ],
)
def test_bucket_command_bad_input_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, out, err = run_cli(capsys, *args)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("partbuild: error: ")
    assert message in err
    assert out == ""


# ----------------------------------------------------------------- `partbuild run`'s options


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--bucket-total", "0"], {}, "Invalid value for '--bucket-total': '0' is not a positive integer"),
        (
            ["--bucket-total", "3", "--bucket-id", "4"],
            {},
            "'--bucket-id': bucket_id: 4 is not within [1, bucket_total=3]",
        ),
        ([], {"PARTBUILD_BUCKET_ID": "2"}, "'--bucket-id': bucket_id: 2 is not within [1, bucket_total=1]"),
        (
            ["--bucket-total", "6", "--bucket-ranges", "2-3", "--bucket-ranges", "7"],
            {},
            "'--bucket-ranges': bucket_ranges: 7 in '7'",
        ),
        (["--bucket-total", "6"], {"PARTBUILD_BUCKET_RANGES": "5-3"}, "bucket_ranges: '5-3' starts after it ends"),
        (["--bucket-total", "6", "--bucket-ranges", ","], {}, "bucket_ranges: [','] names no bucket"),
        # A worker group member's buckets come from its group: no static bucket beside it.
        (["--group", "g", "--bucket-total", "3"], {}, "--group and --bucket-total exclude each other"),
        (["--group", "g", "--bucket-id", "1"], {}, "--group and --bucket-id exclude each other"),
        (["--group", "g"], {"PARTBUILD_ROUND_ROBIN": "true"}, "--group and --round-robin exclude each other"),
        ([], {"PARTBUILD_GROUP": "g", "PARTBUILD_BUCKET_TOTAL": "2"}, "--group and --bucket-total exclude each other"),
        (["--group", "no spaces"], {}, "Invalid value for '--group': invalid group name 'no spaces'"),
        (["--group", "g", "--buckets", "0"], {}, "Invalid value for '--buckets': '0' is not a positive integer"),
        (["--group", "g"], {"PARTBUILD_MEMBER_TIMEOUT": "0"}, "Invalid value for '--member-timeout'"),
    ],
)
def test_run_validates_bucketing_at_start_up(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    env: dict[str, str],
    message: str,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code, _, err = run_cli(capsys, "run", "--graph", "no-such-graph.py", *args)  # refused before the graph is read
    assert code == 2 and err.count("\n") == 1
    assert message in err


class _Stopped(Exception):
    pass


def test_run_passes_the_config_to_the_orchestrator(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    import partbuild.orchestrator.loop as loop
    import partbuild.orchestrator.spark as spark

    given_kwargs: dict[str, Any] = {}

    def fake_orchestrator(*_args: Any, **kwargs: Any) -> None:
        given_kwargs.update(kwargs)
        raise _Stopped

    monkeypatch.setattr(loop, "Orchestrator", fake_orchestrator)
    monkeypatch.setattr(spark, "spark_session", lambda master, conf=None: None)
    monkeypatch.setenv("PARTBUILD_ROUND_ROBIN", "true")
    graph = tmp_path / "graph.py"
    graph.write_text(
        "from partbuild.orchestrator.graph import Graph, Job\n"
        "graph = Graph([Job('noop', ['t/noop/part={n:int}'], lambda ctx: None)])\n"
    )
    args = ["run", "--db", sqlite_url, "--graph", str(graph), "--bucket-total", "6", "--bucket-id", "2"]
    with pytest.raises(_Stopped):
        main([*args, "--bucket-ranges", "1-2", "--bucket-ranges", "5,6"])
    assert given_kwargs["settings"].bucketing == BucketingConfig(6, 2, True, ("1-2", "5,6"))


def test_orchestrator_turns_the_config_into_its_bucket(sqlite_url: str) -> None:
    from partbuild.orchestrator.graph import Graph
    from partbuild.orchestrator.loop import Orchestrator
    from partbuild.state.database import Database

    with Database.open(sqlite_url) as db:
        log = db.log
        worker = Orchestrator(db, Graph([]), warehouse="w", bucketing=BucketingConfig(bucket_total=4, bucket_id=3))
        owned = worker.ownership
        assert owned is not None and (owned.scope.bucket_id, owned.scope.bucket_total) == (3, 4)
        assert Orchestrator(db, Graph([]), warehouse="w", bucketing=BucketingConfig()).ownership is None
        assert Orchestrator(db, Graph([]), warehouse="w").ownership is None
        assert log.head() == 1  # only the worker with a bucket recorded its start; the rotation ignores it
        (stored,) = log.read(0, 10)
        start = stored.to_event()
        assert start.bucket_run_start.static_bucket and start.bucket_run_start.bucket.bucket_id == 3
        assert start.source.system.worker == WORKER_ID
        state, _ = load_state(log)
        assert state.bucket_runs == {} and state.bucket_layouts == {"partbuild": (4, 1)}


def test_round_robin_workers_take_the_next_bucket_from_the_log(sqlite_url: str) -> None:
    """Each start records its bucket (BucketRunStart); the next start, in a new process, continues from it."""
    from partbuild.orchestrator.graph import Graph
    from partbuild.orchestrator.loop import Orchestrator
    from partbuild.state.database import Database

    config = BucketingConfig(bucket_total=6, round_robin_bucket_execution=True, bucket_ranges="2-3,5")
    chosen = []
    with Database.open(sqlite_url) as db:
        log = db.log
        for _ in range(5):
            orchestrator = Orchestrator(db, Graph([]), warehouse="w", bucketing=config)
            assert orchestrator.ownership is not None
            chosen.append(orchestrator.ownership.scope.bucket_id)
            orchestrator.close()
        state, _ = load_state(log)
    assert chosen == [2, 3, 5, 2, 3]
    assert state.bucket_runs == {"partbuild": 3} and not state.rejections
