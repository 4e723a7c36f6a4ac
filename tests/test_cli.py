"""The command line without a server: option parsing, lines, fields, templates, the report."""

from __future__ import annotations

import argparse
import base64
import json
import sys
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiokpl._cli import SUBCOMMANDS, build_parser, main
from aiokpl._cli.lines import (
    BadLine,
    FieldError,
    FieldPath,
    Line,
    LineParser,
    LineSplitter,
    ParsedRecord,
    Template,
    random_partition_key,
)
from aiokpl._cli.local import (
    DEFAULT_PORT,
    fault_rate,
    limits_and_faults,
    seconds,
    stream_spec,
    usage_lines,
)
from aiokpl._cli.options import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    backend_problem,
    config_from_args,
    made_of,
    usage_message,
)
from aiokpl._cli.put import default_dead_letter
from aiokpl._cli.put_report import DeadLetters, PutReport, encode_data, progress_line
from aiokpl._cli.reader import StartPosition
from aiokpl._cli.tail import format_record, parse_timestamp
from aiokpl._core.errors import ConfigError
from aiokpl.aggregation import DeaggregatedRecord
from aiokpl.testing._servers import ServerFaults, ShardLimits
from aiokpl.tracing import context_tags

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup, ExceptionGroup

# --------------------------------------------------------------------------------------------
# Global options and the table of subcommands
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["--region", "eu-west-1", "--endpoint-url", "http://h:1", "--profile", "p", "put", "s"],
        ["put", "s", "--region", "eu-west-1", "--endpoint-url", "http://h:1", "--profile", "p"],
        ["--region", "eu-west-1", "put", "--endpoint-url", "http://h:1", "s", "--profile", "p"],
    ],
)
def test_global_options_go_before_or_after_the_subcommand(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert (args.region, args.endpoint_url, args.profile) == ("eu-west-1", "http://h:1", "p")
    assert (args.verify_ssl, args.backend, args.stream, args.files) == (True, "asyncio", "s", [])
    config = config_from_args(args)
    assert (config.region, config.endpoint_url, config.profile_name, config.verify_ssl) == (
        "eu-west-1",
        "http://h:1",
        "p",
        True,
    )


def test_an_option_after_the_subcommand_wins_and_defaults_do_not_overwrite() -> None:
    parser = build_parser()
    args = parser.parse_args(["--region", "a", "--backend", "trio", "tail", "s", "--region", "b"])
    assert (args.region, args.backend) == ("b", "trio")
    args = parser.parse_args(["--backend", "trio", "--no-verify-ssl", "tail", "s"])
    assert (args.backend, args.verify_ssl) == ("trio", False)
    args = parser.parse_args(["--backend", "trio", "demo", "--count", "5"])
    assert (args.backend, args.count) == ("trio", 5)


def test_defaults_without_options() -> None:
    args = build_parser().parse_args(["tail", "s"])
    assert (args.region, args.endpoint_url, args.profile, args.backend) == (
        None,
        None,
        None,
        "asyncio",
    )
    assert (args.start, args.at_timestamp, args.count, args.follow, args.data) == (
        None,
        None,
        None,
        True,
        "auto",
    )
    assert args.poll_interval == 1.0
    args = build_parser().parse_args(["put", "s", "a.txt", "-"])
    assert args.files == ["a.txt", "-"]
    assert (args.json, args.partition_key_field, args.partition_key_template) == (False, None, None)
    assert (args.no_aggregation, args.max_buffered_ms, args.record_ttl_ms) == (False, 100, 30_000)
    assert (args.rate_limit, args.dead_letter, args.report_json) == (None, None, None)


def test_subcommands_are_a_table_of_add_parser_functions() -> None:
    def add_echo(
        commands: argparse._SubParsersAction[argparse.ArgumentParser],
        parents: list[argparse.ArgumentParser],
    ) -> None:
        echo = commands.add_parser("echo", parents=parents)
        echo.add_argument("word")
        echo.set_defaults(handler=lambda args: len(args.word) + (args.region == "x"))

    SUBCOMMANDS.append(add_echo)
    try:
        assert main(["echo", "four", "--region", "x"]) == 5
        assert main(["--region", "y", "echo", "four"]) == 4
    finally:
        SUBCOMMANDS.remove(add_echo)


@pytest.mark.parametrize(
    "argv",
    [
        ["tail", "s", "--latest", "--trim-horizon"],
        ["tail", "s", "--latest", "--at-timestamp", "0"],
        ["tail", "s", "--count", "0"],
        ["tail", "s", "--poll-interval", "0"],
        ["tail", "s", "--poll-interval", "inf"],
        ["tail", "s", "--data", "hex"],
        ["tail", "s", "--at-timestamp", "yesterday"],
        ["put", "s", "--partition-key-field", "a", "--partition-key-template", "b"],
        ["put", "s", "--partition-key-template", "{a"],
        ["put", "s", "--partition-key-field", "a..b"],
        ["put", "s", "--rate-limit", "-1"],
        ["put", "s", "--rate-limit", "fast"],
        ["put", "s", "--max-buffered-ms", "x"],
        ["--backend", "curio", "put", "s"],
        ["put"],
        [],
    ],
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == EXIT_USAGE
    assert "usage: aiokpl" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["put", "s", "--partition-key-field", "user"], "--partition-key-field read JSON"),
        (["put", "s", "--data-field", "d"], "--data-field read JSON fields: add --json"),
        (["put", "s", "--partition-key-template", "{user}-{n}"], "template with fields"),
        (["put", "s", "--json", "/no/such/file"], "cannot read /no/such/file"),
        (["put", "s", "--max-buffered-ms", "999999999"], "record_max_buffered_time_ms"),
        (["--endpoint-url", "http://127.0.0.1:9", "demo"], "starts its own local Kinesis"),
    ],
)
def test_semantic_usage_errors_exit_2_before_any_request(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == EXIT_USAGE
    assert message in capsys.readouterr().err


def test_ca_bundle_goes_to_the_config_and_must_exist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_text("")
    args = build_parser().parse_args(["put", "s", "--ca-bundle", str(bundle)])
    assert config_from_args(args).ca_bundle == str(bundle)
    with pytest.raises(SystemExit) as exited:
        main(["--ca-bundle", str(tmp_path / "missing.pem"), "tail", "s"])
    assert exited.value.code == EXIT_USAGE
    assert "--ca-bundle: no such file" in capsys.readouterr().err
    assert main(["--no-verify-ssl", "--ca-bundle", str(bundle), "tail", "s"]) == EXIT_USAGE
    assert "--ca-bundle is given with --no-verify-ssl" in capsys.readouterr().err
    assert main(["--ca-bundle", str(bundle), "demo"]) == EXIT_USAGE
    assert "--ca-bundle do not apply" in capsys.readouterr().err


def test_the_default_dead_letter_file_is_named_after_the_streams_name() -> None:
    assert default_dead_letter("events") == "events.dead-letter.jsonl"
    arn = "arn:aws:kinesis:eu-west-1:123456789012:stream/events"
    assert default_dead_letter(arn) == "events.dead-letter.jsonl"


def test_no_verify_ssl_is_warned_about(capsys: pytest.CaptureFixture[str]) -> None:
    # Each command says it before anything else (here, before it finds no region).
    for command in (["put", "s", "/dev/null"], ["tail", "s"]):
        assert main(["--no-verify-ssl", *command]) == EXIT_USAGE
        err = capsys.readouterr().err
        assert err.startswith(
            f"aiokpl {command[0]}: warning: --no-verify-ssl: the endpoint's TLS certificate is "
            "not verified"
        ), err
        assert "no AWS region" in err
    assert main(["tail", "s"]) == EXIT_USAGE
    assert "warning" not in capsys.readouterr().err


def test_without_region_put_and_tail_say_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["put", "s", "/dev/null"]) == EXIT_USAGE
    assert "no AWS region" in capsys.readouterr().err
    assert main(["tail", "s"]) == EXIT_USAGE
    assert "no AWS region" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# Lines
