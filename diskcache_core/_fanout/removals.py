"""A FanoutCache's bulk removals: each runs on every shard, resuming a shard after its
timeouts (a shard's give-up is not the caller's: the removal completes), and sums the counts.
`evict_tags` is one transaction per shard (`Cache.evict_tags`).
"""

from __future__ import annotations

import time
from typing import Any, Iterable

from .._arguments import check_time
from .._cache.cache import Cache
from .._cache.tags import check_evict_tags
from .._errors import RemoteUnavailableError, Timeout
from .layout import proportional_shares

__all__ = ["ShardRemovals"]


def _evict_in_shares(shards: tuple[Cache, ...], count: int, retry: bool) -> int:
    """`FanoutCache.evict_items`: each shard's share, resuming after timeouts as the other bulk
    removals do; how many were removed."""
    removed = 0
    for shard, share in zip(shards, proportional_shares([len(shard) for shard in shards], count)):
        while share > 0:
            try:
                done = shard.evict_items(share, retry)
                share = 0
            except Timeout as exc:
                done = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
                share -= done
            removed += done
    return removed


class ShardRemovals:
    """The bulk removals of a FanoutCache over its shards (a base class of FanoutCache)."""

    _shards: tuple[Cache, ...]

    def _each_until_done(self, method: str, *args: Any, retry: bool) -> int:
        """Run a bulk removal on every shard, resuming after timeouts; the total removed. An
        unreachable remote raises RemoteUnavailableError (resuming would spin while it is down)."""
        total = 0
        for shard in self._shards:
            while True:
                try:
                    total += getattr(shard, method)(*args, retry=retry)
                except RemoteUnavailableError:
                    raise
                except Timeout as exc:
                    total += exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
                else:
                    break
        return total

    def expire(self, retry: bool = False, now: float | None = None) -> int:
        """Remove expired items from every shard; return how many.

        `retry` comes first, as in python-diskcache's FanoutCache (Cache.expire takes `now`
        first); `now` is the time to expire by, the current time by default.
        """
        cutoff = time.time() if now is None else check_time("now", now)
        return self._each_until_done("expire", cutoff, retry=retry)

    def evict(self, tag: Any, retry: bool = False) -> int:
        """Remove every item carrying `tag` among its tags from every shard; return how many."""
        return self._each_until_done("evict", tag, retry=retry)

    def evict_tags(self, tags: Iterable[Any], retry: bool = False) -> int:
        """Remove every item carrying any of `tags`, one transaction per shard (a shard that
        timed out is tried again: its transaction rolled back); return how many."""
        return self._each_until_done("evict_tags", check_evict_tags(tags), retry=retry)

    def cull(self, retry: bool = False) -> int:
        """Remove expired items, then evict by policy until each shard is within its limit."""
        return self._each_until_done("cull", retry=retry)

    def evict_items(self, count: int, retry: bool = False) -> int:
        """Remove up to `count` items in the eviction policy's order, each shard giving up its
        share (in proportion to the items it holds); return how many."""
        return _evict_in_shares(self._shards, count, retry)

    def clear(self, retry: bool = False) -> int:
        """Remove every item from every shard; return how many."""
        return self._each_until_done("clear", retry=retry)
