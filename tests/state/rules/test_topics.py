"""Composite topics of webhook subscriptions (state/rules/topics.py): K chains, routing, shard ranges, consistency."""

from __future__ import annotations

import math

import blake3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partbuild.state.rules.topics import (
    MAX_PARTITIONS,
    CompositeTopic,
    StorageTopic,
    divisors,
    key_hash,
    next_k,
    partition_count_problem,
    route,
    shard_count_problem,
    shard_of_partition,
    shard_partitions,
    valid_partition_count,
)
from partbuild.state.rules.topics import _shard_signature as _shard_signature  # the rule the brute force checks

VALID_COUNTS = [count for count in range(1, MAX_PARTITIONS + 1) if valid_partition_count(count)]
SMALL_COUNTS = [count for count in VALID_COUNTS if count <= 24]
hashes = st.integers(min_value=0, max_value=2**31 - 1)


def _owner(topic: StorageTopic, h: int, shard_count: int) -> int:
    return shard_of_partition(topic.partition_for(h), topic.partitions, shard_count)


def _owners_agree(topics: list[StorageTopic], shard_count: int, hs: range | list[int]) -> bool:
    return all(len({_owner(topic, h, shard_count) for topic in topics}) == 1 for h in hs)


# ----------------------------------------------------------------- partition counts


def test_recommended_partition_counts() -> None:
    assert VALID_COUNTS[:8] == [1, 2, 3, 4, 6, 8, 12, 16]
    assert valid_partition_count(MAX_PARTITIONS)
    assert not valid_partition_count(MAX_PARTITIONS + 4)  # a multiple of 4, but too many
    assert all(count % 4 == 0 or count % 6 == 0 for count in VALID_COUNTS if count > 3)


@pytest.mark.parametrize("count", [0, 5, 7, -1, 10, 1028])
def test_unrecommended_partition_counts_are_refused_with_the_reason(count: int) -> None:
    problem = partition_count_problem(count)
    assert problem == f"a storage topic has 1, 2, 3 or a multiple of 4 or 6 partitions (at most 1024), not {count}"
    assert not valid_partition_count(count)
    with pytest.raises(ValueError, match=f"not {count}$"):
        CompositeTopic.create(count)
    with pytest.raises(ValueError, match=f"not {count}$"):
        CompositeTopic.create(4).add_storage_topic(count)


@pytest.mark.parametrize(("value", "shown"), [(True, "True (bool)"), ("4", "'4' (str)"), (4.0, "4.0 (float)")])
def test_partition_counts_that_are_not_ints_are_refused(value: object, shown: str) -> None:
    assert partition_count_problem(value) == f"a partition count is an int, not {shown}"  # type: ignore[arg-type]
    assert not valid_partition_count(value)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="is an int"):
        CompositeTopic.create(value)  # type: ignore[arg-type]


# ----------------------------------------------------------------- group hash


def test_key_hash_is_pinned() -> None:
    """Existing subscriptions' ordering depends on these values: they must never change."""
    assert key_hash("a") == 1482137955
    assert key_hash("b") == 62559716
    assert key_hash("") == 627458821
    assert key_hash("partition/2024-01-01") == 2024461584


def test_key_hash_is_blake3_key_derivation_truncated_to_31_bits() -> None:
    context = "partbuild subscription ordering group v1"
    for key in ["a", "ключ", "run/42"]:
        digest = blake3.blake3(key.encode("utf-8"), derive_key_context=context).digest()
        assert key_hash(key) == int.from_bytes(digest[:4], "big") % 2**31
    assert key_hash("a") != int.from_bytes(blake3.blake3(b"a").digest()[:4], "big") % 2**31  # keyed, not plain


@given(st.text())
def test_key_hash_is_deterministic_and_31_bits(key: str) -> None:
    try:
        h = key_hash(key)
    except ValueError:  # lone surrogates have no UTF-8 bytes
        with pytest.raises(UnicodeEncodeError):
            key.encode("utf-8")
        return
    assert 0 <= h < 2**31
    assert key_hash(key) == h


def test_key_hash_refuses_non_text() -> None:
    with pytest.raises(TypeError):
        key_hash(b"a")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="surrogate"):
        key_hash("a\udc80")


# ----------------------------------------------------------------- K and routing


def test_k_follows_the_seeds_example() -> None:
    # The seed scales 2 partitions to 10 (K=5), though 10 is not itself a recommended count.
    assert next_k(StorageTopic(2), 10) == 5
    assert CompositeTopic((StorageTopic(2), StorageTopic(10, 5))).shard_consistent(2)
    assert next_k(StorageTopic(4), 6) == 1  # not a multiple: the chain restarts
    assert next_k(StorageTopic(4), 4) == 1  # the same size: a multiple, with factor 1