# --------------------------------------------------------------------------------------------


def test_splitter_numbers_lines_and_keeps_a_carriage_return() -> None:
    splitter = LineSplitter()
    assert splitter.feed(b"a\r\nbb\n\nc") == [
        Line(1, b"a\r", 2),
        Line(2, b"bb", 2),
        Line(3, b"", 0),
    ]
    assert splitter.feed(b"cc") == []
    assert splitter.end() == [Line(4, b"ccc", 3)]
    assert splitter.end() == []


def test_splitter_drops_long_lines_as_they_come() -> None:
    splitter = LineSplitter(max_size=4)
    assert splitter.feed(b"1234\n12") == [Line(1, b"1234", 4)]
    assert splitter.feed(b"345") == []
    assert splitter._pending == bytearray()  # nothing of the long line is kept
    assert splitter.feed(b"67\nok\n") == [Line(2, None, 7), Line(3, b"ok", 2)]
    assert splitter.feed(b"toolong") == []
    assert splitter.end() == [Line(4, None, 7)]


@given(
    lines=st.lists(st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"")), max_size=12),
    cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=8),
    final_newline=st.booleans(),
)
def test_splitter_gives_the_same_lines_however_the_input_is_cut(
    lines: list[bytes], cuts: list[int], final_newline: bool
) -> None:
    text = b"\n".join(lines) + (b"\n" if final_newline and lines else b"")
    splitter = LineSplitter(max_size=8)
    found: list[Line] = []
    start = 0
    for cut in [*sorted(cuts), len(text)]:
        found += splitter.feed(text[start : max(start, cut)])
        start = max(start, cut)
    found += splitter.end()
    expected_lines = lines if (final_newline or not lines or lines[-1]) else lines[:-1]
    expected = [
        Line(i, line if len(line) <= 8 else None, len(line))
        for i, line in enumerate(expected_lines, 1)
    ]
    assert found == expected


