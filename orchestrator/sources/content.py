"""Confirming a moved weak version by content before it counts: a touched or copied file rebuilds nothing.

A filesystem's versions are weak (size, mtime; the ctime as change stamp), so a
`touch`, a `cp` without `-p`, a restore or a re-sync of unchanged files moves them.
When a complete partition's weak version differs from the one its Live instance
was observed with, `ContentCheck.confirm` reads the partition's files (listed
again, a page at a time) and digests their contents: the same digest as the
observed version's means nothing changed, and the scanner observes nothing (the
partition is handed on with the observed version); another digest is a change,
observed as before. An unchanged weak version is never looked at (the pass over
unchanged files costs what it did), nor is a strong one (S3 ETags are content
hashes already): only moved weak versions, and new partitions (their digest is
what a later touch is compared with), are read.

New partitions are never held back. A partition with no Live observed instance to
compare with (new, or one whose observed version has no complete digest) is
observed in the pass that finds it, and its digest is pending (`_pending`:
directory -> the version being digested): read after the key range's observations
(`digest_pending`, which the scanner calls after a range's last append) with what
is left of the pass's budget, and continued in later passes while the partition is
listed at that version; the facts are saved once it is complete. A version that
moves before its first digest is complete drops it: there is no complete digest of
what was observed, so the move counts as a change (as before this check), observed
at once, and the new version's digest is pending in turn. After a restart the
pending set is not in memory: the first time a check sees an unchanged partition it
looks up (one store query, after the range) whether its observed version's digest
is complete, and takes up the reading if not; later passes over unchanged
partitions only look up memory.

Bounded: each pass (each key range of a pass, recorded or quiet: the scanner's
`pass_key`) reads at most `verify_bytes_per_pass` bytes for at most
`verify_s_per_pass` seconds, in chunks of `CHUNK_BYTES` (the
first chunk of a pass is always read, so a file larger than the budget still gets
done). Moved versions are read first, as they are listed (their observation waits
on their digest); pending digests of new partitions get what is left. A moved
partition not decided within the budget is undecided: neither observed nor
declared unchanged; the next pass lists it again and finishes it, reading only what
was not read yet (rows of files read in part are kept).

Where the digests are kept, and why not in the log. In an operational table
(`state/ops/content_digests.py`, through `Database.content_digests`), as facts
keyed by the weak version they were read at: "file F listed as v holds chunks
c1..cn", "partition P listed as V holds C". Such a fact is true whichever scanner
wrote it and whatever the log says, so two scanners (key ranges of a worker group,
or a stale one) can only write true facts, a restart reads them back, and no fact
waits on an append that may lose its race. The log could not hold them: a
confirmed touch appends nothing (that is the point), so the fold would never learn
the new weak version, and every later pass would read the files again. What the
scanner compares with stays in the log: the observed instance's version, looked up
in the table; a missing row (lost, not complete yet, or an instance observed
before this check) counts as a change, as before it, observed without reading. A
scanner given no store keeps the facts in memory (`MemoryDigests`): correct, but
read again after a restart.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import blake3

from partbuild.orchestrator.connectors.errors import EnumerateError, ReadError
from partbuild.orchestrator.connectors.items import ScanItem
from partbuild.orchestrator.connectors.paging import Budgets, Cursor, KeyRange
from partbuild.orchestrator.connectors.toxic import ItemKey
from partbuild.orchestrator.graph import PartitionPattern, SourceDataset
from partbuild.orchestrator.sources.partitions import FoundPartition, PartitionAssembler
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import InstanceState
from partbuild.state.log.live import LiveState
from partbuild.state.ops.content_digests import FileDigest

logger = logging.getLogger("partbuild.sources")

CHUNK_BYTES = 8 << 20  # a file is digested in chunks, so a read cut short by the budget resumes at a chunk
_DIGEST = 32
_LIST_BYTES = 1 << 62  # listing is bounded by items and time
FLUSH_ROWS = 1_000  # rows of files read are saved with the partition's, or at least every this many


class DigestStore(Protocol):
    """Where the facts are kept: `state.ops.content_digests.ContentDigestStore`, or `MemoryDigests`."""

    def files(self, source_id: str, item_ids: Sequence[str]) -> dict[str, FileDigest]: ...

    def save_files(self, source_id: str, directory_id: str, digests: dict[str, FileDigest]) -> None: ...

    def partitions(self, source_id: str, directory_id: str, versions: Sequence[str]) -> dict[str, str]: ...

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
    ) -> None: ...


class MemoryDigests:
    """The facts in this process's memory only (a scanner without a database store)."""

    def __init__(self) -> None:
        self._files: dict[tuple[str, str], tuple[str, FileDigest]] = {}
        self._partitions: dict[tuple[str, str], dict[str, str]] = {}

    def files(self, source_id: str, item_ids: Sequence[str]) -> dict[str, FileDigest]:
        rows = ((item_id, self._files.get((source_id, item_id))) for item_id in item_ids)
        return {item_id: row[1] for item_id, row in rows if row is not None}

    def save_files(self, source_id: str, directory_id: str, digests: dict[str, FileDigest]) -> None:
        for item_id, digest in digests.items():
            self._files[(source_id, item_id)] = (directory_id, digest)

    def partitions(self, source_id: str, directory_id: str, versions: Sequence[str]) -> dict[str, str]:
        known = self._partitions.get((source_id, directory_id), {})
        return {version: known[version] for version in versions if version in known}

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
        self.save_files(source_id, directory_id, files or {})
        known = self._partitions.setdefault((source_id, directory_id), {})
        for old in [old for old in known if old not in (version, keep)]:
            del known[old]
        known[version] = content
        gone = [key for key, (where, _) in self._files.items() if key[0] == source_id and where == directory_id]
        for key in gone:
            if key[1] not in item_ids:
                del self._files[key]


