"""What Spark's plan of a DataFrame proves about its rows: the columns that are a key of it.

Spark's optimizer tracks the distinct keys of every plan (`LogicalPlan.distinctKeys`: the output of a
`groupBy(url)` has one row per `url`, a `distinct()` one per row, and projections and aliases carry
them along) and uses them to drop redundant aggregations. The same knowledge lets the `unique` check
pass on a written frame without reading it: if the plan of the frame being written has a key made of
some of the checked columns, no two written rows share their values. A frame whose plan proves nothing
(or a session that does not expose its plan, such as Spark Connect) is checked by reading it, as always.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

logger = logging.getLogger("partbuild.checks")


def proves_unique(frame: Any, columns: Sequence[str]) -> bool:
    """Whether the plan of `frame` proves that no two of its rows share their values of `columns`."""
    wanted = set(columns)
    return wanted <= set(frame.columns) and any(key <= wanted for key in distinct_keys(frame))


def distinct_keys(frame: Any) -> list[set[str]]:
    """The keys the optimized plan of `frame` knows, each as the names of its columns (only plain columns)."""
    try:
        key_sets = frame._jdf.queryExecution().optimizedPlan().distinctKeys()
    except Exception:  # Spark Connect, or a plan that does not say: nothing is proven
        logger.debug("no distinct keys from the plan of a frame", exc_info=True)
        return []
    found = []
    sets = key_sets.iterator()
    while sets.hasNext():
        names: set[str] = set()
        expressions = sets.next().iterator()
        while expressions.hasNext():
            expression = expressions.next()
            if expression.getClass().getSimpleName() != "AttributeReference":
                names.clear()  # a key over a computed expression says nothing about plain columns
                break
            names.add(expression.name())
        if names:
            found.append(names)
    return found
