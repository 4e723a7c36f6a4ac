"""A spool trusts only its owner (issue 33): what it holds is replayed with the producer's
credentials, so a start refuses a directory another user owns or may write, and sets aside,
unread, any segment name that is not a regular file of this user reached without a link, or is
longer than a segment can be. Everything the spool writes is ``0600`` in a ``0700`` directory,
whatever the umask.

Each test starts a real ``Producer`` on a real directory (the spool's worker-thread hop runs
inline, under the virtual clock, as in ``tests/test_spool_producer.py``'s real-files test) and
reads the fake stream back: a record planted in a refused place must not be in it. The tests
that need a file of another user ``chown`` to ``nobody`` (65534), which needs root; the mode
rules are tested as any user.
"""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from aiokpl import Config, Producer, SpoolError, _spooling
from aiokpl._cli import main
from aiokpl._private_files import UntrustedPathError
from aiokpl._spool import OsFiles, SpoolWriter, scan
from aiokpl._spool.files import LOCK_NAME, MAX_SEGMENT_BYTES
from aiokpl._spool.format import HEADER_BYTES, segment_name
from aiokpl.aggregation import deaggregate
from aiokpl.testing import FakeKinesis, read_stream

pytestmark = pytest.mark.anyio

NOBODY = 65534
needs_root = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0,
    reason="giving a file to another user (chown) needs root; the mode rules are tested by all",
)
PLANTED = b"INJECTED by uid 65534"


async def inline(function: Callable[..., Any], *args: Any) -> Any:
    """The spool's worker-thread hop, inline: a virtual clock's loop runs no threads."""
    await anyio.lowlevel.checkpoint()
    return function(*args)


@pytest.fixture(autouse=True)
def _inline_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_spooling, "run_sync", inline)


@pytest.fixture
def umask() -> Iterator[Callable[[int], int]]:
    """Set the process's umask for the test; the old one comes back after."""
    old = os.umask(0o022)
    os.umask(old)
    yield os.umask
    os.umask(old)


def fake() -> FakeKinesis:
    kinesis = FakeKinesis()
    kinesis.add_stream("events", shard_count=1)
    kinesis.add_stream("attacker-stream", shard_count=1)
    return kinesis


async def stored(kinesis: FakeKinesis, stream: str) -> list[bytes]:
    return [u.data for _, record in await read_stream(kinesis, stream) for u in deaggregate(record)]


def config(directory: Path, **changes: Any) -> Config:
    return Config(region="us-east-1", spool_directory=directory, **changes)


def segment_bytes(
    scratch: Path, *, stream: str = "attacker-stream", data: bytes = PLANTED
) -> bytes:
    """A whole, valid segment holding one unresolved record for ``stream``."""
    writer = SpoolWriter(scan(str(scratch), OsFiles()))
    writer.append(stream=stream, partition_key="k", data=data, accepted_at=0.0)
    writer.close(0.0)
    (path,) = scratch.glob("*.seg")
    content = path.read_bytes()
    path.unlink()
    return content


def private_spool(tmp_path: Path) -> Path:
    spool = tmp_path / "spool"
    spool.mkdir(mode=0o700)
    return spool


async def start_and_flush(directory: Path, kinesis: FakeKinesis, **changes: Any) -> Any:
    async with Producer(config(directory, **changes), client=kinesis) as producer:
        await producer.flush()
        return producer.statistics().spool


# --- what the spool writes ----------------------------------------------------------------------
@pytest.mark.parametrize("mask", [0o000, 0o022, 0o277])
async def test_the_directory_is_0700_and_every_file_in_it_0600_whatever_the_umask(
    tmp_path: Path, umask: Callable[[int], int], mask: int
) -> None:
    spool = tmp_path / "spool"
    umask(mask)
    kinesis = fake()
    async with Producer(config(spool), client=kinesis) as producer:
        await producer.put_record(stream="events", partition_key="k", data=b"kept")
        await producer.wait_durable()
    # A damaged segment, so that the next start writes a *.corrupt copy of it.
    (segment,) = spool.glob("*.seg")
    content = bytearray(segment.read_bytes())
    content[-3] ^= 0xFF
    segment.write_bytes(bytes(content))
    await start_and_flush(spool, kinesis)
    modes = {p.name: stat.S_IMODE(p.lstat().st_mode) for p in spool.iterdir()}
    assert stat.S_IMODE(spool.stat().st_mode) == 0o700
    assert any(name.endswith(".corrupt") for name in modes)
    assert any(name.endswith(".seg") for name in modes)
    assert LOCK_NAME in modes
    assert set(modes.values()) == {0o600}, modes


