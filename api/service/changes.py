"""Changes: what changed after one seq up to another, from the state store or the live state's histories.

A page's cursor is its last change's key, `seq:kind:id`; with the same `from_seq` and `to_seq` the next page
continues after it. Once the store's projection has reached the range's end (state/store/changes.py), a page
is one range scan of the store's key, whatever the range. Before, it is read from the live state's histories
(`changes_page`), which keep no index by seq: a page deep into a range scans the records created before it.
Both answer the same pages (tests/state/store/test_change_store.py).
"""

from __future__ import annotations

from partbuild.api.errors import Conflict, InvalidInput
from partbuild.api.models.changes import ChangeOut
from partbuild.api.models.common import PageOut
from partbuild.api.service.as_of import page_at
from partbuild.api.service.base import ServiceBase, check_limit, state_name, unknown_cursor
from partbuild.state.log.live import SeqAfterHead
from partbuild.state.queries.changes import KINDS, Change, changes_page

_KIND_ORDER = {kind: index for index, kind in enumerate(KINDS)}


class ChangesService(ServiceBase):
    """What changed between two seqs."""

    def changes(
        self,
        from_seq: int,
        to_seq: int | None = None,
        cursor: str | None = None,
        limit: int = 100,
        min_seq: int | None = None,
    ) -> PageOut[ChangeOut]:
        """The changes in (`from_seq`, `to_seq`] (default: up to the head), by seq, then kind, then id."""
        check_limit(limit)
        if from_seq < 0 or (to_seq is not None and to_seq < 0):
            raise InvalidInput("from_seq and to_seq must not be negative")
        try:  # a seq the log has not reached is a 409 (it may come), before how the two compare (a 422)
            self.reads.read_at_least(min_seq)
            self.reads.read_at_least(from_seq, "from_seq")
            if to_seq is not None:
                self.reads.read_at_least(to_seq, "to_seq")
        except SeqAfterHead as exc:
            raise Conflict(str(exc)) from None
        if to_seq is not None and from_seq > to_seq:
            raise InvalidInput(f"from_seq ({from_seq}) must not be after to_seq ({to_seq})")
        # From a seq to itself nothing changed: a poll from the head gets an empty page, not an error.
        last = self.reads.head_seq if to_seq is None else to_seq
        after = _cursor_key(cursor, from_seq, last)
        if self.db.changes.watermark() >= last:  # the store has every change of the range: one range scan
            found = self.db.changes.page(from_seq, last, limit, after)
        else:  # a replica's head is the store's watermark: only a live state is ever ahead of it
            with self.live.read() as state:
                found = changes_page(state, from_seq, last, limit, after)
        items = [change_out(change) for change in found]
        return page_at(items, limit, lambda c: f"{c.seq}:{c.kind}:{c.id}", last)


def _cursor_key(cursor: str | None, first: int, last: int) -> tuple[int, int, str] | None:
    """The key a cursor names; NotFound unless a page of changes in (first, last] could have given it."""
    if cursor is None:
        return None
    seq, _, rest = cursor.partition(":")
    kind, _, key = rest.partition(":")
    if not (seq.isascii() and seq.isdigit() and len(seq) <= 16 and kind in _KIND_ORDER and key):
        raise unknown_cursor(cursor)
    if not first < int(seq) <= last:
        raise unknown_cursor(cursor)
    return int(seq), _KIND_ORDER[kind], key


# ----------------------------------------------------------------- records -> models


def change_out(change: Change) -> ChangeOut:
    return ChangeOut(
        seq=change.seq,
        kind=change.kind,
        id=change.id,
        ref=change.ref,
        from_state=None if change.from_state is None else state_name(change.from_state),
        to_state=None if change.to_state is None else state_name(change.to_state),
        from_uuid=change.from_uuid,
        to_uuid=change.to_uuid,
    )
