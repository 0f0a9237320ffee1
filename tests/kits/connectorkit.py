"""Shared fixtures of the connector tests: in-memory data sets and ways to build them."""

from __future__ import annotations

from collections.abc import Sequence

from partbuild.orchestrator.connectors.in_memory import InMemoryConnector, MemoryItem
from partbuild.orchestrator.connectors.toxic import ItemKey, ItemRef


def key(text: str | bytes) -> ItemKey:
    return ItemKey(text.encode() if isinstance(text, str) else text)


def clicks_items(days: int = 30, parts: int = 3) -> list[MemoryItem]:
    """A W1-shaped raw tree: day directories of part files of varied sizes, and _SUCCESS markers."""
    items = []
    for day in range(1, days + 1):
        for part in range(parts):
            name = f"clicks/date=2026-01-{day:02d}/part-{part:05d}.json"
            items.append(MemoryItem(key(name), bytes([day % 251]) * ((day * 37 + part * 101) % 700 + 1)))
        items.append(MemoryItem(key(f"clicks/date=2026-01-{day:02d}/_SUCCESS"), b""))
    return items


def memory(items: Sequence[MemoryItem], *, tokens: bool = False) -> InMemoryConnector:
    return InMemoryConnector(items, tokens=tokens)


def with_refs(items: Sequence[MemoryItem], make_ref: object) -> list[MemoryItem]:
    return [MemoryItem(item.key, item.data, ItemRef(make_ref(item.key.raw_bytes()))) for item in items]  # type: ignore[operator]
