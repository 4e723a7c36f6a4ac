"""The health verdict's pure parts (``_core.health``) and the region judge (``_core.regions``),
with explicit times: no clock, no producer."""

from __future__ import annotations

import math
from typing import Any

import pytest

from aiokpl import Health, HealthReason
from aiokpl._core.answers import UNKNOWN_OUTCOME, UNREACHABLE
from aiokpl._core.health import (
    CLOSED,
    CREDENTIAL_CODES,
    MAX_STREAM_REASONS,
    NEVER_SIGNED,
    STREAM_FAILURES,
    Reachability,
    Transition,
    check_window,
    credentials_reason,
    endpoint_reason,
    progress_reason,
    spool_reason,
    stream_reasons,
    verdict,
)
from aiokpl._core.regions import NOT_A_REGION, UNKNOWN, region_problem
from aiokpl._core.results import Attempt, with_cause
from aiokpl._kinesis import _NEVER_SENT, _WRAPPERS, _partitions

REFUSED = ("EndpointConnectionError", 'Could not connect to the endpoint URL: "http://h:1/"')


# --- the cause a record's last attempt failed with -----------------------------------------------
def test_with_cause_names_the_last_attempt_and_counts_them() -> None:
    attempts = (
        Attempt(0.0, 0.1, 0.0, False, "InternalFailure", "Internal service failure."),
        Attempt(0.2, 0.3, 0.1, False, *REFUSED),
    )
    assert with_cause("time ran out", attempts) == (
        "time ran out; after 2 attempts, the last failed with EndpointConnectionError: "
        'Could not connect to the endpoint URL: "http://h:1/"'
    )
    assert with_cause("time ran out", attempts[:1]).startswith("time ran out; after 1 attempt,")
    assert with_cause("time ran out", ()) == "time ran out"


# --- reachability: what each request's outcome says ----------------------------------------------
def since(reach: Reachability) -> float | None:
    return reach.since  # read anew: observe() changes it


def credentials_since(reach: Reachability) -> float | None:
    return reach.credentials_since


def test_the_first_failure_to_connect_is_a_transition_and_the_next_ones_are_not() -> None:
    reach = Reachability()
    assert reach.observe(*REFUSED, 1.0) == Transition(False, 1.0, *REFUSED)
    assert reach.observe("ConnectTimeoutError", "Connect timeout", 2.0) is None
    assert (reach.since, reach.failure) == (1.0, ("ConnectTimeoutError", "Connect timeout"))
    # A request sent and not answered says nothing either way.
    for code in UNKNOWN_OUTCOME:
        assert reach.observe(code, "read timeout", 3.0) is None
    assert reach.since == 1.0
    # Any answer of the service, an error included, is the endpoint answering.
    assert reach.observe("ResourceNotFoundException", "no stream", 4.0) == Transition(
        True, 1.0, "ConnectTimeoutError", "Connect timeout"
    )
    assert since(reach) is None
    assert reach.observe(None, "", 5.0) is None


def test_credentials_fail_until_the_service_accepts_a_request() -> None:
    reach = Reachability()
    assert reach.observe("NoCredentialsError", "none found", 1.0) is None
    assert (reach.credentials_since, reach.since) == (1.0, None)  # nothing was sent
    reach.observe("UnrecognizedClientException", "token invalid", 2.0)
    assert reach.credentials_since == 1.0
    assert reach.credentials_failure == ("UnrecognizedClientException", "token invalid")
    reach.observe("Internal", "timed out", 3.0)  # no answer: still failing
    assert reach.credentials_since == 1.0
    reach.observe("ProvisionedThroughputExceededException", "slow down", 4.0)  # accepted
    assert credentials_since(reach) is None
    reach.observe("ExpiredTokenException", "expired", 5.0)
    assert credentials_since(reach) == 5.0
    reach.observe(None, "", 6.0)
    assert credentials_since(reach) is None


