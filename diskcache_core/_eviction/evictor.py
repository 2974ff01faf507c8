"""The eviction part of a Cache: limits, culling, expiry, and the bookkeeping policies order by.

Bulk removals run in batches of `_BATCH` rows per transaction, so the write lock is never held
for long; a Timeout carries the count removed so far. The Store runs the size check
(_eviction/sizecheck.py, the budget it was made with) once per `SizeCheck.every` bytes written:
it drops expired items first, then evicts by policy while the cache is over its size_limit. Reads
and overwrites are noted in an `AccessLog` and written in batches (see _eviction/access.py),
`_FLUSH_BATCH` keys per transaction; at `MAX_PENDING` keys the thread that notes one more writes
or drops the oldest part itself (`relieve`).
"""

from __future__ import annotations

import time
from typing import Any

from .._store import reaper as _reaper
from .._store import schema as sql
from .access import FINAL_WAIT, MAX_PENDING, schedule_flush
from .._arguments import check_tag, check_time
from .._errors import DiskCacheError, Timeout
from .._metrics import EvictionCounts
from .._settings import Settings
from .._store.store import Store
from .sizecheck import SizeCheck

__all__ = ["Evictor"]

_BATCH = 100  # rows per transaction in expire/evict/clear/cull: bounded lock hold time
# Keys per transaction when the access log is written (2-7 us each, measured): a batch of 10,000
# written at once held the write lock for 20-40 ms, and every writer of the cache waited.
_FLUSH_BATCH = 256
_FREE_PAGES_BATCH = 1024  # free pages returned per transaction after bulk removals
#: set's and add's statements under least-recently-stored, which indexes store_time: they leave
#: it alone, and the overwrite's store time is the access log's batched refresh.
STORE_TIME_BATCHED = {
    statement: statement.replace(" store_time = excluded.store_time,", "")
    for statement in (sql.UPSERT, sql.ADD, *sql.PLAIN_VARIANT.values())
}


