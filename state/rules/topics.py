"""Composite topics for webhook subscriptions: storage topics, shard-consistent routing, shard ranges.

Pure structures and arithmetic, no I/O. The event log (the "main topic") and a
subscription's retry and dead-letter queues are each a `CompositeTopic`: an
append-only sequence of `StorageTopic`s, one of which (the produce pointer)
receives new messages. A message goes to the partition `route(h, P, K)` of that
storage topic, `h` being `key_hash` of its ordering key. Shards of a
subscription each own a contiguous range of partitions (`shard_partitions`);
routing keeps a key on the same shard across storage topics whose K factors
chain from one another, which is what lets a subscription rewind into older
storage topics without regrouping its keys.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable

import blake3

MAX_PARTITIONS = 1024
KEY_HASH_CONTEXT = "partbuild subscription ordering group v1"  # changing it reorders every subscription
_HASH_MASK = 2**31 - 1  # 31 bits: K * h stays far inside a signed 64-bit SQL integer


# ----------------------------------------------------------------- partition counts


def partition_count_problem(partitions: int) -> str | None:
    """None for a recommended storage topic size, else one sentence saying why not.

    Recommended: 1, 2 or 3, or a multiple of 4 or of 6, at most `MAX_PARTITIONS`;
    such counts have many divisors, so many shard counts split them evenly.
    """
    if type(partitions) is not int:  # bool is an int subclass, but True partitions is a mistake
        return f"a partition count is an int, not {partitions!r} ({type(partitions).__name__})"
    recommended = partitions in (1, 2, 3) or (partitions > 0 and (partitions % 4 == 0 or partitions % 6 == 0))
    if recommended and partitions <= MAX_PARTITIONS:
        return None
    return (
        f"a storage topic has 1, 2, 3 or a multiple of 4 or 6 partitions (at most {MAX_PARTITIONS}), not {partitions}"
    )


def valid_partition_count(partitions: int) -> bool:
    """Whether `partitions` is a recommended storage topic size (see `partition_count_problem`)."""
    return partition_count_problem(partitions) is None


# ----------------------------------------------------------------- hashing and routing


def key_hash(key: str) -> int:
    """The ordering hash of `key`: the first 31 bits of BLAKE3 in key-derivation mode over its UTF-8.

    Stable forever: partition and shard of every stored message follow from it.
    Raises TypeError for a non-str and ValueError for text with lone surrogates.
    """
    if not isinstance(key, str):
        raise TypeError(f"an ordering key is a str, not {type(key).__name__}")
    try:
        raw = key.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"ordering key has a lone surrogate at position {exc.start}; it has no UTF-8 bytes") from None
    digest = blake3.blake3(raw, derive_key_context=KEY_HASH_CONTEXT).digest(length=4)
    return int.from_bytes(digest, "big") & _HASH_MASK


def _need_int(value: int, name: str, least: int) -> None:
    if type(value) is not int:
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < least:
        raise ValueError(f"{name} must be at least {least}, got {value}")


def route(h: int, partitions: int, k: int) -> int:
    """The partition of hash `h` in a storage topic of `partitions` partitions scaled by `k`.

    `k * h % P + (h // P) % k`: with base = P / k, a hash lands in the block of k
    partitions that stands for its partition `h % base` in an unscaled topic, so
    shards splitting `base` evenly see the same hashes in every scaled topic.
    `k` must divide `partitions`; otherwise the sum can reach P.
    """
    _need_int(h, "hash", 0)
    _need_int(partitions, "partitions", 1)
    _need_int(k, "k", 1)
    if partitions % k:
        raise ValueError(f"k={k} does not divide {partitions} partitions")
    return k * h % partitions + (h // partitions) % k


# ----------------------------------------------------------------- storage and composite topics


@dataclasses.dataclass(frozen=True)
class StorageTopic:
    """One storage topic: its partition count, its scale factor k, and (main topics) its first log seq.

    Only structure is checked here (k divides partitions); the recommended sizes are
    enforced by `CompositeTopic.create` and `add_storage_topic`, so a topic
    restored from elsewhere with an unusual size can still be represented.
    """

    partitions: int
    k: int = 1
    start_seq: int = 0

    def __post_init__(self) -> None:
        _need_int(self.partitions, "partitions", 1)
        _need_int(self.k, "k", 1)
        _need_int(self.start_seq, "start_seq", 0)
        if self.partitions % self.k:
            raise ValueError(f"k={self.k} does not divide {self.partitions} partitions")

    @property
    def base(self) -> int:
        """The unscaled partition count this topic's routing refines (partitions / k)."""
        return self.partitions // self.k

    def partition_for(self, h: int) -> int:
        """The partition a message with hash `h` goes to."""
        return route(h, self.partitions, self.k)


