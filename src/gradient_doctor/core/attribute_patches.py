"""Attributes of a framework's modules and classes replaced for a while, then put back.

The doctor watches unchanged code by replacing a few of its framework's functions and
methods (a loss function, an optimizer's `apply`, `math.isnan`) with versions that note
what they see and call the original. Each replacement is undone exactly: an attribute
the class only inherited is deleted again, not left as a copy of its parent's.
"""

from __future__ import annotations

from collections.abc import Iterable

# A stand-in for an attribute the owner did not hold itself (it was inherited).
_INHERITED = object()


class AttributePatches:
    """Replacements installed in order and undone in reverse."""

    def __init__(self) -> None:
        self._saved: list[tuple[object, str, object]] = []

    @property
    def installed(self) -> bool:
        return bool(self._saved)

    def replace(self, owner, name: str, value) -> None:
        """Set `owner.name` to `value`, keeping what it was (or that it was inherited)."""
        held = vars(owner).get(name, _INHERITED)
        self._saved.append((owner, name, held))
        setattr(owner, name, value)

    def replace_all(self, patches: Iterable[tuple[object, str, object]]) -> None:
        """`replace` each (owner, name, value)."""
        for owner, name, value in patches:
            self.replace(owner, name, value)

    def restore(self) -> None:
        """Put every replaced attribute back, the last replaced first."""
        for owner, name, held in reversed(self._saved):
            if held is _INHERITED:
                delattr(owner, name)
            else:
                setattr(owner, name, held)
        self._saved = []
