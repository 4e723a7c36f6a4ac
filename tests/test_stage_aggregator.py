"""The aggregator on its own: synchronous, with explicit ``now``; it returns what it seals."""

from __future__ import annotations

from aiokpl._core.decoder import decode, is_aggregated
from aiokpl._core.records import KinesisRecord
from aiokpl._pipeline.aggregator import Aggregator
from stages import Recorder, user_record


def aggregator(
    *, enabled: bool = True, max_size: int = 51_200, max_count: int = 100
) -> tuple[Aggregator, Recorder]:
    deadlines = Recorder()
    stage = Aggregator(
        deadlines, enabled=enabled, max_size=max_size, max_count=max_count, release_lead=0.02
    )
    return stage, deadlines


def test_records_of_one_shard_share_an_aggregate_sealed_at_its_earliest_deadline() -> None:
    stage, deadlines = aggregator()
    first = user_record(b"1", deadline=0.2, expires_at=5.0)
    second = user_record(b"2", deadline=0.1, expires_at=3.0)
    other = user_record(b"3", deadline=0.3)
    assert stage.put(first, 7, "a") is None
    assert stage.put(second, 8, "a") is None
    assert stage.put(other, 9, "b") is None
    assert stage.buffered_records == 3
    assert [when for when, _ in deadlines.calls] == [0.2, 0.1, 0.3]
    (sealed,), released = stage.due(deadlines.calls[1][1], 0.1)
    assert released == []
    assert sealed.records == [first, second]
    assert (sealed.predicted_shard, sealed.explicit_hash_key) == ("a", "7")  # the first's key
    assert (sealed.deadline, sealed.expires_at) == (0.1, 3.0)
    assert is_aggregated(sealed.data)
    assert [r.data for r in decode(sealed.data)] == [b"1", b"2"]
    assert stage.due(deadlines.calls[0][1], 0.2) == ([], [])  # the same batch: sealed already
    assert stage.kinesis_records_out == 1
    assert [k.records for k in stage.flush()] == [[other]]
    assert stage.flush() == []


def test_a_full_batch_is_sealed_by_the_put_that_fills_it() -> None:
    stage, _ = aggregator(max_count=2)
    first, second = user_record(b"1"), user_record(b"2")
    assert stage.put(first, 1, "a") is None
    sealed = stage.put(second, 1, "a")
    assert isinstance(sealed, KinesisRecord)
    assert sealed.records == [first, second]


def test_a_record_that_does_not_fit_seals_the_batch_and_starts_the_next() -> None:
    stage, _ = aggregator(max_size=60)
    first = user_record(b"a" * 20)
    assert stage.put(first, 1, "a") is None
    second = user_record(b"b" * 30)
    sealed = stage.put(second, 1, "a")
    assert isinstance(sealed, KinesisRecord)
    assert sealed.records == [first]
    assert sealed.data == first.data  # one record alone goes raw
    assert [k.records for k in stage.flush()] == [[second]]


def test_a_lone_record_too_large_to_aggregate_goes_alone_after_the_batch_it_closes() -> None:
    stage, _ = aggregator(max_size=60)
    small = user_record(b"a" * 10)
    assert stage.put(small, 1, "a") is None
    large = user_record(b"L" * 100)
    sealed = stage.put(large, 1, "a")
    assert isinstance(sealed, list)
    assert [k.records for k in sealed] == [[small], [large]]
    assert sealed[1].data == large.data
    assert stage.flush() == []


def test_without_aggregation_every_record_is_its_own_kinesis_record() -> None:
    stage, deadlines = aggregator(enabled=False)
    record = user_record(b"1", ehk=5)
    sealed = stage.put(record, 5, "a")
    assert isinstance(sealed, KinesisRecord)
    assert (sealed.records, sealed.predicted_shard, sealed.explicit_hash_key) == (
        [record],
        "a",
        "5",
    )
    assert deadlines.calls == []


def test_held_records_are_released_at_their_deadline_less_the_lead() -> None:
    stage, deadlines = aggregator()
    late = user_record(b"late", deadline=0.5)
    early = user_record(b"early", deadline=0.1)
    stage.hold(late, 1)
    stage.hold(early, 2)
    assert stage.held_records == 2
    turn = 1e-6
    assert [when for when, _ in deadlines.calls] == [0.5 - 0.02 - turn, 0.1 - 0.02 - turn]
    hold = deadlines.calls[1][1]
    deadlines.calls.clear()
    assert stage.due(hold, 0.08 - turn) == ([], [])  # armed: released one turn later
    ((when, _),) = deadlines.calls
    assert when == 0.08
    # Handed back with its hash key: the router places it (alone, unpredicted, or placed).
    assert stage.due(hold, 0.08) == ([], [(early, 2)])
    assert stage.held_records == 1
    assert stage.flush() == []
    assert stage.flush_on_release  # the stream is flushed when the hold ends
    assert stage.take_held() == [(late, 1)]
    assert stage.held_records == 0


def test_close_batches_outside_seals_the_batches_of_shards_a_new_map_dropped() -> None:
    stage, _ = aggregator()
    kept, dropped = user_record(b"k"), user_record(b"d")
    stage.put(kept, 1, "kept")
    stage.put(dropped, 2, "dropped")
    assert [k.records for k in stage.close_batches_outside({"kept"})] == [[dropped]]
    assert [k.records for k in stage.close_batches_outside(())] == [[kept]]