# --------------------------------------------------------------------------------------------
# Field paths and templates
# --------------------------------------------------------------------------------------------


def test_field_paths() -> None:
    document = {"user": {"id": 42, "name": "ana", "tags": ["a", "b"]}, "n": True, "x": None}
    assert FieldPath.parse("user.id") == FieldPath.parse(".user.id")
    assert FieldPath.parse(".user.id").segments == ("user", "id")
    assert FieldPath.parse("user.id").text_of(document) == "42"
    assert FieldPath.parse("user.name").text_of(document) == "ana"
    assert FieldPath.parse("user.tags.1").text_of(document) == "b"
    assert FieldPath.parse("n").text_of(document) == "true"
    assert FieldPath.parse("user.tags").lookup(document) == ["a", "b"]
    for path, code, message in [
        ("user.email", "MissingField", "no field 'user.email'"),
        ("user.tags.2", "MissingField", "no field 'user.tags.2'"),
        ("user.id.x", "MissingField", "no field 'user.id.x'"),
        ("x", "InvalidField", "field 'x' is null, not a string, number or boolean"),
        ("user", "InvalidField", "field 'user' is an object"),
        ("user.tags", "InvalidField", "field 'user.tags' is an array"),
    ]:
        with pytest.raises(FieldError) as raised:
            FieldPath.parse(path).text_of(document)
        assert (raised.value.code, message in str(raised.value)) == (code, True)
    with pytest.raises(FieldError, match="no field 'a'"):
        FieldPath.parse("a").text_of([1])
    for bad in ["", ".", "a..b", "a.", ".."]:
        with pytest.raises(ValueError, match="invalid field path"):
            FieldPath.parse(bad)


def test_templates() -> None:
    template = Template.parse("{user.id}-{n}")
    assert template.render({"user": {"id": "u7"}}, 12) == "u7-12"
    assert template.fields == (FieldPath.parse("user.id"),)
    assert Template.parse("k{{{n}}}").render(None, 3) == "k{3}"
    assert Template.parse("{.n}/{n}").render({"n": 1.5}, 2) == "1.5/2"
    assert Template.parse("plain").render(None, 1) == "plain"
    assert Template.parse("").parts == ()
    assert Template.parse("{n}").fields == ()
    with pytest.raises(FieldError, match=r"no field 'user\.id'"):
        template.render({"user": {}}, 1)
    for bad, message in [
        ("{user", "'{' at 0 is never closed"),
        ("a}", "'}' at 1 closes nothing"),
        ("x{}", "placeholder at 1: invalid field path ''"),
        ("{a..b}", "placeholder at 0"),
    ]:
        with pytest.raises(ValueError, match=message):
            Template.parse(bad)


# --------------------------------------------------------------------------------------------
# Line parsing
# --------------------------------------------------------------------------------------------


def test_plain_lines_get_random_keys_and_their_bytes_as_data() -> None:
    parser = LineParser()
    first = parser.parse(b"hello \xff", 1)
    second = parser.parse(b"hello \xff", 2)
    assert isinstance(first, ParsedRecord)
    assert isinstance(second, ParsedRecord)
    assert first.data == second.data == b"hello \xff"
    assert first.explicit_hash_key is None
    assert first.partition_key != second.partition_key
    assert first.partition_key is not None
    assert len(first.partition_key) == 32
    assert int(first.partition_key, 16) >= 0


def test_random_keys_are_32_hex_digits() -> None:
    import random

    keys = {random_partition_key(random.Random(seed)) for seed in range(50)}
    assert len(keys) == 50
    assert all(len(key) == 32 and int(key, 16) < 2**128 for key in keys)


