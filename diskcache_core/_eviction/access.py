"""Eviction bookkeeping recorded in memory and written in batches.

What the eviction policy orders by — LRU access times, LFU counts, the store time an overwrite
refreshes under least-recently-stored — and the hit/miss statistics. python-diskcache opens a
write transaction on every get under LRU/LFU or with statistics on, and every overwrite moves
an index entry; here a get or an overwrite only updates a dict, and a background thread per
process writes the batch at most `FLUSH_INTERVAL` seconds later (sooner when it grows large);
close() and every cull write what is left. Eviction order across processes is therefore
approximate within that delay — the trade-off this module exists for.

What waits is bounded: at most `MAX_PENDING` keys per log, plus the one part of `_FLUSH_BATCH`
keys (in _eviction) being written (a size check writes the whole log in its transaction). A
thread that reads without pause holds the GIL that the background writer needs for every row it
writes, and outruns it; at the bound the noting thread writes the oldest part itself, or drops it
where it cannot without waiting (see `Evictor.relieve`).
"""

from __future__ import annotations

import atexit
import itertools
import os
import sqlite3
import threading
import weakref
from typing import Any, Protocol

from .._policies import policy_of
from .._store.schema import ADD_TO_COUNTER, REFRESH_COLUMN

__all__ = [
    "AccessLog", "FINAL_WAIT", "FLUSH_INTERVAL", "MAX_PENDING", "NOT_PENDING", "schedule_flush",
]

FLUSH_INTERVAL = 1.0  # seconds a recorded read may wait before it reaches the database
FLUSH_SIZE = 10_000  # distinct keys that trigger an early flush
# Keys a log holds at most (a FanoutCache's, per shard): 150-220 bytes a key besides the key
# itself, 4-6 MiB for short keys. Twice FLUSH_SIZE, so that a writer that keeps up never meets it.
MAX_PENDING = 20_000

NOT_PENDING = object()  # `AccessLog.stored`'s answer for a key that had nothing pending
# A batch taken for writing: refreshed column values by (db_key, raw), hits, misses.
# (Under least-frequently-used a value is ``[reads, time of the first read]``.)
Batch = tuple[dict[tuple[Any, Any], Any], int, int]


