"""``aiokpl spool check|repair|dump PATH`` on spools written to a real directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aiokpl._cli import main
from aiokpl._cli.spool import escaped
from aiokpl._spool import AckOutcome, OsFiles, SpoolWriter, scan
from aiokpl._spool.format import HEADER_BYTES, encode_header, segment_name
from hostile import at_most_cpu_seconds, record_frame, segment_of

SCRIPT = Path(sys.executable).with_name("aiokpl")
"""The console script ``pip install`` put next to this interpreter (``[project.scripts]``)."""

PID = bytes(range(16))


def write_spool(directory: Path) -> Path:
    """A spool of three records (the first acknowledged); returns its one segment's path."""
    writer = SpoolWriter(scan(str(directory), OsFiles()), producer_id=PID)
    writer.append(stream="s", partition_key="pk", data=b"plain text", accepted_at=0.0)
    writer.append(
        stream="s\x1b[2J",
        partition_key="k\u00e9y",
        explicit_hash_key="42",
        data=b"\x1b[31mred\\" + bytes(range(40)),
        accepted_at=1700000000.25,
        tags=(("tag", "v"),),
    )
    writer.append(stream="s", partition_key="pk", data=b"third", accepted_at=0.0)
    writer.acknowledge(PID, [0], AckOutcome.DELIVERED)
    writer.close(0.0)
    (segment,) = directory.glob("*.seg")
    return segment


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(["spool", *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_check_of_a_sound_spool_exits_0_and_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_spool(tmp_path)
    status, out, _ = run_cli(capsys, "check", str(tmp_path))
    assert status == 0
    assert out.splitlines() == [
        f"{tmp_path}: 1 segments",
        "records: 2 to replay, 1 resolved",
        "torn tails: 0 (0 bytes to truncate)",
        "corrupt: 0 frames, 0 bytes lost, 0 segments to move aside",
    ]


def test_check_exits_1_on_corruption_and_repair_mends_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    segment = write_spool(tmp_path)
    data = bytearray(segment.read_bytes())
    data[HEADER_BYTES + 20] ^= 0x01  # inside the first record
    segment.write_bytes(bytes(data))
    status, out, _ = run_cli(capsys, "check", str(tmp_path))
    assert status == 1
    assert "corrupt: 1 frames" in out
    assert "run 'aiokpl spool repair'" in out
    assert segment.read_bytes() == bytes(data)  # check changes nothing
    status, out, _ = run_cli(capsys, "repair", str(tmp_path))
    assert status == 0
    assert "1 segments moved aside" in out
    assert Path(f"{segment}.corrupt").read_bytes() == bytes(data)
    assert segment.stat().st_size == HEADER_BYTES
    status, out, _ = run_cli(capsys, "check", str(tmp_path))
    assert (status, "records: 0 to replay" in out) == (0, True)


def test_a_torn_tail_is_reported_by_check_and_truncated_by_repair(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    segment = write_spool(tmp_path)
    size = segment.stat().st_size
    with segment.open("ab") as file:
        file.write(b"\x30\x00\x00")
    status, out, _ = run_cli(capsys, "check", str(tmp_path))
    assert status == 0  # a crash's normal mark, not corruption
    assert "torn tails: 1 (3 bytes to truncate)" in out
    status, out, _ = run_cli(capsys, "repair", str(tmp_path))
    assert "torn tails: 1 (3 bytes truncated)" in out
    assert segment.stat().st_size == size


def test_repair_refuses_a_spool_a_producer_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    segment = write_spool(tmp_path)
    with segment.open("ab") as file:
        file.write(b"\x30\x00\x00")  # a torn tail repair would cut
    files = OsFiles()
    held = files.lock(str(tmp_path))  # as a running producer holds it
    try:
        status, out, err = run_cli(capsys, "repair", str(tmp_path))
        assert (status, out) == (1, "")
        assert "in use by a producer" in err
        assert segment.read_bytes().endswith(b"\x30\x00\x00")  # untouched
        status, out, _ = run_cli(capsys, "check", str(tmp_path))  # reading is harmless
        assert (status, "torn tails: 1" in out) == (0, True)
    finally:
        files.unlock(held)
    status, out, _ = run_cli(capsys, "repair", str(tmp_path))
    assert (status, "3 bytes truncated" in out) == (0, True)


def test_dump_prints_one_escaped_line_per_entry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    segment = write_spool(tmp_path)
    with segment.open("ab") as file:
        file.write(b"\x30\x00\x00")
    status, out, _ = run_cli(capsys, "dump", str(tmp_path))
    assert status == 0
    lines = out.splitlines()
    name = segment.name
    assert lines[0] == f"{name} segment producer_id='{PID.hex()}'"
    assert lines[1] == (
        f"{name}@{HEADER_BYTES} record sequence_number=0 accepted_at='1970-01-01T00:00:00.000Z' "
        "stream='s' partition_key='pk' explicit_hash_key=None tags=[] data_bytes=10 "
        "data_prefix='plain text'"
    )
    assert "stream='s\\x1b[2J'" in lines[2]
    assert "partition_key='k\\xe9y'" in lines[2]
    assert "tags=[['tag', 'v']]" in lines[2]
    assert "accepted_at='2023-11-14T22:13:20.250Z'" in lines[2]
    assert "\x1b" not in out
    assert lines[4].split(" ", 1)[1].startswith("ack producer_id=")
    assert "outcome='delivered' runs=[[0, 1]]" in lines[4]
    assert lines[5].endswith(" torn bytes=3")
    assert len(lines) == 6


def test_dump_json_gives_one_object_per_entry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_spool(tmp_path)
    (tmp_path / segment_name(7)).write_bytes(b"short")
    (tmp_path / segment_name(8)).write_bytes(b"X" * HEADER_BYTES)
    (tmp_path / "notes.txt").write_text("not a segment")
    status, out, _ = run_cli(capsys, "dump", "--json", str(tmp_path))
    assert status == 0
    entries = [json.loads(line) for line in out.splitlines()]
    assert [e["kind"] for e in entries] == [
        "segment",
        "record",
        "record",
        "record",
        "ack",
        "torn",
        "corrupt",
    ]
    second = entries[2]
    assert second["data_bytes"] == 49
    assert second["data_prefix"] == escaped(b"\x1b[31mred\\" + bytes(range(40)))
    assert second["data_prefix"].startswith("\\x1b[31mred\\x5c\\x00\\x01")
    assert second["data_prefix"].endswith("...")
    assert second["explicit_hash_key"] == "42"
    assert entries[4]["producer_id"] == PID.hex()
    assert entries[5] == {"segment": segment_name(7), "kind": "torn", "bytes": 5}
    assert "magic" in entries[6]["error"]


def test_a_path_that_is_not_a_directory_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for action in ("check", "repair", "dump"):
        status, out, err = run_cli(capsys, action, str(tmp_path / "missing"))
        assert (status, out) == (2, "")
        assert err == f"aiokpl spool: {tmp_path / 'missing'}: not a directory\n"
    assert not (tmp_path / "missing").exists()


def test_the_console_script_checks_a_spool(tmp_path: Path) -> None:
    assert SCRIPT.exists(), f"{SCRIPT} is missing: install the project (pip install -e .)"
    segment = write_spool(tmp_path)
    data = segment.read_bytes()
    segment.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))  # the last frame's data changed
    (tmp_path / segment_name(5)).write_bytes(encode_header(PID)[:4])
    finished = subprocess.run(
        [str(SCRIPT), "spool", "check", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ},
    )
    assert finished.returncode == 1, finished.stderr
    assert finished.stderr == ""
    assert "torn tails: 1 (4 bytes to truncate)" in finished.stdout
    assert "corrupt: 1 frames" in finished.stdout


# -- hostile bytes (issue 33) -------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(record_frame(1, encoded_tags=b'"\x05\n\x01'), id="tag-cut-short"),
        pytest.param(record_frame(1, accepted_at=float("nan")), id="nan-time"),
        pytest.param(record_frame(1, accepted_at=float("inf")), id="inf-time"),
        pytest.param(record_frame(1, accepted_at=1e300), id="1e300-time"),
    ],
)
def test_check_finds_a_record_that_does_not_decode_and_repair_cuts_it_off(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: bytes
) -> None:
    """Its CRC checks: ``check`` said healthy (exit 0) while every start stopped on it, and
    ``dump`` printed a traceback. Now the three agree with a start: a corrupt frame."""
    segment = tmp_path / segment_name(0)
    segment.write_bytes(segment_of(PID, record_frame(0), bad, record_frame(2)))
    status, out, err = run_cli(capsys, "check", str(tmp_path))
    assert (status, err) == (1, "")
    assert "records: 1 to replay" in out
    assert "corrupt: 1 frames" in out
    status, out, err = run_cli(capsys, "dump", str(tmp_path))
    assert (status, err) == (0, "")
    assert [line.split(" ")[1] for line in out.splitlines()] == ["segment", "record", "corrupt"]
    status, out, err = run_cli(capsys, "repair", str(tmp_path))
    assert (status, err) == (0, "")
    assert "1 segments moved aside" in out
    assert (tmp_path / f"{segment.name}.corrupt").exists()
    assert run_cli(capsys, "check", str(tmp_path))[0] == 0


