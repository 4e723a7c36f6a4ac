"""When the spool fsyncs: group commit as a pure policy, ``now`` passed in.

One fsync makes durable everything appended before it, so the policy decides only *when* to
pay for one, never per record:

- ``"batch"``: at every flush that has something new (one fsync per flush, however many records
  the flush wrote: a task putting records one after another shares its fsync with every other
  record written since the last one).
- ``"interval"``: at most one fsync per ``interval_ms``; a flush inside the interval leaves the
  data written but not durable, and :meth:`FsyncPolicy.next_fsync_at` says when to flush again.
  After a quiet spell the first flush fsyncs at once, so an idle spool adds no delay.
- ``"none"``: never. Data handed to the operating system survives the process being killed,
  not a power loss; the spool reports it durable when it is written.
"""

from __future__ import annotations

from typing import Literal

__all__ = ("FSYNC_MODES", "FsyncMode", "FsyncPolicy")

FsyncMode = Literal["batch", "interval", "none"]
FSYNC_MODES: tuple[FsyncMode, ...] = ("batch", "interval", "none")


class FsyncPolicy:
    """Decides, from explicit times, whether a flush fsyncs.

    Args:
        mode: ``"batch"``, ``"interval"`` or ``"none"``.
        interval_ms: the shortest time between two fsyncs with ``"interval"``.
    """

    def __init__(self, mode: FsyncMode = "batch", interval_ms: float = 50.0) -> None:
        if mode not in FSYNC_MODES:
            raise ValueError(f"fsync mode must be one of {', '.join(FSYNC_MODES)}, not {mode!r}")
        if not interval_ms >= 0:
            raise ValueError(f"interval_ms must be at least 0, not {interval_ms!r}")
        self.mode: FsyncMode = mode
        self.interval_ms = interval_ms
        self._last_fsync_at: float | None = None

    def __repr__(self) -> str:
        return f"FsyncPolicy(mode={self.mode!r}, interval_ms={self.interval_ms!r})"

    def should_fsync(self, now: float, *, unsynced: bool) -> bool:
        """Whether a flush at ``now`` with ``unsynced`` data written since the last fsync
        fsyncs."""
        if not unsynced or self.mode == "none":
            return False
        if self.mode == "batch" or self._last_fsync_at is None:
            return True
        return now >= self._last_fsync_at + self.interval_ms / 1000

    def fsynced(self, now: float) -> None:
        """Record an fsync done at ``now`` (by a flush, or forced by a segment rotation)."""
        self._last_fsync_at = now

    def next_fsync_at(self, *, unsynced: bool) -> float | None:
        """When a flush should next run to fsync ``unsynced`` data; ``None``: no need.

        With ``"batch"`` the next flush fsyncs whenever it runs, so the answer is "now" (the
        last fsync's time, or 0); callers flush at once.
        """
        if not unsynced or self.mode == "none":
            return None
        if self._last_fsync_at is None:
            return 0.0
        if self.mode == "batch":
            return self._last_fsync_at
        return self._last_fsync_at + self.interval_ms / 1000
