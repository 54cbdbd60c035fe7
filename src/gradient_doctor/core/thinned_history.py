"""A bounded history of a long series that keeps every k-th item, doubling k when full."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

from gradient_doctor.core.arguments import check_int

Item = TypeVar("Item")


class ThinnedHistory(Generic[Item]):
    """Keep an evenly spaced subset of everything appended, in bounded memory.

    Items are kept at every `stride`-th append, starting with the first. When more than
    `size` items are kept, every other one is dropped and the stride doubles, so the
    history always spans the whole series at a resolution of `size / 2` to `size` points.

    Args:
        size: int, the most items kept (at least 2).

    Example:
        >>> history = ThinnedHistory(4)
        >>> for step in range(10):
        ...     history.append(step)
        >>> history.items(), history.stride
        ((0, 4, 8), 4)
    """

    def __init__(self, size: int) -> None:
        self._size = check_int(size, "size", 2)
        self._items: list[Item] = []
        self._stride = 1
        self._appended = 0

    @property
    def stride(self) -> int:
        """How many appends lie between two kept items."""
        return self._stride

    def append(self, item: Item) -> None:
        """Offer one item; it is kept when it falls on the current stride."""
        if self._appended % self._stride == 0:
            self._items.append(item)
            if len(self._items) > self._size:
                self._items = self._items[::2]
                self._stride *= 2
        self._appended += 1

    def items(self) -> tuple[Item, ...]:
        """The kept items, oldest first."""
        return tuple(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Item]:
        return iter(tuple(self._items))