def _id(text: str) -> str:
    return blake3.blake3(text.encode()).hexdigest()[:32]


def _listed(item: ScanItem) -> str:
    """A file's weak version and change stamp as one short digest: what its row was read at."""
    stamp = b"" if item.change_stamp is None else item.change_stamp.to_bytes(8, "big", signed=True)
    return blake3.blake3(len(item.version.value).to_bytes(2, "big") + item.version.value + stamp).hexdigest()[:32]


class _Undecided(Exception):
    """The partition could not be confirmed in this pass (budget spent, or its files changed meanwhile)."""


class _Spent(_Undecided):
    """The pass's bytes or seconds to read are spent."""


@dataclass
class _PassBudget:
    key: tuple[int, int]  # the scanner's pass key (a key range of a pass taken up): a new one gets a fresh budget
    bytes_left: int
    deadline: float  # monotonic
    chunks: int = 0  # read in this pass (the first is read whatever the budget)


@dataclass
class _Reading:
    """A partition being digested: its running digest, the files listed, the rows read and not yet saved."""

    directory_id: str
    content: blake3.blake3 = dataclasses.field(default_factory=blake3.blake3)
    item_ids: set[str] = dataclasses.field(default_factory=set)
    fresh: dict[str, FileDigest] = dataclasses.field(default_factory=dict)