def test_every_code_of_a_request_that_never_left_is_unreachable_or_credentials() -> None:
    never_sent = {kind.__name__ for kind in (*_WRAPPERS, *_NEVER_SENT)}
    assert never_sent <= UNREACHABLE | NEVER_SIGNED
    assert not UNREACHABLE & CREDENTIAL_CODES


# --- the reasons ---------------------------------------------------------------------------------
def test_an_unreachable_endpoint_and_failing_credentials_fail_the_producer() -> None:
    reach = Reachability()
    assert endpoint_reason(reach, "http://h:1", 5.0) is None
    assert credentials_reason(reach, 5.0) is None
    reach.observe(*REFUSED, 1.0)
    reach.observe("NoCredentialsError", "no AWS credentials found", 2.0)
    endpoint = endpoint_reason(reach, "http://h:1", 5.0)
    assert endpoint == HealthReason(
        "endpoint_unreachable",
        "failing",
        "cannot connect to http://h:1 for 4.0 s (EndpointConnectionError: Could not connect to "
        'the endpoint URL: "http://h:1/"); records are kept and retried until record_ttl_ms',
    )
    credentials = credentials_reason(reach, 5.0)
    assert credentials is not None
    assert credentials.message == (
        "requests fail for their credentials for 3.0 s (NoCredentialsError: no AWS credentials "
        "found)"
    )
    assert endpoint_reason(reach, None, 5.0).message.startswith(  # type: ignore[union-attr]
        "cannot connect to the Kinesis endpoint for 4.0 s"
    )


@pytest.mark.parametrize(
    ("outstanding", "oldest", "delivered", "expected"),
    [
        (0, -math.inf, -math.inf, None),  # nothing outstanding: nothing to progress on
        (3, 95.0, -math.inf, None),  # the oldest is younger than the window
        (3, 80.0, 95.0, None),  # something was delivered within it
        (
            3,
            80.0,
            85.0,
            "3 records outstanding, the oldest for 20.0 s, and none delivered for 15.0 s",
        ),
        (1, 80.0, -math.inf, "1 record outstanding, the oldest for 20.0 s, and none delivered yet"),
    ],
)
def test_no_progress(
    outstanding: int, oldest: float, delivered: float, expected: str | None
) -> None:
    reason = progress_reason(outstanding, oldest, delivered, 100.0, 10.0)
    if expected is None:
        assert reason is None
    else:
        assert reason == HealthReason("no_progress", "failing", expected)


def test_a_full_spool() -> None:
    assert spool_reason(False, "/spool") is None
    assert spool_reason(True, "/spool") == HealthReason(
        "spool_full",
        "failing",
        "the spool's disk is full (/spool): puts wait until a write succeeds",
    )


def test_a_stream_is_named_once_its_requests_keep_failing_within_the_window() -> None:
    failure = ("InternalFailure", "Internal service failure.")
    rows: list[tuple[str, float, float, int, tuple[str, str]]] = [
        ("once", 95.0, 95.0, 1, failure),  # one failed request is no news
        ("stale", 50.0, 80.0, 9, failure),  # its last failure is older than the window
        ("bad", 90.0, 99.5, STREAM_FAILURES, failure),
        ("gone", 90.0, 99.0, 5, REFUSED),  # said by a producer-wide reason
    ]
    [reason] = stream_reasons(rows, 100.0, 10.0, covered=UNREACHABLE)
    assert reason == HealthReason(
        "stream_failing",
        "degraded",
        "the last 2 requests to stream 'bad' failed, for 10.0 s; the last 0.5 s ago, with "
        "InternalFailure: Internal service failure.",
        "bad",
    )
    assert [r.stream for r in stream_reasons(rows, 100.0, 10.0)] == ["bad", "gone"]


