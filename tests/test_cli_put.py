"""``aiokpl put``'s run (reading, putting, results, dead letters) against the in-process fake.

The run reads in-memory inputs (no worker thread), so it runs under virtual time on asyncio and
trio; the command line around it is tested end to end in ``tests/integration/test_cli.py``.
"""

from __future__ import annotations

import base64
import io
import json
import os
import signal
import stat
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from aiokpl import Config, Producer
from aiokpl._cli import build_parser
from aiokpl._cli.lines import BadLine, FieldPath, LineParser, ParsedRecord, Template
from aiokpl._cli.options import EXIT_USAGE
from aiokpl._cli.put import MAX_REPORTED_BAD_LINES, Input, PutRun, _parser_from_args
from aiokpl._cli.put_report import DeadLetters, PutReport
from aiokpl.aggregation import deaggregate
from aiokpl.testing import FakeKinesis

pytestmark = pytest.mark.anyio


def make_run(
    tmp_path: Path, lines: list[bytes], parser: LineParser | None = None, **options: Any
) -> tuple[PutRun, io.StringIO]:
    stderr = io.StringIO()
    report = PutReport(stream="s")
    run = PutRun(
        stream="s",
        inputs=[Input("in.jsonl", io.BytesIO(b"".join(line + b"\n" for line in lines)))],
        parser=parser or LineParser(),
        dead_letters=DeadLetters(str(tmp_path / "dl.jsonl"), report),
        report=report,
        stderr=stderr,
        **options,
    )
    return run, stderr


def dead_letters(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "dl.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def stored(fake: FakeKinesis) -> list[tuple[str | None, bytes]]:
    return [
        (record.partition_key, record.data)
        for kinesis in fake.stored_records("s")
        for record in deaggregate({"Data": kinesis.data, "PartitionKey": kinesis.partition_key})
    ]


async def test_every_line_is_delivered_or_dead_lettered(tmp_path: Path) -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2)
    lines = [
        b'{"user": "ana", "v": 1}',
        b"",
        b'{"user": "bob", "v": 2',
        b"   ",
        b'{"v": 3}',
        b'{"user": "' + b"x" * 300 + b'"}',
        b'{"user": "cid", "v": 4}',
    ]
    parser = LineParser(json_lines=True, partition_key_field=FieldPath.parse("user"))
    run, stderr = make_run(tmp_path, lines, parser)
    async with Producer(Config(region="us-east-1"), client=fake) as producer:
        await run.run(producer)
    run._dead_letters.close()
    report = run.report
    assert (report.lines, report.blank, report.delivered) == (7, 2, 2)
    assert report.delivered_bytes == len(lines[0]) + len(lines[6])
    assert dict(report.failed) == {"InvalidJson": 1, "MissingField": 1, "InvalidRecord": 1}
    assert sorted(stored(fake)) == [("ana", lines[0]), ("cid", lines[6])]
    assert [(e["line"], e["error_code"], e["attempts"]) for e in dead_letters(tmp_path)] == [
        (3, "InvalidJson", 0),
        (5, "MissingField", 0),
        (6, "InvalidRecord", 0),
    ]
    entry = dead_letters(tmp_path)[2]
    assert entry["source"] == "in.jsonl"
    assert entry["data"] == lines[5].decode()
    assert entry["data_encoding"] == "text"
    assert "256" in entry["error_message"]  # the partition key limit is named
    messages = stderr.getvalue().splitlines()
    assert messages[0].startswith("in.jsonl:3: InvalidJson: invalid JSON")
    assert messages[1] == "in.jsonl:5: MissingField: no field 'user'"
    assert report.exit_status() == 1


async def test_failures_from_kinesis_are_dead_lettered_with_their_attempts(tmp_path: Path) -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    # One record is throttled and fails at once (fail_if_throttled); another fails once with
    # InternalFailure and is delivered on its retry.
    fake.script_records(
        [
            ("ProvisionedThroughputExceededException", "Rate exceeded for shard"),
            ("InternalFailure", "Internal service failure."),
        ]
    )
    lines = [b"zero", b"one \xff", b"two", b"three"]
    run, _ = make_run(tmp_path, lines)
    config = Config(region="us-east-1", aggregation_enabled=False, fail_if_throttled=True)
    async with Producer(config, client=fake) as producer:
        await run.run(producer)
    run._dead_letters.close()
    report = run.report
    assert report.delivered == 3
    assert dict(report.failed) == {"ProvisionedThroughputExceededException": 1}
    assert report.retries == 1
    [entry] = dead_letters(tmp_path)
    assert entry["error_code"] == "ProvisionedThroughputExceededException"
    assert entry["error_message"] == "Rate exceeded for shard"
    assert entry["attempts"] == 1
    if entry["data_encoding"] == "text":
        failed_data = entry["data"].encode()
    else:
        failed_data = base64.b64decode(entry["data"])
    delivered = [data for _, data in stored(fake)]
    assert sorted([*delivered, failed_data]) == sorted(lines)
    assert len(entry["partition_key"]) == 32
    assert report.exit_status() == 1


