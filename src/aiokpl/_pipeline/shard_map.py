"""Which shard owns which hash key, per stream, kept fresh with ``ListShards``.

States, as in the KPL (``shard_map.cc``): ``INVALID`` (no usable map, a refresh will be tried
after a backoff), ``UPDATING`` (a refresh is running) and ``READY``.

Invariants:

* ``predict`` never blocks and never does I/O: it answers from the last table that loaded;
* one refresh at a time; refresh failures back off 1 s, ×1.5, up to 30 s, with jitter;
* an invalidation starts a refresh only if it is news: it was seen after the last refresh
  completed, and the shard it blames is still open in the current table. A burst of
  wrong-shard results after a split therefore causes one refresh, not a storm;
* the ranges of shards that closed stay known for about 60 s after the refresh that dropped
  them, so a record predicted for a parent that lands on a child can be checked.

Better than the KPL: while a refresh is running, predictions keep using the previous table, so
aggregation and rate limiting continue (the KPL predicts nothing until the refresh completes).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING, Any

import anyio

from .._core.backoff import Backoff
from .._core.shards import ShardRange, ShardTable
from .._kinesis import error_of

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from .._kinesis import KinesisClient

__all__ = ("ShardMap", "ShardMapState")

logger = logging.getLogger("aiokpl.shard_map")

CLOSED_SHARD_TTL = 60.0
PAGE_SIZE = 1000


def _is_closed(shard: dict[str, Any]) -> bool:
    sequence_range = shard.get("SequenceNumberRange")
    return isinstance(sequence_range, dict) and bool(sequence_range.get("EndingSequenceNumber"))


class ShardMapState(Enum):
    INVALID = "INVALID"
    UPDATING = "UPDATING"
    READY = "READY"


class ShardMap:
    """The shard map of one stream."""

    def __init__(
        self,
        stream: str,
        client: KinesisClient,
        task_group: TaskGroup,
        *,
        request_timeout: float = 6.0,
        random_value: Callable[[], float] = random.random,
    ) -> None:
        self.stream = stream
        self._client = client
        self._task_group = task_group
        self._random = random_value
        self._request_timeout = request_timeout
        self.state = ShardMapState.INVALID
        self.table: ShardTable | None = None
        self.updated_at = -float("inf")
        self.refreshes = 0
        self.failures = 0
        self.last_error: tuple[str, str] | None = None
        self._closed: dict[str, tuple[ShardRange, float]] = {}
        self._backoff = Backoff(1.0, 1.5, 30.0, jitter=0.5)
        self._running = False
        self._after_refresh: list[Callable[[], None]] = []

    # --- queries (synchronous, hot path) ------------------------------------------------
    def predict(self, hash_key: int) -> str | None:
        """The shard expected to own ``hash_key``, or ``None`` if no map has loaded yet."""
        table = self.table
        return table.lookup(hash_key) if table is not None else None

    def hash_range(self, shard_id: str) -> ShardRange | None:
        """The range of an open shard, or of one closed less than about 60 s ago."""
        table = self.table
        if table is not None:
            found = table.get(shard_id)
            if found is not None:
                return found
        closed = self._closed.get(shard_id)
        return closed[0] if closed is not None else None

    # --- updates ------------------------------------------------------------------------
    def start(self) -> None:
        """Load the map for the first time (in the background)."""
        self._spawn_refresh()

    def invalidate(self, seen_at: float, predicted_shard: str | None) -> None:
        """A result contradicted the map: refresh it, unless that is already known."""
        if seen_at <= self.updated_at or self.state is not ShardMapState.READY:
            return
        table = self.table
        if predicted_shard is not None and table is not None and predicted_shard not in table:
            return
        logger.info(
            "refreshing the shard map of %r: a record did not land where predicted", self.stream
        )
        self._spawn_refresh()

    def after_refresh(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once the next refresh attempt ends, starting one if none runs.

        Used for records delivered to a shard the map does not know: only the refreshed map
        can say which of them that shard holds. The refresh is news in itself (an unknown shard
        id), and callbacks arriving while one runs share it, so this cannot cause a storm. If
        the attempt fails, the callbacks run anyway, with the map as it is.
        """
        self._after_refresh.append(callback)
        self._spawn_refresh()

    def _spawn_refresh(self) -> None:
        if self._running:
            return
        self._running = True
        self.state = ShardMapState.UPDATING
        self._task_group.start_soon(
            self._refresh_until_done, name=f"aiokpl shard map {self.stream}"
        )

    async def _refresh_until_done(self) -> None:
        try:
            while True:
                self.state = ShardMapState.UPDATING
                try:
                    shards = await self._list_open_shards()
                    table = ShardTable.from_shards(shards)
                except Exception as exc:
                    self.failures += 1
                    # Whoever waits for this refresh decides with what is known: a verdict
                    # never waits longer than one attempt (and the records' TTL still runs).
                    self._run_after_refresh()
                    self.last_error = error_of(exc)
                    self.state = ShardMapState.INVALID
                    delay = self._backoff.next_delay(self._random())
                    logger.warning(
                        "could not load the shard map of %r (%s: %s); retrying in %.1f s",
                        self.stream,
                        *self.last_error,
                        delay,
                    )
                    await anyio.sleep(delay)
                    continue
                self._install(table, anyio.current_time())
                return
        finally:
            self._running = False

    def _install(self, table: ShardTable, now: float) -> None:
        previous = self.table
        if previous is not None:
            for shard in previous:
                if shard.shard_id not in table:
                    self._closed[shard.shard_id] = (shard, now + CLOSED_SHARD_TTL)
        self._closed = {
            shard_id: entry
            for shard_id, entry in self._closed.items()
            if entry[1] > now and shard_id not in table
        }
        self.table = table
        self.updated_at = now
        self.refreshes += 1
        self.last_error = None
        self._backoff.reset()
        self.state = ShardMapState.READY
        logger.info("shard map of %r loaded: %d open shards", self.stream, len(table))
        self._run_after_refresh()

    def _run_after_refresh(self) -> None:
        callbacks, self._after_refresh = self._after_refresh, []
        for callback in callbacks:
            callback()

    async def _list_open_shards(self) -> list[dict[str, Any]]:
        with anyio.fail_after(self._request_timeout):
            response = await self._client.list_shards(
                StreamName=self.stream, ShardFilter={"Type": "AT_LATEST"}, MaxResults=PAGE_SIZE
            )
        shards: list[dict[str, Any]] = list(response.get("Shards") or [])
        token = response.get("NextToken")
        while token:
            # Later pages carry the token alone: the service rejects it with a stream name.
            with anyio.fail_after(self._request_timeout):
                response = await self._client.list_shards(NextToken=token, MaxResults=PAGE_SIZE)
            shards.extend(response.get("Shards") or [])
            token = response.get("NextToken")
        # AT_LATEST asks for open shards only, but local servers (moto, kinesalite) ignore the
        # filter and list closed parents too, overlapping their children: drop them here.
        open_shards = [shard for shard in shards if not _is_closed(shard)]
        if not open_shards:
            # A stream always has an open shard: an answer without any is malformed (a proxy's
            # page parsed as an empty document, say), a failed attempt to retry, not a map.
            raise ValueError("ListShards answered without any open shard")
        return open_shards

    def __repr__(self) -> str:
        shards = len(self.table) if self.table is not None else 0
        return f"<ShardMap stream={self.stream!r} state={self.state.value} shards={shards}>"
