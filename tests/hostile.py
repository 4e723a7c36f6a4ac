"""Hostile input for the tests and the fuzz targets of issue 33: crafted aggregates (built by
``bench/hostile.py``, which the codec benchmark times too) and spool segments, a ``Deduper``'s
stored state held in memory, and a bound on the work a test lets code do with them.

Where the issue sets a target (decoding any 1 MiB record in time linear in its size, recovery
linear in a segment's size), a test bounds the work by the process's CPU time
(``time.process_time``: other processes on the machine do not count), at a limit many times
what the linear code takes under coverage on a loaded machine and many times less than what
the quadratic code it replaced took. Never a tight timed assertion: the figures themselves are
measured and reported (``docs/aggregation.md``, ``docs/spool.md``), not asserted.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from bench.hostile import MIB, framed, hostile_aggregates

from aiokpl._spool.format import encode_header, encode_record_fields

__all__ = (
    "MIB",
    "MemoryStore",
    "at_most_cpu_seconds",
    "framed",
    "hostile_aggregates",
    "record_frame",
    "segment_of",
)


@contextmanager
def at_most_cpu_seconds(limit: float, what: str) -> Iterator[None]:
    """Fail if the block takes more than ``limit`` seconds of this process's CPU time."""
    start = time.process_time()
    yield
    spent = time.process_time() - start
    assert spent <= limit, f"{what} took {spent:.1f} s of CPU, over the {limit} s allowed"


class MemoryStore:
    """A ``DeduperStore`` holding one document in memory: the stored state a ``Deduper`` is
    handed (any bytes, or ``None``: nothing stored), and what it saves."""

    def __init__(self, data: bytes | None) -> None:
        self.data = data

    def load(self) -> bytes | None:
        return self.data

    def save(self, data: bytes) -> None:
        self.data = data


def record_frame(
    sequence_number: int,
    *,
    accepted_at: float = 1.0,
    encoded_tags: bytes = b"",
    stream: str = "s",
    data: bytes = b"x",
) -> bytes:
    """One framed spool record, its CRC valid whatever its fields hold."""
    return encode_record_fields(sequence_number, accepted_at, stream, "k", None, data, encoded_tags)


def segment_of(producer_id: bytes, *frames: bytes) -> bytes:
    """A segment's bytes: its header, then ``frames``."""
    return encode_header(producer_id) + b"".join(frames)
