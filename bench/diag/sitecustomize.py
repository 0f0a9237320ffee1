"""Opt-in diagnosis for the group benchmarks (`--count-conflicts`): log every append that loses a race.

Put on a worker's PYTHONPATH, this wraps `EventLog.append` so that an `AppendConflict`
(another writer appended after the head the caller decided on, `expected_head`) logs one
line naming the thread and the events it carried, then is raised as before. Only the
failure path is touched, so the figures are not. `_groupkit.conflicts` counts the lines.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from partbuild.state.log import store

_append = store.EventLog.append


def _logged_append(self: store.EventLog, events: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return _append(self, events, *args, **kwargs)
    except store.AppendConflict:
        kinds = sorted({event.WhichOneof("payload") for event in events})
        logging.getLogger("partbuild.bench").warning(
            "append conflict in %s: %s", threading.current_thread().name, ",".join(kinds)
        )
        raise


store.EventLog.append = _logged_append  # type: ignore[method-assign]
