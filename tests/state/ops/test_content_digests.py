"""The content digest store (`Database.content_digests`) on both backends: file rows, partition facts, pruning.

The behaviour it serves (touched files rebuild nothing, restarts read nothing twice) is tested through the
scanner in tests/orchestrator/sources/test_content.py; here, what the store itself promises.
"""

from __future__ import annotations

from partbuild.state.database import Database
from partbuild.state.ops.content_digests import BATCH, ContentDigestStore, FileDigest

SOURCE, DIRECTORY = "s" * 32, "d" * 32


def test_file_rows_are_written_replaced_and_read_in_batches(database: Database) -> None:
    store: ContentDigestStore = database.content_digests
    ids = [f"{n:064x}" for n in range(BATCH + 7)]  # more than one IN (...) batch
    store.save_files(SOURCE, DIRECTORY, {item_id: FileDigest("v1", 3, b"\x01" * 32, None) for item_id in ids})
    store.save_files(SOURCE, DIRECTORY, {ids[0]: FileDigest("v2", 4, b"\x02" * 64, "c" * 64)})
    rows = store.files(SOURCE, [*ids, "f" * 64])
    assert len(rows) == len(ids)
    assert rows[ids[0]] == FileDigest("v2", 4, b"\x02" * 64, "c" * 64)
    assert rows[ids[-1]] == FileDigest("v1", 3, b"\x01" * 32, None)  # a read cut short: chunks, no content
    assert store.files("o" * 32, ids) == {}  # another source's rows are its own


def test_a_partition_keeps_the_new_and_the_observed_version_and_drops_files_gone(database: Database) -> None:
    store = database.content_digests
    store.save_files(
        SOURCE, DIRECTORY, {"a": FileDigest("v", 1, b"", "1" * 64), "b": FileDigest("v", 1, b"", "2" * 64)}
    )
    store.save_files(SOURCE, "e" * 32, {"c": FileDigest("v", 1, b"", "3" * 64)})
    store.save_partition(SOURCE, DIRECTORY, "V1", "C1", keep=None, item_ids={"a", "b"})
    store.save_partition(SOURCE, DIRECTORY, "V2", "C1", keep="V1", item_ids={"a", "b"})
    assert store.partitions(SOURCE, DIRECTORY, ["V1", "V2", "V0"]) == {"V1": "C1", "V2": "C1"}
    store.save_partition(SOURCE, DIRECTORY, "V3", "C3", keep="V2", item_ids={"a"})  # b was deleted
    assert store.partitions(SOURCE, DIRECTORY, ["V1", "V2", "V3"]) == {"V2": "C1", "V3": "C3"}
    assert set(store.files(SOURCE, ["a", "b", "c"])) == {"a", "c"}  # another directory's rows stay