def test_k_chains_over_the_base() -> None:
    topic = CompositeTopic.create(2).add_storage_topic(4).add_storage_topic(12)
    assert [(t.partitions, t.k) for t in topic.storage_topics] == [(2, 1), (4, 2), (12, 6)]
    assert topic.add_storage_topic(8).storage_topics[-1].k == 4  # k counts from the base 2, not from 12
    assert topic.add_storage_topic(3).add_storage_topic(24).storage_topics[-2:] == (
        StorageTopic(3, 1),
        StorageTopic(24, 8),
    )


def test_a_k_out_of_chain_is_refused() -> None:
    with pytest.raises(ValueError, match="implies k=2"):
        CompositeTopic((StorageTopic(2), StorageTopic(4, 1)))
    with pytest.raises(ValueError, match="does not divide"):
        StorageTopic(6, 4)


@given(hashes, st.sampled_from(VALID_COUNTS), st.data())
def test_route_stays_within_the_topic(h: int, partitions: int, data: st.DataObject) -> None:
    k = data.draw(st.sampled_from(divisors(partitions)))
    assert 0 <= route(h, partitions, k) < partitions
    assert route(h, partitions, 1) == h % partitions


def test_route_refuses_bad_arguments() -> None:
    for h, partitions, k in [(-1, 4, 1), (0, 0, 1), (0, 4, 0), (0, 3, 2)]:
        with pytest.raises(ValueError):
            route(h, partitions, k)
    assert StorageTopic(10, 5).partition_for(11) == route(11, 10, 5) == 6


# ----------------------------------------------------------------- shard ranges


