"""Removing items: expire, evict by tag, clear, cull by policy, and the write path's check.

Bulk removals run in batches of `_BATCH` rows per transaction, so the write lock is never held
for long; a Timeout carries the count removed so far. Writes call `_check_size` once per
`_check_every` bytes: it drops expired items first, then evicts by policy while the cache is
over its size_limit (the overshoot per writing process is bounded by that interval).
"""

from __future__ import annotations

import time
from typing import Any

from . import _reaper
from . import _schema as sql
from ._access import AccessLog
from ._arguments import check_tag
from ._connections import ThreadState
from ._errors import Timeout
from ._memory import MemoryTier
from ._store import MIN_WRITE_CHARGE, Store

__all__ = ["EvictionMixin"]

_now = time.time
_BATCH = 100  # rows per transaction in expire/evict/clear/cull: bounded lock hold time


class EvictionMixin(Store):
    """expire/evict/clear/cull/volume for Cache, and the write path's size check."""

    _access: AccessLog
    _memory: MemoryTier | None  # this object's memory tier (Cache sets it)
    cull_limit: int
    eviction_policy: str  # properties of Cache
    size_limit: int

    def flush_access_log(self, timeout: float | None = None) -> None:
        raise NotImplementedError

    def _delete_batches(self, statement: str, params: tuple[Any, ...], retry: bool) -> int:
        """Run a batched DELETE until it removes nothing; Timeout carries the count so far."""
        count = 0
        while True:
            try:
                removed = self._write(statement, params + (_BATCH,), retry).rowcount
            except Timeout:
                raise Timeout(count) from None
            if removed <= 0:
                _reaper.drain()  # the caller sees the files gone, not just the rows
                return count
            count += removed

    def expire(self, now: float | None = None, retry: bool = False) -> int:
        """Remove items that expired before `now` (default: the current time); return how many."""
        return self._delete_batches(sql.DELETE_EXPIRED, (_now() if now is None else now,), retry)

    def evict(self, tag: Any, retry: bool = False) -> int:
        """Remove every item with `tag`; return how many."""
        check_tag(tag)
        return self._delete_batches(sql.DELETE_TAGGED, (tag,), retry)

    def clear(self, retry: bool = False) -> int:
        """Remove every item; return how many."""
        try:
            return self._delete_batches(sql.DELETE_ANY, (), retry)
        finally:
            # The triggers have invalidated every entry (in every process); free them here.
            if self._memory is not None:
                self._memory.clear()

    def cull(self, retry: bool = False) -> int:
        """Remove expired items, then evict by policy until the volume is within size_limit."""
        count = self.expire(retry=retry)
        cull_select = sql.EVICTION_POLICY[self.eviction_policy]["cull"]
        if cull_select is None:
            return count
        self.flush_access_log()
        delete = sql.DELETE_BY_POLICY[self.eviction_policy]
        try:
            while self.volume() > self.size_limit:
                removed = self._write(delete, (_BATCH // 10,), retry).rowcount
                if removed <= 0:
                    break
                count += removed
        except Timeout:
            raise Timeout(count) from None
        _reaper.drain()
        return count

    def _check_size(self) -> None:
        """The periodic write-path check: drop expired items, then cull if over the limit."""
        budget = min(self.cull_limit * (self._unchecked // MIN_WRITE_CHARGE), 1000)
        self._unchecked = 0
        if self.cull_limit == 0:
            return
        try:
            with self._transaction() as state:
                state.execute(sql.DELETE_EXPIRED, (_now(), max(budget, self.cull_limit)))
                delete = sql.DELETE_BY_POLICY.get(self.eviction_policy)
                if delete is None:
                    return
                volume = self._volume(state)
                over = volume > self.size_limit
                if over:
                    batch = self._access.take()
                    self._access.write(state.con, batch)
                    over = self._evict_until_within(state, delete, volume)
        except Timeout:
            return  # busy: the write itself succeeded; check again on a later write
        if over:
            self._unchecked = self._check_every  # still over: check again on the next write

    def _evict_until_within(self, state: ThreadState, delete: str, volume: int) -> bool:
        """Evict up to cull_limit victims in policy order, stopping as soon as the volume is
        within size_limit; True while still over.

        One victim at a time while each removal lowers the volume (value files), so a small
        cache — a FanoutCache shard holds a fraction of the limit — never evicts the item just
        written along with older ones; the rest in one statement once a removal frees nothing
        (inline rows free database pages only when a page empties).
        """
        removed = 0
        step = 1
        while removed < self.cull_limit:
            count = state.execute(delete, (step,)).rowcount
            if count <= 0:
                break
            removed += count
            after = self._volume(state)
            if after <= self.size_limit:
                return False
            if after >= volume:
                step = self.cull_limit - removed
            volume = after
        return True

    def _volume(self, state: ThreadState) -> int:
        used_pages, page_size, file_bytes = state.execute(sql.VOLUME).fetchone()
        return used_pages * page_size + (file_bytes or 0)

    def volume(self) -> int:
        """Estimated bytes on disk: database pages in use plus value files."""
        ((used_pages, page_size, file_bytes),) = self._read(sql.VOLUME)
        return used_pages * page_size + (file_bytes or 0)
