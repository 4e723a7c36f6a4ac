"""The command line's first-contact errors, through the installed ``aiokpl`` console script.

Each test runs the script as a user does (a new process, its stdout and stderr, its exit
status): a mistyped endpoint or profile is one line and exit status 2 (a usage error, not 1,
which ``put`` keeps for "some records failed"), ``--version`` prints the version, a subcommand's
unknown option shows that subcommand's usage, an endpoint that answers with a web page is
summarised in one line. (That tracebacks name public classes by their public module is in
``tests/test_public_names_in_errors.py``.)
"""

from __future__ import annotations

import argparse
import asyncio
import io
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import aiokpl
from aiokpl._cli import main
from aiokpl._cli.local import _request_log
from aiokpl._cli.options import (
    EXIT_USAGE,
    MAX_SERVICE_MESSAGE,
    endpoint_url,
    interrupted,
    service_message,
    setup_problem,
)

if sys.version_info < (3, 11):
    from exceptiongroup import ExceptionGroup

SCRIPT = Path(sys.executable).with_name("aiokpl")
"""The console script ``pip install`` put next to this interpreter (``[project.scripts]``)."""

COMMANDS_WITH_AWS_OPTIONS = [
    ["put", "events", "/dev/null"],
    ["tail", "events"],
    ["coordinate", "--s3", "bucket/prefix"],
]


def aiokpl_command(
    *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the console script with ``args`` (stdin empty) and dummy credentials."""
    assert SCRIPT.exists(), f"{SCRIPT} is missing: install the project (pip install -e .)"
    return subprocess.run(
        [str(SCRIPT), *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
        env={
            **os.environ,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            **(env or {}),
        },
    )


def one_line_error(finished: subprocess.CompletedProcess[str]) -> str:
    """The single line a failed command printed: no traceback, exit status 2, nothing on stdout."""
    assert finished.returncode == 2, finished.stderr
    assert "Traceback" not in finished.stderr
    assert finished.stdout == ""
    lines = finished.stderr.splitlines()
    assert len(lines) == 1, finished.stderr
    return lines[0]


# --------------------------------------------------------------------------------------------
# A mistyped endpoint or profile
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", COMMANDS_WITH_AWS_OPTIONS, ids=lambda c: c[0])
@pytest.mark.parametrize("where", ["before", "after"])
def test_an_endpoint_without_a_scheme_is_a_usage_error_of_its_command(
    command: list[str], where: str
) -> None:
    option = ["--endpoint-url", "127.0.0.1:4567"]
    argv = [*option, *command] if where == "before" else [*command, *option]
    finished = aiokpl_command(*argv)
    assert finished.returncode == 2, finished.stderr
    assert "Traceback" not in finished.stderr
    prog = "aiokpl" if where == "before" else f"aiokpl {command[0]}"
    assert finished.stderr.splitlines()[-1] == (
        f"{prog}: error: argument --endpoint-url: '127.0.0.1:4567' has no scheme: give the "
        "whole URL, e.g. http://127.0.0.1:4567"
    )


@pytest.mark.parametrize(
    ("text", "valid"),
    [
        ("http://127.0.0.1:4567", True),
        ("https://kinesis.eu-west-1.amazonaws.com", True),
        ("http://[::1]:4567/", True),
        ("127.0.0.1:4567", False),
        ("localhost", False),
        ("ftp://127.0.0.1", False),
        ("http://", False),
        ("http://host:port", False),
    ],
)
def test_endpoint_urls(text: str, valid: bool) -> None:
    if valid:
        assert endpoint_url(text) == text
    else:
        with pytest.raises(argparse.ArgumentTypeError):
            endpoint_url(text)


@pytest.mark.parametrize("command", COMMANDS_WITH_AWS_OPTIONS, ids=lambda c: c[0])
def test_a_profile_that_does_not_exist_is_one_line_and_exit_2(command: list[str]) -> None:
    line = one_line_error(aiokpl_command(*command, "--profile", "nope"))
    assert line == (
        f"aiokpl {command[0]}: no AWS profile named 'nope' (from --profile or AWS_PROFILE) in "
        "~/.aws/config or ~/.aws/credentials"
    )
    # The same profile from the environment.
    assert one_line_error(aiokpl_command(*command, env={"AWS_PROFILE": "nope"})) == line


def test_an_endpoint_from_the_environment_without_a_scheme_is_one_line_and_exit_2() -> None:
    line = one_line_error(aiokpl_command("tail", "events", env={"AWS_ENDPOINT_URL": "h:1"}))
    assert line == (
        "aiokpl tail: invalid endpoint 'h:1' (from the environment or the profile): an "
        "endpoint URL starts with http:// or https://"
    )


@pytest.mark.parametrize("command", COMMANDS_WITH_AWS_OPTIONS, ids=lambda c: c[0])
def test_main_turns_a_missing_profile_into_a_usage_error(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # In-process (what the console script calls), with the region the command needs.
    assert main([*command, "--profile", "nope", "--region", "us-east-1"]) == EXIT_USAGE
    assert f"aiokpl {command[0]}: no AWS profile named 'nope'" in capsys.readouterr().err


def test_setup_problems_are_found_inside_exception_groups() -> None:
    invalid = ValueError("Invalid endpoint: h:1")
    assert setup_problem(ExceptionGroup("g", [ExceptionGroup("h", [invalid])])) is not None
    assert setup_problem(ValueError("something else")) is None
    assert setup_problem(ExceptionGroup("g", [RuntimeError("x")])) is None


# --------------------------------------------------------------------------------------------
# --version, unknown options, help
# --------------------------------------------------------------------------------------------


def test_version_prints_the_version() -> None:
    finished = aiokpl_command("--version")
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout == f"aiokpl {aiokpl.__version__}\n"


@pytest.mark.parametrize("command", ["put", "tail", "coordinate", "demo", "local"])
def test_an_unknown_option_after_a_subcommand_shows_its_usage(command: str) -> None:
    argv = {"put": ["put", "s"], "tail": ["tail", "s"], "coordinate": ["coordinate", "--s3", "b"]}
    finished = aiokpl_command(*argv.get(command, [command]), "--bogus")
    assert finished.returncode == 2
    assert finished.stderr.startswith(f"usage: aiokpl {command} [-h]")
    assert finished.stderr.splitlines()[-1] == (
        f"aiokpl {command}: error: unrecognized arguments: --bogus"
    )


def test_main_reports_an_unknown_option_with_the_subcommands_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["tail", "s", "--bogus", "-"])
    assert exited.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("usage: aiokpl tail [-h]")
    assert err.endswith("aiokpl tail: error: unrecognized arguments: --bogus -\n")


def test_an_unknown_option_before_the_subcommand_shows_the_top_level_usage() -> None:
    finished = aiokpl_command("--bogus", "tail", "s")
    assert finished.returncode == 2
    assert finished.stderr.startswith("usage: aiokpl [-h]")
    assert finished.stderr.splitlines()[-1] == "aiokpl: error: unrecognized arguments: --bogus"


def test_put_still_takes_files_after_its_options() -> None:
    finished = aiokpl_command("put", "s", "a.txt", "--json", "b.txt", "--endpoint-url", "http://h")
    # The files are put's (the first one cannot be read), not unknown arguments.
    assert one_line_error(finished) == "aiokpl put: cannot read a.txt: No such file or directory"


def test_coordinate_help_names_its_own_endpoint() -> None:
    finished = aiokpl_command("coordinate", "--help")
    assert finished.returncode == 0
    help_text = " ".join(finished.stdout.split())
    assert "--endpoint-url URL S3 or DynamoDB endpoint instead of the region's" in help_text
    assert "Kinesis" not in help_text
    top = " ".join(aiokpl_command("--help").stdout.split())
    assert "(e.g. a local server); for coordinate, the S3 or DynamoDB endpoint" in top


# --------------------------------------------------------------------------------------------
# An endpoint that is not Kinesis
# --------------------------------------------------------------------------------------------

PAGE = (
    "<!DOCTYPE html>\n<html><head><title>Welcome to nginx!</title><style>body {}</style></head>"
    "<body>\n<h1>Welcome to nginx!</h1>\n<p>If you see this page, the web server works &amp; "
    "more.</p>\n" + "<p>filler</p>\n" * 500 + "</body></html>\n"
)


class _WebPage(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = PAGE.encode()
        self.send_response(404)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def web_server() -> Iterator[str]:
    """A web server on 127.0.0.1 that answers every POST with a long HTML page."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _WebPage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.mark.parametrize(
    ("command", "start"),
    [
        ("put", "aiokpl put: cannot write to 'events': "),
        ("tail", "aiokpl tail: cannot read 'events': "),
    ],
)
def test_an_endpoint_that_is_not_kinesis_is_summarised_in_one_line(
    web_server: str, command: str, start: str
) -> None:
    finished = aiokpl_command("--endpoint-url", web_server, command, "events")
    assert finished.returncode == 3, finished.stderr
    [line] = finished.stderr.splitlines()
    assert line.startswith(
        start + "404: the endpoint answered with a web page, not as Kinesis does: "
        "Welcome to nginx!: If you see this page, the web server works & more. filler filler"
    )
    assert "<" not in line
    assert len(line) <= len(start) + len("404: ") + MAX_SERVICE_MESSAGE