class AccessLog:
    """One cache's not-yet-written reads and store-time refreshes in this process."""

    def __init__(self, policy: str, statistics: bool | int) -> None:
        self.pending: dict[tuple[Any, Any], Any] = {}
        self.hits = 0
        self.misses = 0
        self.statistics = bool(statistics)
        self.scheduled = False  # a flush is arranged for the current batch
        self.dropped = 0  # keys whose bookkeeping was dropped at MAX_PENDING (in this process)
        self._lock = threading.Lock()
        # Held from taking a batch until it is written: a batch in flight is counted nowhere.
        self.flushing = threading.Lock()
        self.set_policy(policy)
        _logs.add(self)

    def set_policy(self, policy: str) -> None:
        """Follow the cache's eviction policy; what was pending for the old one is dropped."""
        found = policy_of(policy)
        self.read_column = found.read_column
        self.write_column = found.write_column
        self.custom_refresh = found.refresh  # a user-added policy's UPDATE
        self.column = self.read_column or self.write_column
        self.pending = {}
        self.scheduled = False

    @property
    def tracks_reads(self) -> bool:
        """Whether gets need recording at all (the get path skips this class otherwise)."""
        return self.read_column is not None or self.statistics

    @property
    def tracks_writes(self) -> bool:
        """Whether writes refresh a policy column through this log."""
        return self.write_column is not None

    def record(self, db_key: Any, raw: Any, hit: bool, now: float) -> bool:
        """Note one read; True when the cache must (re)schedule a flush: the batch was empty
        before, or has grown large enough to write early."""
        if not hit and not self.statistics:
            return False  # nothing to record: a flush must not be marked as arranged
        if hit and self.read_column is not None:
            self._note_use(db_key, raw, now)
        if self.statistics:
            with self._lock:
                if hit:
                    self.hits += 1
                else:
                    self.misses += 1
        return self.needs_schedule()

    def used(self, db_key: Any, raw: Any, now: float) -> bool:
        """Note a use that is not a get (an incr: python-diskcache applies the policy's read
        refresh there too), not counted as a hit; True as `record`."""
        if self.read_column is None:
            return False
        self._note_use(db_key, raw, now)
        return self.needs_schedule()

    def _note_use(self, db_key: Any, raw: Any, now: float) -> None:
        pending = self.pending
        if self.read_column == "access_count":
            key = (db_key, raw)
            with self._lock:
                counted = pending.get(key)
                if counted is None:
                    pending[key] = [1, now]  # reads, and the time of the first
                else:
                    counted[0] += 1
        else:  # access_time, or a user-added policy's: the time of the latest read
            pending[(db_key, raw)] = now

    def stored(self, db_key: Any, raw: Any, now: float) -> Any:
        """Note a write's store/access time; return what was pending for the key before
        (`NOT_PENDING` if nothing: for `unstore`). Once the write has stored an overwrite, the
        cache asks `needs_schedule` (not before: an insert's note is taken back)."""
        key = (db_key, raw)
        pending = self.pending
        previous = pending.get(key, NOT_PENDING)
        pending[key] = now
        return previous

    def store_time(self, db_key: Any, raw: Any, stored: float | None) -> float | None:
        """`stored` (a row's store_time), or the later store time pending for the key."""
        if self.write_column == "store_time":
            pending = self.pending.get((db_key, raw))
            if type(pending) is float and (stored is None or pending > stored):
                return pending
        return stored

    def unstore(self, db_key: Any, raw: Any, previous: Any) -> None:
        """The write `stored` noted did not happen: put back what was pending before."""
        if previous is NOT_PENDING:
            self.pending.pop((db_key, raw), None)
        else:
            self.pending[(db_key, raw)] = previous

    def needs_schedule(self) -> bool:
        """Whether the cache must (re)schedule a flush for what is pending now."""
        if not self.scheduled:
            self.scheduled = True
            return True
        return len(self.pending) >= FLUSH_SIZE

    def has_pending(self) -> bool:
        """Whether anything waits to be written."""
        return bool(self.pending or self.hits or self.misses)

    def forget(self, db_key: Any, raw: Any) -> None:
        """The item was removed: its pending bookkeeping must not land on a later row."""
        self.pending.pop((db_key, raw), None)

    def take(self) -> Batch:
        """Detach the batch for writing."""
        with self._lock:
            batch = (self.pending, self.hits, self.misses)
            self.pending = {}
            self.hits = self.misses = 0
            self.scheduled = False
        return batch

    def take_oldest(self, count: int, first: bool) -> Batch:
        """Detach the `count` keys noted longest ago, to be written as one part; the `first`
        part of a flush takes the hits and misses too, and arranges a new flush for what is
        noted from now on (as `take` does)."""
        with self._lock:
            pending = self.pending
            part: dict[tuple[Any, Any], Any] = {}
            for key in list(itertools.islice(pending, count)):
                value = pending.pop(key, NOT_PENDING)  # (`forget` takes no lock)
                if value is not NOT_PENDING:
                    part[key] = value
            if not first:
                return (part, 0, 0)
            batch = (part, self.hits, self.misses)
            self.hits = self.misses = 0
            self.scheduled = False
        return batch

    def drop_oldest(self, count: int) -> None:
        """Forget the `count` keys noted longest ago (at MAX_PENDING, where they cannot be
        written at once): the policy loses those reads, the memory stays bounded."""
        with self._lock:
            pending = self.pending
            for key in list(itertools.islice(pending, count)):
                if pending.pop(key, NOT_PENDING) is not NOT_PENDING:  # (`forget` takes no lock)
                    self.dropped += 1

    def count_dropped(self, count: int) -> None:
        """`count` more keys' bookkeeping was dropped (a part that could not be written)."""
        with self._lock:
            self.dropped += count

    def give_back(self, batch: Batch) -> None:
        """Re-attach a batch whose write failed (a busy database): it goes out next time, as
        far as MAX_PENDING allows (the rest is dropped)."""
        pending, hits, misses = batch
        with self._lock:
            for number, (key, value) in enumerate(pending.items()):
                if len(self.pending) >= MAX_PENDING:
                    self.dropped += len(pending) - number
                    break
                if self.column == "access_count":
                    counted = self.pending.get(key)
                    if counted is None:
                        self.pending[key] = value
                    else:
                        counted[0] += value[0]
                        counted[1] = min(counted[1], value[1])
                else:
                    self.pending.setdefault(key, value)
            self.hits += hits
            self.misses += misses

    def write(self, con: sqlite3.Connection, batch: Batch) -> None:
        """Write `batch` on `con`, inside the caller's write transaction."""
        pending, hits, misses = batch
        if pending and self.column == "access_count":
            # Only onto a row stored before the first of the reads: a key removed and stored
            # anew meanwhile (by any process) starts from no reads, as python-diskcache's does.
            con.executemany(
                REFRESH_COLUMN["access_count"],
                [(reads, key[0], key[1], first) for key, (reads, first) in pending.items()],
            )
        elif pending and self.column is not None:
            statement = self.custom_refresh or REFRESH_COLUMN[self.column]
            con.executemany(statement, [(value, key[0], key[1]) for key, value in pending.items()])
        if hits:
            con.execute(ADD_TO_COUNTER, (hits, "hits"))
        if misses:
            con.execute(ADD_TO_COUNTER, (misses, "misses"))

    def reset_after_fork(self) -> None:
        """The parent's unwritten reads are the parent's to write."""
        self.pending = {}
        self.hits = self.misses = self.dropped = 0
        self.scheduled = False
        self._lock = threading.Lock()
        self.flushing = threading.Lock()


