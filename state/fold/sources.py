"""Source scans: SourceScanProgress, the cursors of a connector's scan of a source dataset.

A pass lists a source from its first key to its last, possibly split into key
ranges (fixed by the slice that begins the pass; the proto calls one a "shard"),
each listed in slices by whoever owns it. A slice continues exactly where the
previous slice of its key range ended: it is accepted only when it names the
current pass, a key range not yet done, and that range's cursor as where it
began. Or it begins a new pass (the next number, from the start of range 0; an
operator may begin one at any time). A second scanner of a key range, or a stale
one, names a cursor that has moved on and is rejected: nothing it found is
counted twice.

SourceScanRequest (an operator's "scan it again now") makes the next pass due.

PartitionGone: a completed pass over a key range no longer found a partition whose Live
instance it had observed there; the instance becomes Gone (it stays canonical, so what
needs the ref waits, and what was built from it stays as it is). It is accepted only
right behind the accepted slice that ended that key range (`scan_seq`), so a second or
stale scanner, whose slice is rejected, cannot declare anything gone. Observing the
partition again makes a new Live instance (check_partition_observed: a canonical
instance that is not Live is replaced).
"""

from __future__ import annotations

from itertools import pairwise
from sys import intern
from typing import TYPE_CHECKING

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.fold.records import (
    MAX_SCAN_KEY_BYTES,
    MAX_SCAN_TOKEN_BYTES,
    Instance,
    InstanceState,
    ScanRange,
    SourceScan,
)
from partbuild.state.fold.transitions import move_instance, set_note
from partbuild.state.fold.validation import id_problem, short
from partbuild.state.rules.refs import ref_problem

if TYPE_CHECKING:
    from partbuild.state.fold.build_state import BuildState

MAX_ERROR_CHARS = 1024
MAX_KEY_RANGES = 256

# (the source's record, or None for its first event; the key ranges of a new pass, or None to continue)
ScanPlan = tuple[SourceScan | None, list[ScanRange] | None]


def check_source_scan_progress(
    state: BuildState, seq: int, msg: pb.SourceScanProgress, event: pb.Event
) -> str | ScanPlan:
    """Validate a slice: bounds, then whether it begins the next pass or continues its key range's cursor."""
    problem = id_problem("source name", msg.source) or _bounds_problem(msg)
    if problem:
        return problem
    name = short(msg.source)
    scan = state.sources.get(msg.source)
    current = scan.pass_number if scan is not None else 0
    if msg.pass_number == current + 1:
        if msg.after_key or msg.shard != 0:
            return f"pass {msg.pass_number} of source {name} must begin at the start of shard 0"
        ranges = _split(list(msg.split_keys))
        if isinstance(ranges, str):
            return ranges
        return _slice_problem(msg, ranges[0]) or (scan, ranges)
    if msg.split_keys:
        return "only the slice that begins a pass may split it"
    if msg.pass_number != current:
        return f"source {name} is at pass {current}; a slice of pass {msg.pass_number} is stale"
    assert scan is not None  # current >= 1 here, since pass_number >= 1
    # The rejection reasons below keep the proto's word "shard": they are recorded in the state.
    if msg.shard >= len(scan.ranges):
        return f"pass {current} of source {name} has {len(scan.ranges)} shard(s), not a shard {msg.shard}"
    key_range = scan.ranges[msg.shard]
    if key_range.done:
        return f"shard {msg.shard} of pass {current} of source {name} is done"
    if msg.after_key != key_range.last_key:
        # Keys are a connector's bytes: the reason says that they differ, not what they are.
        return f"source {name} has moved past where this slice began (another scanner, or a stale one)"
    return _slice_problem(msg, key_range) or (scan, None)


def _split(keys: list[bytes]) -> list[ScanRange] | str:
    """The key ranges `keys` split the key space into, or why they cannot."""
    if len(keys) >= MAX_KEY_RANGES:
        return f"a pass has at most {MAX_KEY_RANGES} shards"
    if any(not key or len(key) > MAX_SCAN_KEY_BYTES for key in keys):
        return f"a split key is 1..{MAX_SCAN_KEY_BYTES} bytes"
    if any(a >= b for a, b in pairwise(keys)):
        return "split keys must increase"
    bounds = [b"", *keys, b""]
    return [ScanRange(start, end) for start, end in pairwise(bounds)]


def _slice_problem(msg: pb.SourceScanProgress, key_range: ScanRange) -> str | None:
    """Why a slice's keys do not fit its key range, or None."""
    if msg.last_key and not key_range.contains(msg.last_key):
        return f"the slice's last key is outside shard {msg.shard}"
    if msg.split_hint and not (msg.done and key_range.contains(msg.split_hint)):
        return "a split hint comes with the slice that ends a shard, inside the shard"
    return None


