"""A sliding window of the latest values kept in sorted order, for running medians.

A detector that compares each step with the median of the last few hundred steps
would otherwise sort its window twice a step (the median, then the median absolute
deviation around it). Kept sorted as values arrive, the window gives both exactly as
`forecast.median` computes them from the same values: one insertion and one removal
a step, and a binary search for each order statistic of the deviations.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Iterator

from gradient_doctor.core.arguments import check_int


class SortedWindow:
    """The last `size` values appended, kept both in arrival order and sorted.

    Args:
        size: int, the most values kept (at least 1); older ones drop out.

    Raises:
        ValueError: for a `size` below 1.

    Example:
        >>> window = SortedWindow(3)
        >>> for value in (5.0, 1.0, 4.0, 2.0):
        ...     window.append(value)
        >>> window.median(), window.median_abs_deviation(window.median())
        (2.0, 1.0)
    """

    def __init__(self, size: int) -> None:
        self._size = check_int(size, "size", 1)
        self._arrived: deque[float] = deque()
        self._sorted: list[float] = []
        self.full = False  # `size` values are in (it stays full)

    def __len__(self) -> int:
        return len(self._sorted)

    def __iter__(self) -> Iterator[float]:
        """The values in the order they arrived, oldest first (a sum then adds up as a
        plain list of them would)."""
        return iter(self._arrived)

    def append(self, value: float) -> None:
        """Add `value` (not NaN: it has no place in an order), dropping the oldest when full."""
        if self.full:
            oldest = self._arrived.popleft()
            del self._sorted[bisect_left(self._sorted, oldest)]
        self._arrived.append(value)
        insort(self._sorted, value)
        if not self.full:
            self.full = len(self._arrived) == self._size

    def smallest(self) -> float:
        """The smallest value in the window.

        Raises:
            IndexError: for an empty window.
        """
        return self._sorted[0]

    def any_nonzero(self) -> bool:
        """Whether some value is not 0, as `any(window)` (its smallest or largest is not)."""
        return bool(self._sorted) and (self._sorted[0] != 0 or self._sorted[-1] != 0)

    def median(self) -> float:
        """The median of the window, as `forecast.median` gives it (the mean of the two
        middle values when even).

        Raises:
            ValueError: for an empty window.
        """
        ordered = self._sorted
        if not ordered:
            raise ValueError("The window is empty: append a value before asking its median.")
        middle = len(ordered) // 2
        if len(ordered) % 2:
            return ordered[middle]
        return 0.5 * (ordered[middle - 1] + ordered[middle])

    def quantile(self, share: float) -> float:
        """The value below which `share` of the window lies (the nearest rank at or above:
        the 90th percentile of 100 values is the 90th smallest).

        Raises:
            ValueError: for an empty window.
        """
        ordered = self._sorted
        if not ordered:
            raise ValueError("The window is empty: append a value before asking a quantile.")
        rank = min(len(ordered) - 1, max(0, math.ceil(share * len(ordered)) - 1))
        return ordered[rank]

    def median_abs_deviation(self, center: float) -> float:
        """The median of |value - center| over the window, as `forecast.median` of those
        deviations gives it, without computing or sorting them all.

        The values below `center`, walked down, and those from it up are two ascending
        runs of deviations (c - v is exactly -(v - c) in floating point); the middle
        order statistics of their union are found by a binary search over how many of
        the smallest deviations come from the lower run.

        Raises:
            ValueError: for an empty window.
        """
        ordered = self._sorted
        count = len(ordered)
        if not count:
            raise ValueError("The window is empty: append a value before asking its deviation.")
        split = bisect_left(ordered, center)
        below, above = split, count - split
        # The deviations up to and including the median's (the upper middle one when even).
        taken = count // 2 + 1
        low, high = max(0, taken - above), min(taken, below)
        while low < high:  # how many of the `taken` smallest lie below the center
            from_below = (low + high) // 2
            if (
                center - ordered[split - 1 - from_below]
                < ordered[split + taken - from_below - 1] - center
            ):
                low = from_below + 1
            else:
                high = from_below
        from_above = taken - low
        # The largest taken deviation from each side, and the second largest overall.
        last = [center - ordered[split - low]] if low else []
        if from_above:
            last.append(ordered[split + from_above - 1] - center)
        if low > 1:
            last.append(center - ordered[split - low + 1])
        if from_above > 1:
            last.append(ordered[split + from_above - 2] - center)
        last.sort()
        if count % 2:
            return last[-1]
        return 0.5 * (last[-2] + last[-1])