async def test_binary_data_is_dead_lettered_as_base64(tmp_path: Path) -> None:
    fake = FakeKinesis()  # no stream: every record fails with ResourceNotFoundException
    run, _ = make_run(tmp_path, [b"\xff\xfe"])
    async with Producer(Config(region="us-east-1"), client=fake) as producer:
        await run.run(producer)
    run._dead_letters.close()
    [entry] = dead_letters(tmp_path)
    assert (entry["error_code"], entry["data"], entry["data_encoding"]) == (
        "ResourceNotFoundException",
        "//4=",
        "base64",
    )


async def test_a_clean_run_leaves_no_dead_letter_file(tmp_path: Path) -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=4)
    lines = [f"line {i}".encode() for i in range(1000)]
    run, stderr = make_run(tmp_path, lines)
    async with Producer(Config(region="us-east-1"), client=fake) as producer:
        await run.run(producer)
    run._dead_letters.close()
    assert run.report.delivered == 1000
    assert not run.report.failed
    assert sorted(data for _, data in stored(fake)) == sorted(lines)
    assert not (tmp_path / "dl.jsonl").exists()
    assert stderr.getvalue() == ""
    assert run.report.exit_status() == 0


async def test_reading_waits_for_the_producer_to_make_room(tmp_path: Path) -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    fake.latency = 0.5
    run, _ = make_run(tmp_path, [f"{i}".encode() for i in range(50)])
    peak = 0

    async def watch(producer: Producer) -> None:
        nonlocal peak
        while True:
            peak = max(peak, producer.outstanding_records)
            await anyio.sleep(0.01)

    config = Config(region="us-east-1", max_outstanding_records=10)
    async with Producer(config, client=fake) as producer, anyio.create_task_group() as group:
        group.start_soon(watch, producer)
        await run.run(producer)
        group.cancel_scope.cancel()
    assert run.report.delivered == 50
    assert peak == 10  # the whole input never sat in memory


async def test_rate_limit_paces_the_input(tmp_path: Path) -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    run, _ = make_run(tmp_path, [f"{i}".encode() for i in range(30)], rate_limit=10.0)
    async with Producer(Config(region="us-east-1"), client=fake) as producer:
        await run.run(producer)
    assert run.report.delivered == 30
    # 10 at once (the burst), then 20 more at 10 per second.
    assert run.report.seconds == pytest.approx(2.0, abs=0.01)


async def test_progress_is_redrawn_at_most_four_times_a_second(tmp_path: Path) -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    fake.latency = 1.0
    run, stderr = make_run(tmp_path, [b"a", b"b"], progress=True)
    started = anyio.current_time()
    async with Producer(Config(region="us-east-1"), client=fake) as producer:
        await run.run(producer)
    # Every call takes 1 s: the shard map's, then the records' (held for the map).
    seconds = anyio.current_time() - started
    assert seconds >= 2.0
    drawn = stderr.getvalue()
    redraws = [part for part in drawn.split("\r") if part.startswith("put ")]
    assert 1 <= len(redraws) <= seconds / 0.25 + 1
    assert redraws[0] == "put 2 · delivered 0 (0 bytes) · 0/s · pending 2\x1b[K"
    assert drawn.endswith("\r\x1b[K")  # the line is cleared at the end


async def test_only_the_first_bad_lines_are_described(tmp_path: Path) -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    run, stderr = make_run(tmp_path, [b"{"] * 30, LineParser(json_lines=True))
    async with Producer(Config(region="us-east-1"), client=fake) as producer:
        await run.run(producer)
    run._dead_letters.close()
    messages = stderr.getvalue().splitlines()
    assert len(messages) == MAX_REPORTED_BAD_LINES + 1
    assert messages[-1].startswith("(further bad lines are not shown here")
    assert len(dead_letters(tmp_path)) == 30
    assert run.report.failed["InvalidJson"] == 30