@settings(max_examples=200)
@given(st.sampled_from(VALID_COUNTS), st.data())
def test_shard_ranges_partition_the_topic_in_order(partitions: int, data: st.DataObject) -> None:
    shard_count = data.draw(st.sampled_from(divisors(partitions)))
    ranges = [shard_partitions(sid, partitions, shard_count) for sid in range(shard_count)]
    assert [p for r in ranges for p in r] == list(range(partitions))  # contiguous, ordered, each once
    assert {len(r) for r in ranges} == {partitions // shard_count}
    for sid, owned in enumerate(ranges):
        assert all(shard_of_partition(p, partitions, shard_count) == sid for p in owned)


@given(st.integers(1, 200), st.data())
def test_shard_of_partition_inverts_uneven_ranges(partitions: int, data: st.DataObject) -> None:
    shard_count = data.draw(st.integers(1, partitions))
    ranges = [shard_partitions(sid, partitions, shard_count) for sid in range(shard_count)]
    assert [p for r in ranges for p in r] == list(range(partitions))
    assert all(len(r) >= 1 for r in ranges)
    assert [shard_of_partition(p, partitions, shard_count) for p in range(partitions)] == [
        sid for sid, r in enumerate(ranges) for _ in r
    ]


def test_shard_range_arguments_are_checked() -> None:
    assert shard_partitions(1, 12, 3) == range(4, 8)
    for sid, partitions, shard_count in [(3, 12, 3), (-1, 12, 3), (0, 12, 0), (0, 4, 5)]:
        with pytest.raises(ValueError):
            shard_partitions(sid, partitions, shard_count)
    with pytest.raises(ValueError):
        shard_of_partition(12, 12, 3)


def test_shard_counts_must_divide_every_topic() -> None:
    assert shard_count_problem(2, [4, 6, 12]) is None
    assert shard_count_problem(4, [8, 6, 10]) == "4 shards cannot split 6 partitions evenly"
    assert shard_count_problem(0, [4]) == "a subscription has at least 1 shard, not 0"
    assert shard_count_problem(True, [4]) is not None
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    assert divisors(1) == [1]
    assert all(shard_count_problem(d, [12]) is None for d in divisors(12))
    assert [d for d in range(1, 13) if shard_count_problem(d, [12]) is None] == divisors(12)


# ----------------------------------------------------------------- produce pointer and seqs


def test_switch_produce_stops_at_the_last_topic_and_adding_never_moves_it() -> None:
    topic = CompositeTopic.create(4)
    assert topic.switch_produce().produce_pointer == 0
    grown = topic.add_storage_topic(8).add_storage_topic(16)
    assert grown.produce_pointer == 0 and grown.produce_topic == StorageTopic(4)
    moved = grown.switch_produce().switch_produce().switch_produce()
    assert moved.produce_pointer == 2 and moved.produce_topic.partitions == 16
    assert moved.add_storage_topic(32).produce_pointer == 2


def test_main_topic_seqs_map_to_storage_topics() -> None:
    topic = CompositeTopic.create(4).add_storage_topic(8, start_seq=100).add_storage_topic(24, start_seq=250)
    assert [topic.topic_index_at_seq(seq) for seq in (0, 99, 100, 300)] == [0, 0, 0, 0]  # nothing switched yet
    once = topic.switch_produce()
    assert [once.topic_index_at_seq(seq) for seq in (0, 99, 100, 249, 250, 10**9)] == [0, 0, 1, 1, 1, 1]
    twice = once.switch_produce()
    assert [twice.topic_index_at_seq(seq) for seq in (0, 99, 100, 249, 250, 10**9)] == [0, 0, 1, 1, 2, 2]
    with pytest.raises(ValueError):
        twice.topic_index_at_seq(-1)


def test_start_seqs_must_increase() -> None:
    main = CompositeTopic.create(4).add_storage_topic(8, start_seq=100)
    for seq in (100, 50, 0):
        with pytest.raises(ValueError, match="greater than the previous"):
            main.add_storage_topic(8, start_seq=seq)
    internal = CompositeTopic.create(4).add_storage_topic(8)  # all at 0: an internal topic
    assert [t.start_seq for t in internal.storage_topics] == [0, 0]


@settings(max_examples=50)
@given(st.lists(hashes, min_size=20, max_size=20), st.sampled_from([1, 2, 4]))
def test_rewinding_never_moves_a_group_to_another_shard(hs: list[int], shard_count: int) -> None:
    topic = CompositeTopic.create(4).add_storage_topic(8, start_seq=100).add_storage_topic(24, start_seq=250)
    topic = topic.switch_produce().switch_produce()
    assert topic.shard_consistent(shard_count)
    for h in hs:
        owners = set()
        for seq in (0, 150, 300):
            stored_in = topic.storage_topics[topic.topic_index_at_seq(seq)]
            owners.add(_owner(stored_in, h, shard_count))
        assert len(owners) == 1


# ----------------------------------------------------------------- shard consistency


@st.composite
def k_chains(draw: st.DrawFn) -> CompositeTopic:
    base = draw(st.sampled_from([1, 2, 3, 4, 6, 12]))
    topic = CompositeTopic.create(base)
    sizes = [base * factor for factor in (1, 2, 3, 4, 6) if valid_partition_count(base * factor)]
    for partitions in draw(st.lists(st.sampled_from(sizes), max_size=3)):
        topic = topic.add_storage_topic(partitions)
    return topic


@settings(max_examples=100)
@given(k_chains(), st.lists(hashes, min_size=1, max_size=50))
def test_a_k_chain_keeps_every_group_on_its_shard(topic: CompositeTopic, hs: list[int]) -> None:
    first = topic.storage_topics[0].partitions
    for shard_count in divisors(first):
        assert topic.shard_consistent(shard_count)
        assert _owners_agree(list(topic.storage_topics), shard_count, hs)


def test_a_k_reset_is_detected_with_a_witness() -> None:
    topic = CompositeTopic.create(4).add_storage_topic(6)
    assert topic.storage_topics[1].k == 1
    assert topic.shard_consistent(1)
    assert not topic.shard_consistent(2)
    witness = next(h for h in range(100) if not _owners_agree(list(topic.storage_topics), 2, [h]))
    assert _owner(topic.storage_topics[0], witness, 2) != _owner(topic.storage_topics[1], witness, 2)
    assert not topic.shard_consistent(3)  # 3 does not split 4 partitions at all


def test_consistency_needs_the_shards_to_split_the_base() -> None:
    # Same base 2, but 4 shards split the 2-partition base unevenly: the k blocks straddle shards.
    topic = CompositeTopic((StorageTopic(4, 2), StorageTopic(8, 4)))
    assert not topic.shard_consistent(4)
    assert not _owners_agree(list(topic.storage_topics), 4, range(64))
    same = CompositeTopic((StorageTopic(4, 2), StorageTopic(4, 2)))
    assert same.shard_consistent(4)


def _exhaustive_agreement(a: StorageTopic, b: StorageTopic, shard_count: int) -> bool:
    # Routing of (P, k) repeats with period P * k, so one joint period decides every h.
    return _owners_agree([a, b], shard_count, range(math.lcm(a.partitions * a.k, b.partitions * b.k)))


SMALL_TOPICS = [StorageTopic(p, k) for p in SMALL_COUNTS for k in divisors(p)]


def test_shard_consistent_matches_brute_force_for_every_small_composite() -> None:
    """Every two-topic composite of small sizes (any first k, every successor) and every shard count."""
    checked = 0
    for first in SMALL_TOPICS:
        for partitions in SMALL_COUNTS:
            pair = (first, StorageTopic(partitions, next_k(first, partitions)))
            for shard_count in divisors(math.gcd(first.partitions, partitions)):
                truth = _exhaustive_agreement(*pair, shard_count)
                assert CompositeTopic(pair).shard_consistent(shard_count) == truth, (pair, shard_count)
                checked += 1
    assert checked > 500


def test_shard_signature_is_exact_for_arbitrary_pairs() -> None:
    """The rule behind shard_consistent, on pairs no composite would chain (bases of 1, foreign k)."""
    equal_pairs = 0
    for a in SMALL_TOPICS:
        for b in SMALL_TOPICS:
            for shard_count in divisors(math.gcd(a.partitions, b.partitions))[1:]:
                same = _shard_signature(a, shard_count) == _shard_signature(b, shard_count)
                assert same == _exhaustive_agreement(a, b, shard_count), (a, b, shard_count)
                equal_pairs += same and (a.partitions, a.k) != (b.partitions, b.k)
    assert equal_pairs > 50  # distinct layouts that do agree exist, so the rule is not mere identity
