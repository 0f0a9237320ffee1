"""Pausing Python's cyclic garbage collector around bulk work on the state."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic GC for the block.

    BuildState is millions of long-lived records without reference cycles.
    Building, (de)serializing or hashing it would trigger the collector
    thousands of times, each pass rescanning every record and freeing nothing
    (a third of replay time on a million events). Reference counting still
    frees everything that is dropped.
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def settle_loaded_state() -> None:
    """After loading a large state in a long-lived process: collect once, then exempt what survived.

    Without this the collector makes full passes over millions of loaded records in the
    first seconds of serving (about a second each at a million instances) and finds
    nothing; frozen objects are never scanned again. Objects created later are tracked
    as usual.
    """
    gc.collect()
    gc.freeze()


def unsettle_loaded_state() -> None:
    """Before dropping a state loaded and settled earlier (a working set loaded again): let the collector scan
    what was frozen again, so the dropped state's cycles are freed by the next `settle_loaded_state`."""
    gc.unfreeze()
