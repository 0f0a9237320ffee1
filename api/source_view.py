"""Source datasets as the API shows them: the served graph's declaration with the fold's `SourceScan` record.

A scan's keys (key range bounds, cursors, tokens) are a connector's bytes: they leave
here only as `redacted(...)` text, never raw.
"""

from __future__ import annotations

from collections.abc import Mapping

from partbuild.api import models as m
from partbuild.orchestrator.graph import SourceDataset
from partbuild.orchestrator.sources.discovery import Discovery
from partbuild.state.fold.records import ScanRange, SourceScan
from partbuild.state.rules.redact import redacted


def found_by(source: SourceDataset) -> m.SourceFoundByName:
    if source.locate is not None and source.discovery is not None:
        return "both"
    return "discovery" if source.discovery is not None else "locate"


def connector_out(discovery: Discovery) -> m.SourceConnector:
    """The connector's class and tag name: nothing of its configuration (a root, a bucket, credentials)."""
    connector = discovery.connector
    tag = getattr(connector, "tag", None)
    tag_name = getattr(tag, "name", None)
    return m.SourceConnector(class_name=type(connector).__name__, tag=tag_name if isinstance(tag_name, str) else None)


def discovery_out(source: SourceDataset, discovery: Discovery) -> m.SourceDiscovery:
    return m.SourceDiscovery(
        connector=connector_out(discovery),
        base_location=discovery.base_location,
        keys=discovery.keys or source.pattern.template,  # type: ignore[union-attr]
        complete_marker=discovery.complete_marker,
        rescan_every_s=discovery.rescan_every_s,
        rewant_tainted=discovery.rewant_tainted,
        shards=discovery.shards,
    )


def key_range_out(key_range: ScanRange) -> m.SourceScanShard:
    return m.SourceScanShard(
        start=redacted("ItemKey", key_range.start),
        end=redacted("ItemKey", key_range.end),
        cursor=redacted("ItemKey", key_range.last_key),
        resume_token=redacted("ResumeToken", key_range.resume_token),
        done=key_range.done,
        items=key_range.items,
        bytes=key_range.bytes,
    )


def scan_out(scan: SourceScan) -> m.SourceScanStatus:
    error = None
    if scan.last_error is not None:
        error = m.SourceScanError(
            message=scan.last_error, retryable=scan.last_error_retryable, at_ms=scan.last_error_ms
        )
    return m.SourceScanStatus(
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


def source_out(name: str, declared: SourceDataset | None, scan: SourceScan | None) -> m.Source:
    """One source: what the graph declares of it (if it has it), and its scan record (if any)."""
    discovery = declared.discovery if declared is not None else None
    return m.Source(
        name=name,
        pattern=declared.pattern.template if declared is not None else None,  # type: ignore[union-attr]
        found_by=found_by(declared) if declared is not None else None,
        discovery=discovery_out(declared, discovery) if declared is not None and discovery is not None else None,
        scan=scan_out(scan) if scan is not None else None,
    )


def sources_out(declared: Mapping[str, SourceDataset], scans: Mapping[str, SourceScan]) -> list[m.Source]:
    """Every source the graph declares or the log has scanned, by name."""
    return [source_out(name, declared.get(name), scans.get(name)) for name in sorted({*declared, *scans})]
