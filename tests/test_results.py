"""RecordResult, Attempt and the errors (pure, synchronous)."""

from __future__ import annotations

import dataclasses

import pytest

from aiokpl import (
    AggregationFormatError,
    AiokplError,
    Attempt,
    BufferFullError,
    ConfigError,
    InvalidRecordError,
    InvalidRecordTypeError,
    ProducerClosedError,
    RecordFailedError,
    RecordResult,
)


def failed(code: str, message: str, at: float) -> Attempt:
    return Attempt(
        started_at=at,
        ended_at=at + 0.25,
        delay=0.1,
        success=False,
        error_code=code,
        error_message=message,
    )


def test_success_result() -> None:
    attempt = Attempt(
        started_at=1.0,
        ended_at=1.5,
        delay=0.1,
        success=True,
        shard_id="shardId-1",
        sequence_number="42",
    )
    result = RecordResult(
        success=True, shard_id="shardId-1", sequence_number="42", attempts=(attempt,)
    )
    assert attempt.duration == 0.5
    assert result.error_code is None
    assert result.error_message is None
    result.raise_for_failure()  # does not raise


def test_failed_result_reports_last_attempt() -> None:
    attempts = (
        failed("ProvisionedThroughputExceededException", "Rate exceeded", 1.0),
        failed("Expired", "record_ttl_ms elapsed", 2.0),
    )
    result = RecordResult(success=False, attempts=attempts)
    assert result.error_code == "Expired"
    assert result.error_message == "record_ttl_ms elapsed"
    with pytest.raises(RecordFailedError) as info:
        result.raise_for_failure()
    assert str(info.value) == "record failed with Expired: record_ttl_ms elapsed (after 2 attempts)"
    assert info.value.result is result


def test_failure_without_attempts_and_singular_wording() -> None:
    assert RecordResult(success=False).error_code is None
    assert RecordResult(success=False).error_message is None
    error = RecordFailedError(
        RecordResult(success=False, attempts=(failed("Cancelled", "producer cancelled", 0.0),))
    )
    assert str(error).endswith("(after 1 attempt)")


def test_results_are_frozen_and_slotted() -> None:
    attempt = failed("X", "y", 0.0)
    result = RecordResult(success=False, attempts=(attempt,))
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.success = True  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        attempt.delay = 1.0  # type: ignore[misc]
    assert not hasattr(result, "__dict__")
    assert not hasattr(attempt, "__dict__")


@pytest.mark.parametrize(
    ("error", "bases"),
    [
        (ProducerClosedError, (AiokplError,)),
        (BufferFullError, (AiokplError,)),
        (InvalidRecordError, (AiokplError, ValueError)),
        (InvalidRecordTypeError, (AiokplError, TypeError)),
        (ConfigError, (AiokplError, ValueError)),
        (AggregationFormatError, (AiokplError, ValueError)),
        (RecordFailedError, (AiokplError,)),
    ],
)
def test_error_hierarchy_says_whose_fault(error: type[Exception], bases: tuple[type, ...]) -> None:
    assert all(issubclass(error, base) for base in bases)
    assert error.__doc__ is not None
    assert len(error.__doc__) > 40