class Evictor:
    """Size limit, eviction policy and statistics of one cache; see the module docstring."""

    def __init__(self, store: Store, settings: Settings, sizing: SizeCheck) -> None:
        """`sizing`: the size budget `store` was made with (its access log is this one's)."""
        self.store = store
        self.settings = settings
        self.access = sizing.access
        self.sizing = sizing
        self._follow_access()
        # Under least-frequently-used, a write's key is spared by its own size check (`spares`).
        self.read_counts = self.access.read_column == "access_count"
        # Items this process removed, by reason (metrics); the size check counts its own here.
        self.removed: EvictionCounts = sizing.removed
        self.set_size_limit(settings.size_limit)

    # --- settings with derived state ----------------------------------------------------------

    # The setters take validated values (see CacheBase._apply_setting).

    def set_policy(self, value: str) -> None:
        self.settings.eviction_policy = value
        self.access.set_policy(self.settings.eviction_policy)
        self._follow_access()
        self.read_counts = self.access.read_column == "access_count"

    def set_statistics(self, value: int) -> None:
        self.settings.statistics = value
        self.access.statistics = bool(self.settings.statistics)
        self._follow_access()

    def _follow_access(self) -> None:
        """Whether a get (`tracks_reads`) or a write (`tracks_writes`) must note anything: as
        the access log says, but never on a read-only cache, which could write none of it."""
        writable = not self.store.pool.read_only
        self.tracks_reads = writable and self.access.tracks_reads
        self.tracks_writes = writable and self.access.tracks_writes
        # Under least-recently-stored an overwrite's store time is the access log's batched
        # refresh (store_time is indexed), not the set's own statement (STORE_TIME_BATCHED).
        self.batches_store_time = self.tracks_writes and self.access.write_column == "store_time"

    def set_size_limit(self, value: int) -> None:
        self.settings.size_limit = value
        self._set_check_interval()

    def set_exact(self, value: int) -> None:
        self.settings.exact_size_limit = value
        self._set_check_interval()

    def _set_check_interval(self) -> None:
        self.sizing.follow_limit()

    def spares(self, db_key: Any, raw: Any) -> tuple[Any, Any] | None:
        """The write context of a set or incr of `db_key`: what the size check its write may
        run must not evict (handed to `Store.write`). Under least-frequently-used only: there
        an overwritten item keeps its few reads, and could be the first victim."""
        return (db_key, raw) if self.read_counts else None

    # --- bookkeeping ----------------------------------------------------------------------------

    def note_read(self, db_key: Any, raw: Any, hit: bool, now: float) -> None:
        """A get found (or missed) `db_key` (call only when `tracks_reads`)."""
        if self.access.record(db_key, raw, hit, now):
            self._schedule()

    def note_use(self, db_key: Any, raw: Any, now: float) -> None:
        """An incr changed `db_key`: a use of it, as a read is, to the policy (not a hit)."""
        if self.access.used(db_key, raw, now):
            self._schedule()

    def _schedule(self) -> None:
        """A note asked for a flush (the batch was empty, or is large): arrange it, and past
        MAX_PENDING relieve the log here. Off the get path's common case: a note asks only
        once per flush, or while FLUSH_SIZE keys or more wait."""
        schedule_flush(self)
        if len(self.access.pending) >= MAX_PENDING:
            self.relieve()

    def relieve(self) -> None:
        """MAX_PENDING keys wait: the background writer has fallen behind (a thread reading
        without pause holds the GIL that writer needs for each row). Write the oldest part
        here, in one transaction that does not wait; where that cannot be (a flush or another
        process holds the lock, this thread is inside a transaction, the cache is read-only),
        drop it: the policy loses those reads, and memory stays bounded."""
        access = self.access
        if not access.flushing.acquire(blocking=False):
            access.drop_oldest(_FLUSH_BATCH)
            return
        try:
            state = getattr(self.store.local, "state", None)
            if state is not None and (state.txn.depth or state.con.in_transaction):
                access.drop_oldest(_FLUSH_BATCH)  # (its failure would undo the caller's block)
                return
            part = access.take_oldest(_FLUSH_BATCH, False)
            try:
                with self.store.transaction(timeout=0.0) as state:
                    access.write(state.con, part)
            except Exception:  # noqa: BLE001 - busy, read-only, full: the part is dropped
                access.count_dropped(len(part[0]))
        finally:
            access.flushing.release()

    def store_time(self, db_key: Any, raw: Any, stored: float | None) -> float | None:
        """The store time of `db_key` whose row says `stored`: a later one this process noted
        for an overwrite and has not written yet, under least-recently-stored (see _access)."""
        return self.access.store_time(db_key, raw, stored)

    def note_write(self, db_key: Any, raw: Any, now: float) -> Any:
        """A write is about to store `db_key` (call only when `tracks_writes`, and before the
        write: the size check the write may run must see the item as just stored, or it could
        evict it). Returns what to hand `undo_write` or `wrote` once the write is done."""
        return self.access.stored(db_key, raw, now)

    def undo_write(self, db_key: Any, raw: Any, previous: Any) -> None:
        """The write `note_write` announced stored nothing (it failed, or add found a live
        item): what was pending for the key before stands."""
        self.access.unstore(db_key, raw, previous)

    def wrote(self, db_key: Any, raw: Any, previous: Any, inserted: bool) -> None:
        """The write `note_write` announced stored the item. A new row holds the write's time
        already: its refresh would be an UPDATE for nothing (a seventh of the instructions of a
        set of a new key, a third on a FanoutCache), so it is taken back. An overwrite's is
        written within FLUSH_INTERVAL."""
        if inserted:
            self.access.unstore(db_key, raw, previous)
        elif self.access.needs_schedule():
            self._schedule()

    def note_removed(self, db_key: Any, raw: Any) -> None:
        """`db_key` was removed (a delete or pop): nothing to refresh for it any more."""
        self.removed.explicit += 1
        access = self.access
        if access.column is not None and access.pending:  # (nothing pending: nothing to forget)
            access.forget(db_key, raw)

    def flush_access_log(self, timeout: float | None = None) -> None:
        """Write this process's batched bookkeeping now; `timeout` replaces the cache's wait for
        the write lock for this call (the background flusher waits briefly, retries later)."""
        access = self.access
        # One part at a time, the oldest keys first, each taken and written under `flushing`:
        # a part another thread took is written (or given back) before this writes its own, and
        # `hits_misses` waits for the first part, which carries the hits and misses (counted
        # nowhere meanwhile). Only one part is ever out of the log; between parts a thread at
        # MAX_PENDING may write one itself. As many parts as the keys waiting now make up:
        # keys noted meanwhile do not keep this call going.
        parts = 1 + (len(access.pending) - 1) // _FLUSH_BATCH
        for number in range(max(parts, 1)):
            with access.flushing:
                if not access.has_pending():
                    return
                part = access.take_oldest(_FLUSH_BATCH, number == 0)
                try:
                    with self.store.transaction(timeout=timeout) as state:
                        access.write(state.con, part)
                except Exception:
                    access.give_back(part)
                    raise

    def flush_finally(self) -> None:
        """At close or exit: write what is pending, waiting for a busy write lock at least
        FINAL_WAIT; never raises (a busy, read-only or removed cache keeps its last batch)."""
        try:
            self.flush_access_log(max(self.store.pool.timeout, FINAL_WAIT))
        except Exception:  # noqa: BLE001 - closing must not fail
            pass

    def close_connection(self) -> None:
        """Close the calling thread's connection (the flusher's, between its rounds)."""
        self.store.pool.close_current()

    def hits_misses(self, reset: bool) -> tuple[int, int]:
        """Hits and misses counted so far (stored and pending); with `reset`, zero them."""
        with self.access.flushing:  # not while a batch is between memory and the database
            rows = dict(self.store.read(sql.SELECT_COUNTERS))
            stored = [rows.get(name) for name in ("hits", "misses")]  # (check() repairs others)
            hits, misses = [value if type(value) is int and value >= 0 else 0 for value in stored]
            result = (hits + self.access.hits, misses + self.access.misses)
        if reset:
            batch = self.access.take()
            try:
                with self.store.transaction() as state:
                    self.access.write(state.con, (batch[0], 0, 0))
                    state.execute(sql.RESET_HITS_MISSES)
            except BaseException:  # a Timeout, say: nothing was reset, nothing may be lost
                self.access.give_back(batch)
                raise
        return result

    # --- removals -------------------------------------------------------------------------------

    def _delete_batches(
        self, statement: str, params: tuple[Any, ...], retry: bool, reason: str
    ) -> int:
        """Run a batched DELETE until it removes nothing; Timeout carries the count so far.
        `reason`: the `EvictionCounts` field the removals count towards."""
        count = 0
        while True:
            try:
                removed, _ = self.store.write(statement, params + (_BATCH,), retry)
            except Timeout:
                raise Timeout(count) from None
            if removed <= 0:
                _reaper.drain()  # the caller sees the files gone, not just the rows
                self.return_free_pages()
                return count
            count += removed
            setattr(self.removed, reason, getattr(self.removed, reason) + removed)

    def expire(self, now: float | None = None, retry: bool = False) -> int:
        """Remove items that expired before `now` (default: the current time); return how many."""
        cutoff = time.time() if now is None else check_time("now", now)
        return self._delete_batches(sql.DELETE_EXPIRED, (cutoff,), retry, "expiry")

    def evict(self, tag: Any, retry: bool = False) -> int:
        """Remove every item with `tag`; return how many."""
        tag = check_tag(tag)
        return self._delete_batches(sql.DELETE_TAGGED, (tag,), retry, "tag")

    def clear(self, retry: bool = False) -> int:
        """Remove every item; return how many."""
        return self._delete_batches(sql.DELETE_ANY, (), retry, "explicit")

    def cull(self, retry: bool = False) -> int:
        """Remove expired items, then evict by policy until the volume is within size_limit."""
        count = self.expire(retry=retry)
        delete = sql.delete_by_policy(self.settings.eviction_policy)
        if delete is None:
            return count
        self.flush_access_log()
        try:
            while self.volume() > self.settings.size_limit:
                removed, _ = self.store.write(delete, (_BATCH // 10,), retry)
                if removed <= 0:
                    break
                count += removed
                self.removed.size += removed
        except Timeout:
            raise Timeout(count) from None
        _reaper.drain()
        self.return_free_pages()
        return count

    def return_free_pages(self) -> None:
        """Return the database's free pages to the file system, a batch per transaction (with
        incremental auto-vacuum; see "Free pages" in docs/eviction.rst). Best effort: a busy
        lock leaves the rest to the checkpoint thread."""
        store = self.store
        try:
            if store.read(sql.AUTO_VACUUM)[0][0] != sql.INCREMENTAL_VACUUM:
                return
            before = store.read(sql.FREELIST_COUNT)[0][0]
            while before > 0:
                store.return_free_pages(_FREE_PAGES_BATCH)
                after = store.read(sql.FREELIST_COUNT)[0][0]
                if after >= before:
                    return
                before = after
        except DiskCacheError:
            pass  # busy, read-only, full disk: the rows are gone all the same

    def evict_in_order(self, count: int, retry: bool = False) -> int:
        """Remove up to `count` items in the policy's order (store order under "none"), expired
        or not; return how many. Timeout carries the count so far."""
        if type(count) is not int or count < 0:
            raise ValueError(f"count must be an int >= 0, not {count!r}")
        delete = sql.delete_by_policy(self.settings.eviction_policy)
        if delete is None:
            delete = sql.DELETE_BY_POLICY["least-recently-stored"]
        self.flush_access_log()  # the order is that of every read noted so far
        removed = 0
        try:
            while removed < count:
                done, _ = self.store.write(delete, (min(_BATCH, count - removed),), retry)
                if done <= 0:
                    break
                removed += done
                self.removed.count += done
        except Timeout:
            raise Timeout(removed) from None
        _reaper.drain()
        return removed

    def volume(self) -> int:
        """Estimated bytes on disk: database pages in use plus value files."""
        ((used_pages, page_size, file_bytes),) = self.store.read(sql.VOLUME)
        return int(used_pages * page_size + (file_bytes or 0))
