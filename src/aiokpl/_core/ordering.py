"""Strict ordering per shard (``Config(ordering="shard")``): the rules, and the pure helpers.

Kinesis stores a shard's records in the order they arrive, and numbers them so. What breaks
put order is the producer's side: several requests in flight for one shard, a retried record
sent after records put later, and ``PutRecords`` itself, which processes its entries
independently ("``PutRecords`` doesn't guarantee the ordering of records", says its API
reference): entry 1 for a shard can be throttled while entry 2 for the same shard is stored.
By default (``ordering="aggregate"``) the producer keeps put order only within one aggregate,
as the KPL does, whose users keep asking for more (KPL issues #23, #135). With
``ordering="shard"`` the stream pipeline keeps these rules:

* **One lane per predicted shard, one Kinesis record in flight per lane.** The limiter's queue
  of a shard is a FIFO lane. Its head is admitted only when nothing of the lane is in flight;
  it stays *in flight* from admission until its request is answered and judged (or it expires
  unsent). So a request carries at most one Kinesis record per shard (one aggregate holding
  many user records, or one raw record without aggregation), and no two requests for one
  shard overlap.
* **A failed record goes back to the head of its lane**, before any later record: the
  router gives its retried user records back as one Kinesis record (:func:`regroup`: the
  same aggregate if all of them are retried, else a new one of those retried, in put order),
  never to the aggregator, where later records wait in open batches. It stays in its lane
  even if the shard map has changed since: the explicit hash key routes it.
* **Records of a closed shard go before those of its children.** When a new shard map drops
  a shard whose lane still holds records (queued or in flight), the lane *retires*: it keeps
  sending its records with their old prediction (Kinesis routes each by its hash key to the
  child that owns it), and every lane whose hash-key range overlaps it (:func:`overlaps`),
  children and grandchildren, is *held*: it admits nothing until the retired lane is empty.
  Open batches of the dropped shards are closed into their lanes first, so every record
  predicted with the old map is ahead of every record predicted with the new one. A consumer
  that reads a parent to its end before its children, as the KCL does, sees each partition
  key's records in put order across splits and merges. Records sent before any map (no
  prediction) form one lane for the whole stream that holds every shard's lane while it has
  records.

Choices where the service's documentation is silent:

* **Outcome unknown** (a timeout, a lost connection): the record is resent first, as in the
  default mode. That can store it twice, never out of order for a consumer that keeps the
  first copy of each record: the next record of the lane is sent only after a copy of this
  one was acknowledged, so the first copy of every record comes before the first copy of any
  record put after it. A late copy of an unacknowledged request (processed after the
  producer gave up on it) may land later: deduplicate by a key of your own.
* **Expiry and failures leave gaps, not holds.** A record that fails for good (its TTL
  passed, or an error no retry can fix) is reported failed and the lane goes on with the
  next record: what is delivered is in put order, and what failed is missing. Failing every
  later record of the shard instead would turn one bad record into an outage of its shard.
  The one exception is a record whose result says ``outcome_unknown``: it may be in the
  stream, and, as above, after records put later.
* **``PutRecord`` with ``SequenceNumberForOrdering``**, the service's own tool, is not used.
  It orders one record per call after the previous record's sequence number, so it needs the
  same one-at-a-time wait per shard, and adds a request per record where ``PutRecords``
  carries one record for each of up to 500 shards; it does not help when the previous
  record's outcome is unknown (there is no sequence number to give); and it needs the
  separate ``kinesis:PutRecord`` permission. One request per shard in flight, sent after the
  previous one was answered, gives the same order: the service numbers a shard's records by
  arrival.

These helpers are pure (no clock, no I/O); :func:`regroup` mutates the Kinesis record it is
given when it reuses it, and says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .encoder import AggregateBuilder
from .records import AGGREGATE_PARTITION_KEY, KinesisRecord, UserRecordLike
from .retry_policy import WRONG_SHARD

if TYPE_CHECKING:
    from .shards import ShardRange

__all__ = ("overlaps", "regroup")


def overlaps(first: ShardRange | None, second: ShardRange | None) -> bool:
    """Whether two shards' hash-key ranges share a key; an unknown range (``None``) overlaps
    every range, so a lane whose range is not known waits rather than risk an overtake."""
    if first is None or second is None:
        return True
    return (
        first.starting_hash_key <= second.ending_hash_key
        and second.starting_hash_key <= first.ending_hash_key
    )


def regroup(sent: KinesisRecord, retry: Sequence[UserRecordLike]) -> list[KinesisRecord]:
    """The Kinesis records that resend ``retry``, the user records of ``sent`` to retry, in
    order.

    ``retry`` holds user records of ``sent`` in its order (a retried record's data is back,
    see ``KinesisRecord.restore_data``). The result keeps ``sent``'s prediction, so it goes
    back to the head of the same lane.

    * none to retry: none;
    * all of them, ``sent`` landed where predicted: ``sent`` itself, its blob unchanged
      (*mutating*: its deadline and expiry become the earliest of theirs, the retry deadline
      set by the retry policy);
    * all of them because ``sent`` landed on a shard that does not hold them all
      (``"Wrong Shard"``: a KCL consumer drops it whole): each alone, raw, so that each lands
      where its own key routes it (the same aggregate would land where it did);
    * one: that record alone, raw (with tags, an aggregate of one: ``KinesisRecord.single``);
    * some: a new aggregate of those, in their order, tags kept (it fits, as ``sent`` did).
    """
    if not retry:
        return []
    deadline = min(record.deadline for record in retry)
    expires_at = min(record.expires_at for record in retry)
    last = retry[0].attempts[-1:]
    if len(retry) > 1 and last and last[0].error_code == WRONG_SHARD:
        return [_alone(sent, record) for record in retry]
    if len(retry) == len(sent.records):
        sent.deadline = deadline
        sent.expires_at = expires_at
        return [sent]
    first = retry[0]
    if len(retry) == 1:
        return [_alone(sent, first)]
    builder = AggregateBuilder()
    for record in retry:
        builder.try_add(
            record.partition_key,
            record.data,
            record.explicit_hash_key,
            float("inf"),
            record.encoded_tags,
        )
    ehk = first.explicit_hash_key
    return [
        KinesisRecord(
            list(retry),
            builder.encode(),
            AGGREGATE_PARTITION_KEY,
            ehk if ehk is not None else str(first.hash_key),
            sent.predicted_shard,
            deadline,
            expires_at,
            len(AGGREGATE_PARTITION_KEY),
        )
    ]


def _alone(sent: KinesisRecord, record: UserRecordLike) -> KinesisRecord:
    """``record`` alone, raw, back to the lane of ``sent``."""
    single = KinesisRecord.single(record, record.hash_key)
    single.predicted_shard = sent.predicted_shard
    return single
