"""The size check: what the Store runs once every `SizeCheck.every` bytes written.

The Store counts the bytes its writes store and, past the budget, calls `SizeCheck.check` with
itself, the bytes counted and the writer's context (the key the write stored, to be spared):
expired items go first, then items in the eviction policy's order while the cache is over its
size_limit. The overshoot per writing process is bounded by the interval. Nothing is assigned
onto the Store: it is handed this object when it is made (`Store(..., budget=...)`).
"""

from __future__ import annotations

import time
from typing import Any

from .._errors import Timeout
from .._metrics import EvictionCounts
from .._policies import POLICIES
from .._settings import Settings
from .._store import schema as sql
from .._store.connections import ThreadState
from .._store.store import MIN_WRITE_CHARGE, Store
from .access import AccessLog

__all__ = ["SizeCheck"]

# The size check's victims under a built-in policy, never the item a write of this thread has
# just stored, which its own check must not evict: ?2 the row its connection inserted last, ?3
# and ?4 the key the write stored (its context), where it overwrote one. Under
# least-frequently-used a new row has the fewest reads of all (an overwrite keeps its count);
# under the others it is the newest anyway.
_SPARED = " WHERE rowid IS NOT ?2 AND NOT (key IS ?3 AND raw IS ?4) ORDER BY"
_SPARING_DELETE = {
    name: "DELETE FROM Cache WHERE rowid IN ("
    + policy.cull.replace(" ORDER BY", _SPARED).replace("LIMIT ?", "LIMIT ?1")
    + ")"
    for name, policy in POLICIES.items()
    if policy.cull is not None
}
_LAST_INSERT = "SELECT last_insert_rowid()"
_NOTHING_SPARED = (None, None)


class SizeCheck:
    """The size budget a Store is made with: `every` (bytes between checks) and `check`."""

    def __init__(self, settings: Settings, access: AccessLog) -> None:
        self.settings = settings
        self.access = access
        self.removed = EvictionCounts()  # items removed in this process, by reason (metrics)
        self.every = 2**20
        self.follow_limit()

    def follow_limit(self) -> None:
        """The size limit (or exactness) changed: check every 1/128th of the limit (between 4
        KiB and 1 MiB of writes; the cache may overshoot it by that much per process, never
        more), or after every write that stores bytes with ``exact_size_limit``."""
        if self.settings.exact_size_limit:
            self.every = 1
        else:
            self.every = min(max(self.settings.size_limit // 128, 4096), 2**20)

    def check(self, store: Store, unchecked: int, spared: tuple[Any, Any] | None) -> bool:
        """The periodic write-path check: drop expired items, then cull if over the limit.
        `unchecked`: the bytes written since the last check; `spared`: the ``(db_key, raw)``
        the write stored (or None). True: still over, check again on the next write."""
        settings = self.settings
        cull_limit = settings.cull_limit
        budget = min(cull_limit * (unchecked // MIN_WRITE_CHARGE), 1000)
        if cull_limit == 0:
            return False
        access = self.access
        # Held to the commit, as a flush holds it (so stats() never sees a batch counted nowhere);
        # not waited for: a flush under way writes the reads itself.
        flushing = access.flushing.acquire(blocking=False)
        batch = None
        over = False
        expired = evicted = 0  # counted once the transaction has committed
        try:
            with store.transaction() as state:
                written = state.execute(_LAST_INSERT).fetchone()[0]  # (no statement below sets it)
                expired = state.execute(
                    sql.DELETE_EXPIRED, (time.time(), max(budget, cull_limit))
                ).rowcount
                delete = sql.delete_by_policy(settings.eviction_policy)
                if delete is None:
                    return False
                volume = _volume(state)
                over = volume > settings.size_limit
                if over:
                    if flushing:
                        batch = access.take()
                        access.write(state.con, batch)
                    sparing = _SPARING_DELETE.get(settings.eviction_policy)
                    kept = (written, *(spared or _NOTHING_SPARED))
                    victims = (delete, ()) if sparing is None else (sparing, kept)
                    over, evicted = self._evict_until_within(state, victims, volume, budget)
        except BaseException as exc:
            expired = evicted = 0
            if batch is not None:  # not written: it goes out with the next flush
                access.give_back(batch)
            if isinstance(exc, Timeout):
                return False  # busy: the write itself succeeded; check again on a later write
            raise
        finally:
            if flushing:
                access.flushing.release()
            self.removed.expiry += max(expired, 0)
            self.removed.size += evicted
        return over

    def _evict_until_within(
        self, state: ThreadState, victims: tuple[str, tuple[Any, ...]], volume: int, budget: int
    ) -> tuple[bool, int]:
        """Evict victims in policy order (`victims`: the DELETE, and its parameters after the
        count), stopping as soon as the volume is within size_limit; True while still over,
        and how many were evicted.

        One victim first; while removals lower the volume, as many average rows as the
        overshoot (so a small cache — a FanoutCache shard holds a fraction of the limit — does not
        evict the item just written along with older ones, and a check of large inline rows
        takes two or three statements rather than one per row). Once a removal frees nothing
        (inline rows free database pages only when a page empties), as many as the overshoot
        plus one check interval: up to cull_limit victims for each write since the last check
        (`budget`, as python-diskcache culls up to cull_limit per write), so that one check of a
        cache of small items buys a whole check interval instead of finding it still over on the
        next write.
        """
        cull_limit, size_limit = self.settings.cull_limit, self.settings.size_limit
        limit = max(cull_limit, budget)
        delete, spared = victims
        removed = 0
        step = 1
        while removed < limit:
            count = state.execute(delete, (step, *spared)).rowcount
            if count <= 0:
                break
            removed += count
            after = _volume(state)
            if after <= size_limit:
                return False, removed
            # A removal that freed nothing: the overshoot plus one interval's worth of average
            # rows; one that freed bytes: the overshoot's worth (no more than is needed).
            step = min(limit - removed, self._rows_to_free(state, after, after >= volume))
            volume = after
        return True, removed

    def _rows_to_free(self, state: ThreadState, volume: int, interval: bool) -> int:
        """How many average rows make up the overshoot (plus one check interval with
        `interval`); all of the budget, or one row, where the database keeps no item count."""
        rows = state.execute(sql.STORED_COUNT).fetchall()
        count = int(rows[0][0]) if rows and rows[0][0] else 0
        if count <= 0:
            return 1 << 62 if interval else 1
        excess = volume - self.settings.size_limit + (self.every if interval else 0)
        return max(1, -(-excess * count // volume))


def _volume(state: ThreadState) -> int:
    used_pages, page_size, file_bytes = state.execute(sql.VOLUME).fetchone()
    return int(used_pages * page_size + (file_bytes or 0))