def test_plain_lines_with_a_template() -> None:
    parser = LineParser(partition_key_template=Template.parse("line-{n}"))
    assert parser.parse(b"x", 7) == ParsedRecord("line-7", b"x", None)


def test_json_lines() -> None:
    parser = LineParser(
        json_lines=True,
        partition_key_field=FieldPath.parse("user.id"),
        explicit_hash_key_field=FieldPath.parse("ehk"),
        data_field=FieldPath.parse("payload"),
    )
    assert parser.parse(b'{"user": {"id": 3}, "ehk": "12", "payload": "h\xc3\xa9"}', 1) == (
        ParsedRecord("3", "hé".encode(), "12")
    )
    assert parser.parse(
        b'{"user": {"id": "a"}, "ehk": 5, "payload": {"b": [1, "\xc3\xa9"]}}', 1
    ) == (ParsedRecord("a", '{"b":[1,"é"]}'.encode(), "5"))
    bad = parser.parse(b'{"user": {"id": 3}, "payload": 1}', 4)
    assert bad == BadLine("MissingField", "no field 'ehk'")
    bad = parser.parse(b'{"user": {"id": null}}', 4)
    assert isinstance(bad, BadLine)
    assert bad.code == "InvalidField"
    bad = parser.parse(b'{"user": ', 4)
    assert isinstance(bad, BadLine)
    assert bad.code == "InvalidJson"
    assert bad.message.startswith("invalid JSON: ")
    bad = parser.parse(b'"\xff"', 4)
    assert isinstance(bad, BadLine)
    assert bad.code == "InvalidJson"


def test_json_lines_keep_the_line_as_data_by_default() -> None:
    parser = LineParser(json_lines=True, partition_key_template=Template.parse("{k}-{n}"))
    line = b'{"k": "a",  "v": 1}'
    assert parser.parse(line, 9) == ParsedRecord("a-9", line, None)


def test_line_parser_refuses_fields_without_json() -> None:
    with pytest.raises(ValueError, match="--explicit-hash-key-field read JSON fields"):
        LineParser(explicit_hash_key_field=FieldPath.parse("a"))
    with pytest.raises(ValueError, match="not both"):
        LineParser(
            json_lines=True,
            partition_key_field=FieldPath.parse("a"),
            partition_key_template=Template.parse("b"),
        )


# --------------------------------------------------------------------------------------------
# Report, progress, dead letters
# --------------------------------------------------------------------------------------------


def test_report_formatting() -> None:
    report = PutReport(
        stream="events",
        lines=1_500,
        blank=2,
        delivered=1_495,
        delivered_bytes=3 * 1024 * 1024 + 512 * 1024,
        failed=Counter({"InvalidJson": 2, "ProvisionedThroughputExceededException": 1}),
        retries=7,
        seconds=2.5,
        dead_letters=3,
        dead_letter_path="events.dead-letter.jsonl",
    )
    assert report.format().splitlines() == [
        "      stream  events",
        "  lines read  1,500 (2 blank, skipped)",
        "   delivered  1,495 records, 3.5 MiB",
        "        rate  598 records/s over 2.50 s",
        "     retries  7",
        "      failed  3 (InvalidJson 2, ProvisionedThroughputExceededException 1)",
        "dead letters  3 in events.dead-letter.jsonl",
    ]
    assert report.exit_status() == EXIT_FAILED
    assert report.as_json() == {
        "stream": "events",
        "lines": 1500,
        "blank_lines": 2,
        "delivered": 1495,
        "delivered_bytes": 3670016,
        "failed": 3,
        "failed_by_code": {"InvalidJson": 2, "ProvisionedThroughputExceededException": 1},
        "retries": 7,
        "seconds": 2.5,
        "records_per_second": 598.0,
        "dead_letters": 3,
        "dead_letter_file": "events.dead-letter.jsonl",
        "dead_letter_error": None,
        "interrupted": False,
        "stopped_by": None,
        "not_put": 0,
        "resume_source": None,
        "resume_line": None,
        "exit_status": 1,
    }


def test_report_of_a_clean_run_and_of_an_interrupted_one() -> None:
    report = PutReport(stream="s", lines=2, delivered=2, delivered_bytes=10)
    assert report.format().splitlines() == [
        "    stream  s",
        "lines read  2",
        " delivered  2 records, 10 bytes",
        "      rate  0 records/s over 0.00 s",
        "   retries  0",
        "    failed  0",
    ]
    assert report.exit_status() == EXIT_OK
    report.delivered_bytes = 5 * 1024**3
    assert "5.0 GiB" in report.format()
    report.delivered_bytes = 2048
    assert "2.0 KiB" in report.format()
    report.interrupted = True
    assert report.exit_status() == EXIT_INTERRUPTED
    assert report.format().splitlines()[-1] == (
        "interrupted  stopped by Ctrl-C; all input was read"
    )
    report.interrupted = False
    report.dead_letter_error = "x: disk full"
    assert report.exit_status() == EXIT_FAILED
    assert "NOT ALL WRITTEN: x: disk full" in report.format()