def test_an_entry_that_is_not_a_segment_is_set_aside_as_a_start_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A directory named like a segment (each command printed a traceback): a start sets it
    aside unread, so check counts it to move aside (exit 1), dump says so in one line, and
    repair moves it aside."""
    tmp_path.chmod(0o700)
    write_spool(tmp_path)
    directory = tmp_path / segment_name(9)
    directory.mkdir()
    status, out, err = run_cli(capsys, "check", str(tmp_path))
    assert (status, err) == (1, "")
    assert "1 segments to move aside" in out
    status, out, err = run_cli(capsys, "dump", str(tmp_path))
    assert (status, err) == (0, "")
    assert out.splitlines()[-1] == (
        f"{directory.name} set-aside error={str(directory) + ' is a directory'!a}"
    )
    status, out, err = run_cli(capsys, "repair", str(tmp_path))
    assert (status, err) == (0, "")
    assert "1 segments moved aside" in out
    assert (tmp_path / f"{directory.name}.corrupt").is_dir()
    assert run_cli(capsys, "check", str(tmp_path))[0] == 0


def test_a_directory_a_start_refuses_is_refused_in_one_line_unless_any_owner(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tmp_path.chmod(0o700)
    write_spool(tmp_path)
    tmp_path.chmod(0o777)
    for action in ("check", "repair", "dump"):
        status, out, err = run_cli(capsys, action, str(tmp_path))
        assert (status, out) == (2, ""), action
        assert err == (
            f"aiokpl spool: {tmp_path} is writable by its group and others (mode 0777; "
            "chmod go-w it)\n"
        ), action
    status, out, err = run_cli(capsys, "check", "--any-owner", str(tmp_path))
    assert (status, err) == (0, "")
    assert "2 to replay" in out


def test_a_linked_lock_and_a_fifo_segment_are_one_line_never_a_hang(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tmp_path.chmod(0o700)
    write_spool(tmp_path)
    fifo = tmp_path / segment_name(9)
    os.mkfifo(fifo)
    status, out, err = run_cli(capsys, "dump", str(tmp_path))
    assert (status, err) == (0, "")
    assert out.splitlines()[-1] == f"{fifo.name} set-aside error={str(fifo) + ' is a FIFO'!a}"
    target = tmp_path.parent / "elsewhere"
    (tmp_path / ".lock").unlink(missing_ok=True)
    (tmp_path / ".lock").symlink_to(target)
    status, out, err = run_cli(capsys, "repair", str(tmp_path))
    assert (status, out) == (2, "")
    assert err == f"aiokpl spool: {tmp_path / '.lock'} is a symbolic link\n"
    assert not target.exists()  # nothing created at the link's target


def test_a_record_with_100_000_tags_is_checked_and_dumped_in_linear_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``dump`` of a record of 100,000 tags took 22.8 s, 0.3 s now."""
    tags = b'"\x02\n\x00' * 100_000
    (tmp_path / segment_name(0)).write_bytes(segment_of(PID, record_frame(0, encoded_tags=tags)))
    with at_most_cpu_seconds(6, "checking and dumping a record of 100,000 tags"):
        assert run_cli(capsys, "check", str(tmp_path))[0] == 0
        status, out, _ = run_cli(capsys, "dump", "--json", str(tmp_path))
    assert status == 0
    assert len(json.loads(out.splitlines()[1])["tags"]) == 100_000
