"""The shared pass of aggregate checks (orchestrator/check_pass.py), its parts that need no Spark: which
location a file Spark listed belongs to, what the writes observed, row counts from parquet footers. The pass
itself on real parquet data: tests/e2e/test_checks_spark.py and tests/e2e/test_observed_writes_spark.py."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from partbuild.orchestrator.check_pass import (
    PassOutput,
    UnmatchedRows,
    _location_parts,
    _owners,
    _spellings,
    compute,
)
from partbuild.orchestrator.parquet_rows import footer_rows, local_rows


def test_a_location_is_read_as_hadoop_reads_it() -> None:
    assert _location_parts("/w/a b%c#x?y/") == ("", "", "/w/a b%c#x?y")  # `#`, `?` and `%` are the path's own
    assert _location_parts("s3a://bucket/w/x") == ("s3a", "bucket", "/w/x")
    assert _location_parts("file:///w/x") == _location_parts("file:/w/x") == ("file", "", "/w/x")
    assert _location_parts("w/x") == ("", "", os.path.join(os.getcwd(), "w/x"))  # the process's directory


def test_a_listed_file_belongs_to_the_location_it_is_under_by_its_decoded_path() -> None:
    locations = ["/w/a", "/w/a b%c#x?y", "s3a://bucket/w/a"]
    assert _owners("file:///w/a%20b%25c%23x%3Fy/part-0.parquet", locations) == [1]
    assert _owners("file:/w/a/part-0.parquet", locations) == [0]  # a bare path: whichever file system
    assert _owners("hdfs://nn:8020/w/a/part-0.parquet", locations) == [0]
    assert _owners("s3a://bucket/w/a/part-0.parquet", locations[1:]) == [1]
    with pytest.raises(UnmatchedRows, match="under none of the 1 locations"):
        _owners("s3a://other/w/a/part-0.parquet", ["s3a://bucket/w/a"])  # another bucket
    with pytest.raises(UnmatchedRows, match="under none"):
        _owners("file:/w/ab/part-0.parquet", ["/w/a"])  # a prefix of the name is not a parent directory


def test_one_place_spelled_twice_is_one_owner_and_nested_locations_are_refused() -> None:
    assert _owners("file:/w/a/part-0.parquet", ["file:///w/a", "/w/a/"]) == [0, 1]
    with pytest.raises(UnmatchedRows, match="nested"):
        _owners("file:/w/a/b/part-0.parquet", ["/w/a", "/w/a/b"])


def test_a_row_may_name_a_local_file_in_either_form_spark_writes() -> None:
    assert _spellings("file:///w/a/p") == ["file:///w/a/p", "file:/w/a/p"]
    assert _spellings("s3a://bucket/w/p") == ["s3a://bucket/w/p"]


def test_nothing_to_compute_asks_nothing_of_spark() -> None:
    assert compute(object(), [], {0: {}}) == {}


def test_what_the_writes_observed_is_taken_as_is_and_asks_nothing_of_spark() -> None:
    """Every check's columns and every counted location's rows known from the writes: no Spark at all."""
    outputs = [
        PassOutput("/w/a", {0: {"rows": ["/w/a"]}}, {1: {"nulls": 0}}, rows=3),
        PassOutput("/w/b", {0: {"rows": ["/w/b"]}}, {1: {"nulls": 2}}, rows=0),
    ]
    shares = compute(object(), outputs, {0: {}, 1: {"nulls": "an expression"}})
    assert {key: share.values for key, share in shares.items()} == {
        (0, 0): {"rows": 3},
        (0, 1): {"nulls": 0},
        (1, 0): {"rows": 0},
        (1, 1): {"nulls": 2},
    }
    assert all(share.error is None for share in shares.values())


def test_parquet_rows_come_from_the_footers_of_the_files_spark_would_read(tmp_path: Path) -> None:
    table = pa.table({"k": [1, 2, 3]})
    (tmp_path / "out" / "n=1").mkdir(parents=True)
    (tmp_path / "out" / "_n=2").mkdir()  # a partition directory: read
    (tmp_path / "out" / "_temporary").mkdir()  # hidden from Spark: not read
    pq.write_table(table, tmp_path / "out" / "part-0.parquet")
    pq.write_table(table, tmp_path / "out" / "n=1" / "part-1.parquet")
    pq.write_table(table, tmp_path / "out" / "_n=2" / "part-2.parquet")
    pq.write_table(table, tmp_path / "out" / "_temporary" / "part-3.parquet")
    pq.write_table(table, tmp_path / "out" / ".part-4.parquet")
    (tmp_path / "out" / "_SUCCESS").write_text("")
    (tmp_path / "out" / ".part-0.parquet.crc").write_bytes(b"\0\1")
    location = str(tmp_path / "out")
    assert local_rows(location) == 9
    assert local_rows(f"file://{location}") == 9 and local_rows(location + "/part-0.parquet") == 3
    assert local_rows(location, bare_is_local=False) is None  # a bare path on a default file system elsewhere
    assert local_rows("s3a://bucket/out") is None and local_rows(str(tmp_path / "absent")) is None
    (tmp_path / "out" / "not-parquet").write_text("text")
    assert local_rows(location) is None  # Spark reads it, and says what is wrong with it
    assert footer_rows(object(), [location]) == {}  # no classic SparkContext: Spark counts