async def test_an_existing_lock_file_left_open_by_an_earlier_version_is_made_0600(
    tmp_path: Path,
) -> None:
    spool = private_spool(tmp_path)
    (spool / LOCK_NAME).touch(mode=0o644)
    (spool / LOCK_NAME).chmod(0o644)
    await start_and_flush(spool, fake())
    assert stat.S_IMODE((spool / LOCK_NAME).stat().st_mode) == 0o600


# --- whose directory ----------------------------------------------------------------------------
@needs_root
async def test_a_directory_another_user_owns_is_refused_at_start_in_one_line(
    tmp_path: Path,
) -> None:
    """The review's reproduction: a segment planted by another user in a spool directory it
    owns was replayed, with the producer's credentials, to the stream it named."""
    spool = private_spool(tmp_path)
    planted = spool / segment_name(0)
    planted.write_bytes(segment_bytes(tmp_path))
    os.chown(planted, NOBODY, NOBODY)
    os.chown(spool, NOBODY, NOBODY)
    kinesis = fake()
    with pytest.raises(SpoolError) as refused:
        await start_and_flush(spool, kinesis)
    message = str(refused.value)
    assert "\n" not in message
    assert f"is owned by uid {NOBODY}, not by this process's user (uid 0)" in message
    assert "spool_check_permissions" in message
    assert isinstance(refused.value, OSError)
    assert await stored(kinesis, "attacker-stream") == []
    assert not (spool / LOCK_NAME).exists()  # refused before anything was written there


@pytest.mark.parametrize(
    ("mode", "who"),
    [
        (0o777, "its group and others"),
        (0o1733, "its group and others"),
        (0o720, "its group"),
        (0o702, "others"),
    ],
)
async def test_a_directory_others_may_write_is_refused_at_start(
    tmp_path: Path, mode: int, who: str
) -> None:
    spool = private_spool(tmp_path)
    (spool / segment_name(0)).write_bytes(segment_bytes(tmp_path))
    spool.chmod(mode)
    kinesis = fake()
    with pytest.raises(SpoolError, match=f"is writable by {who} \\(mode {mode:04o}") as refused:
        await start_and_flush(spool, kinesis)
    assert "\n" not in str(refused.value)
    assert await stored(kinesis, "attacker-stream") == []


async def test_the_opt_out_accepts_a_directory_others_may_write(tmp_path: Path) -> None:
    spool = private_spool(tmp_path)
    (spool / segment_name(0)).write_bytes(segment_bytes(tmp_path, stream="events", data=b"ok"))
    spool.chmod(0o777)
    kinesis = fake()
    statistics = await start_and_flush(spool, kinesis, spool_check_permissions=False)
    assert statistics.records_replayed == 1
    assert await stored(kinesis, "events") == [b"ok"]


async def test_a_spool_path_that_is_a_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_bytes(b"")
    with pytest.raises(SpoolError, match=r"is refused: .*/file is not a directory$"):
        await start_and_flush(path, fake())


def test_the_owner_rules_compare_with_the_effective_user_as_any_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner rules without root: this process seen as another user (its effective uid
    changed), the directory and segment it made are a stranger's."""
    spool = private_spool(tmp_path)
    (spool / segment_name(0)).write_bytes(segment_bytes(tmp_path, stream="events", data=b"ok"))
    mine = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: mine + 1)
    files = OsFiles()
    with pytest.raises(UntrustedPathError, match=f"owned by uid {mine}, not by .* {mine + 1}"):
        files.check_directory(str(spool))
    recovery = scan(str(spool), files, repair=False)
    assert (recovery.statistics.segments_moved_aside, recovery.statistics.segments) == (1, 0)
    with pytest.raises(UntrustedPathError, match=f"owned by uid {mine},"):
        files.lock(str(spool))
    trusting = OsFiles(check_owner=False)
    trusting.check_directory(str(spool))
    assert scan(str(spool), trusting, repair=False).statistics.records_recovered == 1
    trusting.unlock(trusting.lock(str(spool)))