def test_progress_line() -> None:
    report = PutReport(stream="s", delivered=900, delivered_bytes=4096)
    assert progress_line(report, 1000, 2.0) == (
        "put 1,000 · delivered 900 (4.0 KiB) · 450/s · pending 100"
    )
    report.failed["Expired"] = 10
    assert progress_line(report, 1000, 0.0) == (
        "put 1,000 · delivered 900 (4.0 KiB) · 0/s · pending 90 · failed 10"
    )


def test_data_is_text_when_it_can_be() -> None:
    assert encode_data("é".encode()) == ("é", "text")
    assert encode_data(b"\xff\x00") == (base64.b64encode(b"\xff\x00").decode(), "base64")


def test_dead_letters_file_is_created_on_the_first_entry(tmp_path: Path) -> None:
    path = tmp_path / "dl.jsonl"
    report = PutReport(stream="s")
    dead_letters = DeadLetters(str(path), report)
    dead_letters.close()
    assert not path.exists()
    assert (report.dead_letters, report.dead_letter_path) == (0, None)
    dead_letters.write(
        source="in.txt",
        line=3,
        code="Expired",
        message="record_ttl_ms elapsed",
        attempts=4,
        partition_key="k",
        explicit_hash_key="7",
        data=b"\xff\x00",
        outcome_unknown=True,
    )
    dead_letters.write(
        source="-",
        line=5,
        code="LineTooLong",
        message="long",
        attempts=0,
        partition_key=None,
        explicit_hash_key=None,
        data=None,
    )
    dead_letters.close()
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    assert entries == [
        {
            "source": "in.txt",
            "line": 3,
            "error_code": "Expired",
            "error_message": "record_ttl_ms elapsed",
            "attempts": 4,
            "outcome_unknown": True,
            "partition_key": "k",
            "explicit_hash_key": "7",
            "data": "/wA=",
            "data_encoding": "base64",
        },
        {
            "source": "-",
            "line": 5,
            "error_code": "LineTooLong",
            "error_message": "long",
            "attempts": 0,
            "outcome_unknown": False,
            "partition_key": None,
            "explicit_hash_key": None,
            "data": None,
            "data_encoding": None,
        },
    ]
    assert (report.dead_letters, report.dead_letter_path) == (2, str(path))


def test_a_dead_letter_file_that_cannot_be_written_is_reported(tmp_path: Path) -> None:
    report = PutReport(stream="s")
    dead_letters = DeadLetters(str(tmp_path / "missing" / "dl.jsonl"), report)
    for line in (1, 2):
        dead_letters.write(
            source="-",
            line=line,
            code="InvalidJson",
            message="m",
            attempts=0,
            partition_key=None,
            explicit_hash_key=None,
            data=b"x",
        )
    dead_letters.close()
    assert report.dead_letters == 0
    assert report.dead_letter_error is not None
    assert "No such file" in report.dead_letter_error
    assert report.exit_status() == EXIT_FAILED


# --------------------------------------------------------------------------------------------
# tail: timestamps and output
# --------------------------------------------------------------------------------------------


def test_timestamps() -> None:
    utc = timezone.utc
    assert parse_timestamp("1700000000") == datetime(2023, 11, 14, 22, 13, 20, tzinfo=utc)
    assert parse_timestamp("1700000000.5").microsecond == 500_000
    assert parse_timestamp("2024-05-01T12:00:00Z") == datetime(2024, 5, 1, 12, tzinfo=utc)
    assert parse_timestamp("2024-05-01T12:00:00") == datetime(2024, 5, 1, 12, tzinfo=utc)
    assert parse_timestamp("2024-05-01T14:00:00+02:00") == datetime(2024, 5, 1, 12, tzinfo=utc)
    assert parse_timestamp("2024-05-01") == datetime(2024, 5, 1, tzinfo=utc)
    for bad in ["", "soon", "2024-13-01", "1e400"]:
        with pytest.raises(argparse.ArgumentTypeError, match="ISO 8601"):
            parse_timestamp(bad)


