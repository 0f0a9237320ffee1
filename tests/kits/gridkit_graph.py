"""A graph file for `--graph` (tests of the grid's CLI): gridkit's graph."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from gridkit import grid_graph

graph = grid_graph()
