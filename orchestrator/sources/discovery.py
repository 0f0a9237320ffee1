"""How a source dataset's partitions are discovered by scanning a connector.

A `Discovery` says which connector lists the source's items, how an item's key
maps to a partition (`keys`: the partition's directory under the connector's
root, a pattern with the same fields as the source's ref pattern), where readers
find that directory (`base_location`), and when a partition is complete (a marker
item in it, by default Spark's `_SUCCESS`; None: complete as soon as the scan has
listed all of it). Also: `rescan_every_s`, `rewant_tainted` (late data re-wants what
it tainted), page size and slice time, `shards` (how many key ranges a pass is
split into), and `verify_content`: a moved weak version (files: size, mtime, ctime)
counts only once the partition's content is confirmed to differ, read within
`verify_bytes_per_pass` and `verify_s_per_pass` (`content.py`); False for data too
large to read, where every moved version counts, as before. Strong versions (S3
ETags) are content hashes already and are never read. `filesystem_discovery` and `object_store_discovery` build one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from partbuild.orchestrator.connectors.contract import Connector
from partbuild.state.fold.sources import MAX_KEY_RANGES

if TYPE_CHECKING:
    from partbuild.orchestrator.connectors.s3_config import ObjectStoreConfig

DEFAULT_MARKER = "_SUCCESS"


@dataclass(frozen=True)
class Discovery:
    """A source's connector and how its items form partitions; see the module docstring."""

    connector: Connector
    base_location: str  # the connector's root as jobs read it: a directory, `s3a://bucket/prefix`
    keys: str | None = None  # the partition directory under the root; None: the source's ref pattern
    complete_marker: str | None = DEFAULT_MARKER
    rescan_every_s: float = 60.0  # a finished pass is followed by the next after this long
    # Late data: re-want the partitions a new version tainted that a person (a root want) wanted before.
    rewant_tainted: bool = False
    page_items: int = 1_000  # items per connector call
    slice_s: float = 0.05  # the longest a connector call may take when the connector honours deadlines
    # Split each pass into up to this many key ranges of about equal bytes (rebalanced from the last
    # recorded pass's split estimates), each scanned by the worker that owns it: for sources too big
    # for one worker's scan. 1: one range. Once the split settles, idle passes record nothing either way.
    # Named `shards` where graphs declare it (and in the API's JSON): the declared name stays, like a CLI
    # flag; everywhere else a pass's slice is a key range.
    shards: int = 1
    # Confirm a moved weak version by reading the partition's files before it counts (`content.py`).
    verify_content: bool = True
    verify_bytes_per_pass: int = 4 << 30  # read at most this much per pass (at least one chunk)
    verify_s_per_pass: float = 30.0  # and for at most this long; the rest is confirmed next pass

    def __post_init__(self) -> None:
        if not isinstance(self.connector, Connector):
            raise TypeError(f"Discovery.connector must be a Connector, not {type(self.connector).__name__}")
        if not isinstance(self.base_location, str) or not self.base_location:
            raise ValueError("Discovery.base_location must be a non-empty str")
        marker = self.complete_marker
        if marker is not None and (not isinstance(marker, str) or not marker or "/" in marker):
            raise ValueError("Discovery.complete_marker must be a file name (no slash) or None")
        for name in ("rescan_every_s", "slice_s", "verify_s_per_pass"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"Discovery.{name} must be a positive number of seconds")
        if isinstance(self.page_items, bool) or not isinstance(self.page_items, int) or self.page_items < 1:
            raise ValueError("Discovery.page_items must be an int of at least 1")
        ranges = self.shards
        if isinstance(ranges, bool) or not isinstance(ranges, int) or not 1 <= ranges <= MAX_KEY_RANGES:
            raise ValueError(f"Discovery.shards must be an int from 1 to {MAX_KEY_RANGES}")
        for name in ("rewant_tainted", "verify_content"):
            if type(getattr(self, name)) is not bool:
                raise TypeError(f"Discovery.{name} must be a bool")
        budget = self.verify_bytes_per_pass
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise ValueError("Discovery.verify_bytes_per_pass must be an int of at least 1")

    def location_of(self, directory: str) -> str:
        """Where readers find the partition directory `directory` (relative to the connector's root)."""
        return self.base_location.rstrip("/") + "/" + directory


def filesystem_discovery(root: str | os.PathLike[str], keys: str | None = None, **options: object) -> Discovery:
    """A `Discovery` over the files under `root` (an absolute directory as base location)."""
    from partbuild.orchestrator.connectors.filesystem import FilesystemConnector

    absolute = os.path.abspath(os.fspath(root))
    return Discovery(FilesystemConnector(absolute), absolute, keys, **options)  # type: ignore[arg-type]


def object_store_discovery(
    config: ObjectStoreConfig, keys: str | None = None, *, scheme: str = "s3a", **options: object
) -> Discovery:
    """A `Discovery` over the objects under the config's bucket and prefix; jobs read `scheme://bucket/prefix`."""
    from partbuild.orchestrator.connectors.object_store import ObjectStoreConnector

    base = f"{scheme}://{config.bucket}/{config.prefix}"
    return Discovery(ObjectStoreConnector(config), base, keys, **options)  # type: ignore[arg-type]
