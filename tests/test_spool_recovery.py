"""The spool's writer and recovery on the fault-injecting file layer (``MemoryFiles``).

The crash tests run one scenario (appends, flushes, acknowledgements, segment rotations and
deletions) and crash it at every file operation in turn, by power loss (only what was fsync'd
stays) or by the process being killed (everything written stays), part-way through a write
too. After each crash recovery must yield exactly the durable, unresolved records: nothing
reported durable and not resolved is lost, nothing whose acknowledgement was durable is
replayed, every record is the one appended (same identity and data), and a new writer on the
directory resolves what was replayed and deletes everything it can.
"""

from __future__ import annotations

import errno
import os
import random
from dataclasses import dataclass, field

import pytest

from aiokpl._spool import (
    AckOutcome,
    FsyncPolicy,
    OsFiles,
    SpoolError,
    SpoolFullError,
    SpoolIOError,
    SpoolRecord,
    SpoolWriter,
    scan,
)
from aiokpl._spool.format import HEADER_BYTES, SpoolAck, encode_ack, encode_header, segment_name
from aiokpl._spool.policy import FsyncMode
from aiokpl.testing._spool_files import MemoryFiles, SimulatedCrash
from hostile import at_most_cpu_seconds, record_frame, segment_of

D = "/spool"
Key = tuple[bytes, int]


@dataclass
class Model:
    """What the test knows the spool was told, and what the writer said is durable."""

    appended: dict[Key, bytes] = field(default_factory=dict)
    durable: set[Key] = field(default_factory=set)
    acknowledged: set[Key] = field(default_factory=set)
    """Every acknowledgement given: a crash may or may not have kept those not yet durable."""
    acknowledged_durably: set[Key] = field(default_factory=set)

    def check(self, recovered: list[SpoolRecord]) -> None:
        keys = [(r.producer_id, r.sequence_number) for r in recovered]
        assert len(keys) == len(set(keys)), "a record was yielded twice"
        for record in recovered:
            key = (record.producer_id, record.sequence_number)
            assert self.appended[key] == record.data
            assert record.stream == "s"
        must = self.durable - self.acknowledged
        assert must <= set(keys), f"durable records lost: {sorted(must - set(keys))[:5]}"
        replayed = set(keys) & self.acknowledged_durably
        assert not replayed, f"resolved records replayed: {sorted(replayed)[:5]}"


def flushed(writer: SpoolWriter, model: Model, now: float, *, power_loss: bool) -> None:
    """Flush and tell the model what the writer now guarantees."""
    pid = writer.producer_id
    durable = writer.flush(now)
    stats = writer.statistics()
    if power_loss:
        model.durable |= {(pid, s) for s in range(durable)}
        if stats.unsynced_bytes == 0 and stats.buffered_bytes == 0:
            model.acknowledged_durably |= model.acknowledged
    else:  # a killed process loses nothing it wrote
        model.durable |= {(pid, s) for s in range(stats.next_sequence_number)}
        model.acknowledged_durably |= model.acknowledged


def append(writer: SpoolWriter, model: Model, n: int, rng: random.Random) -> None:
    for _ in range(n):
        data = rng.randbytes(rng.randrange(1, 60))
        seq = writer.append(stream="s", partition_key="pk", data=data, accepted_at=1.0)
        model.appended[writer.producer_id, seq] = data


def acknowledge(writer: SpoolWriter, model: Model, keys: list[Key]) -> None:
    by_producer: dict[bytes, list[int]] = {}
    for pid, seq in keys:
        by_producer.setdefault(pid, []).append(seq)
    for pid, seqs in by_producer.items():
        writer.acknowledge(pid, seqs, AckOutcome.DELIVERED)
    model.acknowledged |= set(keys)


