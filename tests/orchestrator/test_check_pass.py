"""The shared pass of aggregate checks (orchestrator/check_pass.py), its parts that need no Spark: which
location a file Spark listed belongs to. The pass itself on real parquet data: tests/e2e/test_checks_spark.py."""

from __future__ import annotations

import os

import pytest

from partbuild.orchestrator.check_pass import UnmatchedRows, _location_parts, _owners, _spellings, compute


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
