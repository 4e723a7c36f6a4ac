"""Sets of sequence numbers kept as sorted runs, so a million acknowledged records in order
cost one run, not a million entries.

Invariants:

* The runs are half-open ``[start, end)``, disjoint and never adjacent (touching runs merge),
  sorted; they are kept in chunks of at most ``2 * chunk_runs`` runs, none empty, each chunk
  a pair of lists (starts, ends) with its first start in ``_heads``.
* Every operation costs a bisection of ``_heads``, one of a chunk and a copy of at most a
  chunk, whatever the order numbers come in: adding runs in descending or random order is
  as cheap as in ascending order (in one flat list each insertion at the front moved every
  run after it, and recovery of 400,000 records written in descending order took minutes).
  Adding just after the last run, the common case, touches only the last chunk.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator

__all__ = ("SequenceSet", "runs_of")


class SequenceSet:
    """A set of non-negative integers stored as disjoint, sorted half-open runs.

    Args:
        chunk_runs: how many runs a chunk holds before it is split in two (at ``2 *
            chunk_runs``); tests use small ones to split often.
    """

    __slots__ = (
        "_chunk_runs",
        "_ends",
        "_heads",
        "_last_ends",
        "_last_starts",
        "_size",
        "_starts",
    )

    def __init__(self, chunk_runs: int = 512) -> None:
        self._chunk_runs = chunk_runs
        self._heads: list[int] = []
        self._starts: list[list[int]] = []
        self._ends: list[list[int]] = []
        self._size = 0
        # The last chunk's lists (empty ones when there is none): what adding after
        # everything, the common case, touches.
        self._last_starts: list[int] = []
        self._last_ends: list[int] = []

    def _chunks_changed(self) -> None:
        """Call after a chunk is added or removed: the last one may be another."""
        if self._starts:
            self._last_starts, self._last_ends = self._starts[-1], self._ends[-1]
        else:
            self._last_starts, self._last_ends = [], []

    def __repr__(self) -> str:
        return f"SequenceSet(runs={self.run_count}, size={self._size})"

    def __len__(self) -> int:
        return self._size

    def __contains__(self, seq: object) -> bool:
        if not isinstance(seq, int):
            return False
        c = bisect_right(self._heads, seq) - 1
        if c < 0:
            return False
        i = bisect_right(self._starts[c], seq) - 1  # >= 0: the chunk's head is <= seq
        return seq < self._ends[c][i]

    @property
    def run_count(self) -> int:
        """How many runs the set holds (its memory, in effect)."""
        return sum(map(len, self._starts))

    def _pairs(self) -> Iterator[tuple[int, int]]:
        for starts, ends in zip(self._starts, self._ends, strict=True):
            yield from zip(starts, ends, strict=True)

    def runs(self) -> list[tuple[int, int]]:
        """The runs as ``(first, count)``, in order."""
        return [(s, e - s) for s, e in self._pairs()]

    def covered(self, first: int, count: int) -> int:
        """How many of ``first .. first + count - 1`` are in the set."""
        end = first + count
        heads, all_starts, all_ends = self._heads, self._starts, self._ends
        c = max(bisect_right(heads, first) - 1, 0)
        total = 0
        while c < len(heads) and heads[c] < end:
            starts, ends = all_starts[c], all_ends[c]
            i = bisect_right(ends, first)  # the first run reaching past first
            j = bisect_left(starts, end)  # the runs starting before end
            for k in range(i, j):
                total += min(ends[k], end) - max(starts[k], first)
            if j < len(starts):
                break
            c += 1
        return total

    def add(self, first: int, count: int = 1) -> int:
        """Add ``first .. first + count - 1``; returns how many of them were new."""
        if count <= 0:
            return 0
        end = first + count
        ends = self._last_ends
        if ends:
            if first == ends[-1]:  # the common case: just after everything
                ends[-1] = end
                self._size += count
                return count
            if first > ends[-1]:
                starts = self._last_starts
                starts.append(first)
                ends.append(end)
                self._size += count
                if len(starts) > 2 * self._chunk_runs:
                    self._split(len(self._heads) - 1)
                return count
        if self._place(first, end):
            self._size += count
            return count
        new = count - self.covered(first, count)
        first, end = self._take_touching(first, end)
        self._place(first, end)  # it touches nothing now
        self._size += new
        return new

    def _place(self, first: int, end: int) -> bool:
        """Put the run ``[first, end)`` in, if it overlaps no other and touches at most one
        (then it extends that one: adding in descending order, say); whether it did."""
        heads = self._heads
        if not heads:
            heads.append(first)
            self._starts.append([first])
            self._ends.append([end])
            self._chunks_changed()
            return True
        c = max(bisect_right(heads, first) - 1, 0)
        starts, ends = self._starts[c], self._ends[c]
        i = bisect_right(starts, first)  # 0 only in the first chunk, before its head
        before = ends[i - 1] if i else first - 1  # the end of the run before, if any
        if i < len(starts):
            after, after_starts, after_c, after_i = starts[i], starts, c, i
        elif c + 1 < len(heads):
            after, after_starts, after_c, after_i = heads[c + 1], self._starts[c + 1], c + 1, 0
        else:
            after, after_starts, after_c, after_i = end + 1, starts, c, i  # no run after
        if before > first or after < end or (before == first and after == end):
            return False  # overlaps one, or would join two
        if before == first:
            ends[i - 1] = end
        elif after == end:
            after_starts[after_i] = first
            heads[after_c] = after_starts[0]
        else:
            starts.insert(i, first)
            ends.insert(i, end)
            heads[c] = starts[0]
            if len(starts) > 2 * self._chunk_runs:
                self._split(c)
        return True

    def _take_touching(self, first: int, end: int) -> tuple[int, int]:
        """Remove the runs that overlap or touch ``[first, end)``; return their span with it.

        They are consecutive: from the first run ending at or after ``first`` to the last one
        starting at or before ``end``, in one chunk or across a few.
        """
        heads, all_starts, all_ends = self._heads, self._starts, self._ends
        c = max(bisect_right(heads, first) - 1, 0)
        while c < len(heads):
            starts, ends = all_starts[c], all_ends[c]
            i = bisect_left(ends, first)  # the first run ending at or after first
            j = bisect_right(starts, end)  # the runs starting at or before end
            whole = j == len(starts)  # the touching runs may go on in the next chunk
            if i < j:
                first, end = min(first, starts[i]), max(end, ends[j - 1])
                del starts[i:j], ends[i:j]
                if not starts:
                    del heads[c], all_starts[c], all_ends[c]
                    self._chunks_changed()
                    continue  # the next chunk is at c now
                heads[c] = starts[0]
            if not whole or i < len(starts):
                break
            c += 1
        return first, end

    def _split(self, c: int) -> None:
        starts, ends = self._starts[c], self._ends[c]
        half = len(starts) // 2
        self._starts.insert(c + 1, starts[half:])
        self._ends.insert(c + 1, ends[half:])
        self._heads.insert(c + 1, starts[half])
        del starts[half:], ends[half:]
        self._chunks_changed()

    def discard_from(self, seq: int) -> None:
        """Remove every member ``>= seq``."""
        heads, all_starts, all_ends = self._heads, self._starts, self._ends
        c = max(bisect_right(heads, seq) - 1, 0)
        for starts, ends in zip(all_starts[c + 1 :], all_ends[c + 1 :], strict=True):
            self._size -= sum(ends) - sum(starts)
        del heads[c + 1 :], all_starts[c + 1 :], all_ends[c + 1 :]
        self._chunks_changed()
        if not heads:
            return
        starts, ends = all_starts[c], all_ends[c]
        i = bisect_right(ends, seq)  # the first run that reaches past seq
        if i < len(starts) and starts[i] < seq:
            self._size -= ends[i] - seq
            ends[i] = seq
            i += 1
        self._size -= sum(ends[i:]) - sum(starts[i:])
        del starts[i:], ends[i:]
        if not starts:
            del heads[c], all_starts[c], all_ends[c]
            self._chunks_changed()


def runs_of(seqs: Iterable[int]) -> list[tuple[int, int]]:
    """Sequence numbers as ``(first, count)`` runs of consecutive numbers, in order."""
    runs: list[tuple[int, int]] = []
    for seq in sorted(set(seqs)):
        if runs and runs[-1][0] + runs[-1][1] == seq:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((seq, 1))
    return runs