async def test_abandoned_records_are_dead_lettered_as_cancelled(tmp_path: Path) -> None:
    """What a second Ctrl-C does: the scope around the producer is cancelled mid-flight."""
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    fake.latency = 10.0  # every request is still in flight when the run is abandoned
    run, _ = make_run(tmp_path, [b"a", b"b", b"c"])
    with anyio.CancelScope() as abandon:
        async with (
            Producer(Config(region="us-east-1"), client=fake) as producer,
            anyio.create_task_group() as group,
        ):
            group.start_soon(run.run, producer)
            await anyio.sleep(1.0)
            abandon.cancel()
    run._dead_letters.close()
    assert dict(run.report.failed) == {"Cancelled": 3}
    entries = dead_letters(tmp_path)
    assert sorted(e["data"] for e in entries) == ["a", "b", "c"]
    assert {(e["error_code"], e["attempts"]) for e in entries} == {("Cancelled", 1)}


@pytest.mark.parametrize(
    ("signum", "name"), [(signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "Ctrl-C")]
)
async def test_a_run_stopped_while_a_line_waits_for_the_rate_limit_accounts_for_it(
    tmp_path: Path, signum: int, name: str
) -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    lines = [f"{i}".encode() for i in range(1, 31)]
    run, stderr = make_run(tmp_path, lines, rate_limit=10.0)

    async def stop_at(instant: float) -> None:
        await anyio.sleep_until(instant)
        run.stop(signum)

    async with (
        Producer(Config(region="us-east-1"), client=fake) as producer,
        anyio.create_task_group() as group,
    ):
        # Lines 1-10 go at once (the burst), 11-15 at 0.1 … 0.5 s; line 16 waits until 0.6 s.
        group.start_soon(stop_at, 0.55)
        await run.run(producer)
    run._dead_letters.close()
    report = run.report
    assert (report.lines, report.delivered, report.failed_total, report.not_put) == (16, 15, 0, 1)
    assert report.lines == report.blank + report.delivered + report.failed_total + report.not_put
    assert (report.resume_source, report.resume_line, report.unread_inputs) == ("in.jsonl", 16, ())
    assert sorted(data for _, data in stored(fake)) == sorted(lines[:15])
    assert dead_letters(tmp_path) == []
    assert stderr.getvalue() == (
        f"aiokpl put: interrupted ({name}); finishing the records already read "
        "(interrupt again to abandon them)\n"
    )
    assert report.format().splitlines()[-3:] == [
        "    not put  1 (stopped while waiting to put it)",
        f"interrupted  stopped by {name} before the end of the input",
        "resume from  line 16 of in.jsonl: tail -n +16 in.jsonl | aiokpl put s (same options)",
    ]


async def test_a_run_stopped_between_reads_resumes_at_the_next_input(tmp_path: Path) -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    report = PutReport(stream="s")

    class StopsWhenRead(io.BytesIO):
        """The second input: the signal arrives as it is first read."""

        def read1(self, size: int | None = -1, /) -> bytes:
            run.stop(signal.SIGINT)
            return super().read1(size)

    run = PutRun(
        stream="s",
        inputs=[
            Input("one", io.BytesIO(b"a\nb")),
            Input("two", StopsWhenRead(b"c\n")),
            Input("3", io.BytesIO()),
        ],
        parser=LineParser(),
        dead_letters=DeadLetters(str(tmp_path / "dl.jsonl"), report),
        report=report,
        stderr=io.StringIO(),
    )
    async with Producer(Config(region="us-east-1"), client=fake) as producer:
        await run.run(producer)
    assert (report.lines, report.delivered, report.not_put) == (2, 2, 0)
    assert (report.resume_source, report.resume_line) == ("two", 1)
    assert report.unread_inputs == ("3",)


# --------------------------------------------------------------------------------------------
# --no-partition-key
# --------------------------------------------------------------------------------------------


def test_no_partition_key_is_parsed_and_excludes_the_key_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = build_parser().parse_args(["put", "s", "--no-partition-key"])
    parser = _parser_from_args(args)
    assert parser.no_partition_key
    assert parser.parse(b"line", 1) == ParsedRecord(None, b"line", None)
    assert not _parser_from_args(build_parser().parse_args(["put", "s"])).no_partition_key
    for other in (["--partition-key-field", "a"], ["--partition-key-template", "{n}"]):
        with pytest.raises(SystemExit) as exited:
            build_parser().parse_args(["put", "s", "--no-partition-key", *other])
        assert exited.value.code == EXIT_USAGE
        assert "not allowed with argument" in capsys.readouterr().err


def test_a_line_parser_without_partition_keys() -> None:
    parser = LineParser(
        json_lines=True,
        no_partition_key=True,
        explicit_hash_key_field=FieldPath.parse("ehk"),
        data_field=FieldPath.parse("v"),
    )
    assert parser.parse(b'{"ehk": 7, "v": "x"}', 1) == ParsedRecord(None, b"x", "7")
    assert parser.parse(b'{"v": "x"}', 2) == BadLine("MissingField", "no field 'ehk'")
    with pytest.raises(ValueError, match="--no-partition-key and a partition key field"):
        LineParser(json_lines=True, no_partition_key=True, partition_key_field=FieldPath.parse("k"))
    with pytest.raises(ValueError, match="--no-partition-key and a partition key field"):
        LineParser(no_partition_key=True, partition_key_template=Template.parse("{n}"))