def test_start_positions() -> None:
    moment = datetime(2024, 5, 1, tzinfo=timezone.utc)
    assert StartPosition("AT_TIMESTAMP", moment).timestamp == moment
    with pytest.raises(ValueError, match="AT_TIMESTAMP"):
        StartPosition("AT_TIMESTAMP")
    with pytest.raises(ValueError, match="AT_TIMESTAMP"):
        StartPosition("LATEST", moment)


def _record(data: bytes, timestamp: object) -> DeaggregatedRecord:
    return DeaggregatedRecord("pk", data, "123", "4959", 2, True, timestamp)


def test_record_lines() -> None:
    moment = datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)
    line = json.loads(format_record("s", "shardId-1", _record("é".encode(), moment), "auto"))
    assert line == {
        "stream": "s",
        "shard_id": "shardId-1",
        "partition_key": "pk",
        "explicit_hash_key": "123",
        "sequence_number": "4959",
        "sub_sequence_number": 2,
        "aggregated": True,
        "approximate_arrival_timestamp": "2024-05-01T12:00:00.123Z",
        "data": "é",
        "data_encoding": "text",
    }
    binary = _record(b"\xff", 1714564800.5)
    auto = json.loads(format_record("s", "x", binary, "auto"))
    assert (auto["data"], auto["data_encoding"]) == ("/w==", "base64")
    assert auto["approximate_arrival_timestamp"] == "2024-05-01T12:00:00.500Z"
    text = json.loads(format_record("s", "x", binary, "text"))
    assert (text["data"], text["data_encoding"]) == ("\ufffd", "text")
    forced = json.loads(format_record("s", "x", _record(b"ok", None), "base64"))
    assert (forced["data"], forced["data_encoding"]) == ("b2s=", "base64")
    assert forced["approximate_arrival_timestamp"] is None
    naive = json.loads(format_record("s", "x", _record(b"", datetime(2024, 1, 1)), "auto"))
    assert naive["approximate_arrival_timestamp"] == "2024-01-01T00:00:00.000Z"


def test_record_lines_never_carry_what_a_terminal_obeys() -> None:
    # ESC and BEL (escaped by JSON already), CSI and OSC in their 8-bit forms (C1), DEL, a
    # right-to-left override and an isolate, a line separator.
    hostile = "\x1b[2J\x9b31m\x9d0;pwned\x07\x7f\u202egnp.exe\u2066x\u2069\u2028"
    record = DeaggregatedRecord(hostile, hostile.encode(), None, "4959", 0, False, None)
    line = format_record("s", "x", record, "auto")
    assert line.isprintable(), ascii(line)
    assert "\\u009b31m\\u009d0;pwned\\u0007\\u007f\\u202egnp.exe" in line
    parsed = json.loads(line)  # the same values, once read
    assert (parsed["partition_key"], parsed["data"]) == (hostile, hostile)
    # Text in any script is left as it is.
    readable = format_record("s", "x", _record("日本語, é, ✓".encode(), None), "auto")
    assert '"data": "日本語, é, ✓"' in readable


def test_a_record_lines_trace_context_never_carries_what_a_terminal_obeys() -> None:
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    hostile = "\x1b[2J\x9b31m\u202e"  # a tracestate is whatever the record carries
    tags = context_tags(traceparent, hostile)
    record = DeaggregatedRecord("pk", b"x", None, "4959", 0, True, None, tags)
    line = format_record("s", "x", record, "auto")
    assert line.isprintable(), ascii(line)
    assert json.loads(line)["trace"] == {"traceparent": traceparent, "tracestate": hostile}


def test_help_lists_the_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert all(
        name in out for name in ("demo", "put", "tail", "coordinate", "--endpoint-url", "--backend")
    )
    with pytest.raises(SystemExit):
        main(["put", "--help"])
    out = capsys.readouterr().out
    assert "--partition-key-template" in out
    assert "130 when interrupted" in out


def test_interrupts_are_recognised_inside_exception_groups() -> None:
    interrupt = KeyboardInterrupt()
    assert made_of(interrupt, KeyboardInterrupt)
    assert made_of(BaseExceptionGroup("g", [interrupt]), KeyboardInterrupt)
    nested = BaseExceptionGroup("g", [BaseExceptionGroup("h", [interrupt, KeyboardInterrupt()])])
    assert made_of(nested, KeyboardInterrupt)
    mixed = BaseExceptionGroup("g", [interrupt, ValueError()])
    assert not made_of(mixed, KeyboardInterrupt)
    assert not made_of(ValueError(), KeyboardInterrupt)
    assert made_of(ExceptionGroup("g", [BrokenPipeError()]), BrokenPipeError)