def scenario(files: MemoryFiles, model: Model, policy: FsyncMode, *, power_loss: bool) -> None:
    """Recover, replay (acknowledge) what was recovered, and write six rounds of records."""
    rng = random.Random(1)
    recovery = scan(D, files)
    writer = SpoolWriter(
        recovery,
        policy=FsyncPolicy(policy, interval_ms=10),
        segment_size_bytes=300,
        producer_id=files.operations.to_bytes(16, "little"),  # a new one each session
    )
    replay = [(r.producer_id, r.sequence_number) for r in recovery.unresolved()]
    now = 0.0
    for round_ in range(6):
        append(writer, model, 4, rng)
        now += 0.004
        flushed(writer, model, now, power_loss=power_loss)
        if round_ == 1:
            acknowledge(writer, model, replay)
        pid = writer.producer_id
        done = [k for k in model.appended if k[0] == pid and k not in model.acknowledged]
        acknowledge(writer, model, done[: 3 if round_ % 2 else 5])
        now += 0.004
        flushed(writer, model, now, power_loss=power_loss)
    writer.close(now)  # everything is written (and, unless "none", fsync'd)
    model.durable |= {k for k in model.appended if k[0] == writer.producer_id}
    model.acknowledged_durably |= model.acknowledged


def count_operations(policy: FsyncMode) -> int:
    files = MemoryFiles()
    scenario(files, Model(), policy, power_loss=policy != "none")
    before = files.operations
    files.operation_counts.clear()
    scenario(files, Model(), policy, power_loss=policy != "none")
    # The scenario meets every step: creation and rotation, writes, fsyncs, deletions.
    steps = {"create", "append", "unlink"} | ({"fsync"} if policy != "none" else set())
    assert set(files.operation_counts) == steps
    assert files.operation_counts["unlink"] >= 2
    return files.operations - before


CASES = [("batch", True), ("interval", True), ("batch", False), ("none", False)]


@pytest.mark.parametrize(("policy", "power_loss"), CASES)
def test_a_crash_at_every_step_loses_nothing_durable_and_replays_nothing_resolved(
    policy: FsyncMode, power_loss: bool
) -> None:
    total = count_operations(policy)
    assert total >= 30
    for crash_at in range(1, total):
        for torn_bytes in (0, 5):
            files = MemoryFiles()
            model = Model()
            # One whole run first, so the crash also meets recovery of an earlier session.
            scenario(files, model, policy, power_loss=power_loss)
            files.crash_at = files.operations + crash_at
            files.torn_bytes = torn_bytes
            with pytest.raises(SimulatedCrash):
                scenario(files, model, policy, power_loss=power_loss)
            files.crash(power_loss=power_loss)
            recovery = scan(D, files)
            assert not recovery.statistics.corrupt
            recovered = list(recovery.unresolved())
            model.check(recovered)
            assert recovery.statistics.records_recovered == len(recovered)
            # A new session replays them and ends with nothing left to replay.
            writer = SpoolWriter(recovery, policy=FsyncPolicy(policy))
            acknowledge(writer, model, [(r.producer_id, r.sequence_number) for r in recovered])
            writer.close(9.0)
            assert writer.statistics().records_unresolved == 0
            assert writer.statistics().segments == 1
            assert writer.statistics().producers == 1  # earlier sessions' sets are dropped
            final = scan(D, files)
            assert list(final.unresolved()) == []
            assert final.statistics.torn_tails == 0  # the first recovery truncated them


def test_a_full_disk_is_back_pressure_and_writes_resume_when_space_is_back() -> None:
    files = MemoryFiles()
    writer = SpoolWriter(scan(D, files), segment_size_bytes=10_000)
    writer.append(stream="s", partition_key="pk", data=b"a" * 50, accepted_at=1.0)
    assert writer.flush(0.0) == 1
    files.capacity_bytes = sum(len(f.content) for f in files.files.values()) + 30
    writer.append(stream="s", partition_key="pk", data=b"b" * 50, accepted_at=1.0)
    with pytest.raises(SpoolFullError) as raised:
        writer.flush(1.0)
    assert raised.value.errno == errno.ENOSPC
    assert isinstance(raised.value.__cause__, OSError)
    assert writer.full
    assert writer.statistics().full
    assert writer.durable_through == 1
    # The part-written frame was cut off: the file holds whole frames only.
    assert scan(D, files, repair=False).statistics.bytes_truncated == 0
    with pytest.raises(SpoolFullError):  # still full: still refused, still nothing lost
        writer.flush(2.0)
    files.capacity_bytes = None
    assert writer.flush(3.0) == 2
    assert not writer.statistics().full
    assert [r.data for r in scan(D, files).unresolved()] == [b"a" * 50, b"b" * 50]


