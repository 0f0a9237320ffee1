"""Content digests of source files and partitions (`Database.content_digests`), on SQLite and PostgreSQL.

The source scanner confirms a moved weak version (size, mtime, ctime) by content
before it counts (`orchestrator/sources/content.py` says why and how). What it
read is kept here, not in the log:

- `source_file_digests`: per file, the weak version it was read at, the digests of
  the chunks read so far and, once whole, the file's content digest. A file whose
  listed version still matches its row is never read again; a row with chunks but
  no content is a read the byte or time budget cut short, continued from there.
- `source_partition_digests`: per partition directory and partition version (as
  listed), the digest of its files' contents: the fact "files listed as V hold C".

Every row is a fact about bytes read, keyed by the weak version they were read at,
true whichever scanner wrote it and whatever the log says: two scanners write the
same facts (the last write wins, either is true), a restart finds them, a lost row
costs a re-read. Names are BLAKE3 digests (source, directory) and keyed item ids:
no source bytes are stored.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from partbuild.state.db import begin_write, upsert
from partbuild.state.log.events import Clock, wall_clock_ms
from partbuild.state.schema import source_file_digests as files_table
from partbuild.state.schema import source_partition_digests as partitions_table

BATCH = 500  # ids per IN (...): well under either backend's limit on bound parameters


@dataclass(frozen=True, slots=True)
class FileDigest:
    """What was read of one file, listed as `listed` (a digest of its weak version and change stamp)."""

    listed: str
    size: int
    chunks: bytes  # the 32-byte digests of the chunks read so far, in order
    content: str | None  # the file's content digest once every chunk is read


def _batches(ids: Sequence[str]) -> Iterable[Sequence[str]]:
    for start in range(0, len(ids), BATCH):
        yield ids[start : start + BATCH]


class ContentDigestStore:
    """The two digest tables of one database; see the module docstring."""

    def __init__(self, engine: Engine, clock: Clock = wall_clock_ms) -> None:
        self._engine = engine
        self._clock = clock

    def files(self, source_id: str, item_ids: Sequence[str]) -> dict[str, FileDigest]:
        """The rows of these files (absent: never read)."""
        found: dict[str, FileDigest] = {}
        columns = (files_table.c.item_id, files_table.c.listed, files_table.c.size, files_table.c.chunks)
        with self._engine.connect() as conn:
            for batch in _batches(item_ids):
                query = sa.select(*columns, files_table.c.content).where(
                    files_table.c.source_id == source_id, files_table.c.item_id.in_(batch)
                )
                for row in conn.execute(query):
                    found[row.item_id] = FileDigest(row.listed, row.size, bytes(row.chunks), row.content)
        return found

    def save_files(self, source_id: str, directory_id: str, digests: dict[str, FileDigest]) -> None:
        """Write (or replace) these files' rows."""
        if digests:
            with begin_write(self._engine) as conn:
                self._write_files(conn, source_id, directory_id, digests)

    def _write_files(self, conn: Connection, source_id: str, directory_id: str, digests: dict[str, FileDigest]) -> None:
        now = self._clock()
        rows = [
            {
                "source_id": source_id,
                "item_id": item_id,
                "directory_id": directory_id,
                "listed": digest.listed,
                "size": digest.size,
                "chunks": digest.chunks,
                "content": digest.content,
                "updated_ms": now,
            }
            for item_id, digest in digests.items()
        ]
        update = ["directory_id", "listed", "size", "chunks", "content", "updated_ms"]
        conn.execute(upsert(conn, files_table, ["source_id", "item_id"], update), rows)

    def partitions(self, source_id: str, directory_id: str, versions: Sequence[str]) -> dict[str, str]:
        """The content digests known for these versions of the directory (version -> content)."""
        table = partitions_table
        query = sa.select(table.c.version, table.c.content).where(
            table.c.source_id == source_id, table.c.directory_id == directory_id, table.c.version.in_(list(versions))
        )
        with self._engine.connect() as conn:
            return {row.version: row.content for row in conn.execute(query)}

    def save_partition(
        self,
        source_id: str,
        directory_id: str,
        version: str,
        content: str,
        *,
        keep: str | None,
        item_ids: set[str],
        files: dict[str, FileDigest] | None = None,
    ) -> None:
        """Record `version` -> `content` (with `files`' rows, in the same transaction); drop the directory's
        other versions but `keep` (the observed one) and, when there is one, the rows of files no longer in
        it (`item_ids`: the files listed now)."""
        table = partitions_table
        where = (table.c.source_id == source_id) & (table.c.directory_id == directory_id)
        kept = [version] if keep is None else [version, keep]
        with begin_write(self._engine) as conn:
            if files:
                self._write_files(conn, source_id, directory_id, files)
            row = {"source_id": source_id, "directory_id": directory_id, "version": version}
            statement = upsert(conn, table, ["source_id", "directory_id", "version"], ["content", "updated_ms"])
            conn.execute(statement, [{**row, "content": content, "updated_ms": self._clock()}])
            conn.execute(sa.delete(table).where(where, table.c.version.not_in(kept)))
            if keep is None:
                return  # a partition seen for the first time: no rows of files deleted since
            in_directory = (files_table.c.source_id == source_id) & (files_table.c.directory_id == directory_id)
            gone = [
                item_id
                for (item_id,) in conn.execute(sa.select(files_table.c.item_id).where(in_directory))
                if item_id not in item_ids
            ]
            for batch in _batches(gone):
                conn.execute(sa.delete(files_table).where(in_directory, files_table.c.item_id.in_(batch)))
