"""The interface between the Cache facade and a tier above its store (a near tier).

A read asks the tiers from the top (`lookup`); the first that answers wins. Below them the store
answers, and what it found fills the tiers it passed on the way up — only under the permission a
tier gave before the store was read (`begin_fill`), because only the tier knows what makes a
fill safe against a write racing with it. A write goes to the source of truth first; once it has
committed, each tier hears of it (`after_write`, `after_delete`) with the versions the commit
published, and keeps the new value or forgets the old one by its own rules.

The memory tier (_memory/tier.py) is the one near tier today. The facade calls only these methods on
it, so a further tier — a remote source of truth with the local store as a near cache in front
of it — plugs in below the facade's read and write paths without changing Cache's methods.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ._memory.tier import Entry, Fill

__all__ = ["NearTier"]


class NearTier(Protocol):
    """What the facade's read and write paths need of a tier above the store."""

    def lookup(self, key: Any, touch: bool = True) -> Entry | None:
        """The entry answering a get of `key` now, or None (then the store is read); `touch`:
        count it as recently used."""

    def begin_fill(self, db_key: Any, raw: Any, seen: bool = False) -> Fill | None:
        """Before the store is read for a key the tier missed: may the result be kept? (`seen`:
        the tier's own lookup has just found the key worth keeping.)"""

    def finish_fill(
        self, fill: Fill, value: Any, db_value: Any, mode: int, has_file: bool,
        expire_time: float | None, db_key: Any, raw: Any,
    ) -> None:
        """The store found the item: keep it, under the permission `fill`."""

    def finish_fill_absent(self, fill: Fill, db_key: Any, raw: Any, known: bool) -> None:
        """The store found no live item: keep that, under the permission `fill`, where it is
        `known` that there is no row (an expired one lives again if the clock steps back)."""

    def after_write(
        self, db_key: Any, raw: Any, published: dict[int, int] | None, value: Any,
        db_value: Any, mode: int, has_file: bool, expire_time: float | None,
    ) -> None:
        """A set or add committed (`published`: the versions its commit published)."""

    def after_delete(self, db_key: Any, raw: Any, published: dict[int, int] | None) -> None:
        """A delete or pop committed."""

    def forget_key(self, db_key: Any, raw: Any) -> None:
        """Drop what the tier holds for a key."""

    def clear(self) -> None:
        """Drop everything (after the store was cleared)."""


if TYPE_CHECKING:
    from ._memory.tier import MemoryTier

    def _memory_tier_is_a_near_tier(tier: MemoryTier) -> NearTier:
        return tier  # checked by mypy: MemoryTier implements the interface