def test_service_messages() -> None:
    assert service_message("Stream s not found.") == "Stream s not found."
    assert service_message("<html><body><p>Bad\n gateway</p></body></html>") == (
        "the endpoint answered with a web page, not as Kinesis does: Bad gateway"
    )
    assert service_message("<html><head><title>T</title></head></html>").endswith("does: T")
    long = service_message("x" * 1000)
    assert long == "x" * (MAX_SERVICE_MESSAGE - 1) + "…"


def test_the_web_servers_log_keeps_errors_and_one_line_for_a_client_that_is_not_http() -> None:
    logger = logging.getLogger("werkzeug")
    stderr = io.StringIO()
    with _request_log(stderr, enabled=False):
        logger.info('127.0.0.1 - - [date] "POST / HTTP/1.1" 200 -')
        for _ in range(2):
            logger.error("127.0.0.1 - - [date] code 400, message Bad request version ('\\x16')")
        logger.error("Error on request: boom")
    assert stderr.getvalue().splitlines() == [
        "aiokpl local: a client sent something that is not HTTP: an https:// URL? This server "
        "speaks plain http://",
        "Error on request: boom",
    ]
    assert not logger.handlers
    assert logger.propagate
    with _request_log(stderr, enabled=True):  # --log-requests: werkzeug's own handler
        assert not logger.handlers


def test_an_interrupt_is_a_keyboard_interrupt_or_on_3_10_the_asyncio_runners_cancellation() -> None:
    # Python 3.10's asyncio runner (anyio's backport) lets Ctrl-C out as the main task's
    # CancelledError: the demo then printed a traceback and exited 1 (found by `make pythons`).
    assert interrupted(KeyboardInterrupt())
    assert interrupted(ExceptionGroup("g", [ValueError(), RuntimeError()])) is False
    assert interrupted(asyncio.CancelledError()) is (sys.version_info < (3, 11))