def test_enospc_on_fsync_writes_the_records_again_into_a_new_segment() -> None:
    files = MemoryFiles()
    writer = SpoolWriter(scan(D, files))
    writer.append(stream="s", partition_key="pk", data=b"first", accepted_at=1.0)
    assert writer.flush(0.0) == 1
    writer.append(stream="s", partition_key="pk", data=b"second", accepted_at=1.0)
    files.fail("fsync", errno.ENOSPC)
    with pytest.raises(SpoolFullError):
        writer.flush(1.0)
    assert writer.durable_through == 1
    assert writer.flush(2.0) == 2
    assert writer.statistics().segments == 2
    files.crash()
    recovered = list(scan(D, files).unresolved())
    assert [(r.sequence_number, r.data) for r in recovered] == [(0, b"first"), (1, b"second")]


def test_an_io_error_that_is_not_enospc_is_an_io_error_not_full() -> None:
    files = MemoryFiles()
    writer = SpoolWriter(scan(D, files))
    writer.append(stream="s", partition_key="pk", data=b"x", accepted_at=1.0)
    files.fail("append", errno.EIO, written=3)
    files.fail("truncate", errno.EIO)  # cannot cut the part-written frame off either,
    files.fail("truncate_path", errno.EIO)  # not even when it leaves the segment
    with pytest.raises(SpoolIOError) as raised:
        writer.flush(0.0)
    assert not isinstance(raised.value, SpoolFullError)
    assert not writer.full
    # Into a new segment; the one with a part-written frame held no record, so it goes.
    assert writer.flush(1.0) == 1
    assert list(files.files) == [f"{D}/{segment_name(1)}"]
    files.crash(power_loss=False)
    recovery = scan(D, files)
    assert recovery.statistics.torn_tails == 0
    assert [r.data for r in recovery.unresolved()] == [b"x"]


def test_a_segment_that_cannot_be_created_is_an_error_and_leaves_nothing_behind() -> None:
    files = MemoryFiles()
    files.makedirs(D)
    files.fail("append", errno.ENOSPC)
    with pytest.raises(SpoolFullError):
        SpoolWriter(scan(D, files))
    assert files.files == {}
    files.fail("create", errno.EACCES)
    with pytest.raises(SpoolIOError):
        SpoolWriter(scan(D, files))


def test_a_rotation_that_fails_is_retried_at_the_next_flush() -> None:
    files = MemoryFiles()
    writer = SpoolWriter(scan(D, files), segment_size_bytes=HEADER_BYTES + 1)
    writer.append(stream="s", partition_key="pk", data=b"one", accepted_at=1.0)
    writer.flush(0.0)
    writer.append(stream="s", partition_key="pk", data=b"two", accepted_at=1.0)
    files.fail("create", errno.ENOSPC)
    with pytest.raises(SpoolFullError):
        writer.flush(1.0)
    assert writer.flush(2.0) == 2
    assert [r.data for r in scan(D, files).unresolved()] == [b"one", b"two"]


def test_segments_go_oldest_first_once_every_record_in_them_is_resolved() -> None:
    files = MemoryFiles()
    writer = SpoolWriter(scan(D, files), segment_size_bytes=HEADER_BYTES + 1)
    pid = writer.producer_id
    for n in range(3):  # three segments of one record each, then an empty active one
        writer.append(stream="s", partition_key="pk", data=bytes([n]), accepted_at=1.0)
        writer.flush(float(n))
    writer.flush(3.0)
    assert len(files.files) == 4
    writer.acknowledge(pid, [1, 2], AckOutcome.DELIVERED)
    writer.flush(4.0)
    assert len(files.files) == 4  # the oldest holds record 0, unresolved: nothing goes
    writer.acknowledge(pid, [0, 1], AckOutcome.FAILED)  # 1 again: ignored
    writer.flush(5.0)
    assert len(files.files) == 1
    assert writer.statistics().records_unresolved == 0
    writer.acknowledge(pid, [], AckOutcome.DELIVERED)
    assert writer.statistics().buffered_bytes == 0
    assert "segments=1" in repr(writer)


