"""httpx without its command line: what the HTTP client of the CLI imports instead of `import httpx`.

httpx imports its own command line (rich's progress bars and syntax highlighting, pygments) whenever
those libraries are installed: over half of its import time, for a tool no partbuild process runs.
A None in `sys.modules` makes that one import fail, and httpx then defines a stub `main` instead.
"""

from __future__ import annotations

import sys

sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]

import httpx  # noqa: E402  (after the line above: that is the point)

__all__ = ["httpx"]