class _Flushable(Protocol):
    """What the flusher needs of a cache's bookkeeping (the eviction part provides it)."""

    access: AccessLog

    def flush_access_log(self, timeout: float | None = None) -> None: ...

    def flush_finally(self) -> None: ...

    def close_connection(self) -> None: ...


_BACKGROUND_LOCK_WAIT = 0.1  # seconds the flusher waits for the write lock before retrying later
# Seconds, at least, close() and a normal exit wait for the write lock to write the last batch:
# there is no later round (a FanoutCache shard's 10 ms timeout would drop it at any contention).
FINAL_WAIT = 2.0


class _Flusher:
    """The per-process thread that writes every cache's batch each FLUSH_INTERVAL.

    The thread runs only while some batch is pending and exits when none is, so a process
    that forks after a burst of cache use usually has no extra thread left. While it writes it
    holds `busy`, and fork() waits for that (see the hooks below): a child never inherits
    SQLite in the middle of a statement.
    """

    def __init__(self) -> None:
        self.caches: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self.wake = threading.Event()
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()
        self.busy = threading.Lock()

    def schedule(self, cache: _Flushable) -> None:
        # Called only when a batch becomes non-empty or large, so taking the lock is cheap;
        # under the lock it cannot miss a thread that is just deciding to exit.
        with self.lock:
            self.caches.add(cache)
            if self.thread is None:
                self.thread = threading.Thread(
                    target=self._run, name="diskcache_core-access-flush", daemon=True
                )
                self.thread.start()
        if len(cache.access.pending) >= FLUSH_SIZE:
            self.wake.set()

    def _run(self) -> None:
        while True:
            self.wake.wait(FLUSH_INTERVAL)
            self.wake.clear()
            with self.busy:
                self.flush_all(_BACKGROUND_LOCK_WAIT)
                # Holding no connection between rounds, this thread leaves none open to a fork.
                for cache in list(self.caches):
                    cache.close_connection()
            with self.lock:
                if not any(cache.access.has_pending() for cache in list(self.caches)):
                    self.thread = None
                    return

    def flush_all(self, timeout: float | None = None) -> None:
        for cache in list(self.caches):
            try:
                cache.flush_access_log(timeout)
            except Exception:  # noqa: BLE001 - a closed or busy cache retries next round
                pass


_flusher = _Flusher()
_logs: "weakref.WeakSet[AccessLog]" = weakref.WeakSet()


def schedule_flush(cache: _Flushable) -> None:
    """Make sure `cache`'s batch is written within FLUSH_INTERVAL (at once when large)."""
    _flusher.schedule(cache)


def _before_fork() -> None:
    _flusher.busy.acquire()


def _after_fork_in_parent() -> None:
    _flusher.busy.release()


def _after_fork_in_child() -> None:
    global _flusher
    _flusher = _Flusher()
    for log in list(_logs):
        log.reset_after_fork()


@atexit.register
def _flush_at_exit() -> None:
    for cache in list(_flusher.caches):
        cache.flush_finally()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before_fork,
        after_in_parent=_after_fork_in_parent,
        after_in_child=_after_fork_in_child,
    )