class ContentCheck:
    """One source's content confirmation; see the module docstring. Runs in the scanner's thread."""

    def __init__(self, source: SourceDataset, store: DigestStore, *, stop: Callable[[], bool] = lambda: False) -> None:
        assert source.discovery is not None
        self.discovery = discovery = source.discovery
        self._store = store
        self._stop = stop
        self._name = source.name
        self._source_id = _id(source.name)
        keys = PartitionPattern(discovery.keys) if discovery.keys else source.pattern
        self._patterns = (keys, source.pattern)
        self._budget: _PassBudget | None = None
        # Per directory, the last (listed version, observed version) found to hold the same content: a
        # touched partition is confirmed from memory in later passes, with no query (one entry a directory).
        self._same: dict[str, tuple[str, str]] = {}
        # Digests of observed partitions not complete yet (directory -> as listed when observed), the
        # directories this check has seen (a restart looks up the others once), and the pending ones
        # listed unchanged in the current key range (`_due_key`): read after its observations.
        self._pending: dict[str, FoundPartition] = {}
        self._seen: set[str] = set()
        self._due: dict[str, None] = {}
        self._due_key: tuple[int, int] | None = None
        self.bytes_read = 0  # file bytes read since this check was made (tests and benchmarks read it)
        self.partitions_read = 0  # partitions whose files were read (wholly or in part)

    def confirm(self, live: LiveState, pass_key: tuple[int, int], closed: list[FoundPartition]) -> list[FoundPartition]:
        """`closed` as the scanner should see it: an unchanged partition with its observed version, an
        undecided one left out (the next pass lists it again), the others (new ones too) as found."""
        candidates = [found for found in closed if found.complete and not found.strong]
        if not candidates:
            return closed
        if self._due_key != pass_key:  # a new key range or pass: what is due after it starts empty
            self._due_key, self._due = pass_key, {}
        with live.read() as state:
            observed = {found.ref: self._observed(state, found) for found in candidates}
        confirmed: list[FoundPartition] = []
        for found in closed:
            if found.ref not in observed:
                confirmed.append(found)  # strong or incomplete: as today, nothing is read
                continue
            known = observed[found.ref]
            pending = self._pending.get(found.directory)
            if pending is not None and pending.version != found.version:
                del self._pending[found.directory]  # moved before its first digest was complete: dropped
                self._seen.discard(found.directory)  # (if another scanner observed the move: looked up again)
            if known == found.version:
                self._unchanged(found)  # nothing is read now (a digest still pending: after the range)
                confirmed.append(found)
                continue
            if known is None:
                self._digest_later(found)  # new: observed now; its digest only serves a later move
                confirmed.append(found)
                continue
            same_as_before = known == found.unstamped_version  # observed before stamps
            if same_as_before or self._same.get(found.directory) == (found.version, known):
                confirmed.append(dataclasses.replace(found, version=known))
                continue
            try:
                same = self._same_content(found, known, pass_key)
            except _Undecided as reason:
                # Debug: once a pass's budget is spent, every partition after it says so.
                logger.debug("source %s: %s not confirmed in this pass: %s", self._name, found.ref, reason)
                continue
            if same is None:
                self._digest_later(found)  # nothing complete to compare with: a change, observed now
            elif same:
                self._same[found.directory] = (found.version, known)
                found = dataclasses.replace(found, version=known)
            confirmed.append(found)
        return confirmed

    def _unchanged(self, found: FoundPartition) -> None:
        """An unchanged partition: due after the range if its digest is pending, or may be (first seen here).

        A digest a previous process left unfinished is not in memory: a partition this check has not
        seen yet is put in the pending set, and the reading after the range finds in the store (one
        query) whether its observed version's digest is complete. Later passes only look up memory.
        """
        if found.directory in self._pending:
            self._due[found.directory] = None
        elif found.directory not in self._seen:
            self._digest_later(found)

    def _digest_later(self, found: FoundPartition) -> None:
        self._seen.add(found.directory)
        self._pending[found.directory] = found
        self._due[found.directory] = None

    def digest_pending(self, pass_key: tuple[int, int]) -> None:
        """After a key range's observations: continue the pending digests listed in it, with what is left
        of its budget (moved versions, which hold their observation back, were read first)."""
        if self._due_key != pass_key:
            return
        due, self._due = self._due, {}
        for directory in due:
            found = self._pending.get(directory)
            if found is None:
                continue
            if self._stop() or self._spent(self._spend(pass_key)):
                return  # the rest stay pending: a later pass lists them again
            try:
                self._complete_digest(found, pass_key)
            except _Spent:
                return
            except _Undecided as reason:
                # Its files moved since listed (the next pass sees the move), or reading failed: kept.
                logger.debug("source %s: digest of %s not complete in this pass: %s", self._name, found.ref, reason)
                continue
            del self._pending[directory]

    def _complete_digest(self, found: FoundPartition, pass_key: tuple[int, int]) -> None:
        """Read the partition at its listed version, unless its digest is known already; save the facts."""
        directory_id = _id(found.directory)
        if self._store.partitions(self._source_id, directory_id, [found.version]):
            return
        # Keeping only its own version also drops the rows of files no longer in the directory.
        self._read_and_save(found, directory_id, pass_key, keep=found.version)

    def _read_and_save(self, found: FoundPartition, directory_id: str, pass_key: tuple[int, int], keep: str) -> str:
        """Digest the partition at its listed version and save the facts, keeping the digest of `keep` beside it."""
        reading = _Reading(directory_id)
        try:
            content = self._read_partition(found, pass_key, reading)
        except _Undecided:
            self._flush(reading)  # what was read, even in part, is not read again
            raise
        self._store.save_partition(
            self._source_id,
            directory_id,
            found.version,
            content,
            keep=keep,
            item_ids=reading.item_ids,
            files=reading.fresh,
        )
        return content

    def _observed(self, state: BuildState, found: FoundPartition) -> str | None:
        """The weak version the partition's Live instance was observed with there; None: none to compare."""
        current = state.canonical_instance(found.ref)
        if current is None or current.state != InstanceState.LIVE or current.version is None:
            return None
        if current.location != self.discovery.location_of(found.directory) or current.version[1]:
            return None
        return current.version[0]

    def _same_content(self, found: FoundPartition, known: str, pass_key: tuple[int, int]) -> bool | None:
        """Whether the partition holds what it held when observed as `known`; None: no complete digest of
        `known` to compare with (its first digest was not finished, or the row is lost): a change."""
        directory_id = _id(found.directory)
        facts = self._store.partitions(self._source_id, directory_id, [found.version, known])
        if known not in facts:
            return None
        content = facts.get(found.version)
        if content is None:
            content = self._read_and_save(found, directory_id, pass_key, keep=known)
        return facts[known] == content

    def _flush(self, reading: _Reading) -> None:
        self._store.save_files(self._source_id, reading.directory_id, reading.fresh)
        reading.fresh = {}

    # ----------------------------------------------------------------- reading

    def _spend(self, pass_key: tuple[int, int]) -> _PassBudget:
        budget = self._budget
        if budget is None or budget.key != pass_key:
            deadline = time.monotonic() + self.discovery.verify_s_per_pass
            budget = self._budget = _PassBudget(pass_key, self.discovery.verify_bytes_per_pass, deadline)
        return budget

    def _spent(self, budget: _PassBudget) -> bool:
        """No more reading in this pass (the first chunk of a pass is read whatever the budget)."""
        if not budget.chunks:
            return False
        return budget.bytes_left <= 0 or time.monotonic() >= budget.deadline or self._stop()

    def _read_partition(self, found: FoundPartition, pass_key: tuple[int, int], reading: _Reading) -> str:
        """The partition's content digest, from its files listed again (they must still be as found)."""
        budget = self._spend(pass_key)
        self.partitions_read += 1
        prefix = (found.directory + "/").encode()
        key_range = KeyRange(ItemKey(prefix), ItemKey(prefix[:-1] + b"0"))  # "0" follows "/": the directory
        keys, refs = self._patterns
        relisted = PartitionAssembler(keys, refs, self.discovery.complete_marker, stamps=True)
        cursor = Cursor.initial()
        # The budget bounds reading; listing the partition again costs what the pass's listing of it did.
        listing = Budgets(self.discovery.page_items, _LIST_BYTES)
        while True:
            if self._stop():
                raise _Undecided("the scanner is stopping")
            try:
                page = self.discovery.connector.fill_page(key_range, cursor, listing)
            except EnumerateError as error:
                raise _Undecided(f"listing it again failed: {error.message}") from None
            if page is None:
                break
            relisted.feed(page.items)
            self._digest_page(page.items, len(prefix), reading, budget)
            cursor = page.cursor
        again = relisted.finish()
        if len(again) != 1 or again[0].version != found.version:
            raise _Undecided("its files changed since they were listed")
        return reading.content.hexdigest()

    def _digest_page(self, items: Sequence[ScanItem], skip: int, reading: _Reading, budget: _PassBudget) -> None:
        """Add a page of the partition's files to its digest, reading the ones no row has at their version."""
        ids = [item.item_id.hex() for item in items]
        rows = self._store.files(self._source_id, ids)
        for item, item_id in zip(items, ids, strict=True):
            reading.item_ids.add(item_id)
            listed = _listed(item)
            row = rows.get(item_id)
            if row is None or row.listed != listed or row.size != item.size:
                row = FileDigest(listed, item.size, b"", None)
            if row.content is None:
                row = reading.fresh[item_id] = self._read_file(item, row, budget)
            if row.content is None:
                raise _Spent("the pass's bytes or time to read are spent")
            name = item.key.raw_bytes()[skip:]
            reading.content.update(len(name).to_bytes(4, "big") + name + bytes.fromhex(row.content))
        if len(reading.fresh) >= FLUSH_ROWS:  # memory stays bounded in a partition of many files
            self._flush(reading)

    def _read_file(self, item: ScanItem, row: FileDigest, budget: _PassBudget) -> FileDigest:
        """`row` continued chunk by chunk while the budget lasts; with its content once the file is read."""
        chunks = bytearray(row.chunks)
        offset = len(chunks) // _DIGEST * CHUNK_BYTES
        connector = self.discovery.connector
        read_as_listed = getattr(connector, "read_range_as_listed", None)
        while offset < item.size:
            length = min(CHUNK_BYTES, item.size - offset)
            spent = budget.bytes_left < length or time.monotonic() >= budget.deadline or self._stop()
            if spent and budget.chunks:
                return FileDigest(row.listed, item.size, bytes(chunks), None)
            reads = Budgets(1, length)
            try:
                if read_as_listed is not None:
                    data = read_as_listed(item, offset, length, reads)
                else:
                    data = connector.read_range(item.ref, offset, length, reads)
            except ReadError as error:
                raise _Undecided(f"reading a file failed: {error.message}") from None
            if len(data) != length:
                raise _Undecided("a file is shorter than listed")
            chunks += blake3.blake3(data).digest()
            offset += length
            budget.bytes_left -= length
            budget.chunks += 1
            self.bytes_read += length
        whole = blake3.blake3(bytes(chunks) + item.size.to_bytes(8, "big")).hexdigest()
        return FileDigest(row.listed, item.size, bytes(chunks), whole)
