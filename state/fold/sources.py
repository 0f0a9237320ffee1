"""Source scans: SourceScanProgress, the cursor of a connector's scan of a source dataset.

A pass lists a source from its first key to its last, in slices; each slice
continues exactly where the previous one ended. So a slice is accepted only when
it names the current pass and the current cursor as where it began, or when it
begins a new pass (the next number, from the start; an operator may start one
at any time). A second scanner of the same source, or a stale one, names a
cursor that has moved on and is rejected: nothing it found is counted twice.
"""

from __future__ import annotations

from sys import intern
from typing import TYPE_CHECKING

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.validation import id_problem, short
from partbuild.state.model import MAX_SCAN_KEY_BYTES, MAX_SCAN_TOKEN_BYTES, SourceScan

if TYPE_CHECKING:
    from partbuild.state.build_state import BuildState

MAX_ERROR_CHARS = 1024

# (the source's record, or None for its first event; whether the slice begins a new pass)
ScanPlan = tuple[SourceScan | None, bool]


def check_source_scan_progress(
    state: BuildState, seq: int, msg: pb.SourceScanProgress, event: pb.Event
) -> str | ScanPlan:
    """Validate a slice of a scan: bounds, then whether it continues the current pass or begins the next."""
    problem = id_problem("source name", msg.source) or _bounds_problem(msg)
    if problem:
        return problem
    scan = state.sources.get(msg.source)
    current = scan.pass_number if scan is not None else 0
    if msg.pass_number == current + 1:
        if msg.after_key:
            return f"pass {msg.pass_number} of source {short(msg.source)} must begin at the start, not after a key"
        return scan, True
    if msg.pass_number != current:
        return f"source {short(msg.source)} is at pass {current}; a slice of pass {msg.pass_number} is stale"
    assert scan is not None  # current >= 1 here, since pass_number >= 1
    if scan.done:
        return f"pass {current} of source {short(msg.source)} is done; the next slice begins pass {current + 1}"
    if msg.after_key != scan.last_key:
        # Keys are a connector's bytes: the reason says that they differ, not what they are.
        return f"source {short(msg.source)} has moved past where this slice began (another scanner, or a stale one)"
    return scan, False


def _bounds_problem(msg: pb.SourceScanProgress) -> str | None:
    if msg.pass_number < 1:
        return "pass_number must be at least 1"
    if len(msg.after_key) > MAX_SCAN_KEY_BYTES or len(msg.last_key) > MAX_SCAN_KEY_BYTES:
        return f"a scan key is at most {MAX_SCAN_KEY_BYTES} bytes"
    if len(msg.resume_token) > MAX_SCAN_TOKEN_BYTES:
        return f"a resume token is at most {MAX_SCAN_TOKEN_BYTES} bytes"
    if msg.resume_token and not msg.last_key:
        return "a resume token needs the key it resumes after"
    if msg.last_key and msg.after_key and msg.last_key < msg.after_key:
        return "a slice's last key is before the key it began after"
    if msg.items < 0 or msg.partitions < 0:
        return "items and partitions must not be negative"
    if len(msg.error) > MAX_ERROR_CHARS or any(not ch.isprintable() for ch in msg.error):
        return f"a scan error is at most {MAX_ERROR_CHARS} printable characters"
    return None


def apply_source_scan_progress(state: BuildState, seq: int, plan: ScanPlan, event: pb.Event) -> None:
    """Move the source's cursor; count what the slice listed and found; close the pass when done."""
    scan, new_pass = plan
    msg = event.source_scan_progress
    now = event.timestamp_ms
    if scan is None:
        scan = state.sources[intern(msg.source)] = SourceScan(intern(msg.source))
    if new_pass:
        scan.pass_number = msg.pass_number
        scan.pass_started_ms = now
        scan.pass_items = scan.pass_partitions = 0
        scan.done = False
    if msg.last_key:  # a slice that found nothing after the cursor leaves it where it was
        scan.last_key = msg.last_key
        scan.resume_token = msg.resume_token
    elif new_pass:
        scan.last_key = scan.resume_token = b""
    scan.pass_items += msg.items
    scan.pass_partitions += msg.partitions
    scan.items_total += msg.items
    scan.partitions_total += msg.partitions
    if msg.error:
        scan.errors_total += 1
        scan.last_error = msg.error
        scan.last_error_retryable = msg.error_retryable
        scan.last_error_ms = now
    if msg.done:
        scan.done = True
        scan.passes_done += 1
        scan.last_pass_done_ms = now
        scan.last_pass_items = scan.pass_items
        scan.last_pass_partitions = scan.pass_partitions
    scan.updated_seq = seq
    scan.updated_ms = now