# --------------------------------------------------------------------------------------------
# Usage errors in the command line's words
# --------------------------------------------------------------------------------------------


def test_put_without_a_stream_asks_only_for_the_stream(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["put"])
    assert exited.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == "aiokpl put: error: the following arguments are required: STREAM"
    assert "STREAM [FILE ...]" in err


@pytest.mark.parametrize(
    "command", [["put", "s", "/dev/null"], ["tail", "s"], ["coordinate", "--dynamodb", "table"]]
)
def test_without_region_the_message_names_the_option_not_config(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(command) == EXIT_USAGE
    err = capsys.readouterr().err
    assert f"aiokpl {command[0]}: no AWS region: pass --region (e.g. --region us-east-1)" in err
    assert "AWS_DEFAULT_REGION" in err
    assert "Config(" not in err


@pytest.mark.parametrize("missing", ["trio", "httpx_both"])
@pytest.mark.parametrize(
    "argv",
    [
        ["--backend", "trio", "tail", "s"],
        ["put", "s", "--backend", "trio"],
        ["demo", "--backend", "trio"],
    ],
)
def test_backend_trio_without_trio_is_a_usage_error_naming_the_extra(
    argv: list[str],
    missing: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A None entry in sys.modules makes the module unimportable (find_spec answers None).
    for name in ["httpx2", "httpx"] if missing == "httpx_both" else ["trio"]:
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.splitlines()[-1].endswith(
        "error: --backend trio needs the trio extra: pip install 'aiokpl[trio]'"
    )


def test_backend_problem_is_none_when_the_backend_can_run() -> None:
    assert backend_problem("asyncio") is None
    assert backend_problem("trio") is None  # the development environment has the trio extra


def test_usage_message_leaves_other_config_errors_alone() -> None:
    assert usage_message(ConfigError("record_ttl_ms must be ≥ 100")) == (
        "record_ttl_ms must be ≥ 100"
    )


# --------------------------------------------------------------------------------------------
# local
# --------------------------------------------------------------------------------------------


def test_local_options() -> None:
    args = build_parser().parse_args(["local"])
    assert (args.port, args.host, args.streams, args.region) == (
        DEFAULT_PORT,
        "127.0.0.1",
        None,
        None,
    )
    args = build_parser().parse_args(
        ["local", "--stream", "a", "--stream", "b.c-d_e:4", "--port", "0", "--region", "eu-west-1"]
    )
    assert (args.streams, args.port, args.region) == ([("a", 1), ("b.c-d_e", 4)], 0, "eu-west-1")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "invalid stream name ''"),
        ("a b", "invalid stream name 'a b'"),
        ("x" * 129, "invalid stream name"),
        ("a:", "not a shard count: ''"),
        ("a:two", "not a shard count: 'two'"),
        ("a:0", "at least 1 shard, got 0"),
    ],
)
def test_local_stream_specs_are_checked(text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        stream_spec(text)


def test_local_without_moto_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "moto", None)
    assert main(["local"]) == EXIT_USAGE
    assert capsys.readouterr().err == (
        "aiokpl local: moto's server is not installed: pip install 'aiokpl[local]'\n"
    )
    assert main(["demo"]) == EXIT_USAGE
    assert capsys.readouterr().err == (
        "aiokpl demo: moto's server is not installed: pip install 'aiokpl[local]'\n"
    )


def test_local_refuses_a_stream_named_twice(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["local", "--stream", "a:2", "--stream", "a"]) == EXIT_USAGE
    assert "a stream is named twice" in capsys.readouterr().err


def test_local_instructions_name_the_endpoint_region_and_dummy_credentials() -> None:
    lines = usage_lines("http://127.0.0.1:4567", "eu-west-1", [("events", 2)])
    assert lines[0] == "local Kinesis (moto) at http://127.0.0.1:4567, region eu-west-1"
    assert lines[1] == "streams: events (2 shards)"
    text = "\n".join(lines)
    # The variable Getting started tells a reader to set: a client built without an endpoint
    # (the producer's own, boto3's, `aiokpl put`) then finds the server.
    assert "  export AWS_ENDPOINT_URL_KINESIS=http://127.0.0.1:4567" in lines
    assert (
        "export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing "
        "AWS_DEFAULT_REGION=eu-west-1"
    ) in text
    assert "aiokpl --endpoint-url http://127.0.0.1:4567 put events FILE" in text
    assert "aws --endpoint-url http://127.0.0.1:4567 kinesis list-streams" in text
    assert 'Config(endpoint_url="http://127.0.0.1:4567", region="eu-west-1",' in text
    assert "STREAM FILE" in "\n".join(usage_lines("http://h:1", "us-east-1", []))