def next_k(previous: StorageTopic, partitions: int) -> int:
    """K of a storage topic of `partitions` appended after `previous`: the scale over its base, else 1.

    A size that is no multiple of the base restarts the chain (k = 1, a new base).
    """
    _need_int(partitions, "partitions", 1)
    base = previous.base
    return partitions // base if partitions % base == 0 else 1


def _shard_signature(topic: StorageTopic, shard_count: int) -> tuple[int, ...]:
    """Equal for two topics exactly when `shard_count` shards see the same hashes in both.

    With shard_count dividing the base, the block of k partitions of `h % base` lies in
    one shard, so the shard is `(h // (base / sc)) % sc`: only the stride base / sc
    matters. A base of 1 (k == partitions) routes by `(h // P) % P`, again a stride,
    P * P / sc. Any other layout splits some block between shards and is equal only
    to itself (tests check all this exhaustively over small sizes).
    """
    if topic.base % shard_count == 0:
        return (topic.base // shard_count,)
    if topic.base == 1:
        return (topic.partitions * (topic.partitions // shard_count),)
    return (0, topic.partitions, topic.k)


@dataclasses.dataclass(frozen=True)
class CompositeTopic:
    """An ordered, append-only sequence of storage topics and the index new messages go to.

    Each storage topic's k follows `next_k` from its predecessor, and nonzero start
    seqs increase (a main topic); internal topics (retry, dead letter) keep all at 0.
    """

    storage_topics: tuple[StorageTopic, ...]
    produce_pointer: int = 0

    def __post_init__(self) -> None:
        topics = self.storage_topics
        if type(topics) is not tuple or not topics or not all(isinstance(t, StorageTopic) for t in topics):
            raise TypeError("storage_topics must be a non-empty tuple of StorageTopic")
        _need_int(self.produce_pointer, "produce_pointer", 0)
        if self.produce_pointer >= len(topics):
            raise ValueError(f"produce_pointer {self.produce_pointer} is past the last of {len(topics)} topics")
        for index, (before, after) in enumerate(itertools.pairwise(topics), start=1):
            expected = next_k(before, after.partitions)
            if after.k != expected:
                raise ValueError(f"storage topic {index} has k={after.k}, but its predecessor implies k={expected}")
            _check_start_seq(before, after.start_seq)

    @classmethod
    def create(cls, partitions: int, *, k: int = 1, start_seq: int = 0) -> CompositeTopic:
        """A composite topic of one storage topic of a recommended size."""
        _refuse_size(partitions)
        return cls((StorageTopic(partitions, k, start_seq),))

    def add_storage_topic(self, partitions: int, *, start_seq: int = 0) -> CompositeTopic:
        """This topic with one more storage topic at the end; production stays where it was."""
        _refuse_size(partitions)
        last = self.storage_topics[-1]
        _check_start_seq(last, start_seq)
        added = StorageTopic(partitions, next_k(last, partitions), start_seq)
        return dataclasses.replace(self, storage_topics=(*self.storage_topics, added))

    def switch_produce(self) -> CompositeTopic:
        """This topic producing into the next storage topic, or still the last one if already there."""
        pointer = min(self.produce_pointer + 1, len(self.storage_topics) - 1)
        return dataclasses.replace(self, produce_pointer=pointer)

    @property
    def produce_topic(self) -> StorageTopic:
        """The storage topic new messages go to."""
        return self.storage_topics[self.produce_pointer]

    def topic_index_at_seq(self, seq: int) -> int:
        """The index of the storage topic (of a main topic) that holds log seq `seq`.

        The last one whose start seq is at most `seq`, among those produced into so
        far: a topic beyond the produce pointer holds nothing yet.
        """
        _need_int(seq, "seq", 0)
        if seq < self.storage_topics[0].start_seq:
            raise ValueError(f"seq {seq} precedes the first storage topic (seq {self.storage_topics[0].start_seq})")
        produced = self.storage_topics[: self.produce_pointer + 1]
        return max(index for index, topic in enumerate(produced) if topic.start_seq <= seq)

    def shard_consistent(self, shard_count: int) -> bool:
        """Whether `shard_count` shards split every storage topic evenly and see the same keys in each.

        Then a key's shard never depends on the storage topic it was read from, so a
        rewind into any earlier storage topic keeps every key on its shard.
        """
        _need_int(shard_count, "shard_count", 1)
        if any(topic.partitions % shard_count for topic in self.storage_topics):
            return False
        if shard_count == 1:  # one shard owns everything; strides would differ for no reason
            return True
        return len({_shard_signature(topic, shard_count) for topic in self.storage_topics}) == 1


def _refuse_size(partitions: int) -> None:
    problem = partition_count_problem(partitions)
    if problem is not None:
        raise ValueError(problem)


def _check_start_seq(last: StorageTopic, start_seq: int) -> None:
    # Zero after zero is an internal topic; a main topic's switch seqs strictly increase.
    _need_int(start_seq, "start_seq", 0)
    if not (start_seq == 0 == last.start_seq or start_seq > last.start_seq):
        raise ValueError(f"start_seq {start_seq} must be greater than the previous topic's {last.start_seq}")


# ----------------------------------------------------------------- shards


def _check_shards(partitions: int, shard_count: int) -> None:
    _need_int(partitions, "partitions", 1)
    _need_int(shard_count, "shard_count", 1)
    if shard_count > partitions:  # some shard would own no partition
        raise ValueError(f"{shard_count} shards exceed {partitions} partitions")


def shard_partitions(shard_id: int, partitions: int, shard_count: int) -> range:
    """The partitions shard `shard_id` owns by default: `[sid*P//sc, (sid+1)*P//sc)`, contiguous."""
    _check_shards(partitions, shard_count)
    _need_int(shard_id, "shard_id", 0)
    if shard_id >= shard_count:
        raise ValueError(f"shard_id {shard_id} is not below shard_count {shard_count}")
    return range(shard_id * partitions // shard_count, (shard_id + 1) * partitions // shard_count)


def shard_of_partition(partition: int, partitions: int, shard_count: int) -> int:
    """The shard whose `shard_partitions` range holds `partition`, even when shard_count does not divide P."""
    _check_shards(partitions, shard_count)
    _need_int(partition, "partition", 0)
    if partition >= partitions:
        raise ValueError(f"partition {partition} is not below {partitions}")
    # The largest s with s*P//sc <= partition, i.e. s*P < (partition + 1)*sc.
    return ((partition + 1) * shard_count - 1) // partitions


def shard_count_problem(shard_count: int, partitions: Iterable[int]) -> str | None:
    """None when `shard_count` is at least 1 and divides each given partition count, else why not."""
    if type(shard_count) is not int:
        return f"a shard count is an int, not {shard_count!r} ({type(shard_count).__name__})"
    if shard_count < 1:
        return f"a subscription has at least 1 shard, not {shard_count}"
    for count in partitions:
        if count % shard_count:
            return f"{shard_count} shards cannot split {count} partitions evenly"
    return None


def divisors(partitions: int) -> list[int]:
    """The shard counts that split a topic of `partitions` evenly, ascending."""
    _need_int(partitions, "partitions", 1)
    return [count for count in range(1, partitions + 1) if partitions % count == 0]