async def test_no_partition_key_on_a_stream_routed_by_key(tmp_path: Path) -> None:
    # The producer places each record: the key "-" and an explicit hash key of its shard.
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=4)
    lines = [f"line {i}".encode() for i in range(40)]
    run, _ = make_run(tmp_path, lines, LineParser(no_partition_key=True))
    config = Config(region="us-east-1", aggregation_enabled=False)
    async with Producer(config, client=fake) as producer:
        await run.run(producer)
    run._dead_letters.close()
    assert (run.report.delivered, run.report.exit_status()) == (40, 0)
    shards = {shard.shard_id: shard for shard in fake.shards("s")}
    records = fake.stored_records("s")
    assert sorted(record.data for record in records) == sorted(lines)
    for record in records:
        assert record.partition_key == "-"
        assert record.explicit_hash_key is not None
        shard = shards[record.shard_id]
        assert shard.starting_hash_key <= int(record.explicit_hash_key) <= shard.ending_hash_key


async def test_no_partition_key_on_a_stream_that_places_records(tmp_path: Path) -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=2, on_demand=True, record_distribution="AUTO")
    lines = [b"one", b"two", b"three"]
    run, _ = make_run(tmp_path, lines, LineParser(no_partition_key=True))
    async with Producer(Config(region="us-east-1"), client=fake) as producer:
        await run.run(producer)
    run._dead_letters.close()
    assert run.report.delivered == 3
    assert sorted(stored(fake)) == [(None, b"one"), (None, b"three"), (None, b"two")]
    assert all(record.partition_key is None for record in fake.stored_records("s"))


async def test_a_failed_record_without_a_key_is_dead_lettered_with_a_null_key(
    tmp_path: Path,
) -> None:
    fake = FakeKinesis()
    fake.add_stream("s", shard_count=1)
    fake.script_records([("ProvisionedThroughputExceededException", "Rate exceeded for shard")])
    run, _ = make_run(tmp_path, [b"lost", b"kept"], LineParser(no_partition_key=True))
    config = Config(region="us-east-1", aggregation_enabled=False, fail_if_throttled=True)
    async with Producer(config, client=fake) as producer:
        await run.run(producer)
    run._dead_letters.close()
    assert run.report.delivered == 1
    [entry] = dead_letters(tmp_path)
    assert entry["error_code"] == "ProvisionedThroughputExceededException"
    assert (entry["partition_key"], entry["explicit_hash_key"]) == (None, None)
    assert entry["data"] in {"lost", "kept"}  # the one the script failed
    assert [record.data.decode() for record in fake.stored_records("s")] == [
        data for data in ("lost", "kept") if data != entry["data"]
    ]


def _letter(letters: DeadLetters) -> None:
    letters.write(
        source="in.jsonl",
        line=1,
        code="InvalidRecord",
        message="too long",
        attempts=0,
        partition_key="k",
        explicit_hash_key=None,
        data=b"payload",
    )


@pytest.mark.parametrize("mask", [0o000, 0o022])
def test_the_dead_letter_file_is_its_owners_alone_whatever_the_umask(
    tmp_path: Path, mask: int
) -> None:
    """It holds the records' data: created ``0600`` (it was ``0644``, readable by every
    local user, under the usual umask); an existing file is appended to as it is, and a
    dangling link creates nothing at its target."""
    report = PutReport(stream="s")
    old = os.umask(mask)
    try:
        letters = DeadLetters(str(tmp_path / "dl.jsonl"), report)
        _letter(letters)
        letters.close()
        existing = tmp_path / "existing.jsonl"
        existing.write_text("earlier\n")
        existing.chmod(0o640)
        letters = DeadLetters(str(existing), report)
        _letter(letters)
        letters.close()
        (tmp_path / "link.jsonl").symlink_to(tmp_path / "target")
        letters = DeadLetters(str(tmp_path / "link.jsonl"), report)
        _letter(letters)
        letters.close()
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "dl.jsonl").stat().st_mode) == 0o600
    assert len(dead_letters(tmp_path)) == 1
    assert stat.S_IMODE(existing.stat().st_mode) == 0o640
    assert existing.read_text().splitlines()[0] == "earlier"
    assert len(existing.read_text().splitlines()) == 2
    assert not (tmp_path / "target").exists()
    assert report.dead_letter_error is not None
    assert report.dead_letters == 2
