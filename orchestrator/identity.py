"""Who this orchestrator process is, as written in the source of every event it decides.

`WORKER_ID`: host, pid and a per-start token; `ORCHESTRATOR`: the event source every
orchestrator decision carries.
"""

from __future__ import annotations

import os
import socket
import uuid

from partbuild.state.log.events import system

# Host, pid and a token drawn at start: unique per process start, so every decision in the
# log can be traced to the worker that made it (a restarted worker is a new worker).
WORKER_ID = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
ORCHESTRATOR = system("orchestrator", WORKER_ID)