def _bounds_problem(msg: pb.SourceScanProgress) -> str | None:
    if msg.pass_number < 1 or msg.shard < 0:
        return "pass_number must be at least 1 and shard at least 0"
    if max(len(msg.after_key), len(msg.last_key), len(msg.split_hint)) > MAX_SCAN_KEY_BYTES:
        return f"a scan key is at most {MAX_SCAN_KEY_BYTES} bytes"
    if len(msg.resume_token) > MAX_SCAN_TOKEN_BYTES:
        return f"a resume token is at most {MAX_SCAN_TOKEN_BYTES} bytes"
    if msg.resume_token and not msg.last_key:
        return "a resume token needs the key it resumes after"
    if msg.last_key and msg.after_key and msg.last_key < msg.after_key:
        return "a slice's last key is before the key it began after"
    if msg.items < 0 or msg.partitions < 0 or msg.bytes < 0:
        return "items, partitions and bytes must not be negative"
    if len(msg.error) > MAX_ERROR_CHARS or any(not ch.isprintable() for ch in msg.error):
        return f"a scan error is at most {MAX_ERROR_CHARS} printable characters"
    return None


def apply_source_scan_progress(state: BuildState, seq: int, plan: ScanPlan, event: pb.Event) -> None:
    """Move the key range's cursor; count what the slice listed and found; close the range, and the pass."""
    scan, new_ranges = plan
    msg = event.source_scan_progress
    now = event.timestamp_ms
    if scan is None:
        scan = state.sources[intern(msg.source)] = SourceScan(intern(msg.source))
    if new_ranges is not None:
        scan.rescan_requested = False
        scan.pass_number = msg.pass_number
        scan.ranges = new_ranges
        scan.pass_started_ms = now
        scan.pass_items = scan.pass_partitions = 0
        scan.done = False
    key_range = scan.ranges[msg.shard]
    if msg.last_key:  # a slice that found nothing after the cursor leaves it where it was
        key_range.last_key = msg.last_key
        key_range.resume_token = msg.resume_token
    key_range.items += msg.items
    key_range.bytes += msg.bytes
    key_range.updated_seq = seq
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
        key_range.done = True
        key_range.split_hint = msg.split_hint
        if all(each.done for each in scan.ranges):
            scan.done = True
            scan.passes_done += 1
            scan.last_pass_done_ms = now
            scan.last_pass_items = scan.pass_items
            scan.last_pass_partitions = scan.pass_partitions
            scan.last_pass_ranges = scan.ranges
    scan.updated_seq = seq
    scan.updated_ms = now


def check_source_scan_request(state: BuildState, seq: int, msg: pb.SourceScanRequest, event: pb.Event) -> str | None:
    """Validate a request to scan a source again now (any source name: its scanner may not have run yet)."""
    problem = id_problem("source name", msg.source)
    if problem:
        return problem
    if len(msg.reason) > MAX_ERROR_CHARS:
        return f"a reason is at most {MAX_ERROR_CHARS} characters"
    return None


def apply_source_scan_request(state: BuildState, seq: int, plan: None, event: pb.Event) -> None:
    """The source's next pass is due at once (after the current one, if one is running)."""
    name = intern(event.source_scan_request.source)
    scan = state.sources.get(name)
    if scan is None:
        scan = state.sources[name] = SourceScan(name)
    scan.rescan_requested = True
    scan.updated_seq = seq
    scan.updated_ms = event.timestamp_ms


def check_partition_gone(state: BuildState, seq: int, msg: pb.PartitionGone, event: pb.Event) -> str | Instance:
    """Validate a gone: the slice that ended its key range was just accepted, and the instance is Live there."""
    problem = id_problem("source name", msg.source) or ref_problem(msg.partition_ref)
    if problem:
        return problem
    ref = short(msg.partition_ref)
    scan = state.sources.get(msg.source)
    if scan is None or scan.pass_number != msg.pass_number or not 0 <= msg.shard < len(scan.ranges):
        return f"pass {msg.pass_number} of source {short(msg.source)} is not the current pass; {ref} is not gone"
    key_range = scan.ranges[msg.shard]
    if not key_range.done or key_range.updated_seq != msg.scan_seq or not 0 < msg.scan_seq < seq:
        return f"the slice that ended shard {msg.shard} is not the one this gone follows (a stale scanner)"
    uuid = state.canonical.get(msg.partition_ref)
    instance = state.instances[uuid] if uuid is not None else None
    if instance is None or instance.state != InstanceState.LIVE:
        return f"partition {ref} is not Live; it cannot be gone"
    if instance.location != msg.location:
        return f"partition {ref} is Live at another location than {short(msg.location)}"
    return instance


def apply_partition_gone(state: BuildState, seq: int, instance: Instance, event: pb.Event) -> None:
    """The Live instance becomes Gone, saying why; it stays canonical, so what needs its ref waits."""
    msg = event.partition_gone
    move_instance(state, instance, InstanceState.GONE, seq)
    note = f"its data is gone: pass {msg.pass_number} of source {msg.source} no longer found it (seq {seq})"
    set_note(state, instance, note, seq)