def test_interval_policy_fsyncs_once_per_interval_and_close_makes_everything_durable() -> None:
    files = MemoryFiles()
    writer = SpoolWriter(scan(D, files), policy=FsyncPolicy("interval", interval_ms=100))
    header_fsyncs = files.fsyncs
    for now in (10.0, 10.03, 10.06, 10.09):
        writer.append(stream="s", partition_key="pk", data=b"x", accepted_at=1.0)
        assert writer.next_flush_at() == 0.0
        writer.flush(now)
    assert files.fsyncs - header_fsyncs == 1
    assert writer.durable_through == 1
    assert writer.next_flush_at() == pytest.approx(10.1)
    writer.flush(10.1)
    assert writer.durable_through == 4
    assert writer.next_flush_at() is None
    writer.append(stream="s", partition_key="pk", data=b"x", accepted_at=1.0)
    writer.flush(10.15)
    writer.close(10.16)
    assert writer.durable_through == 5
    files.crash()
    assert len(list(scan(D, files).unresolved())) == 5


def test_close_that_cannot_fsync_raises_and_stays_open() -> None:
    files = MemoryFiles()
    writer = SpoolWriter(scan(D, files), policy=FsyncPolicy("interval", interval_ms=100))
    writer.append(stream="s", partition_key="pk", data=b"x", accepted_at=1.0)
    writer.flush(0.0)
    writer.append(stream="s", partition_key="pk", data=b"y", accepted_at=1.0)
    files.fail("fsync", errno.EIO)
    with pytest.raises(SpoolIOError):
        writer.close(0.01)
    writer.close(0.02)
    assert writer.durable_through == 2
    files.crash()
    assert [r.data for r in scan(D, files).unresolved()] == [b"x", b"y"]


def test_a_producer_id_must_be_16_bytes() -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        SpoolWriter(scan(D, MemoryFiles()), producer_id=b"short")


# -- damage found at recovery -------------------------------------------------------------


def written_spool(files: MemoryFiles, n: int = 6) -> SpoolWriter:
    writer = SpoolWriter(scan(D, files), producer_id=bytes(16))
    for i in range(n):
        writer.append(stream="s", partition_key="pk", data=bytes([i]) * 10, accepted_at=1.0)
    writer.close(0.0)
    return writer


def test_a_corrupt_frame_keeps_the_frames_before_it_and_moves_a_copy_aside() -> None:
    files = MemoryFiles()
    written_spool(files)
    path = f"{D}/{segment_name(0)}"
    original = files.content(path)
    damaged = bytearray(original)
    third = HEADER_BYTES + 2 * (len(original) - HEADER_BYTES) // 6
    damaged[third + 12] ^= 0x40
    files.files[path].content[:] = damaged
    check = scan(D, files, repair=False)
    assert check.statistics.corrupt
    assert files.content(path) == bytes(damaged)  # checking changes nothing
    recovery = scan(D, files)
    stats = recovery.statistics
    assert (stats.frames_lost, stats.segments_moved_aside) == (1, 1)
    assert stats.bytes_lost == len(original) - third
    assert [r.data[0] for r in recovery.unresolved()] == [0, 1]
    assert files.content(f"{path}.corrupt") == bytes(damaged)
    assert files.content(path) == original[:third]
    assert not scan(D, files).statistics.corrupt  # repaired: the next start is clean


def test_a_bad_header_moves_the_segment_aside_and_recovery_goes_on() -> None:
    files = MemoryFiles()
    written_spool(files)
    second = SpoolWriter(scan(D, files), producer_id=b"\x01" * 16)
    second.append(stream="s", partition_key="pk", data=b"later", accepted_at=2.0)
    second.close(1.0)
    path = f"{D}/{segment_name(0)}"
    files.files[path].content[0:8] = b"GARBAGE!"
    files.write_file(f"{path}.corrupt", b"an earlier one")  # the name is taken
    recovery = scan(D, files)
    assert recovery.statistics.segments_moved_aside == 1
    assert recovery.statistics.frames_lost == 1
    assert [r.data for r in recovery.unresolved()] == [b"later"]
    assert f"{path}.corrupt.1" in files.files
    assert recovery.next_segment_number == 2