def test_local_throttles_only_when_asked_and_a_rate_implies_it() -> None:
    def parsed(*args: str) -> tuple[ShardLimits | None, ServerFaults]:
        return limits_and_faults(build_parser().parse_args(["local", *args]))

    assert parsed() == (None, ServerFaults())
    assert parsed("--throttle") == (ShardLimits(), ServerFaults())
    assert parsed("--shard-records-per-sec", "250")[0] == ShardLimits(records_per_second=250)
    assert parsed("--shard-bytes-per-sec", "1000")[0] == ShardLimits(bytes_per_second=1000)
    assert parsed("--burst-seconds", "2")[0] == ShardLimits(burst_seconds=2)
    _, faults = parsed(
        "--fault-rate", "0.05", "--fail-stream", "a", "--hang-stream", "b", "--hang-stream", "c",
        "--hang-seconds", "0", "--control-latency", "0.3",
    )  # fmt: skip
    assert faults == ServerFaults(
        fault_rate=0.05,
        fail_streams=("a",),
        hang_streams=("b", "c"),
        hang_seconds=0.0,
        control_latency=0.3,
    )


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (fault_rate, "x", "not a number: 'x'"),
        (fault_rate, "1.5", "must be a fraction from 0 to 1, got 1.5"),
        (fault_rate, "-0.1", "must be a fraction from 0 to 1"),
        (seconds, "soon", "not a number: 'soon'"),
        (seconds, "-1", "must be a finite number of seconds, 0 or more, got -1"),
        (seconds, "inf", "must be a finite number of seconds"),
    ],
)
def test_local_fault_options_are_checked(
    parse: Callable[[str], float], text: str, message: str
) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        parse(text)
    assert fault_rate("0") == 0.0
    assert seconds("2.5") == 2.5


def test_local_instructions_say_what_a_throttling_server_enforces() -> None:
    plain = "\n".join(usage_lines("http://127.0.0.1:1", "us-east-1", [("e", 1)]))
    assert "throttling" not in plain
    assert "/_local/throughput" not in plain
    lines = usage_lines(
        "http://127.0.0.1:1",
        "us-east-1",
        [("e", 1)],
        ShardLimits(records_per_second=250),
        ServerFaults(fault_rate=0.1),
    )
    assert lines[2:6] == [
        "throttling: 250 records/s and 1,048,576 bytes/s (1 MiB/s) per shard, 1 s of burst",
        "  over the limit, PutRecords answers ProvisionedThroughputExceededException per record "
        "(HTTP 200, FailedRecordCount > 0), PutRecord the same as an HTTP 400 error",
        "fault: 10% of requests fail at random (InternalFailure HTTP 500, ServiceUnavailable "
        "HTTP 503)",
        "records stored, throttled and failed per second: "
        "curl http://127.0.0.1:1/_local/throughput",
    ]
    faults_only = usage_lines(
        "http://h:1", "us-east-1", [], None, ServerFaults(fail_streams=("a",))
    )
    assert faults_only[2:4] == [
        "fault: stream a: every request fails (InternalFailure)",
        "records stored, throttled and failed per second: curl http://h:1/_local/throughput",
    ]


def test_report_of_a_run_stopped_while_a_line_waited() -> None:
    report = PutReport(
        stream="my events",
        lines=16,
        delivered=14,
        failed=Counter({"InvalidJson": 1}),
        interrupted=True,
        stopped_by="SIGTERM",
        not_put=1,
        resume_source="in.jsonl",
        resume_line=16,
        unread_inputs=("b.jsonl", "c d.jsonl"),
    )
    assert report.format().splitlines()[-4:] == [
        "     failed  1 (InvalidJson 1)",
        "    not put  1 (stopped while waiting to put it)",
        "interrupted  stopped by SIGTERM before the end of the input",
        "resume from  line 16 of in.jsonl: tail -n +16 in.jsonl | aiokpl put 'my events' "
        "(same options) - b.jsonl 'c d.jsonl'",
    ]
    document = report.as_json()
    assert (document["stopped_by"], document["not_put"]) == ("SIGTERM", 1)
    assert (document["resume_source"], document["resume_line"]) == ("in.jsonl", 16)
    assert report.exit_status() == EXIT_INTERRUPTED
    report.resume_source, report.unread_inputs = "-", ()
    assert report.resume_hint() == (
        "line 16 of standard input: tail -n +16 INPUT | aiokpl put 'my events' (same options)"
    )
