"""The throttling server's settings and its pure parts: limits, faults, buckets and counts.

What is here: :class:`ShardLimits` (what a shard takes per second) and :class:`ServerFaults`
(what the server adds), frozen and checked when made; :class:`ShardThrottle`, one token bucket
of records and bytes per shard, given ``now``; :class:`ThroughputCounts`, the records stored,
throttled and failed per second and stream; and AWS's message for a throttled record. The WSGI
application that uses them in front of moto is ``_throttling``'s.

Invariants: a shard's bucket is full when the shard is first written to; a record is admitted
only if both its buckets have enough, and what it took is given back whole; counts only grow,
over a bounded window (:class:`ThroughputCounts`).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any

from .._core.token_bucket import TokenBucket

__all__ = (
    "THROUGHPUT_MAX_ROWS",
    "THROUGHPUT_WINDOW_SECONDS",
    "ServerFaults",
    "ShardLimits",
    "ShardThrottle",
    "ThroughputCounts",
    "throttled_message",
)


THROUGHPUT_WINDOW_SECONDS = 3_600
"""The seconds of counts a server keeps (an hour): what ``/_local/throughput`` can report."""
THROUGHPUT_MAX_ROWS = 100_000
"""The most (second, stream) rows of counts a server keeps, whatever the number of streams."""


def _positive(name: str, value: float) -> None:
    if not 0.0 < value < math.inf:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")


@dataclass(frozen=True)
class ShardLimits:
    """The write limits of every shard, AWS's by default.

    Args:
        records_per_second: Records a shard takes per second (AWS: 1,000).
        bytes_per_second: Bytes (data plus partition key, UTF-8) a shard takes per second
            (AWS: 1 MiB).
        burst_seconds: How many seconds of each rate a shard's buckets hold; they start full,
            so a quiet shard takes this much at once (AWS's documented limit is per second;
            one second of burst is what clients observe).

    Raises:
        ValueError: A number is not positive and finite.
    """

    records_per_second: float = 1000.0
    bytes_per_second: float = 1024.0 * 1024.0
    burst_seconds: float = 1.0

    def __post_init__(self) -> None:
        _positive("records_per_second", self.records_per_second)
        _positive("bytes_per_second", self.bytes_per_second)
        _positive("burst_seconds", self.burst_seconds)

    def describe(self) -> str:
        """One line: what a shard takes."""
        mib = self.bytes_per_second / (1024.0 * 1024.0)
        return (
            f"{self.records_per_second:g} records/s and {self.bytes_per_second:,.0f} bytes/s "
            f"({mib:.3g} MiB/s) per shard, {self.burst_seconds:g} s of burst"
        )


@dataclass(frozen=True)
class ServerFaults:
    """Faults the server adds to Kinesis requests (none by default).

    Args:
        fault_rate: The fraction (0 … 1) of requests that fail at random, half with
            ``InternalFailure`` (HTTP 500), half with ``ServiceUnavailable`` (HTTP 503).
        fail_streams: Streams whose every request fails with ``InternalFailure``.
        hang_streams: Streams whose every request is answered only after ``hang_seconds``
            (then served as usual: a client that gave up meanwhile does not know whether its
            records were stored).
        hang_seconds: How long a hanging stream's requests wait.
        control_latency: Seconds every ``ListShards``, ``DescribeStream`` and
            ``DescribeStreamSummary`` is answered late: a far region, or a cold start's DNS,
            TLS and first calls, so that a new producer's first shard map comes late.
        seed: Seed of the random faults (``None``: a new sequence every run).

    Faults hit the calls an application makes while it runs (``PutRecord``, ``PutRecords``,
    ``ListShards``, ``DescribeStream``, ``DescribeStreamSummary``, ``GetShardIterator``,
    ``GetRecords``), never creating, deleting or resharding a stream.

    Raises:
        ValueError: ``fault_rate`` is outside 0 … 1, or ``hang_seconds`` or
            ``control_latency`` is negative.
    """

    fault_rate: float = 0.0
    fail_streams: tuple[str, ...] = ()
    hang_streams: tuple[str, ...] = ()
    hang_seconds: float = 10.0
    control_latency: float = 0.0
    seed: int | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.fault_rate <= 1.0:
            raise ValueError(f"fault_rate must be within 0 … 1, got {self.fault_rate!r}")
        if not 0.0 <= self.hang_seconds < math.inf:
            raise ValueError(f"hang_seconds must be 0 or more seconds, got {self.hang_seconds!r}")
        if not 0.0 <= self.control_latency < math.inf:
            raise ValueError(
                f"control_latency must be 0 or more seconds, got {self.control_latency!r}"
            )
        object.__setattr__(self, "fail_streams", tuple(self.fail_streams))
        object.__setattr__(self, "hang_streams", tuple(self.hang_streams))

    @property
    def any(self) -> bool:
        """Whether any fault is set."""
        return bool(
            self.fault_rate or self.fail_streams or self.hang_streams or self.control_latency
        )

    def describe(self) -> list[str]:
        """One line per fault that is set."""
        lines = []
        if self.fault_rate:
            lines.append(
                f"{self.fault_rate * 100:g}% of requests fail at random "
                "(InternalFailure HTTP 500, ServiceUnavailable HTTP 503)"
            )
        lines += [
            f"stream {name}: every request fails (InternalFailure)" for name in self.fail_streams
        ]
        lines += [
            f"stream {name}: every request is answered {self.hang_seconds:g} s late"
            for name in self.hang_streams
        ]
        if self.control_latency:
            lines.append(
                "ListShards, DescribeStream and DescribeStreamSummary are answered "
                f"{self.control_latency:g} s late"
            )
        return lines


def throttled_message(shard_id: str, stream: str, account: str) -> str:
    """AWS's message for a record (or request) over its shard's limit."""
    return f"Rate exceeded for shard {shard_id} in stream {stream} under account {account}."


class ShardThrottle:
    """One token bucket per shard, paying records and bytes; pure, ``now`` is given.

    A shard's bucket is made on its first write, full. Not thread-safe: the server calls it
    under moto's lock.
    """

    __slots__ = ("_buckets", "limits")

    def __init__(self, limits: ShardLimits) -> None:
        self.limits = limits
        self._buckets: dict[tuple[str, str], TokenBucket] = {}

    def _bucket(self, stream: str, shard_id: str) -> TokenBucket:
        key = (stream, shard_id)
        bucket = self._buckets.get(key)
        if bucket is None:
            limits = self.limits
            bucket = self._buckets[key] = TokenBucket(
                [
                    (limits.records_per_second, limits.records_per_second * limits.burst_seconds),
                    (limits.bytes_per_second, limits.bytes_per_second * limits.burst_seconds),
                ]
            )
        return bucket

    def admit(self, stream: str, shard_id: str, size: int, now: float) -> bool:
        """Take one record of ``size`` bytes from the shard's buckets if both have enough."""
        return self._bucket(stream, shard_id).try_take((1.0, float(size)), now)

    def give_back(self, stream: str, shard_id: str, size: int, now: float) -> None:
        """Return what :meth:`admit` took for a record that was not stored after all."""
        self._bucket(stream, shard_id).refund((1.0, float(size)), now)


