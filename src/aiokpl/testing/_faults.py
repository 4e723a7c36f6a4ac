"""The faults a :class:`~aiokpl.testing.FakeKinesis` injects: random, scripted, and denials.

What is here: :class:`FaultPlan` (random record and request failures drawn from a seeded
``random.Random``), the scripted request faults of ``fail_requests`` and ``raise_next``
(:class:`_ScriptedFault`, optionally scoped to one stream), and :class:`_FaultState`, which holds
all of one fake's faults: its denied operations, its queues of scripted faults per operation,
its scripts of record outcomes, and its random plan with the sequence drawn from it.

Invariants: a call takes at most one fault, in this order: a denial (which consumes nothing
and draws nothing), else the earliest scripted fault that applies to it (a fault scoped to a
stream applies only to calls naming that stream), else one draw of the random plan if the plan
covers the operation. Each record of a ``PutRecords`` that is served takes its scripted outcome,
else one draw if the plan fails records. A call or record decided by a script draws no random
number. A scripted fault of ``count`` calls is one entry with a counter, so
``fail_requests(10**9)`` costs no memory.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ._validation import _STREAM_ARN_PARTS, _STREAM_NAME, _check_operation

__all__ = ("FaultPlan",)


@dataclass(frozen=True)
class FaultPlan:
    """Random faults, drawn from ``random.Random(seed)``: the same seed fails the same calls.

    Assign one to :attr:`FakeKinesis.faults`; assigning restarts the random sequence. Scripted
    faults are consumed first, and a call or record they decide draws no random number.

    Attributes:
        record_failure_rate: The probability that a record of a ``PutRecords`` call fails with
            ``record_error`` (it is then not stored and takes no throughput).
        request_failure_rate: The probability that a call of one of ``operations`` raises a
            ``ClientError`` made from ``request_error``.
        seed: The seed of the random sequence.
        record_error: ``(code, message)`` of a failed record.
        request_error: ``(code, message, http_status)`` of a failed request.
        operations: The operations that ``request_failure_rate`` applies to.

    Raises:
        ValueError: A rate is not in 0 … 1, or an operation name is unknown.
    """

    record_failure_rate: float = 0.0
    request_failure_rate: float = 0.0
    seed: int = 0
    record_error: tuple[str, str] = ("InternalFailure", "Internal service failure.")
    request_error: tuple[str, str, int] = ("InternalFailure", "Internal service failure.", 500)
    operations: tuple[str, ...] = ("PutRecords",)

    def __post_init__(self) -> None:
        for name in ("record_failure_rate", "request_failure_rate"):
            rate = getattr(self, name)
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"FaultPlan.{name} must be in 0 … 1, got {rate!r}")
        for operation in self.operations:
            _check_operation(operation)


class _ScriptedFault:
    """``remaining`` calls of one operation (to one stream, or to any) that fail alike."""

    __slots__ = ("after_processing", "make", "remaining", "stream")

    def __init__(
        self,
        make: Callable[[], BaseException],
        after_processing: bool,
        stream: str | None,
        remaining: int,
    ) -> None:
        self.make = make
        self.after_processing = after_processing
        self.stream = stream
        self.remaining = remaining


def _fault_stream(stream: str | None) -> str | None:
    """The stream name a fault is scoped to, given its name or ARN (``None``: any stream)."""
    if stream is None:
        return None
    if isinstance(stream, str):
        match = _STREAM_ARN_PARTS.fullmatch(stream)
        if match is not None:
            return match.group(4)
        if _STREAM_NAME.fullmatch(stream) is not None:
            return stream
    raise ValueError(f"stream must be a stream name or ARN, got {stream!r}")


def _called_stream(kwargs: Mapping[str, Any]) -> str | None:
    """The stream a call names (``StreamName``, else the name in ``StreamARN``), if any."""
    name = kwargs.get("StreamName")
    if name is None:
        arn = kwargs.get("StreamARN")
        match = _STREAM_ARN_PARTS.fullmatch(arn) if isinstance(arn, str) else None
        name = match.group(4) if match is not None else None
    return name if isinstance(name, str) else None


def _take_fault(queue: deque[_ScriptedFault], kwargs: Mapping[str, Any]) -> _ScriptedFault | None:
    """Use up one call of the earliest scripted fault that applies to a call's ``kwargs``."""
    called: str | None = None
    looked = False
    for index, fault in enumerate(queue):
        if fault.stream is not None:
            if not looked:
                called, looked = _called_stream(kwargs), True
            if fault.stream != called:
                continue
        fault.remaining -= 1
        if not fault.remaining:
            del queue[index]
        return fault
    return None


class _FaultState:
    """Every fault in force on one fake (see the module documentation for their order)."""

    __slots__ = ("denied", "plan", "random", "record_scripts", "request_faults")

    def __init__(self) -> None:
        self.request_faults: dict[str, deque[_ScriptedFault]] = {}
        self.record_scripts: deque[list[tuple[str, str] | None]] = deque()
        self.denied: dict[str, tuple[str, str | None, int]] = {}
        self.plan = FaultPlan()
        self.random = random.Random(self.plan.seed)

    def set_plan(self, plan: FaultPlan) -> None:
        """Put ``plan`` in force, restarting its random sequence."""
        self.plan = plan
        self.random = random.Random(plan.seed)

    def script(self, operation: str, fault: _ScriptedFault) -> None:
        """Queue ``fault`` behind the faults already scripted for ``operation``."""
        if fault.remaining:
            self.request_faults.setdefault(operation, deque()).append(fault)

    def take(self, operation: str, kwargs: Mapping[str, Any]) -> _ScriptedFault | None:
        """Use up the earliest scripted fault that applies to a call, if any."""
        queue = self.request_faults.get(operation)
        return _take_fault(queue, kwargs) if queue else None

    def request_fails(self, operation: str) -> bool:
        """Whether the random plan fails a call of ``operation`` (one draw if it may)."""
        plan = self.plan
        return (
            plan.request_failure_rate > 0.0
            and operation in plan.operations
            and self.random.random() < plan.request_failure_rate
        )
