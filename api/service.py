"""The service behind the HTTP API and the CLI: validated writes to the log, reads from a live BuildState.

`Service` implements `partbuild.api.surface.Client` in-process (the CLI's `--db`
back end) and is what the HTTP routes call. It is assembled from one module per
concern: `writes` (appends), `reads` (queries), `convert` (records to response
models), `metrics` (Prometheus). Its state is a `LiveState`: its own, or the
one a process shares with its orchestrator (`up`), so one process holds one
BuildState. Errors are the domain exceptions of `partbuild.api.errors`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from prometheus_client import CollectorRegistry

from partbuild.api.metrics import Metrics
from partbuild.api.reads import Reads
from partbuild.api.subscriptions_service import Subscriptions
from partbuild.api.writes import Writes
from partbuild.orchestrator.graph import Graph
from partbuild.state.database import Database
from partbuild.state.fold.build_state import BuildState
from partbuild.state.log.events import Clock, wall_clock_ms
from partbuild.state.log.live import LiveState
from partbuild.state.rules.listing import ListingIndex


class Service(Writes, Reads, Subscriptions):
    """Validated writes and consistent reads over one event log."""

    def __init__(
        self,
        db: Database,
        *,
        graph: Graph | None = None,
        live: LiveState | None = None,
        clock: Clock = wall_clock_ms,
        on_append: Callable[[], None] | None = None,
        progress: Callable[[int], None] | None = None,
        snapshot_every: int = 0,
    ) -> None:
        """Serve `db`; with `live`, read that shared state (its owner checkpoints it) instead of loading one."""
        self.db = db
        self.log = log = db.log
        self.graph = graph
        self.clock = clock
        self.on_append = on_append or (lambda: None)
        self._owns_live = live is None
        self.live = live if live is not None else LiveState(log, snapshot_every=snapshot_every, progress=progress)
        self._write_lock = threading.Lock()  # in-process writers take turns
        self.metrics = Metrics(self.live, db)
        self.listing = ListingIndex()
        with self.live.read() as state:
            self.listing.update(state)
        self.live.on_fold(self._folded)

    @property
    def state(self) -> BuildState:
        """The live state (unlocked: for counts and tests)."""
        return self.live.state

    @property
    def registry(self) -> CollectorRegistry:
        return self.metrics.registry

    def _folded(self, state: BuildState, count: int, seconds: float) -> None:
        self.metrics.catch_up_seconds.observe(seconds)
        self.listing.update(state)

    def refresh(self) -> int:
        """Fold whatever was appended since the last refresh; returns how many events."""
        return self.live.catch_up()

    def start_tailing(self, interval_s: float = 0.05) -> None:
        """Keep the state current in the background (other processes append too)."""
        self.live.start_tailing(interval_s)

    def stop(self) -> None:
        """Stop tailing and checkpoint a live state of its own (a shared one is its owner's)."""
        if self._owns_live:
            self.live.close()
        else:
            self.live.stop_tailing()