# --- what is in it ------------------------------------------------------------------------------
@needs_root
async def test_a_segment_another_user_owns_is_set_aside_unread(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A directory made private after another user planted a file in it: the file stays
    theirs, and is not replayed."""
    spool = private_spool(tmp_path)
    planted = spool / segment_name(0)
    planted.write_bytes(segment_bytes(tmp_path))
    os.chown(planted, NOBODY, NOBODY)
    kinesis = fake()
    with caplog.at_level(logging.WARNING, logger="aiokpl.spool"):
        statistics = await start_and_flush(spool, kinesis)
    assert await stored(kinesis, "attacker-stream") == []
    assert (statistics.records_recovered, statistics.segments_moved_aside) == (0, 1)
    assert f"is owned by uid {NOBODY}" in caplog.text
    aside = spool / (segment_name(0) + ".corrupt")
    assert aside.stat().st_uid == NOBODY  # renamed, unread, untouched
    # The opt-out reads it: for file systems whose owners mean nothing.
    aside.rename(planted)
    await start_and_flush(spool, kinesis, spool_check_permissions=False)
    assert await stored(kinesis, "attacker-stream") == [PLANTED]


async def test_a_segment_linked_outside_is_set_aside_and_its_target_untouched(
    tmp_path: Path,
) -> None:
    """The review's reproduction: a segment symlinked outside the spool was truncated through
    the link (its torn tail cut) and its bytes copied in as ``*.corrupt``."""
    spool = private_spool(tmp_path)
    outside = tmp_path / "outside.seg"
    target = segment_bytes(tmp_path) + b"\x40\x00\x00\x00\x01"  # and a torn tail to cut
    outside.write_bytes(target)
    (spool / segment_name(0)).symlink_to(outside)
    kinesis = fake()
    statistics = await start_and_flush(spool, kinesis)
    assert outside.read_bytes() == target
    assert await stored(kinesis, "attacker-stream") == []
    assert statistics.segments_moved_aside == 1
    aside = spool / (segment_name(0) + ".corrupt")
    assert aside.is_symlink()  # the link was moved, no copy of what it points to was made
    regular = [p for p in spool.iterdir() if not p.is_symlink() and p.name != LOCK_NAME]
    assert all(PLANTED not in p.read_bytes() for p in regular)


async def test_a_linked_lock_file_is_refused_and_nothing_is_created_at_its_target(
    tmp_path: Path,
) -> None:
    """The review's reproduction: a ``.lock`` symlink made the start create a file at its
    target. Refused rather than set aside: moving a lock file aside races with another
    producer's start, and both could then hold a lock."""
    spool = private_spool(tmp_path)
    target = tmp_path / "created-through-the-link"
    (spool / LOCK_NAME).symlink_to(target)
    with pytest.raises(SpoolError, match="is a symbolic link") as refused:
        await start_and_flush(spool, fake())
    assert "\n" not in str(refused.value)
    assert not target.exists()


async def test_a_fifo_lock_file_is_refused_without_blocking(tmp_path: Path) -> None:
    spool = private_spool(tmp_path)
    os.mkfifo(spool / LOCK_NAME, 0o600)
    with pytest.raises(SpoolError, match="is a FIFO"):
        await start_and_flush(spool, fake())


async def test_a_fifo_segment_is_set_aside_without_blocking(tmp_path: Path) -> None:
    """The review's reproduction: a FIFO named as a segment hung the start forever."""
    spool = private_spool(tmp_path)
    os.mkfifo(spool / segment_name(0), 0o600)
    (spool / segment_name(1)).write_bytes(segment_bytes(tmp_path, stream="events", data=b"ok"))
    kinesis = fake()
    statistics = await start_and_flush(spool, kinesis)
    assert statistics.segments_moved_aside == 1
    assert stat.S_ISFIFO((spool / (segment_name(0) + ".corrupt")).lstat().st_mode)
    assert await stored(kinesis, "events") == [b"ok"]  # the rest is recovered as ever


async def test_a_segment_linked_to_dev_zero_is_set_aside_unread(tmp_path: Path) -> None:
    """The review's reproduction: a segment linked to ``/dev/zero`` was read until memory ran
    out (1.9 GB, ``MemoryError``)."""
    spool = private_spool(tmp_path)
    (spool / segment_name(0)).symlink_to("/dev/zero")
    statistics = await start_and_flush(spool, fake())
    assert statistics.segments_moved_aside == 1
    assert os.readlink(spool / (segment_name(0) + ".corrupt")) == "/dev/zero"


def test_a_device_or_a_directory_named_as_a_segment_is_refused_by_the_file_layer(
    tmp_path: Path,
) -> None:
    files = OsFiles()
    os.mkdir(tmp_path / "dir.seg")
    with pytest.raises(UntrustedPathError, match="is a directory"):
        files.read(str(tmp_path / "dir.seg"))
    with pytest.raises(UntrustedPathError, match="is a character device"):
        files.read("/dev/zero")
    with pytest.raises(UntrustedPathError, match="is a character device"):
        files.truncate_path("/dev/null", 0)


async def test_a_segment_longer_than_a_segment_can_be_is_set_aside_unread(tmp_path: Path) -> None:
    """Its size is known before it is read: a file past what the writer ever writes (its
    segment size and one entry) is not a segment of this spool, whatever it starts with."""
    spool = private_spool(tmp_path)
    path = spool / segment_name(0)
    path.write_bytes(segment_bytes(tmp_path, stream="events", data=b"too long"))
    os.truncate(path, MAX_SEGMENT_BYTES + 1)  # sparse: costs no disk
    kinesis = fake()
    statistics = await start_and_flush(spool, kinesis)
    assert (statistics.segments_moved_aside, statistics.records_recovered) == (1, 0)
    assert (spool / (segment_name(0) + ".corrupt")).stat().st_size == MAX_SEGMENT_BYTES + 1
    assert await stored(kinesis, "events") == []


def test_the_writer_never_takes_a_segment_past_its_size(tmp_path: Path) -> None:
    """What lets recovery bound a segment before reading it: one flush of many records is
    spread over segments, each within its size; an entry longer than a segment goes alone."""
    size = HEADER_BYTES + 1000
    writer = SpoolWriter(scan(str(tmp_path), OsFiles()), segment_size_bytes=size)
    for i in range(100):  # about 60 bytes a frame: 6,000 bytes in one flush
        writer.append(stream="s", partition_key="k", data=b"%03d" % i, accepted_at=0.0)
    writer.append(stream="s", partition_key="k", data=b"x" * 3000, accepted_at=0.0)
    writer.append(stream="s", partition_key="k", data=b"after", accepted_at=0.0)
    writer.flush(0.0)
    writer.close(0.0)
    sizes = [p.stat().st_size for p in sorted(tmp_path.glob("*.seg"))]
    assert len(sizes) >= 7
    assert sum(s > size for s in sizes) == 1  # the long entry, alone past the size
    recovery = scan(str(tmp_path), OsFiles())
    assert not recovery.statistics.corrupt
    data = [r.data for r in recovery.unresolved()]
    assert data == [b"%03d" % i for i in range(100)] + [b"x" * 3000, b"after"]


# --- the tools agree with a start -----------------------------------------------------------------
def test_check_counts_what_a_start_sets_aside_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spool = private_spool(tmp_path)
    os.mkfifo(spool / segment_name(0), 0o600)
    (spool / segment_name(1)).symlink_to("/dev/zero")
    before = sorted(os.listdir(spool))
    recovery = scan(str(spool), OsFiles(), repair=False)
    assert recovery.statistics.segments_moved_aside == 2
    assert [reason.split(" is ")[1] for reason in recovery.refused] == [
        "a FIFO",
        "a symbolic link",
    ]
    status = main(["spool", "check", str(spool)])
    out = capsys.readouterr().out
    assert status == 1
    assert "2 segments to move aside" in out
    assert sorted(os.listdir(spool)) == before
    assert main(["spool", "repair", str(spool)]) == 0
    assert sorted(os.listdir(spool)) == sorted(
        [LOCK_NAME, segment_name(0) + ".corrupt", segment_name(1) + ".corrupt"]
    )


# --- the cost of a crafted start ------------------------------------------------------------------
CHILD = """
import os, resource, sys, time
import anyio
from aiokpl import Config, Producer
from aiokpl.testing import FakeKinesis

async def main():
    kinesis = FakeKinesis()
    kinesis.add_stream("events", shard_count=1)
    config = Config(region="us-east-1", spool_directory=sys.argv[1])
    async with Producer(config, client=kinesis) as producer:
        await producer.flush()
        return producer.statistics().spool.segments_moved_aside

before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
aside = anyio.run(main)
took = time.perf_counter() - started
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(aside, after - before, round(took, 3))
"""


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss in KiB and /dev/zero: Linux")
def test_a_crafted_directory_starts_in_bounded_memory(tmp_path: Path) -> None:
    """Every crafted name at once (a FIFO, links to ``/dev/zero`` and outside, a sparse file of
    a gigabyte): the start sets each aside unread. The issue's target is 100 MB: the child's
    peak memory may grow by less than that over its start (measured, printed; not timed)."""
    spool = private_spool(tmp_path)
    os.mkfifo(spool / segment_name(0), 0o600)
    (spool / segment_name(1)).symlink_to("/dev/zero")
    (spool / segment_name(2)).symlink_to(tmp_path / "outside")
    (tmp_path / "outside").write_bytes(b"")
    with open(spool / segment_name(3), "wb") as sparse:
        sparse.truncate(1 << 30)
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(spool)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        check=True,
    )
    aside, grown_kib, seconds = result.stdout.split()
    print(f"crafted start: {aside} set aside, peak memory +{grown_kib} KiB, {seconds} s")
    assert int(aside) == 4
    assert int(grown_kib) < 100 * 1024
