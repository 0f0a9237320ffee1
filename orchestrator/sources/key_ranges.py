"""How a pass of a source scan is split into key ranges: rebalanced from the previous pass.

`next_split_keys` gives the next pass's boundaries from the last pass's key ranges
(`ScanRange`: bytes listed, and the `SplitEstimator`'s half-way key moved to a
partition's start). Each finished key range reports the bytes it listed and the
key splitting them about in half. The next pass starts from the previous pass's
boundaries, splits the heaviest range at its hint while there are fewer than
`wanted` (`Discovery.shards`), and, at `wanted`, trades a merge of the
lightest adjacent pair for a split of the heaviest range while that lowers the
heaviest load. Every range can be split once per pass (after a split only its
halves' total is known), so a source grows from one range to `wanted` in about
log2(wanted) passes and follows later shifts of its bytes the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from partbuild.state.fold.records import ScanRange


@dataclass
class _Segment:
    start: bytes
    bytes: float
    hint: bytes  # b"": cannot be split (no hint, or already split this time)


def next_split_keys(previous: list[ScanRange], wanted: int) -> list[bytes]:
    """The split keys of the next pass, from the key ranges of the last finished one (see the module docstring)."""
    if wanted <= 1 or not previous:
        return []
    segments = [_Segment(done.start, float(done.bytes), done.split_hint) for done in previous]
    while len(segments) > wanted:  # asked for fewer key ranges than last time: merge the lightest pairs
        _merge_lightest_pair(segments)
    for _ in range(2 * wanted):  # each round splits one segment: a bound, not a tuning knob
        heaviest = max(range(len(segments)), key=lambda i: segments[i].bytes)
        segment = segments[heaviest]
        if not (segment.hint and segment.hint > segment.start):
            break  # the heaviest cannot be split this time
        if len(segments) >= wanted:
            pair = _lightest_pair(segments)
            merged = segments[pair].bytes + segments[pair + 1].bytes
            if heaviest in (pair, pair + 1) or merged >= segment.bytes:
                break  # a trade would not lower the heaviest load
            _merge_lightest_pair(segments)
            heaviest -= 1 if pair < heaviest else 0
        half = segment.bytes / 2
        segments[heaviest : heaviest + 1] = [_Segment(segment.start, half, b""), _Segment(segment.hint, half, b"")]
    return [segment.start for segment in segments[1:]]


def _lightest_pair(segments: list[_Segment]) -> int:
    return min(range(len(segments) - 1), key=lambda i: segments[i].bytes + segments[i + 1].bytes)


def _merge_lightest_pair(segments: list[_Segment]) -> None:
    pair = _lightest_pair(segments)
    merged = _Segment(segments[pair].start, segments[pair].bytes + segments[pair + 1].bytes, b"")
    segments[pair : pair + 2] = [merged]
