"""The durable spool and record identities through ``Producer``, on asyncio and trio under
virtual clocks: the spool's file layer is ``MemoryFiles`` (what was fsync'd, faults, crashes)
and its worker thread is replaced by an inline call a test can hold (a virtual clock's loop
runs no threads), so "durable only after the fsync" is observed, not timed."""

from __future__ import annotations

import base64
import errno
import logging
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from aiokpl import (
    BufferFullError,
    Config,
    ConfigError,
    InvalidRecordError,
    Producer,
    SpoolError,
    SpoolStatistics,
    SyncProducer,
    _spooling,
)
from aiokpl._producer import marks as _marks
from aiokpl._producer.intake import Intake
from aiokpl._spool.files import OsFiles
from aiokpl._spool.format import segment_name
from aiokpl.aggregation import Deduper, deaggregate, identity_of
from aiokpl.testing import FakeKinesis, read_stream
from aiokpl.testing._spool_files import MemoryFiles
from hostile import record_frame, segment_of
from running import running

pytestmark = pytest.mark.anyio

DIRECTORY = "/spool"
CONFIG = Config(region="us-east-1", spool_directory=DIRECTORY)


class Disk:
    """The spool's disk for a test: ``MemoryFiles``, and the worker-thread hop, which runs
    inline once ``gate`` (when set) opens."""

    def __init__(self) -> None:
        self.files = MemoryFiles()
        self.gate: anyio.Event | None = None
        self.hops = 0

    async def run_sync(self, function: Callable[..., Any], *args: Any) -> Any:
        self.hops += 1
        if self.gate is not None:
            await self.gate.wait()
        await anyio.lowlevel.checkpoint()
        return function(*args)

    def segments(self) -> list[str]:
        return sorted(path for path in self.files.files if path.endswith(".seg"))


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Disk:
    disk = Disk()
    monkeypatch.setattr(_spooling, "spool_files", lambda config: disk.files)
    monkeypatch.setattr(_spooling, "run_sync", disk.run_sync)
    return disk


def stream_fake(shards: int = 1) -> FakeKinesis:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=shards)
    return fake


async def user_records(fake: FakeKinesis, stream: str = "s") -> list[Any]:
    return [user for _, record in await read_stream(fake, stream) for user in deaggregate(record)]


# --- durability ------------------------------------------------------------------------------
async def test_a_record_is_durable_only_after_the_fsync_and_one_fsync_covers_many(
    disk: Disk,
) -> None:
    fake = stream_fake()
    fake.fail_requests(10**9, stream="s")  # nothing resolves: no acknowledgement to write
    async with Producer(CONFIG.replace(record_ttl_ms=5_000), client=fake) as producer:
        fsyncs = disk.files.fsyncs  # the first segment's header, at the start
        disk.gate = anyio.Event()
        outcomes = [
            await producer.put_record(stream="s", partition_key="k", data=b"%d" % i)
            for i in range(20)
        ]
        try:
            await anyio.sleep(0.5)  # the spool task is held in its flush: nothing durable yet
            assert not any(outcome.durable for outcome in outcomes)
            assert disk.files.fsyncs == fsyncs
            assert producer.statistics().spool.records_durable == 0  # type: ignore[union-attr]
        finally:  # a failure must not leave the spool's close waiting on the held flush
            disk.gate.set()
            disk.gate = None
        await producer.wait_durable()
        assert all(outcome.durable for outcome in outcomes)
        assert disk.files.fsyncs == fsyncs + 1  # group commit: one fsync for the 20
        await outcomes[0].wait_durable()  # already durable: returns at once
        statistics = producer.statistics().spool
        assert isinstance(statistics, SpoolStatistics)
        assert statistics.records_appended == statistics.records_durable == 20
        assert statistics.fsyncs == 1  # the group's (a new segment's header is not counted)