def test_a_segment_shorter_than_its_header_is_a_torn_creation_and_removed() -> None:
    files = MemoryFiles()
    files.makedirs(D)
    files.write_file(f"{D}/{segment_name(3)}", encode_header(bytes(16))[:10])
    recovery = scan(D, files)
    assert recovery.statistics.torn_tails == 1
    assert recovery.statistics.bytes_truncated == 10
    assert files.files == {}
    assert recovery.next_segment_number == 4
    assert "segments=0" in repr(recovery)


def test_check_of_a_missing_directory_raises_and_unresolved_skips_deleted_segments() -> None:
    files = MemoryFiles()
    with pytest.raises(FileNotFoundError):
        scan(D, files, repair=False)
    written_spool(files)
    recovery = scan(D, files)
    files.unlink(f"{D}/{segment_name(0)}")
    assert list(recovery.unresolved()) == []


def test_the_real_file_layer_round_trips_a_spool(tmp_path: pytest.TempPathFactory) -> None:
    directory = str(tmp_path)
    files = OsFiles()
    writer = SpoolWriter(scan(directory, files), segment_size_bytes=HEADER_BYTES + 50)
    for i in range(5):
        writer.append(stream="s", partition_key="pk", data=b"%d" % i, accepted_at=1.0)
        writer.flush(float(i))
    writer.acknowledge(writer.producer_id, [0, 1], AckOutcome.DELIVERED)
    writer.close(9.0)
    recovery = scan(directory, files)
    assert [r.data for r in recovery.unresolved()] == [b"2", b"3", b"4"]
    name = sorted(os.listdir(directory))[-1]
    files.truncate_path(os.path.join(directory, name), HEADER_BYTES)
    files.write_file(os.path.join(directory, "x"), b"abc")
    files.rename(os.path.join(directory, "x"), os.path.join(directory, "y"))
    assert files.read(os.path.join(directory, "y")) == b"abc"
    files.unlink(os.path.join(directory, "y"))
    handle = files.create(os.path.join(directory, "z"))
    files.append(handle, b"12345")
    files.truncate(handle, 2)
    files.close(handle)
    assert files.read(os.path.join(directory, "z")) == b"12"


# -- a seeded random walk ---------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(12))
def test_random_faults_and_crashes_keep_every_durable_record(seed: int) -> None:
    rng = random.Random(seed)
    files = MemoryFiles()
    model = Model()
    power_loss = bool(seed % 2)
    for _session in range(4):
        recovery = scan(D, files)
        assert not recovery.statistics.corrupt
        recovered = list(recovery.unresolved())
        model.check(recovered)
        policy: FsyncMode = rng.choice(["batch", "interval"] if power_loss else ["none", "batch"])
        writer = SpoolWriter(
            recovery,
            policy=FsyncPolicy(policy, interval_ms=5),
            segment_size_bytes=400,
            producer_id=rng.randbytes(16),
        )
        backlog = [(r.producer_id, r.sequence_number) for r in recovered]
        files.crash_at = files.operations + rng.randrange(10, 200)
        files.torn_bytes = rng.randrange(0, 20)
        now = 0.0
        try:
            while True:
                append(writer, model, rng.randrange(0, 5), rng)
                if rng.random() < 0.1:
                    files.fail(rng.choice(["append", "fsync"]), written=rng.randrange(0, 30))
                now += rng.random() / 100
                try:
                    flushed(writer, model, now, power_loss=power_loss)
                except SpoolIOError:
                    continue
                pid = writer.producer_id
                mine = sorted(
                    k for k in model.durable if k[0] == pid and k not in model.acknowledged
                )
                backlog += rng.sample(mine, k=min(len(mine), rng.randrange(0, 6)))
                rng.shuffle(backlog)
                n = rng.randrange(0, len(backlog) + 1)
                acknowledge(writer, model, backlog[:n])
                del backlog[:n]
        except SimulatedCrash:
            files.crash(power_loss=power_loss)
    model.check(list(scan(D, files).unresolved()))


