"""Sets of sequence numbers kept as sorted runs, so a million acknowledged records in order
cost one run, not a million entries."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable

__all__ = ("SequenceSet", "runs_of")


class SequenceSet:
    """A set of non-negative integers stored as disjoint, sorted half-open runs."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []

    def __repr__(self) -> str:
        return f"SequenceSet(runs={len(self._starts)}, size={len(self)})"

    def __len__(self) -> int:
        return sum(e - s for s, e in zip(self._starts, self._ends, strict=True))

    def __contains__(self, seq: object) -> bool:
        if not isinstance(seq, int):
            return False
        i = bisect_right(self._starts, seq) - 1
        return i >= 0 and seq < self._ends[i]

    @property
    def run_count(self) -> int:
        """How many runs the set holds (its memory, in effect)."""
        return len(self._starts)

    def runs(self) -> list[tuple[int, int]]:
        """The runs as ``(first, count)``, in order."""
        return [(s, e - s) for s, e in zip(self._starts, self._ends, strict=True)]

    def covered(self, first: int, count: int) -> int:
        """How many of ``first .. first + count - 1`` are in the set."""
        end = first + count
        lo = bisect_right(self._ends, first)
        hi = bisect_left(self._starts, end)
        pairs = zip(self._starts[lo:hi], self._ends[lo:hi], strict=True)
        return sum(min(e, end) - max(s, first) for s, e in pairs)

    def add(self, first: int, count: int = 1) -> int:
        """Add ``first .. first + count - 1``; returns how many of them were new."""
        if count <= 0:
            return 0
        end = first + count
        starts, ends = self._starts, self._ends
        if starts and first == ends[-1]:  # the common case: just after everything
            ends[-1] = end
            return count
        if not starts or first > ends[-1]:
            starts.append(first)
            ends.append(end)
            return count
        new = count - self.covered(first, count)
        lo = bisect_left(ends, first)  # runs touching or overlapping merge
        hi = bisect_right(starts, end)
        if lo < hi:
            first, end = min(first, starts[lo]), max(end, ends[hi - 1])
        starts[lo:hi] = [first]
        ends[lo:hi] = [end]
        return new

    def discard_from(self, seq: int) -> None:
        """Remove every member ``>= seq``."""
        i = bisect_right(self._ends, seq)  # the first run that reaches past seq
        if i < len(self._starts) and self._starts[i] < seq:
            self._ends[i] = seq
            i += 1
        del self._starts[i:], self._ends[i:]


def runs_of(seqs: Iterable[int]) -> list[tuple[int, int]]:
    """Sequence numbers as ``(first, count)`` runs of consecutive numbers, in order."""
    runs: list[tuple[int, int]] = []
    for seq in sorted(set(seqs)):
        if runs and runs[-1][0] + runs[-1][1] == seq:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((seq, 1))
    return runs
