"""The admission module: what a put must pass, for ``Producer`` and ``SyncProducer`` alike.

Plain synchronous tests of ``aiokpl._producer.admission`` (the checks, a ``put_records`` group, the
bounds and their messages, the records of a group, the blocking producer's room), of
``aiokpl._producer.intake`` with a stand-in ledger and pipeline and an explicit clock (the blocking
producer's futures have ``tests/test_sync_futures.py``).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from aiokpl import (
    Config,
    InvalidRecordError,
    InvalidRecordTypeError,
    ProducerClosedError,
)
from aiokpl._blocking.handover import ThreadRoom
from aiokpl._core.encoder import encode_tags
from aiokpl._core.hashing import hash_key_of
from aiokpl._producer.admission import Admission
from aiokpl._producer.intake import Intake
from aiokpl._producer.producer import Producer, port_of
from aiokpl._record import SpooledRecord, TaggedRecord, UserRecord
from aiokpl.aggregation import Tag, deaggregate
from aiokpl.testing import FakeKinesis, read_stream

CONFIG = Config(
    region="us-east-1", max_outstanding_records=3, max_outstanding_bytes=100, max_record_size=100
)
HERE = "arn:aws:kinesis:us-east-1:123456789012:stream/events"
THERE = "arn:aws:kinesis:eu-west-1:123456789012:stream/events"


# --- the checks ------------------------------------------------------------------------------
def test_a_stream_is_a_name_or_an_arn_in_the_producers_region() -> None:
    admission = Admission(CONFIG, "us-east-1")
    admission.check_stream("events")
    admission.check_stream(HERE)
    with pytest.raises(InvalidRecordError, match="is in region 'eu-west-1'"):
        admission.check_stream(THERE)
    with pytest.raises(InvalidRecordTypeError, match="stream must be a str, not int"):
        admission.check_stream(42)
    with pytest.raises(InvalidRecordError):
        admission.check_stream("no spaces")
    Admission(CONFIG, None).check_stream(THERE)  # a producer without a region writes anywhere


def fields(record: UserRecord) -> tuple[str, str, bytes, str | None, int, bytes]:
    """What a checked record holds: stream, key, data, explicit hash key, size, tags."""
    return (
        record.stream,
        record.partition_key,
        record.data,
        record.explicit_hash_key,
        record.size,
        record.encoded_tags,
    )


def test_a_record_is_checked_once_with_its_tags_and_comes_back_built() -> None:
    admission = Admission(CONFIG)
    record, hash_key = admission.check("s", "k", b"data", None, None)
    assert type(record) is UserRecord  # no slot for tags
    assert (fields(record), hash_key) == (("s", "k", b"data", None, 5, b""), hash_key_of(b"k"))
    tagged, hash_key = admission.check("s", "k", bytearray(b"data"), 7, {"a": "b"})
    encoded = encode_tags({"a": "b"})
    assert type(tagged) is TaggedRecord
    # The tags count toward the size.
    assert (fields(tagged), hash_key) == (("s", "k", b"data", "7", 5 + len(encoded), encoded), 7)
    empty, _ = admission.check("s", "k", b"d", None, {})
    assert type(empty) is UserRecord
    assert fields(empty) == ("s", "k", b"d", None, 2, b"")


@pytest.mark.parametrize(
    ("settings", "kind"),
    [
        ({}, UserRecord),
        ({"record_identities": True}, TaggedRecord),
        ({"spool_directory": "/nonexistent/never-opened"}, SpooledRecord),
    ],
)
def test_a_producer_builds_each_record_as_it_will_be_marked(
    settings: dict[str, Any], kind: type[UserRecord]
) -> None:
    # A record that will get an identity tag or a place in the spool is built with room for
    # them, tags or not; the others without a slot they would not use.
    admission = Admission(CONFIG.replace(**settings))
    record, _ = admission.check("s", "k", b"d", None, None)
    assert type(record) is kind
    assert fields(record) == ("s", "k", b"d", None, 2, b"")
    (grouped,), _, _ = admission.check_many("s", [("k", b"d")])
    assert type(grouped) is kind


def test_tags_need_aggregation_unless_there_are_none() -> None:
    admission = Admission(CONFIG.replace(aggregation_enabled=False))
    with pytest.raises(InvalidRecordError, match=r"^tags need aggregation"):
        admission.check_tags({"a": "b"}, "k", 2, None)
    assert admission.check_tags({}, "k", 2, None) == (b"", 2)


def test_a_group_is_checked_whole_and_its_errors_say_which_record() -> None:
    admission = Admission(CONFIG.replace(max_outstanding_records=5))
    built, hash_keys, size = admission.check_many(
        "s",
        [
            ("a", b"1"),
            ["b", b"22", "5"],
            ("c", b"3", None, {"t": None}),
            ("d", b"4", None, {}),
            ["e", b"5"],
        ],
    )
    assert [record.partition_key for record in built] == ["a", "b", "c", "d", "e"]
    assert fields(built[1]) == ("s", "b", b"22", "5", 3, b"")
    assert hash_keys == [
        hash_key_of(b"a"),
        5,
        hash_key_of(b"c"),
        hash_key_of(b"d"),
        hash_key_of(b"e"),
    ]
    tags = encode_tags({"t": None})
    assert [record.encoded_tags for record in built] == [b"", b"", tags, b"", b""]
    assert [type(record) for record in built].count(TaggedRecord) == 1  # only the tagged one
    assert size == sum(record.size for record in built) == 2 + 3 + 2 + len(tags) + 2 + 2
    with pytest.raises(InvalidRecordError, match=r"^records\[1\]: partition_key must be 1"):
        admission.check_many("s", [("a", b"1"), ("", b"2")])
    with pytest.raises(InvalidRecordTypeError, match=r"^records\[0\]: a record is a .*, not str"):
        admission.check_many("s", ["ab"])
    with pytest.raises(InvalidRecordTypeError, match=r"^records\[0\]: .* not one of length 5"):
        admission.check_many("s", [("a", b"1", None, None, None)])
    with pytest.raises(InvalidRecordError, match=r"^records\[2\]: partition_key must be 1"):
        admission.check_many("s", iter([("a", b"1"), ["b", b"2"], ["", b"3"]]))


def test_a_group_over_max_outstanding_records_is_refused_before_its_records() -> None:
    admission = Admission(CONFIG)  # max_outstanding_records=3
    bad = [("", b"")] * 4  # every record breaks a rule: the count is said first
    with pytest.raises(InvalidRecordError, match=r"^records: 4 records can never be outstanding"):
        admission.check_many("s", bad)
    with pytest.raises(InvalidRecordError, match=r"^records: 4 or more records can never be"):
        admission.check_many("s", iter([("a", b"1")] * 9))
    with pytest.raises(InvalidRecordError, match=r"^records\[0\]: partition_key must be 1"):
        admission.check_many("s", bad[:3])
    assert len(admission.check_many("s", iter([("a", b"1")] * 3))[0]) == 3


@pytest.mark.parametrize("records", [None, "ab", b"ab", {"k": b"d"}, 3])
def test_a_group_that_is_not_a_collection_of_records_is_named(records: Any) -> None:
    with pytest.raises(InvalidRecordTypeError, match=r"^records must be an iterable"):
        Admission(CONFIG).check_many("s", records)


# --- the bounds ------------------------------------------------------------------------------
def holding(ledger: _Ledger, records: int, size: int) -> None:
    """``ledger`` holds ``records`` records of ``size`` bytes in all."""
    ledger.outstanding = {UserRecord("s", "k", b"", None, 1): None for _ in range(records)}
    ledger.outstanding_bytes = size


def test_the_bounds_count_records_and_bytes() -> None:
    intake, ledger, _ = _intake([0.0])  # max_outstanding_records=3, max_outstanding_bytes=100
    holding(ledger, 2, 90)
    assert intake.has_room(10)
    holding(ledger, 3, 0)
    assert not intake.has_room(1)  # max_outstanding_records
    holding(ledger, 0, 91)
    assert not intake.has_room(10)  # max_outstanding_bytes
    holding(ledger, 0, 0)
    assert intake.has_room(100, count=3)
    holding(ledger, 1, 0)
    assert not intake.has_room(10, count=3)
    admission = intake.admission
    admission.blocked = "the spool's disk is full"
    holding(ledger, 0, 0)
    assert not intake.has_room(1)  # nothing fits while blocked
    assert admission.holds(0, 0).startswith("the spool's disk is full; the producer holds 0")
    admission.blocked = None
    reserving, ledger, _ = _intake([0.0], CONFIG.replace(record_identities=True))
    reserve = reserving.admission.reserve
    assert reserve > 0
    assert reserving.has_room(100 - reserve)
    assert not reserving.has_room(101 - reserve)  # room kept for the identity
    assert reserving.has_room(100 - 2 * reserve, count=2)  # kept for each
    assert not reserving.has_room(101 - 2 * reserve, count=2)
    admission.check_group(3, 100)
    with pytest.raises(InvalidRecordError, match=r"^records: 4 records of 4 bytes can never"):
        admission.check_group(4, 4)
    with pytest.raises(InvalidRecordError, match="of 101 bytes can never be outstanding"):
        admission.check_group(1, 101)
    assert admission.holds(3, 42) == (
        "the producer holds 3 records / 42 bytes "
        "(max_outstanding_records=3, max_outstanding_bytes=100)"
    )


def test_a_threads_room_counts_waits_and_wakes() -> None:
    lock = threading.Lock()
    room = ThreadRoom(Admission(CONFIG), lock)
    with lock:
        for size in (10, 20, 30):
            assert room.fits(size)
            room.take(size)
        assert (room.records, room.bytes) == (3, 60)
        assert not room.fits(1)
        assert not room.wait(1, 0.0, lambda: False)  # no room, no time: a timeout
        assert room.wait(1, None, lambda: True)  # asked to stop: at once
        assert room.holds().startswith("the producer holds 3 records / 60 bytes")
    fitted: list[bool] = []

    def put() -> None:
        with lock:
            fitted.append(room.wait(5, None, lambda: False))

    waiter = threading.Thread(target=put)
    waiter.start()
    while True:  # until the thread waits (it holds the lock until then)
        with lock:
            if room.waiters:
                room.give_back(10)  # wakes it: one record and 10 bytes fewer
                break
    waiter.join()
    assert fitted == [True]
    assert (room.records, room.bytes, room.waiters) == (2, 50, 0)


class _Ledger:
    def __init__(self) -> None:
        self.outstanding: dict[UserRecord, None] = {}
        self.outstanding_bytes = 0
        self.added: list[list[UserRecord]] = []

    def add(self, record: UserRecord) -> None:
        self.add_group([record])

    def add_group(self, records: list[UserRecord]) -> None:
        self.added.append(list(records))
        for record in records:
            self.outstanding[record] = None
            self.outstanding_bytes += record.size

    async def wait_for_room(self) -> None:  # pragma: no cover - the tests never wait
        raise AssertionError("no wait here")


class _Pipeline:
    def __init__(self) -> None:
        self.records: list[tuple[UserRecord, int]] = []

    def put(self, record: UserRecord, hash_key: int) -> None:
        self.records.append((record, hash_key))


def _intake(
    now: list[float], config: Config = CONFIG
) -> tuple[Intake, _Ledger, dict[str, _Pipeline]]:
    ledger = _Ledger()
    pipelines: dict[str, _Pipeline] = {}

    def pipeline_of(stream: str) -> _Pipeline:
        return pipelines.setdefault(stream, _Pipeline())

    intake = Intake(
        config.replace(record_max_buffered_time_ms=100, record_ttl_ms=30_000),
        Admission(config, "us-east-1"),
        ledger,
        pipelines,
        pipeline_of,
        lambda: now[0],
    )
    return intake, ledger, pipelines


def test_the_intake_refuses_a_put_that_may_not_go_ahead() -> None:
    intake, ledger, _ = _intake([0.0])
    assert intake.thread == threading.get_ident()  # the thread that made it: the loop's
    intake.accept_stream("s")
    with pytest.raises(InvalidRecordError, match="is in region 'eu-west-1'"):
        intake.accept_stream(THERE)
    intake.thread = threading.get_ident() + 1
    with pytest.raises(RuntimeError, match="runs on the event loop of another thread"):
        intake.accept_stream("s")
    intake.thread = threading.get_ident()
    intake.closed = True
    with pytest.raises(ProducerClosedError, match="the producer is closed"):
        intake.accept_stream("s")
    with pytest.raises(ProducerClosedError, match="closed while this put waited"):
        intake.check_still_open()
    assert ledger.outstanding == {}  # a refused put changes nothing
    assert ledger.added == []


def test_the_intake_stamps_each_millisecond_once_and_counts_what_it_enters() -> None:
    now = [10.0]
    intake, ledger, pipelines = _intake(now)
    admission = Admission(CONFIG)
    first = intake.enter(UserRecord("s", "a", b"ab", None, 3), 1)
    now[0] = 10.0009  # the same millisecond: the same stamps
    second = intake.enter(TaggedRecord("s", "b", b"abc", "2", 4, b"tags"), 2)
    assert intake.has_room(93)  # 7 bytes of 100 held
    assert not intake.has_room(94)
    now[0] = 10.002
    third = intake.enter(admission.check("t", "c", b"c", None, None)[0], 3)
    assert not intake.has_room(1)  # 3 records of 3
    assert (first.last_end, first.deadline, first.expires_at) == (10.0, 10.1, 40.0)
    assert (second.last_end, second.deadline, second.expires_at) == (10.0, 10.1, 40.0)
    assert third.last_end == 10.002
    assert third.expires_at == pytest.approx(40.002)
    assert [h for _, h in pipelines["s"].records] == [1, 2]
    assert [r for r, _ in pipelines["t"].records] == [third]
    assert (ledger.added, ledger.outstanding_bytes) == ([[first], [second], [third]], 9)


def test_a_group_enters_in_order_with_one_set_of_stamps_and_one_count() -> None:
    now = [10.0]
    intake, ledger, pipelines = _intake(now)
    built, hash_keys, _ = Admission(CONFIG).check_many(
        "s", [("a", b"1"), ("b", b"2", 22, {"t": "v"})]
    )
    now[0] = 12.5
    assert intake.enter_group("s", built, hash_keys) == built
    assert ledger.added == [built]  # counted as one group
    assert pipelines["s"].records == list(zip(built, [hash_key_of(b"a"), 22], strict=True))
    for record in built:
        assert (record.last_end, record.deadline, record.expires_at) == (12.5, 12.6, 42.5)
    assert intake.enter_group("s", [], []) == []


# --- the hand-over of a checked record -------------------------------------------------------
@pytest.mark.anyio
async def test_a_checked_record_waits_for_room_and_keeps_its_encoded_tags() -> None:
    # What SyncProducer's pump does when the producer is full: the record checked in the
    # caller's thread goes in as it is, its tags still encoded, once there is room.
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    config = Config(region="us-east-1", max_outstanding_records=1)
    admission = Admission(config)
    async with Producer(config, client=fake) as producer:
        port = port_of(producer)
        first = port.put(*admission.check("s", "a", b"1", None, None))
        assert first is not None
        record, hash_key = admission.check("s", "b", b"2", None, {"t": "v"})
        tags = record.encoded_tags
        assert port.put(record, hash_key) is None  # full
        second = await port.put_when_room(record, hash_key)
        assert second is record
        assert first.done()  # it waited for the first record's result
        assert second.encoded_tags is tags
        assert (await second).success
    stored = [user for _, record in await read_stream(fake, "s") for user in deaggregate(record)]
    assert {record.data: record.tags for record in stored} == {b"1": (), b"2": (Tag("t", "v"),)}