def test_a_record_written_twice_is_replayed_once_from_its_first_segment() -> None:
    # A failed fsync whose segment cannot be cut back: the records are written again into a
    # new segment and the old one keeps its copy.
    files = MemoryFiles()
    writer = SpoolWriter(scan(D, files))
    writer.append(stream="s", partition_key="pk", data=b"twice", accepted_at=1.0)
    writer.flush(0.0)
    writer.append(stream="s", partition_key="pk", data=b"also twice", accepted_at=1.0)
    files.fail("fsync", errno.EIO)
    files.fail("truncate_path", errno.EIO)
    with pytest.raises(SpoolIOError):
        writer.flush(1.0)
    assert writer.flush(2.0) == 2
    assert writer.next_sequence_number == 2
    writer.close(3.0)
    writer.close(3.0)  # closing twice is harmless; using a closed writer is an error
    with pytest.raises(SpoolError, match="closed"):
        writer.append(stream="s", partition_key="pk", data=b"late", accepted_at=1.0)
    with pytest.raises(SpoolError, match="closed"):
        writer.acknowledge(writer.producer_id, [0], AckOutcome.DELIVERED)
    with pytest.raises(SpoolError, match="closed"):
        writer.flush(3.0)
    files.crash(power_loss=False)
    recovery = scan(D, files)
    assert [r.data for r in recovery.unresolved()] == [b"twice", b"also twice"]
    assert recovery.statistics.records_recovered == 2
    again = SpoolWriter(recovery)
    again.acknowledge(writer.producer_id, [0, 1], AckOutcome.DELIVERED)
    again.close(4.0)
    assert again.statistics().segments == 1


def test_checking_counts_damage_and_changes_nothing() -> None:
    files = MemoryFiles()
    files.makedirs(D)
    files.write_file(f"{D}/{segment_name(0)}", b"short")
    files.write_file(f"{D}/{segment_name(1)}", b"X" * HEADER_BYTES)
    before = {path: files.content(path) for path in files.files}
    stats = scan(D, files, repair=False).statistics
    assert (stats.torn_tails, stats.segments_moved_aside, stats.segments) == (1, 1, 0)
    assert {path: files.content(path) for path in files.files} == before
    with pytest.raises(FileExistsError):
        files.write_file(f"{D}/{segment_name(0)}", b"")
    with pytest.raises(FileExistsError):
        files.create(f"{D}/{segment_name(0)}")


def test_a_torn_tail_is_truncated_and_the_frames_before_it_recovered() -> None:
    files = MemoryFiles()
    written_spool(files, n=3)
    path = f"{D}/{segment_name(0)}"
    whole = files.content(path)
    files.files[path].content += b"\x40\x00\x00\x00\x01\x02"  # a frame's first bytes
    recovery = scan(D, files)
    assert (recovery.statistics.torn_tails, recovery.statistics.bytes_truncated) == (1, 6)
    assert not recovery.statistics.corrupt
    assert [r.data[0] for r in recovery.unresolved()] == [0, 1, 2]
    assert files.content(path) == whole
    assert scan(D, files).statistics.torn_tails == 0


