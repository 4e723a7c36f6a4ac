"""What the tests read of a running producer: its parts, made when it started."""

from __future__ import annotations

from aiokpl import Producer
from aiokpl._producer.runtime import Runtime


def running(producer: Producer) -> Runtime:
    """The running parts of ``producer`` (started, and not failed to start)."""
    runtime = producer._runtime
    assert runtime is not None, "the producer runs"
    return runtime
