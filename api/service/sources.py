"""Source datasets: the served graph's declarations with the fold's `SourceScan` records; asking for a scan.

A scan's keys (key range bounds, cursors, tokens) are a connector's bytes: they
leave here only as `redacted(...)` text, never raw.
"""

from __future__ import annotations

from collections.abc import Mapping

from partbuild.api.errors import Conflict, NotFound
from partbuild.api.models.sources import (
    ScanKeyRangeOut,
    ScanRequestedOut,
    SourceConnectorOut,
    SourceDiscoveryOut,
    SourceFoundByName,
    SourceOut,
    SourceScanErrorOut,
    SourceScanOut,
)
from partbuild.api.service.base import ServiceBase
from partbuild.api.surface import ANONYMOUS
from partbuild.orchestrator.graph import SourceDataset
from partbuild.orchestrator.sources.discovery import Discovery
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.build_state import BuildState
from partbuild.state.fold.records import ScanRange, SourceScan
from partbuild.state.rules.redact import redacted


class SourcesService(ServiceBase):
    """Reads of source datasets and their scans; scan requests."""

    def sources(self, as_of_seq: int | None = None, min_seq: int | None = None) -> list[SourceOut]:
        """The served graph's source datasets and every source the log has scans of, by name."""
        declared = self.graph.sources if self.graph is not None else {}
        with self._reading(min_seq, as_of_seq) as state:
            return sources_out(declared, state.sources)

    def scan_source(self, name: str, user: str = ANONYMOUS) -> ScanRequestedOut:
        """Ask for a source to be scanned again now: its next pass begins at once, or when the current one ends."""
        declared = self.graph.sources.get(name) if self.graph is not None else None

        def build(state: BuildState) -> list[pb.Event]:
            if name not in state.sources:
                _check_scannable(name, declared, self.graph is not None)
            event = self._event(pb.SourceScanRequest(source=name, reason=f"asked for by {user}"), user)
            reason = state.problem(event)  # the fold's own rules (the name)
            if reason is not None:
                raise Conflict(reason)
            return [event]

        seq = self._write(build)[0]
        self.reads.read_at_least(seq)  # a store's reads (a working set's) wait for what was written
        with self.reads.read() as state:
            source = source_out(name, declared, state.sources.get(name))
        return ScanRequestedOut(seq=seq, source=source)


def _check_scannable(name: str, declared: SourceDataset | None, has_graph: bool) -> None:
    """NotFound unless the graph has `name` as a source with a discovery (the log has no scan of it)."""
    if declared is None:
        if has_graph:
            raise NotFound(f"no source dataset {name!r}: neither the served graph nor the log has one of that name")
        raise NotFound(f"no source dataset {name!r}: the log has no scan of it (and this service has no graph)")
    if declared.discovery is None:
        raise NotFound(f"source dataset {name!r} has no discovery: it is found by locate only, nothing scans it")


# ----------------------------------------------------------------- records -> models


def found_by(source: SourceDataset) -> SourceFoundByName:
    if source.locate is not None and source.discovery is not None:
        return "both"
    return "discovery" if source.discovery is not None else "locate"


def connector_out(discovery: Discovery) -> SourceConnectorOut:
    """The connector's class and tag name: nothing of its configuration (a root, a bucket, credentials)."""
    connector = discovery.connector
    tag = getattr(connector, "tag", None)
    tag_name = getattr(tag, "name", None)
    return SourceConnectorOut(class_name=type(connector).__name__, tag=tag_name if isinstance(tag_name, str) else None)


def discovery_out(source: SourceDataset, discovery: Discovery) -> SourceDiscoveryOut:
    return SourceDiscoveryOut(
        connector=connector_out(discovery),
        base_location=discovery.base_location,
        keys=discovery.keys or source.partition_pattern.template,
        complete_marker=discovery.complete_marker,
        rescan_every_s=discovery.rescan_every_s,
        rewant_tainted=discovery.rewant_tainted,
        shards=discovery.shards,
    )


def key_range_out(key_range: ScanRange) -> ScanKeyRangeOut:
    return ScanKeyRangeOut(
        start=redacted("ItemKey", key_range.start),
        end=redacted("ItemKey", key_range.end),
        cursor=redacted("ItemKey", key_range.last_key),
        resume_token=redacted("ResumeToken", key_range.resume_token),
        done=key_range.done,
        items=key_range.items,
        bytes=key_range.bytes,
    )


def scan_out(scan: SourceScan) -> SourceScanOut:
    error = None
    if scan.last_error is not None:
        error = SourceScanErrorOut(
            message=scan.last_error, retryable=scan.last_error_retryable, at_ms=scan.last_error_ms
        )
    return SourceScanOut(
        pass_number=scan.pass_number,
        pass_done=scan.done,
        shards=[key_range_out(key_range) for key_range in scan.ranges],
        rescan_requested=scan.rescan_requested,
        pass_items=scan.pass_items,
        pass_partitions=scan.pass_partitions,
        items_total=scan.items_total,
        partitions_total=scan.partitions_total,
        passes_done=scan.passes_done,
        pass_started_ms=scan.pass_started_ms,
        last_pass_done_ms=scan.last_pass_done_ms or None,
        last_pass_items=scan.last_pass_items,
        last_pass_partitions=scan.last_pass_partitions,
        errors_total=scan.errors_total,
        last_error=error,
        updated_seq=scan.updated_seq,
    )


def source_out(name: str, declared: SourceDataset | None, scan: SourceScan | None) -> SourceOut:
    """One source: what the graph declares of it (if it has it), and its scan record (if any)."""
    discovery = declared.discovery if declared is not None else None
    return SourceOut(
        name=name,
        pattern=declared.partition_pattern.template if declared is not None else None,
        found_by=found_by(declared) if declared is not None else None,
        discovery=discovery_out(declared, discovery) if declared is not None and discovery is not None else None,
        scan=scan_out(scan) if scan is not None else None,
    )


def sources_out(declared: Mapping[str, SourceDataset], scans: Mapping[str, SourceScan]) -> list[SourceOut]:
    """Every source the graph declares or the log has scanned, by name."""
    return [source_out(name, declared.get(name), scans.get(name)) for name in sorted({*declared, *scans})]
