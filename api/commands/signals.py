"""Stop signals handled on a thread of their own, not inside whatever the main thread was doing.

A Python signal handler runs in the main thread between two bytecodes, possibly
while that thread holds a lock: inside `threading.Event.clear()` of the
orchestrator's wake-up event, or halfway through a log line. A handler that sets
that event or logs would then wait for a lock its own thread holds, forever (a
SIGTERM that came at the wrong moment left `partbuild run` hanging). So the
handler only writes the signal's number to a pipe; a watcher thread reads it and
does the real work.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable

logger = logging.getLogger("partbuild")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def on_stop_signal(action: Callable[[signal.Signals], None]) -> None:
    """From now on, SIGTERM and SIGINT call `action(signal)` on a watcher thread (once per signal)."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)

    def note(signum: int, _frame: object) -> None:
        with contextlib.suppress(BlockingIOError):  # a full pipe already holds a stop to act on
            os.write(write_end, bytes([signum]))

    def watch() -> None:
        while received := os.read(read_end, 1):
            action(signal.Signals(received[0]))

    threading.Thread(target=watch, name="partbuild-signals", daemon=True).start()
    for signum in STOP_SIGNALS:
        signal.signal(signum, note)