def test_at_most_so_many_streams_are_named() -> None:
    rows = [(f"s{i:02d}", 90.0, 99.0, 3, REFUSED) for i in range(MAX_STREAM_REASONS + 3)]
    reasons = stream_reasons(rows, 100.0, 10.0)
    assert [r.stream for r in reasons] == [f"s{i:02d}" for i in range(MAX_STREAM_REASONS)] + [None]
    assert reasons[-1].message == "and 3 more streams whose requests keep failing"


# --- the verdict ---------------------------------------------------------------------------------
def test_the_status_is_the_worst_reason_and_failing_reasons_come_first() -> None:
    degraded = HealthReason("stream_failing", "degraded", "a", "s")
    failing = HealthReason("no_progress", "failing", "b")
    assert verdict([]) == Health("healthy")
    assert verdict([]).severity == 0
    assert verdict([degraded]) == Health("degraded", (degraded,))
    assert verdict([degraded]).severity == 1
    both = verdict([degraded, failing])
    assert both == Health("failing", (failing, degraded))
    assert (both.severity, both.codes) == (2, ("no_progress", "stream_failing"))
    assert CLOSED.codes == ("not_running",)


@pytest.mark.parametrize("window", [0, 0.5, 601, math.inf, math.nan, True, "10", None])
def test_the_window_is_checked(window: Any) -> None:
    with pytest.raises(ValueError, match="window_s must be a number of seconds, 1 … 600"):
        check_window(window)


def test_a_window_in_range_is_taken() -> None:
    assert check_window(1) == 1.0
    assert check_window(600.0) == 600.0


# --- regions ---------------------------------------------------------------------------------
def test_a_region_botocore_knows_is_fine() -> None:
    for region in ("us-east-1", "eu-west-3", "cn-north-1", "us-gov-west-1"):
        assert region_problem(region, f"kinesis.{region}.amazonaws.com", _partitions()) is None


def test_any_region_is_fine_for_an_endpoint_of_your_own() -> None:
    for host in ("127.0.0.1", "localhost", "kinesis.example.com", "amazonaws.com.example.org"):
        assert region_problem("us-east-11", host, _partitions()) is None
        assert region_problem("local", host, _partitions()) is None


def test_a_region_botocore_does_not_know_but_might_exist_is_a_warning() -> None:
    problem = region_problem(
        "us-east-11", "kinesis.us-east-11.amazonaws.com", _partitions(), "1.2.3"
    )
    assert problem is not None
    assert problem.kind == UNKNOWN
    assert problem.message.startswith(
        "region 'us-east-11' is not one botocore 1.2.3 knows (did you mean 'us-east-1'"
    )
    assert "requests go to kinesis.us-east-11.amazonaws.com" in problem.message


@pytest.mark.parametrize("region", ["useast1", "eu-west", "US-EAST-1", "us-east-1-a"])
def test_a_region_of_no_partitions_shape_is_an_error(region: str) -> None:
    problem = region_problem(region, f"kinesis.{region}.amazonaws.com", _partitions())
    assert problem is not None
    assert problem.kind == NOT_A_REGION
    assert problem.message.startswith(f"region {region!r} is not an AWS region")


def test_the_judge_reads_the_partitions_it_is_given() -> None:
    partitions: list[dict[str, Any]] = [
        {
            "outputs": {"dnsSuffix": "example.aws"},
            "regionRegex": r"^xx\-\w+\-\d+$",
            "regions": {"xx-north-1": {}},
        }
    ]
    assert region_problem("xx-north-1", "kinesis.xx-north-1.example.aws", partitions) is None
    unknown = region_problem("xx-north-2", "kinesis.xx-north-2.example.aws", partitions)
    assert unknown is not None
    assert unknown.kind == UNKNOWN
    wrong = region_problem("us-east-1", "kinesis.us-east-1.example.aws", partitions)
    assert wrong is not None
    assert wrong.kind == NOT_A_REGION
    assert region_problem("us-east-1", "kinesis.us-east-1.amazonaws.com", partitions) is None
