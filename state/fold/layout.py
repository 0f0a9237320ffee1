"""How each `BuildState` attribute is declared (`BuildState.LAYOUT`): what the digest covers, in which encoding.

Every attribute of a BuildState is in exactly one section: digested (a scalar
group, a table of records, a map of pointers, a list of records, items or
records that count only once there are some) or left out (an index derived
from the digested sections, or a setting of how the state runs). The state
digest (`state/log/digest.py`) walks the sections in order, each feeding its
bytes to the hash; tests/state/fold/test_registry.py checks that every attribute of a
state is declared and that changing any slot of any record changes the digest.

The encodings are the digest's format: audits compare digests across versions,
so a section's bytes never change. A new attribute gets a new section at the
end; one whose emptiness is the old state (`Items`, `Records`) is hashed only
once it holds something, so older logs keep their digests.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

Update = Callable[[bytes], object]


class Digestible(Protocol):
    """A record as the digest sees it (`_Record`, `GroupState`, `Subscription`, ...)."""

    def digest_values(self) -> tuple[Any, ...]: ...


@dataclass(frozen=True)
class Section:
    """Some attributes of a BuildState; `digest` feeds their bytes to the hash (nothing, if left out)."""

    names: tuple[str, ...]

    digested = True

    def digest(self, state: object, update: Update) -> None:
        raise NotImplementedError


@dataclass(frozen=True)
class Scalars(Section):
    """Plain values hashed together as one tuple, `label` first if there is one.

    `reads` names, for an attribute that changed form, the attribute read in its place (the same
    value in the form the digest always hashed).
    """

    label: str = ""
    reads: tuple[tuple[str, str], ...] = ()

    def digest(self, state: object, update: Update) -> None:
        reads = dict(self.reads)
        values = tuple(getattr(state, reads.get(name, name)) for name in self.names)
        update(repr((self.label, *values) if self.label else values).encode())


@dataclass(frozen=True)
class Table(Section):
    """A dict of records by key: its name and size, then each record's values in key order."""

    def digest(self, state: object, update: Update) -> None:
        for name in self.names:
            table: Mapping[str, Digestible] = getattr(state, name)
            update(f"\n{name} {len(table)}".encode())
            for key in sorted(table):
                update(repr(table[key].digest_values()).encode())


@dataclass(frozen=True)
class Pointers(Section):
    """A dict of str to str: its name, then `key!r=value` in key order."""

    def digest(self, state: object, update: Update) -> None:
        for name in self.names:
            pointers: Mapping[str, str] = getattr(state, name)
            update(f"\n{name}".encode())
            for key in sorted(pointers):
                update(f"{key!r}={pointers[key]}".encode())


@dataclass(frozen=True)
class RecordLog(Section):
    """A list of records in order: its name, then each record's values."""

    def digest(self, state: object, update: Update) -> None:
        for name in self.names:
            update(f"\n{name}".encode())
            for record in getattr(state, name):
                update(repr(record.digest_values()).encode())


@dataclass(frozen=True)
class Items(Section):
    """A dict of plain values, hashed as its sorted items once it holds any."""

    def digest(self, state: object, update: Update) -> None:
        for name in self.names:
            items: Mapping[Any, Any] = getattr(state, name)
            if items:
                update(repr(sorted(items.items())).encode())


@dataclass(frozen=True)
class Records(Section):
    """A dict of records by name, hashed as the list of their values in name order once it holds any."""

    def digest(self, state: object, update: Update) -> None:
        for name in self.names:
            records: Mapping[str, Digestible] = getattr(state, name)
            if records:
                update(repr([records[key].digest_values() for key in sorted(records)]).encode())


@dataclass(frozen=True)
class Index(Section):
    """Derived from the digested sections (lookups, orders, heaps): left out of the digest."""

    digested = False

    def digest(self, state: object, update: Update) -> None:
        return None


@dataclass(frozen=True)
class History(Section):
    """What reads of the past need (state/fold/history.py): derived from the log, left out of the digest."""

    digested = False

    def digest(self, state: object, update: Update) -> None:
        return None


@dataclass(frozen=True)
class Lookup(Section):
    """An index only the orchestrator reads, derived from the log and added after logs were written: left out of
    the digest, so older logs keep theirs."""

    digested = False

    def digest(self, state: object, update: Update) -> None:
        return None


@dataclass(frozen=True)
class Setting(Section):
    """How the state runs, not what it holds (strictness, where it broke): left out of the digest."""

    digested = False

    def digest(self, state: object, update: Update) -> None:
        return None


def declared(layout: tuple[Section, ...]) -> dict[str, Section]:
    """Attribute name -> its section; ValueError when a name is declared twice."""
    found: dict[str, Section] = {}
    for section in layout:
        for name in section.names:
            if name in found:
                raise ValueError(f"BuildState attribute {name!r} is declared twice")
            found[name] = section
    return found
