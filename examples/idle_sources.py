"""A graph of two discovered filesystem sources and no jobs: a system with nothing to do.

`tests/e2e/test_scanner_processes.py` and `bench/idle_log_growth.py` run an
orchestrator on it to see what an idle system appends to its log. The sources are
`a` and `b` under `$IDLE_ROOT` (`date={date:date}` directories), rescanned every
`$IDLE_RESCAN_S` seconds (default 0.1), listed `$IDLE_PAGE_ITEMS` items a page when
set. Each listing that reaches the end of a source appends a line to
`$IDLE_ROOT/<name>.passes`, so passes are counted from outside the process.
"""

from __future__ import annotations

import os
from typing import Any

from partbuild.orchestrator.connectors.filesystem import FilesystemConnector
from partbuild.orchestrator.graph import Graph, SourceDataset
from partbuild.orchestrator.sources.discovery import Discovery


class CountingConnector(FilesystemConnector):
    """The filesystem connector, writing a line to a file at the end of each listing."""

    def __init__(self, root: str, passes: str) -> None:
        super().__init__(root)
        self.passes = passes

    def fill_page(self, key_range: Any, cursor: Any, budgets: Any) -> Any:
        page = super().fill_page(key_range, cursor, budgets)
        if page is None:
            with open(self.passes, "a") as out:
                out.write("pass\n")
        return page


def source(name: str) -> SourceDataset:
    root = os.path.join(os.environ["IDLE_ROOT"], name)
    options: dict[str, Any] = {"rescan_every_s": float(os.environ.get("IDLE_RESCAN_S", "0.1"))}
    if os.environ.get("IDLE_PAGE_ITEMS"):
        options["page_items"] = int(os.environ["IDLE_PAGE_ITEMS"])
    discovery = Discovery(CountingConnector(root, root + ".passes"), root, "date={date:date}", **options)
    return SourceDataset(name, name + "/date={date:date}", discovery=discovery)


graph = Graph(jobs=[], sources=[source("a"), source("b")])