async def test_interval_policy_fsyncs_at_most_once_per_interval(disk: Disk) -> None:
    config = CONFIG.replace(spool_fsync="interval", spool_fsync_interval_ms=50)
    async with Producer(config, client=stream_fake()) as producer:
        first = await producer.put_record(stream="s", partition_key="k", data=b"first")
        await first.wait_durable()  # after a quiet spell the first fsync is at once
        fsynced_at = anyio.current_time()
        fsyncs = disk.files.fsyncs
        later = []
        for i in range(5):
            await anyio.sleep(0.005)
            later.append(await producer.put_record(stream="s", partition_key="k", data=b"%d" % i))
        assert not any(outcome.durable for outcome in later)
        await later[-1].wait_durable()
        assert anyio.current_time() >= fsynced_at + 0.05
        assert all(outcome.durable for outcome in later)
        assert disk.files.fsyncs == fsyncs + 1


async def test_interval_counts_from_the_last_fsyncs_start_so_a_record_waits_one_flush_at_most(
    disk: Disk, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record put just after a flush started waits for the interval, counted from that
    flush's start (when its fsync was decided), then for its own flush: ``interval + one
    flush``, not the flush it missed as well (SPEC §6: accepted → durable p99 at most the
    interval plus a little)."""
    hop = 0.02  # each flush (write, fsync, the thread hop) takes 20 ms of the producer's clock

    async def slow_run_sync(function: Callable[..., Any], *args: Any) -> Any:
        await anyio.sleep(hop)
        return await disk.run_sync(function, *args)

    monkeypatch.setattr(_spooling, "run_sync", slow_run_sync)
    config = CONFIG.replace(spool_fsync="interval", spool_fsync_interval_ms=50)
    async with Producer(config, client=stream_fake()) as producer:
        await anyio.sleep(1)  # quiet: the next flush fsyncs at once
        first = await producer.put_record(stream="s", partition_key="k", data=b"first")
        started = anyio.current_time()  # the spool's task starts flushing it now
        await anyio.sleep(0.001)
        missed = await producer.put_record(stream="s", partition_key="k", data=b"missed")
        put_at = anyio.current_time()
        await first.wait_durable()
        assert anyio.current_time() == pytest.approx(started + hop)
        assert not missed.durable  # written after that flush took its records
        await missed.wait_durable()
        # The next flush starts 50 ms after the last one started, and takes 20 ms.
        assert anyio.current_time() == pytest.approx(started + 0.05 + hop)
        assert anyio.current_time() - put_at < 0.05 + hop


async def test_policy_none_never_fsyncs_records_and_calls_them_durable_once_written(
    disk: Disk,
) -> None:
    config = CONFIG.replace(spool_fsync="none")
    async with Producer(config, client=stream_fake()) as producer:
        outcome = await producer.put_record(stream="s", partition_key="k", data=b"x")
        await producer.wait_durable()
        assert outcome.durable
        assert disk.files.fsyncs == 0
        assert b"x" in disk.files.content(disk.segments()[0])


# --- acknowledgements and replay ----------------------------------------------------------------
async def test_delivered_records_are_acknowledged_and_not_replayed(disk: Disk) -> None:
    fake = stream_fake()
    async with Producer(CONFIG, client=fake) as producer:
        for i in range(10):
            await producer.put_record(stream="s", partition_key="k", data=b"%d" % i)
        await producer.put_records(stream="s", records=[("k", b"%d" % i) for i in range(10, 20)])
        await producer.flush()
        statistics = producer.statistics().spool
        assert statistics is not None
        assert statistics.records_appended == 20
    async with Producer(CONFIG, client=fake) as producer:
        statistics = producer.statistics().spool
        assert statistics is not None
        assert statistics.records_recovered == 0
    assert len(await user_records(fake)) == 20  # delivered once, never sent again


async def test_failed_records_reported_to_the_caller_are_acknowledged(disk: Disk) -> None:
    fake = stream_fake()
    fake.fail_requests(10**9, code="AccessDeniedException", stream="s")  # no retry fixes it
    async with Producer(CONFIG, client=fake) as producer:
        outcome = await producer.put_record(stream="s", partition_key="k", data=b"x")
        assert not (await outcome).success
    async with Producer(CONFIG, client=fake) as producer:
        assert producer.statistics().spool.records_recovered == 0  # type: ignore[union-attr]


async def put_and_cancel(config: Config, count: int) -> list[bytes]:
    """Put ``count`` records to a stream whose requests fail, then cancel the producer: the
    records fail by the exit (``"Cancelled"``), not by Kinesis."""
    data = [b"record-%d" % i for i in range(count)]
    fake = stream_fake()
    fake.fail_requests(10**9, stream="s")
    with anyio.move_on_after(2):
        async with Producer(config, client=fake) as producer:
            outcomes = [
                await producer.put_record(stream="s", partition_key=f"k{i}", data=d)
                for i, d in enumerate(data)
            ]
            await producer.wait_durable()
            await anyio.sleep_forever()
    assert all(outcome.result().error_code == "Cancelled" for outcome in outcomes)
    return data


async def test_records_failed_by_the_exit_stay_and_are_replayed_at_the_next_start(
    disk: Disk,
) -> None:
    config = CONFIG.replace(record_identities=True)
    # The first run delivers one record (its identity names the run), then its stream fails:
    # the next 30 are accepted, made durable, and failed by the exit.
    first_stream = stream_fake()
    data = [b"record-%d" % i for i in range(30)]
    with anyio.move_on_after(2):
        async with Producer(config, client=first_stream) as producer:
            delivered = await producer.put_record(stream="s", partition_key="k", data=b"before")
            await producer.flush()
            assert (await delivered).success
            first_stream.fail_requests(10**9, stream="s")
            outcomes = [
                await producer.put_record(stream="s", partition_key=f"k{i}", data=d)
                for i, d in enumerate(data)
            ]
            await producer.wait_durable()
            await anyio.sleep_forever()
    assert {outcome.result().error_code for outcome in outcomes} == {"Cancelled"}
    [before] = await user_records(first_stream)
    first_run = identity_of(before)
    assert first_run is not None
    # The next run, on the same spool, replays them to a stream that works.
    fake = stream_fake()
    async with Producer(config, client=fake) as producer:
        fresh = await producer.put_record(stream="s", partition_key="k", data=b"after")
        await producer.flush()  # waits for the replay too
        statistics = producer.statistics().spool
        assert statistics is not None
        assert statistics.records_recovered == statistics.records_replayed == 30
        assert (await fresh).success
    by_data = {record.data: identity_of(record) for record in await user_records(fake)}
    assert set(by_data) == {b"after", *data}
    second_run = by_data[b"after"]
    assert second_run is not None
    assert second_run.producer_id != first_run.producer_id
    # Each replayed record carries the identity the first run gave it (its id, and the
    # sequence numbers after the delivered record's), not one of the replaying run.
    assert [by_data[d] for d in data] == [(first_run.producer_id, n) for n in range(1, 31)]
    async with Producer(config, client=fake) as producer:
        assert producer.statistics().spool.records_recovered == 0  # type: ignore[union-attr]


async def test_a_cancelled_exit_says_how_many_records_it_left_in_the_spool(
    disk: Disk, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="aiokpl"):
        await put_and_cancel(CONFIG, 30)
    [line] = [record.getMessage() for record in caplog.records if record.name == "aiokpl"]
    assert line.startswith(
        "the producer's exit was cancelled: of 30 records put, 0 were delivered and 30 were "
        "cancelled ("
    )
    assert "; 30 are left in the spool, sent again at its next start; " in line


async def test_replay_waits_for_room(disk: Disk, monkeypatch: pytest.MonkeyPatch) -> None:
    await put_and_cancel(CONFIG, 50)
    fake = stream_fake()
    config = CONFIG.replace(max_outstanding_records=5)
    producer = Producer(config, client=fake)
    # A probe on every replayed put: what the producer holds once the record is in, each time
    # (one sample now and then misses a replay that takes all 50 in at once).
    replay = Intake.replay
    held: list[int] = []

    async def probed(intake: Intake, record: Any) -> bool:
        put = await replay(intake, record)
        held.append(producer.outstanding_records)
        return put

    monkeypatch.setattr(Intake, "replay", probed)
    async with producer:
        await producer.flush()  # waits for the replay too
    assert len(held) == 50  # every replayed record was probed
    assert max(held) == 5  # the replay filled the room, and never went past it
    assert len(await user_records(fake)) == 50


async def test_a_replayed_record_that_fails_goes_to_on_record_failure(disk: Disk) -> None:
    await put_and_cancel(CONFIG, 3)
    fake = stream_fake()
    fake.fail_requests(10**9, code="AccessDeniedException", stream="s")
    failed: list[Any] = []
    config = CONFIG.replace(on_record_failure=failed.append, return_record_on_failure=True)
    async with Producer(config, client=fake) as producer:
        await producer.flush()
        statistics = producer.statistics().spool
        assert statistics is not None
        assert statistics.records_replay_failed == 3
    assert sorted(result.record.data for result in failed) == [b"record-%d" % i for i in range(3)]
    async with Producer(CONFIG, client=fake) as producer:  # acknowledged: not again
        assert producer.statistics().spool.records_recovered == 0  # type: ignore[union-attr]


async def test_a_corrupt_segment_does_not_stop_the_start_and_its_loss_is_counted(
    disk: Disk, caplog: pytest.LogCaptureFixture
) -> None:
    data = await put_and_cancel(CONFIG, 20)
    (segment,) = disk.segments()
    content = disk.files.files[segment].content
    middle = len(content) // 2
    content[middle] ^= 0xFF  # a flipped byte inside a record frame
    fake = stream_fake()
    async with Producer(CONFIG, client=fake) as producer:
        await producer.flush()
        statistics = producer.statistics().spool
        assert statistics is not None
        assert statistics.frames_lost == 1
        assert statistics.bytes_lost > 0
        assert 0 < statistics.records_recovered < 20
        assert statistics.records_replayed == statistics.records_recovered
    stored = [record.data for record in await user_records(fake)]
    assert stored == data[: len(stored)]  # the records before the damage, in order
    assert "damage found at start" in caplog.text


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(record_frame(1, encoded_tags=b'"\x05\n\x01'), id="tag-cut-short"),
        pytest.param(record_frame(1, accepted_at=float("nan")), id="nan-time"),
    ],
)
async def test_a_record_that_does_not_decode_does_not_stop_the_start(
    disk: Disk, bad: bytes
) -> None:
    """Its CRC checks, so it was taken for sound and replayed: every start on the directory
    died (``ExceptionGroup[IndexError]``). It is cut off and counted like damage now."""
    disk.files.makedirs(DIRECTORY)
    good = record_frame(0, stream="s", data=b"before")
    after = record_frame(2, stream="s", data=b"after")
    disk.files.write_file(f"{DIRECTORY}/{segment_name(0)}", segment_of(bytes(16), good, bad, after))
    fake = stream_fake()
    async with Producer(CONFIG, client=fake) as producer:
        await producer.flush()
        statistics = producer.statistics().spool
        assert statistics is not None
        assert (statistics.frames_lost, statistics.segments_moved_aside) == (1, 1)
        assert statistics.records_replayed == statistics.records_recovered == 1
    assert [record.data for record in await user_records(fake)] == [b"before"]


async def test_a_torn_tail_is_cut_back_and_counted(disk: Disk) -> None:
    data = await put_and_cancel(CONFIG, 20)
    (segment,) = disk.segments()
    content = disk.files.files[segment].content
    del content[len(content) - 3 :]  # the last frame cut short, as by a crash mid-write
    fake = stream_fake()
    async with Producer(CONFIG, client=fake) as producer:
        await producer.flush()
        statistics = producer.statistics().spool
        assert statistics is not None
        assert statistics.torn_tails == 1
        assert 0 < statistics.bytes_truncated < len(data[19]) + 64  # the last record's frame
        assert (statistics.frames_lost, statistics.records_recovered) == (0, 19)
    assert [record.data for record in await user_records(fake)] == data[:19]


# --- disk full --------------------------------------------------------------------------------
async def test_a_full_disk_makes_puts_wait_and_they_resume_when_space_returns(
    disk: Disk,
) -> None:
    fake = stream_fake()
    async with Producer(CONFIG, client=fake) as producer:
        disk.files.capacity_bytes = sum(len(f.content) for f in disk.files.files.values())
        first = await producer.put_record(stream="s", partition_key="k", data=b"x" * 100)
        await anyio.sleep(0.5)  # the flush fails: the disk is full
        statistics = producer.statistics().spool
        assert statistics is not None
        assert statistics.full
        assert statistics.write_errors >= 1
        assert not first.durable
        with pytest.raises(BufferFullError, match="disk is full"):
            producer.put_record_nowait(stream="s", partition_key="k", data=b"y")
        waiting: list[Any] = []

        async def put_one() -> None:
            waiting.append(await producer.put_record(stream="s", partition_key="k", data=b"z"))

        async with anyio.create_task_group() as group:
            group.start_soon(put_one)
            await anyio.sleep(2)
            assert not waiting  # back-pressure: the put waits
            disk.files.capacity_bytes = None  # space again
            with anyio.fail_after(30):
                await first.wait_durable()
        assert waiting
        assert not producer.statistics().spool.full  # type: ignore[union-attr]
        await producer.wait_durable()
        await producer.flush()
    assert sorted(r.data for r in await user_records(fake)) == [b"x" * 100, b"z"]


# --- identities -------------------------------------------------------------------------------
async def test_identities_without_a_spool_are_tags_a_deduper_reads(disk: Disk) -> None:
    fake = stream_fake(shards=2)
    config = Config(region="us-east-1", record_identities=True)
    async with Producer(config, client=fake) as producer:
        await producer.put_record(stream="s", partition_key="a", data=b"0", tags={"u": "1"})
        await producer.put_records(
            stream="s", records=[("b", b"1"), ("c", b"2", None, [("v", None)])]
        )
        producer.put_record_nowait(stream="s", partition_key="d", data=b"3")
        await producer.flush()
        assert producer.statistics().spool is None
    records = sorted(await user_records(fake), key=lambda record: record.data)
    identities = [identity_of(record) for record in records]
    assert all(identity is not None for identity in identities)
    assert len({identity.producer_id for identity in identities if identity}) == 1
    assert [identity.sequence for identity in identities if identity] == [0, 1, 2, 3]
    assert records[0].tags[0] == ("u", "1")
    assert records[2].tags[0] == ("v", None)
    deduper = Deduper()
    fresh = deduper.filter(records + records)  # every copy dropped
    assert [record.data for record in fresh] == [b"0", b"1", b"2", b"3"]


async def test_a_record_too_large_with_its_identity_is_refused_at_put(disk: Disk) -> None:
    config = Config(region="us-east-1", record_identities=True, max_record_size=1000)
    async with Producer(config, client=stream_fake()) as producer:
        with pytest.raises(InvalidRecordError, match="identity tag"):
            await producer.put_record(stream="s", partition_key="k", data=b"x" * 990)
        with pytest.raises(InvalidRecordError, match=r"records\[1\].*identity tag"):
            await producer.put_records(stream="s", records=[("k", b"ok"), ("k", b"x" * 990)])
        assert producer.outstanding_records == 0
        assert producer.statistics().records_put == 0
        outcome = await producer.put_record(stream="s", partition_key="k", data=b"x" * 900)
        assert (await outcome).success


@pytest.mark.parametrize("tags", [{"aiokpl.id": "forged"}, [("ok", "v"), ("aiokpl.x", None)]])
async def test_reserved_tag_keys_are_refused_on_every_put_path(tags: Any) -> None:
    fake = stream_fake()
    async with Producer(Config(region="us-east-1"), client=fake) as producer:
        with pytest.raises(InvalidRecordError, match="reserved"):
            await producer.put_record(stream="s", partition_key="k", data=b"x", tags=tags)
        with pytest.raises(InvalidRecordError, match="reserved"):
            producer.put_record_nowait(stream="s", partition_key="k", data=b"x", tags=tags)
        with pytest.raises(InvalidRecordError, match=r"records\[0\].*reserved"):
            await producer.put_records(stream="s", records=[("k", b"x", None, tags)])
        # A value may say it; only keys are reserved.
        outcome = await producer.put_record(
            stream="s", partition_key="k", data=b"x", tags={"k": "aiokpl.id"}
        )
        assert (await outcome).success


# --- without a spool: nothing changes ---------------------------------------------------------
async def test_without_a_spool_or_identities_the_put_path_is_the_plain_one() -> None:
    async with Producer(Config(region="us-east-1"), client=stream_fake()) as producer:
        assert running(producer).intake.marks is None
        assert running(producer).ledger.on_resolved is None
        outcome = await producer.put_record(stream="s", partition_key="k", data=b"x")
        assert type(outcome).__mro__[1].__name__ == "Outcome"  # a plain UserRecord
        assert not outcome.durable
        with pytest.raises(RuntimeError, match="spool_directory"):
            await outcome.wait_durable()
        with pytest.raises(RuntimeError, match="spool_directory"):
            await producer.wait_durable()
        assert producer.statistics().spool is None


def test_config_checks_the_spool_and_identity_fields() -> None:
    import pathlib

    assert Config(spool_directory=pathlib.Path("/tmp/x")).spool_directory == pathlib.Path("/tmp/x")
    with pytest.raises(TypeError, match=r"spool_directory must be a str or an os\.PathLike"):
        Config(spool_directory=b"/tmp/x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="spool_directory"):
        Config(spool_directory=3)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="spool_directory must not be empty"):
        Config(spool_directory="")
    with pytest.raises(ConfigError, match="spool_fsync must be one of"):
        Config(spool_fsync="always")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="spool_fsync_interval_ms"):
        Config(spool_fsync_interval_ms=0)
    with pytest.raises(ConfigError, match="record_identities needs aggregation_enabled"):
        Config(record_identities=True, aggregation_enabled=False)
    with pytest.raises(TypeError, match="record_identities must be a bool"):
        Config(record_identities=1)  # type: ignore[arg-type]


async def test_a_spool_that_cannot_be_opened_fails_the_start(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_spooling, "run_sync", Disk().run_sync)  # the real files, inline
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    config = CONFIG.replace(spool_directory=blocker / "spool")  # under a file: ENOTDIR
    producer = Producer(config, client=stream_fake())
    with pytest.raises(OSError, match=r"spool .* cannot be opened"):
        async with producer:
            pass


async def test_a_spool_in_use_by_another_producer_is_refused_until_it_closes(
    disk: Disk,
) -> None:
    fake = stream_fake()
    async with Producer(CONFIG, client=fake) as first:
        await first.put_record(stream="s", partition_key="k", data=b"first")
        with pytest.raises(SpoolError, match="in use by another producer") as refused:
            async with Producer(CONFIG, client=fake):
                pass  # pragma: no cover - refused
        assert isinstance(refused.value, OSError)
        await first.flush()
    async with Producer(CONFIG, client=fake) as second:  # the lock was given back
        await second.put_record(stream="s", partition_key="k", data=b"second")
    assert [record.data for record in await user_records(fake)] == [b"first", b"second"]
    assert not disk.files.locked


def test_a_spool_directory_lock_is_one_holder_at_a_time_and_dies_with_it(tmp_path: Any) -> None:
    files = OsFiles()
    directory = str(tmp_path)
    held = files.lock(directory)
    with pytest.raises(BlockingIOError):
        files.lock(directory)  # a second open file, even in this process
    files.unlock(held)
    files.unlock(files.lock(directory))
    memory = MemoryFiles()
    memory.lock("/spool")
    with pytest.raises(BlockingIOError):
        memory.lock("/spool")
    memory.crash()  # the holder died
    memory.unlock(memory.lock("/spool"))


def test_the_identity_encoder_of_a_spool_id_is_the_ids_base64() -> None:
    producer_id = bytes(range(16))
    encoder = _marks.encoder_of(producer_id)
    assert encoder.producer_id == base64.urlsafe_b64encode(producer_id).rstrip(b"=").decode()


# --- SyncProducer ------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_sync_producer_waits_until_what_it_put_is_durable(disk: Disk, backend: str) -> None:
    fake = stream_fake()
    with SyncProducer(CONFIG, client=fake, backend=backend) as producer:  # type: ignore[arg-type]
        futures = [
            producer.put_record(stream="s", partition_key="k", data=b"%d" % i) for i in range(50)
        ]
        producer.wait_durable(timeout=30)
        statistics = producer.statistics().spool
        assert statistics is not None
        assert statistics.records_durable == 50
        with pytest.raises(InvalidRecordError, match="reserved"):
            producer.put_record(stream="s", partition_key="k", data=b"x", tags={"aiokpl.a": "b"})
    assert all(future.result().success for future in futures)
    plain = Config(region="us-east-1")
    with (
        SyncProducer(plain, client=fake, backend=backend) as producer,  # type: ignore[arg-type]
        pytest.raises(RuntimeError, match="spool_directory"),
    ):
        producer.wait_durable()


def test_sync_producer_fails_a_record_its_identity_makes_too_large(disk: Disk) -> None:
    config = Config(region="us-east-1", record_identities=True, max_record_size=1000)
    with SyncProducer(config, client=stream_fake()) as producer:
        refused = producer.put_record(stream="s", partition_key="k", data=b"x" * 990)
        fits = producer.put_record(stream="s", partition_key="k", data=b"x" * 900)
        result = refused.result(timeout=30)
        assert not result.success
        assert result.error_code == "InvalidRecord"
        assert "identity tag" in (result.error_message or "")
        assert fits.result(timeout=30).success


# --- failures of the spool itself --------------------------------------------------------------
async def test_a_failed_fsync_is_retried_and_logged(
    disk: Disk, caplog: pytest.LogCaptureFixture
) -> None:
    async with Producer(CONFIG, client=stream_fake()) as producer:
        disk.files.fail("fsync", errno.EIO)
        outcome = await producer.put_record(stream="s", partition_key="k", data=b"x")
        with anyio.fail_after(30):
            await outcome.wait_durable()
        statistics = producer.statistics().spool
        assert statistics is not None
        assert statistics.write_errors == 1
        assert not statistics.full
    assert "a write failed" in caplog.text


async def test_wait_durable_fails_when_the_producer_closes_first(
    disk: Disk, caplog: pytest.LogCaptureFixture
) -> None:
    errors: list[BaseException] = []
    async with anyio.create_task_group() as group:
        async with Producer(CONFIG, client=stream_fake()) as producer:
            disk.files.capacity_bytes = sum(len(f.content) for f in disk.files.files.values())
            outcome = await producer.put_record(stream="s", partition_key="k", data=b"x")

            async def wait() -> None:
                try:
                    await outcome.wait_durable()
                except SpoolError as exc:
                    errors.append(exc)

            group.start_soon(wait)
            await anyio.sleep(0.5)
        assert (await outcome).success  # sending never waited for the disk
    assert len(errors) == 1
    assert "closed before the record was durable" in str(errors[0])
    assert "closing failed" in caplog.text
    with pytest.raises(SpoolError, match="closed before"):
        await producer.wait_durable()


async def test_a_replay_cut_short_by_the_exit_is_taken_up_at_the_next_start(
    disk: Disk,
) -> None:
    data = await put_and_cancel(CONFIG, 50)
    dead = stream_fake()
    dead.fail_requests(10**9, stream="s")
    with anyio.move_on_after(1):
        async with Producer(CONFIG.replace(max_outstanding_records=5), client=dead) as producer:
            await anyio.sleep_forever()
    statistics = producer.statistics().spool
    assert statistics is not None
    assert statistics.records_recovered == 50
    assert statistics.records_replayed <= 5  # the rest waited for room when the exit came
    live = stream_fake()
    async with Producer(CONFIG, client=live) as producer:
        await producer.flush()
        statistics = producer.statistics().spool
        assert statistics is not None
        assert statistics.records_recovered == statistics.records_replayed == 50
    assert sorted(record.data for record in await user_records(live)) == sorted(data)