def test_recovery_holds_one_segment_in_memory_at_a_time(tmp_path: os.PathLike[str]) -> None:
    """A start reads the spool a segment at a time: ``scan`` and ``unresolved`` keep at most
    one segment's bytes alive (each kept the previous one while reading the next: twice)."""
    import tracemalloc

    directory = os.fspath(tmp_path)
    segment = 1 << 20
    writer = SpoolWriter(scan(directory, OsFiles()), segment_size_bytes=segment)
    data = bytes(1000)
    for i in range(4 * segment // 1000):
        writer.append(stream="s", partition_key="pk", data=data, accepted_at=1.0)
        if i % 100 == 99:
            writer.flush(1.0)  # a segment is filled up to its size, then the next begins
    writer.close(1.0)
    tracemalloc.start()
    try:
        recovery = scan(directory, OsFiles())
        assert len(recovery.segments) >= 4
        _, scan_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        count = sum(1 for _ in recovery.unresolved())
        _, replay_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 4 * segment // 1000
    assert scan_peak < 1.5 * segment, scan_peak
    assert replay_peak < 1.5 * segment, replay_peak


# -- hostile bytes (issue 33) -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        pytest.param(record_frame(1, encoded_tags=b'"\x05\n\x01'), "a tag cut short", id="tag"),
        pytest.param(record_frame(1, accepted_at=float("nan")), "a NaN time", id="nan"),
        pytest.param(record_frame(1, accepted_at=1e300), "a time past year 9999", id="1e300"),
    ],
)
def test_a_record_that_does_not_decode_is_cut_off_counted_and_set_aside(
    bad: bytes, why: str
) -> None:
    """Its CRC checks: a start replayed it and stopped on it (IndexError), or ``dump`` did.
    Now it is found as the segment is read, like damage: the frames before it are kept, the
    segment is copied aside and cut there, and every later start finds it clean."""
    files = MemoryFiles()
    files.makedirs(D)
    pid = bytes(16)
    path = f"{D}/{segment_name(0)}"
    content = segment_of(pid, record_frame(0), bad, record_frame(2))
    files.write_file(path, content)
    checked = scan(D, files, repair=False).statistics
    assert (checked.frames_lost, checked.segments_moved_aside) == (1, 1), why
    assert checked.bytes_lost == len(content) - HEADER_BYTES - len(record_frame(0))
    assert checked.records_recovered == 1
    assert files.content(path) == content  # checking changes nothing
    recovery = scan(D, files)
    assert recovery.statistics == checked
    assert [r.sequence_number for r in recovery.unresolved()] == [0]
    assert files.content(f"{path}.corrupt") == content
    assert files.content(path) == segment_of(pid, record_frame(0))
    assert not scan(D, files).statistics.corrupt


def test_a_record_written_twice_in_one_segment_is_replayed_once() -> None:
    """Counted once, it was replayed as often as it was written: ``records_recovered`` said 1
    and the replay sent 3 (found by the spool's fuzz target)."""
    files = MemoryFiles()
    files.makedirs(D)
    copies = [record_frame(1, data=b"first"), record_frame(1, data=b"again"), record_frame(1)]
    files.write_file(f"{D}/{segment_name(0)}", segment_of(bytes(16), *copies, record_frame(2)))
    recovery = scan(D, files)
    assert recovery.statistics.records_recovered == 2
    assert [(r.sequence_number, r.data) for r in recovery.unresolved()] == [
        (1, b"first"),
        (2, b"x"),
    ]


def test_records_and_acknowledgements_in_descending_order_are_recovered() -> None:
    """The order a segment holds its numbers in changes nothing but the cost, which is linear
    (``tests/test_spool_format.py`` bounds it)."""
    files = MemoryFiles()
    files.makedirs(D)
    pid = bytes(16)
    n = 5_000
    records = [record_frame(2 * (n - i), data=b"%d" % (n - i)) for i in range(n)]
    acks = [  # every fourth record, in descending order, one run each
        encode_ack(SpoolAck(pid, AckOutcome.DELIVERED, ((2 * (n - i), 1),))) for i in range(0, n, 4)
    ]
    files.write_file(f"{D}/{segment_name(0)}", segment_of(pid, *records, *acks))
    recovery = scan(D, files)
    assert recovery.statistics.records_resolved == len(acks)
    replayed = [r.sequence_number for r in recovery.unresolved()]
    assert replayed == [2 * (n - i) for i in range(n) if i % 4]


def test_a_record_with_100_000_tags_is_recovered_and_replayed_in_linear_time() -> None:
    """A record may hold any number of tags (a producer bounds them at put; the spool of an
    older one may not): replaying one of 100,000 took 12.5 s, 0.3 s now."""
    files = MemoryFiles()
    files.makedirs(D)
    tags = b'"\x02\n\x00' * 100_000
    files.write_file(
        f"{D}/{segment_name(0)}", segment_of(bytes(16), record_frame(0, encoded_tags=tags))
    )
    with at_most_cpu_seconds(6, "recovering and replaying a record of 100,000 tags"):
        (record,) = scan(D, files).unresolved()
    assert len(record.tags) == 100_000
