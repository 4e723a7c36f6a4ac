"""A fleet of producers in one process: several ``Producer``s on one throttling ``FakeKinesis``.

The in-process model of the fleet benchmark (``bench/fleet.py``): each producer reaches the
fake through a :class:`Link` of its own that delays the request on its way there and the
response on its way back (``latency`` each way, so throttle feedback arrives one round trip
after the server decided), and counts, per second of (virtual) time, the records the server
stored and the records it throttled. Producers are offered a steady load (one
``put_record_nowait`` every ``1 / rate`` seconds, distinct partition keys), and may join late
or leave early. Deterministic under the test suite's virtual clocks (asyncio and trio).

Run as a script to print per-second series (``cd tests && python fleet.py --help``).
"""

from __future__ import annotations

import argparse
import math
import random
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from aiokpl import Config, Producer
from aiokpl.coordination import Coordination
from aiokpl.testing import FakeKinesis

STREAM = "fleet"
LINKS: weakref.WeakKeyDictionary[Producer, Link] = weakref.WeakKeyDictionary()
"""Each running producer's link (its own counts, for ``--trace``)."""
THROTTLED = "ProvisionedThroughputExceededException"


@dataclass
class Series:
    """Per-second counts, indexed by whole seconds since the fleet started."""

    stored: list[int] = field(default_factory=list)
    throttled: list[int] = field(default_factory=list)
    calls: list[int] = field(default_factory=list)
    stored_bytes: list[int] = field(default_factory=list)  # partition keys and data

    def add(self, second: int, stored: int, throttled: int, stored_bytes: int = 0) -> None:
        while len(self.stored) <= second:
            self.stored.append(0)
            self.throttled.append(0)
            self.calls.append(0)
            self.stored_bytes.append(0)
        self.stored[second] += stored
        self.throttled[second] += throttled
        self.calls[second] += 1
        self.stored_bytes[second] += stored_bytes

    def window(self, start: int, end: int) -> tuple[int, int]:
        """(stored, throttled) summed over seconds ``start`` … ``end - 1``."""
        return sum(self.stored[start:end]), sum(self.throttled[start:end])


class Link:
    """A producer's client: the fake, ``latency`` seconds away each way, counted."""

    def __init__(
        self,
        fake: FakeKinesis,
        latency: float,
        series: Series,
        origin: float,
        *,
        jitter: float = 0.0,
        server: Server | None = None,
        random_value: Callable[[], float] = random.random,
    ) -> None:
        self._fake = fake
        self._latency = latency
        self._series = series
        self._origin = origin
        self._jitter = jitter
        self._server = server
        self._random = random_value
        self.own = Series()  # this link's own counts

    async def _travel(self) -> None:
        delay = self._latency + self._jitter * -math.log(1.0 - self._random())
        if delay:
            await anyio.sleep(delay)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fake, name)

    async def put_records(self, **kwargs: Any) -> dict[str, Any]:
        await self._travel()
        if self._server is not None:
            async with self._server.lock:  # one request at a time, as moto's server
                records = len(kwargs.get("Records", ()))
                await anyio.sleep(self._server.service + self._server.per_record * records)
                response: dict[str, Any] = await self._fake.put_records(**kwargs)
        else:
            response = await self._fake.put_records(**kwargs)
        throttled = stored = stored_bytes = 0
        for sent, answer in zip(kwargs["Records"], response["Records"], strict=True):
            if "SequenceNumber" in answer:
                stored += 1
                stored_bytes += len(sent["Data"]) + len(sent["PartitionKey"].encode())
            elif answer.get("ErrorCode") == THROTTLED:
                throttled += 1
        second = int(anyio.current_time() - self._origin)
        self._series.add(second, stored, throttled, stored_bytes)
        self.own.add(second, stored, throttled, stored_bytes)
        await self._travel()
        return response


class Server:
    """A server that answers one request at a time, ``service`` seconds each."""

    def __init__(self, service: float, per_record: float = 0.0) -> None:
        self.service = service
        self.per_record = per_record
        self.lock = anyio.Lock()


@dataclass
class Member:
    """One producer of the fleet: offered ``rate`` records/s from ``start`` s to the end, or
    to ``stop`` s where it is cancelled (a process stopped: nothing flushed)."""

    rate: float
    start: float = 0.0
    stop: float | None = None
    coordination: Callable[[], Coordination] | None = None


