"""The loopback server's HTTP faults: what a request meets before or instead of its answer.

What is here: :class:`HttpFaultPlan` (random faults at given rates, from a seed), ``Fault`` (one
fault: its kind and what it carries), and ``FaultQueue``, the server's faults in force: the
faults scripted per operation, consumed first in the order they were scripted, then a draw of
the plan. The server (``_loopback``) scripts into the queue and takes one fault per request.

Invariants: a request claimed by a scripted fault draws no random number; a request of an
operation the plan does not cover, or under a plan whose rates are all zero, draws nothing; the
same seed gives the same faults.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass
from typing import Literal

from ._protocol import _check_operation

__all__ = (
    "DEFAULT_CODES",
    "DEFAULT_MESSAGES",
    "Fault",
    "FaultQueue",
    "HttpFaultPlan",
    "MalformedKind",
    "draw",
    "rates_of",
)

MalformedKind = Literal["not-json", "truncated", "missing-records", "wrong-count"]
"""How :meth:`LoopbackKinesis.malformed_body` spoils a response."""

MALFORMED_KINDS: tuple[str, ...] = ("not-json", "truncated", "missing-records", "wrong-count")


@dataclass(frozen=True)
class HttpFaultPlan:
    """Random HTTP faults, drawn from ``random.Random(seed)``: the same seed, the same faults.

    Assign one to :attr:`LoopbackKinesis.http_faults`; assigning restarts the random sequence.
    Each request of one of ``operations`` that no scripted fault claimed draws one number,
    which picks at most one fault (so the rates must add up to at most 1). Requests of other
    operations draw nothing.

    Attributes:
        reset_rate: The probability that the connection is reset before the request is
            applied to the model (nothing stored; the client sees a dropped connection).
        lost_response_rate: The probability that the request is applied to the model and the
            connection is then reset: the records are stored but the client never learns it,
            so a retry stores them again (at-least-once delivery).
        error_5xx_rate: The probability of a ``500 InternalFailure`` or a ``503
            ServiceUnavailable`` (half of each), the model untouched.
        slow_rate: The probability that the request is applied and its response held back
            ``slow_seconds``.
        malformed_rate: The probability that the request is applied and answered ``200`` with
            a body that is not JSON.
        slow_seconds: How long a slow response is held back.
        seed: The seed of the random sequence.
        operations: The operations the plan applies to.

    Raises:
        ValueError: A rate is outside 0 … 1, the rates add up to more than 1,
            ``slow_seconds`` is negative or not finite, or an operation is not served.
    """

    reset_rate: float = 0.0
    lost_response_rate: float = 0.0
    error_5xx_rate: float = 0.0
    slow_rate: float = 0.0
    malformed_rate: float = 0.0
    slow_seconds: float = 1.0
    seed: int = 0
    operations: tuple[str, ...] = ("PutRecords",)

    def __post_init__(self) -> None:
        rates = rates_of(self)
        for name, rate in rates:
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"HttpFaultPlan.{name} must be in 0 … 1, got {rate!r}")
        total = math.fsum(rate for _, rate in rates)
        if total > 1.0:
            raise ValueError(f"HttpFaultPlan rates must add up to at most 1, got {total!r}")
        if not 0.0 <= self.slow_seconds < math.inf:
            raise ValueError(
                f"HttpFaultPlan.slow_seconds must be a finite number >= 0, "
                f"got {self.slow_seconds!r}"
            )
        for operation in self.operations:
            _check_operation(operation)


DEFAULT_CODES = {500: "InternalFailure", 503: "ServiceUnavailable"}
DEFAULT_MESSAGES = {
    "InternalFailure": "Internal service failure.",
    "ServiceUnavailable": "Service Unavailable",
}


@dataclass(frozen=True)
class Fault:
    """One fault: its kind (``"fail_http"``, ``"reset_connection"``, ``"delay_response"`` or
    ``"malformed_body"``), whether the request is applied first, and what the kind needs."""

    kind: str
    after_processing: bool = False
    status: int = 500
    code: str = "InternalFailure"
    message: str | None = None
    seconds: float = 0.0
    malformed: str = "not-json"


def rates_of(plan: HttpFaultPlan) -> tuple[tuple[str, float], ...]:
    """Each rate of ``plan``, by field name."""
    return (
        ("reset_rate", plan.reset_rate),
        ("lost_response_rate", plan.lost_response_rate),
        ("error_5xx_rate", plan.error_5xx_rate),
        ("slow_rate", plan.slow_rate),
        ("malformed_rate", plan.malformed_rate),
    )


def draw(plan: HttpFaultPlan, number: float) -> Fault | None:
    """The fault a random ``number`` in [0, 1) picks from ``plan``, or ``None``."""
    edge = 0.0
    if number < (edge := edge + plan.reset_rate):
        return Fault("reset_connection")
    if number < (edge := edge + plan.lost_response_rate):
        return Fault("reset_connection", after_processing=True)
    if number < (edge := edge + plan.error_5xx_rate):
        status = 500 if number < edge - plan.error_5xx_rate / 2 else 503
        return Fault("fail_http", status=status, code=DEFAULT_CODES[status])
    if number < (edge := edge + plan.slow_rate):
        return Fault("delay_response", seconds=plan.slow_seconds, after_processing=True)
    if number < edge + plan.malformed_rate:
        return Fault("malformed_body", malformed="not-json", after_processing=True)
    return None


class FaultQueue:
    """The HTTP faults in force on one server: the scripted ones per operation, then the plan."""

    def __init__(self) -> None:
        self._scripted: dict[str, deque[Fault]] = {}
        self.plan = HttpFaultPlan()
        self._random = random.Random(self.plan.seed)

    def set_plan(self, plan: HttpFaultPlan) -> None:
        """Draw from ``plan`` from now on, its random sequence restarted."""
        self.plan = plan
        self._random = random.Random(plan.seed)

    def clear(self) -> None:
        """Forget every scripted fault and turn the random ones off."""
        self._scripted.clear()
        self.set_plan(HttpFaultPlan())

    def enqueue(self, operation: str, faults: list[Fault]) -> None:
        """Script ``faults`` for the next requests of ``operation``, after those scripted."""
        self._scripted.setdefault(operation, deque()).extend(faults)

    def next_fault(self, operation: str) -> Fault | None:
        """The fault the next request of ``operation`` meets: scripted, else drawn, or none."""
        queue = self._scripted.get(operation)
        if queue:
            return queue.popleft()
        plan = self.plan
        if operation in plan.operations and any(rate for _, rate in rates_of(plan)):
            return draw(plan, self._random.random())
        return None