class ThroughputCounts:
    """Records stored, throttled and failed, per whole second and per stream; thread-safe.

    Kinesis records, and the user records in them (a KPL aggregate holds many; any other
    record is one). Kept for a window, so a server that runs for days (``aiokpl local``) does
    not grow without bound: the last ``window_seconds`` seconds before the newest one counted,
    at most ``max_rows`` (second, stream) rows. Older seconds go as newer ones arrive; past
    ``max_rows``, the oldest seconds go first, and a second that alone names more streams than
    that counts the first ``max_rows`` of them.

    Args:
        window_seconds: how many seconds are kept (:data:`THROUGHPUT_WINDOW_SECONDS`).
        max_rows: how many (second, stream) rows are kept (:data:`THROUGHPUT_MAX_ROWS`).
    """

    __slots__ = ("_counts", "_lock", "_newest", "_rows", "max_rows", "window_seconds")

    def __init__(
        self,
        window_seconds: int = THROUGHPUT_WINDOW_SECONDS,
        max_rows: int = THROUGHPUT_MAX_ROWS,
    ) -> None:
        self.window_seconds = window_seconds
        self.max_rows = max_rows
        self._lock = threading.Lock()
        self._counts: dict[int, dict[str, list[int]]] = {}
        self._rows = 0
        self._newest = -math.inf

    def add(
        self,
        second: int,
        stream: str,
        *,
        delivered: int = 0,
        throttled: int = 0,
        failed: int = 0,
        delivered_user: int = 0,
        throttled_user: int = 0,
    ) -> None:
        """Count records of ``stream`` in ``second`` (nothing, for a second out of the
        window)."""
        with self._lock:
            if second > self._newest:
                self._newest = second
                self._forget_before(second - self.window_seconds + 1)
            elif second <= self._newest - self.window_seconds:
                return
            streams = self._counts.get(second)
            if streams is None:
                streams = self._counts[second] = {}
            counts = streams.get(stream)
            if counts is None:
                if self._rows >= self.max_rows:
                    self._forget_oldest(second)
                    if self._rows >= self.max_rows:
                        return  # this second alone holds max_rows streams
                counts = streams[stream] = [0] * 5
                self._rows += 1
            counts[0] += delivered
            counts[1] += throttled
            counts[2] += failed
            counts[3] += delivered_user
            counts[4] += throttled_user

    def _forget_before(self, first: float) -> None:
        """Drop the seconds before ``first`` (under the lock)."""
        for second in [s for s in self._counts if s < first]:
            self._rows -= len(self._counts.pop(second))

    def _forget_oldest(self, keep: int) -> None:
        """Drop the oldest second but ``keep`` (under the lock)."""
        older = [s for s in self._counts if s != keep]
        if older:
            self._rows -= len(self._counts.pop(min(older)))

    def rows(self) -> list[dict[str, Any]]:
        """Every (second, stream) counted, in order: ``second``, ``stream``, ``delivered``,
        ``throttled``, ``failed`` (Kinesis records), ``delivered_user_records``,
        ``throttled_user_records``."""
        with self._lock:
            items = sorted(
                ((second, stream), counts)
                for second, streams in self._counts.items()
                for stream, counts in streams.items()
            )
        return [
            {
                "second": second,
                "stream": stream,
                "delivered": d,
                "throttled": t,
                "failed": f,
                "delivered_user_records": du,
                "throttled_user_records": tu,
            }
            for (second, stream), (d, t, f, du, tu) in items
        ]