@dataclass
class Fleet:
    """The set-up: shards, their rate, the producers' config, the members, the round trip."""

    members: list[Member]
    shards: int = 2
    shard_rate: float = 250.0
    producer_limit: float = 250.0
    shard_bytes: float = 1048576.0  # bytes/s a shard takes (64 KiB in --aggregation)
    latency: float = 0.01
    jitter: float = 0.0  # mean of an exponential extra delay on each way
    service: float = 0.0  # the server's seconds per request, one at a time (0: no queue)
    per_record: float = 0.0  # and its seconds per record of a request, with ``service``
    seconds: float = 40.0
    ttl_ms: int = 10_000
    config: dict[str, Any] = field(default_factory=dict)
    seed: int = 0  # seeds each producer's jitter source and load phase (with its index)


async def run(
    fleet: Fleet, on_second: Callable[[int, list[Producer]], None] | None = None
) -> Series:
    """Run ``fleet`` to its end; return the server's per-second counts."""
    fake = FakeKinesis()
    fake.add_stream(
        STREAM,
        shard_count=fleet.shards,
        throttle=True,
        records_per_second=fleet.shard_rate,
        bytes_per_second=fleet.shard_bytes,
    )
    series = Series()
    origin = anyio.current_time()
    server = Server(fleet.service, fleet.per_record) if fleet.service else None
    producers: list[Producer] = []

    def config() -> Config:
        options: dict[str, Any] = {
            "region": "us-east-1",
            "aggregation_enabled": False,
            "record_ttl_ms": fleet.ttl_ms,
            "rate_limit_records_per_sec_per_shard": fleet.producer_limit,
        }
        options.update(fleet.config)
        return Config(**options)

    async def member(index: int, spec: Member) -> None:
        jitter = random.Random(fleet.seed + index)
        # Each producer's load starts a fraction of its put interval late (its phase).
        await anyio.sleep(spec.start + jitter.random() / spec.rate)
        coordination = spec.coordination() if spec.coordination is not None else None
        link = Link(
            fake,
            fleet.latency,
            series,
            origin,
            jitter=fleet.jitter,
            server=server,
            random_value=random.Random(fleet.seed * 7919 + index).random,
        )
        end = fleet.seconds if spec.stop is None else spec.stop
        # A producer that leaves (``stop``) is cancelled there, as a process that is stopped:
        # what it still holds is not flushed. The others flush at the end.
        with anyio.CancelScope(deadline=origin + end if spec.stop is not None else math.inf):
            async with Producer(
                config(), client=link, coordination=coordination, jitter_source=jitter
            ) as producer:
                LINKS[producer] = link
                producers.append(producer)
                step = 1.0 / spec.rate
                put = 0
                try:
                    while anyio.current_time() - origin < end:
                        producer.put_record_nowait(
                            stream=STREAM, partition_key=f"p{index}-{put}", data=b"x" * 100
                        )
                        put += 1
                        await anyio.sleep(step)
                finally:
                    producers.remove(producer)

    async def ticker() -> None:
        second = 0
        while second < fleet.seconds:
            await anyio.sleep_until(origin + second + 1)
            if on_second is not None:
                on_second(second, list(producers))
            second += 1

    async with anyio.create_task_group() as group:
        for index, spec in enumerate(fleet.members):
            group.start_soon(member, index, spec)
        group.start_soon(ticker)
    return series


def trace_cell(producer: Producer, second: int) -> str:
    """``rate/queued/throttled`` of ``producer`` on its first shard in ``second``."""
    streams = producer.statistics().streams
    shard_rates = streams[0].rates_by_shard if streams else {}
    shard = min(shard_rates, default=None)
    if shard is None:
        return f"{'-':>16}"
    queued = streams[0].queued_by_shard.get(shard, 0)
    own = LINKS[producer].own
    throttled = own.throttled[second] if second < len(own.throttled) else 0
    return f"{shard_rates[shard][0]:5.0f}/{queued:<5d}/{throttled:<4d}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--offered", type=float, default=2.0, help="× capacity")
    parser.add_argument("--limit", type=float, default=250.0)
    parser.add_argument("--latency", type=float, default=0.01)
    parser.add_argument("--jitter", type=float, default=0.0)
    parser.add_argument("--service", type=float, default=0.0)
    parser.add_argument("--per-record", type=float, default=0.0, help="s per record served")
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--coordination", action="store_true")
    parser.add_argument(
        "--churn", action="store_true", help="the last producer leaves at half time; one joins"
    )
    parser.add_argument("--backend", default="trio")
    parser.add_argument("--rates", action="store_true", help="print producer 0's rates")
    parser.add_argument(
        "--trace",
        action="store_true",
        help="print each producer's rate, queue and throttled records on its first shard",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--aggregation",
        action="store_true",
        help="bench/fleet.py's aggregated cells: shards of 64 KiB/s, aggregates of 3,200 bytes",
    )
    args = parser.parse_args()
    from conftest import virtual_backend
    from test_coordination import MemoryStore

    shards, shard_rate = 2, 250.0
    # With aggregation, a shard's capacity in user records is its byte rate over a user
    # record's share of an aggregate (about 124 bytes: bench/fleet.py's user_record_bytes).
    per_shard = 65536.0 / 124 if args.aggregation else shard_rate
    each = args.offered * shards * per_shard / args.producers
    store = MemoryStore()

    def coordination_of(index: int) -> Callable[[], Coordination] | None:
        if not args.coordination:
            return None
        return lambda: Coordination(
            store=store,
            interval=1.0,
            shard_max_records_per_sec=shard_rate,
            summarize=index == 0,
        )

    members = [Member(each, coordination=coordination_of(i)) for i in range(args.producers)]
    if args.churn:
        half = args.seconds / 2
        members[-1].stop = half
        members.append(Member(each, start=half, coordination=coordination_of(args.producers)))
    fleet = Fleet(
        members,
        shards=shards,
        shard_rate=shard_rate,
        producer_limit=args.limit,
        latency=args.latency,
        jitter=args.jitter,
        service=args.service,
        per_record=args.per_record,
        seconds=args.seconds,
        seed=args.seed,
    )
    if args.aggregation:
        fleet.shard_bytes = 65536.0
        fleet.config = {"aggregation_enabled": True, "aggregation_max_size": 3200}

    def show(second: int, producers: list[Producer]) -> None:
        if args.trace:
            print(f"{second + 1:3d}", " ".join(trace_cell(p, second) for p in producers))
        if args.rates and producers:
            stats = producers[0].statistics().streams
            if stats:
                rates = {
                    k[-2:]: (round(v[0]), round(v[1])) for k, v in stats[0].rates_by_shard.items()
                }
                ceilings = {k[-2:]: round(v[0]) for k, v in stats[0].ceilings_by_shard.items()}
                p = producers[0].statistics()
                st = stats[0]
                print(
                    f"  t={second + 1}: rates {rates} ceilings {ceilings} "
                    f"queued {st.queued_by_shard}"
                    f" collecting {st.collecting} inflight {p.requests_in_flight} queuedreq "
                    f"{p.requests_queued} expired_unsent {p.records_expired_unsent} "
                    f"retries {st.retries} succ {p.records_succeeded} failed {p.records_failed}"
                )

    backend, options = virtual_backend(args.backend)
    if backend == "trio":  # the same run for the same seed (see conftest's seed_trio_scheduler)
        import trio

        run_module = trio._core._run
        run_module._ALLOW_DETERMINISTIC_SCHEDULING = True  # type: ignore[misc]
        run_module._r.seed(args.seed)
    series = anyio.run(run, fleet, show, backend=backend, backend_options=options)
    capacity = shards * shard_rate
    print("stored/s:   ", " ".join(f"{n:4d}" for n in series.stored))
    print("throttled/s:", " ".join(f"{n:4d}" for n in series.throttled))
    print("calls/s:    ", " ".join(f"{n:4d}" for n in series.calls))
    end = int(args.seconds)
    stored, throttled = series.window(12, end)
    span = int(args.seconds) - 12
    pairs = zip(series.stored[12:end], series.throttled[12:end], strict=False)
    worst = max((t / max(1, s + t) for s, t in pairs), default=0.0)
    delivered = stored / (capacity * span)
    if args.aggregation:  # bytes stored over the shards' byte rate
        delivered = sum(series.stored_bytes[12:end]) / (shards * fleet.shard_bytes * span)
    print(
        f"window 12-{end} s: delivered {delivered:.1%} of capacity, "
        f"throttled {throttled / max(1, stored + throttled):.1%} of attempts; "
        f"worst second {worst:.0%}"
    )


if __name__ == "__main__":
    main()
