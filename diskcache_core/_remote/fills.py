"""Copies of what Redis answered, kept off the caller's path: a background writer batches them.

A get that asks Redis used to write the answer into this host's SQLite database before it
returned (a transaction, often a value file): more than the Redis round trip itself. Now the
get hands the copy to its tier's `Fills` and returns; one writer thread per process (started
when the first remote tier opens, not on a get) writes each tier's waiting copies in one
transaction per batch, gathered for `GATHER` seconds.

Coherence is the stamps' as before: each copy carries the stamp read before Redis was asked,
is answered from the waiting map only while that stamp is unchanged, and is written with it
(or skipped when it changed already), so a change after the read makes it unservable wherever
it is. A copy lost (a busy lock, a full disk, a process that ends first) is a shortcut lost.

`renew_copies` is the refresher's (_remote/listenerprocess.py): the host's rows of items that
changed in Redis, read again in one MGET and written under the stamps read before it.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import weakref
from typing import Any, Callable, NamedTuple

from .._disk.disk import Disk
from .._errors import DiskCacheError
from .._log import REMOTE
from .._store import schema as sql
from .._store.connections import ThreadState
from .._store.store import MIN_WRITE_CHARGE, Store
from .._store.workers import worker_task
from .client import RemoteStore
from .form import decode_item, decode_key, stamp_hash
from .stamps import RemoteWords

__all__ = ["Fill", "Fills", "renew_copies", "write_copies"]

_log = REMOTE

MAX_WAITING = 10_000  # copies waiting per tier at most; past it a new one is dropped
# Seconds the writer gathers copies once the first wakes it: one transaction for them all, and
# one handoff of the GIL instead of one per get (a writer woken by each get made the caller
# wait for the GIL after its Redis answer: ~+50 % on a get, measured).
GATHER = 0.020
_WRITE_WAIT = 0.010  # seconds the writer waits for the write lock
_REFRESH_WAIT = 0.010  # seconds the refresher waits for the write lock


class Fill(NamedTuple):
    """One copy to keep: the item as Redis answered it, and the stamp read before asking."""

    key: Any  # the caller's key (a value file's name derives from it)
    mode: int
    db_value: Any
    expires: float | None
    word: int  # the stamp word
    stamp: int


# A bound method writing a batch (held weakly: the writer keeps no tier alive).
WriteBatch = Callable[[dict[tuple[Any, Any], Fill]], None]


class Fills:
    """One tier's copies waiting to be written, by ``(db_key, raw)``."""

    def __init__(self, write: WriteBatch) -> None:
        self.waiting: dict[tuple[Any, Any], Fill] = {}
        self._write = weakref.WeakMethod(write)
        self._lock = threading.Lock()  # one batch of this tier at a time (writer or `flush`)
        _all.add(self)
        _WRITER.ensure()

    def add(self, db_key: Any, raw: Any, fill: Fill) -> None:
        """Queue `fill` for the process's writer."""
        waiting = self.waiting
        if len(waiting) < MAX_WAITING:
            waiting[(db_key, raw)] = fill
            _WRITER.notify(self)

    def current(
        self, db_key: Any, raw: Any, word: int, stamps: memoryview, now: float
    ) -> Fill | None:
        """The copy of the key waiting to be written, if its stamp is current and it has not
        expired (then it may be answered, as a written copy would be)."""
        fill = self.waiting.get((db_key, raw))
        if fill is None or fill.word != word or stamps[word] != fill.stamp:
            return None
        expires = fill.expires
        return None if expires is not None and expires <= now else fill

    def write_waiting(self) -> None:
        """Write what waits now (in the calling thread), and forget it: written, or dropped."""
        write = self._write()
        with self._lock:
            while self.waiting:
                batch = dict(self.waiting)
                try:
                    if write is not None:
                        write(batch)
                finally:
                    waiting = self.waiting
                    for key, fill in batch.items():
                        if waiting.get(key) is fill:  # (not one queued again meanwhile)
                            waiting.pop(key, None)
                if write is None:
                    return

    def flush(self) -> None:
        """Write the copies waiting now, in the calling thread (its tier's `close` calls it
        before the store closes)."""
        self.write_waiting()


class _Writer:
    """The process's writer thread: it writes the waiting copies of each tier that has some."""

    def __init__(self) -> None:
        self._pid = 0
        self._queue: dict[int, Fills] = {}
        self._wake = threading.Event()
        self._start_lock = threading.Lock()

    def ensure(self) -> None:
        """A running writer in this process (a forked child starts its own)."""
        if self._pid == os.getpid():
            return
        with self._start_lock:
            if self._pid == os.getpid():
                return
            self._queue = {}
            self._wake = threading.Event()
            thread = threading.Thread(
                target=self._run, name="diskcache_core-remote-fills", daemon=True
            )
            thread.start()
            self._pid = os.getpid()

    def notify(self, fills: Fills) -> None:
        """`fills` has copies waiting."""
        if not self._pid:  # (0 in a forked child, until it starts its own: no getpid() here)
            self.ensure()
        self._queue[id(fills)] = fills
        wake = self._wake
        if not wake.is_set():  # (the writer clears it just before it takes the queue)
            wake.set()

    def _run(self) -> None:
        wake = self._wake
        queue = self._queue
        while True:
            wake.wait()
            time.sleep(GATHER)  # (the GIL released: the gets meanwhile wake no one)
            wake.clear()
            while queue:
                taken = list(queue.values())
                for fills in taken:
                    queue.pop(id(fills), None)
                for fills in taken:
                    try:
                        with worker_task():  # (its connections: `close` may close them idle)
                            fills.write_waiting()
                    except Exception:  # a shortcut lost; the writer carries on for the others
                        _log.debug("copies of a remote's answers not written", exc_info=True)
                taken = []


def write_copies(
    store: Store, disk: Disk, stamps: memoryview, batch: dict[tuple[Any, Any], Fill]
) -> None:
    """Write waiting copies into `store` in one transaction (`stamps`: the tier's words, the
    file's size checked just before, `RemoteWords.checked_words`):
    those whose stamp changed since are skipped (a later change made them unservable). The
    write lock is waited for briefly; busy, a full disk, read-only: the batch is dropped
    (the copies are only a shortcut)."""
    limit = disk.min_file_size
    now = time.time()
    inline_rows: list[tuple[Any, ...]] = []
    inline_charge = 0
    file_rows: list[tuple[tuple[Any, ...], str, int]] = []
    # The stamps read at once, in one tight loop right after the caller checked the file's size
    # (a background thread reading a mapped file that was just truncated dies of SIGBUS: the
    # value files below take milliseconds, so no stamp is read in between them).
    current = [item for item in batch.items() if stamps[item[1].word] == item[1].stamp]
    for (db_key, raw), fill in current:
        mode, db_value = fill.mode, fill.db_value
        inline = len(db_value) if type(db_value) in (bytes, str) else 0
        if inline >= limit > 0:
            try:
                plain = disk.fetch(mode, None, db_value, False)
                size, mode, filename, db_value = disk.store(plain, False, key=fill.key)
            except OSError:
                continue
            params = (db_key, raw, now, fill.expires, fill.stamp, size, mode, filename,
                      db_value)
            if filename is not None:
                file_rows.append((params, filename, max(size, MIN_WRITE_CHARGE)))
                continue
        else:
            params = (db_key, raw, now, fill.expires, fill.stamp, 0, mode, None, db_value)
        inline_rows.append(params)
        inline_charge += max(inline, MIN_WRITE_CHARGE)
    if not inline_rows and not file_rows:
        return
    try:
        with store.transaction(timeout=_WRITE_WAIT) as state:
            if inline_rows:  # one call for the batch: the GIL is the caller's meanwhile
                _upsert_rows(state, inline_rows, inline_charge)
            for params, filename, charge in file_rows:
                store.write(sql.UPSERT, params, False, filename, charge)
    except sqlite3.Error:  # (executemany's own, untranslated): as below
        _drop_files(store, file_rows)
    except DiskCacheError:
        _drop_files(store, file_rows)


def renew_copies(
    store: Store, disk: Disk, remote: RemoteStore, words: RemoteWords, stamps: memoryview,
    names: list[bytes],
) -> int:
    """Renew this host's copies of items that just changed in Redis; how many were renewed
    (`RemoteTier.refresh`, the refresher's: _remote/listenerprocess.py).

    For each name (a Redis name without the prefix, its stamp just bumped) whose item this
    host holds a row of, the new value is read from Redis (one MGET) and kept under the stamp
    read before asking, exactly as a reader's fill keeps it, so a change after the read makes
    the copy unservable again. Only inline values are renewed: an item this host holds as a
    value file is not read from Redis at all, and waits for a reader, as does a new value at
    or above ``disk_min_file_size``. A busy lock is waited for briefly.
    """
    wanted: dict[tuple[Any, Any], bytes] = {}
    for name in names:
        decoded = decode_key(name)
        if decoded is not None:
            wanted[decoded] = name
    if not wanted:
        return 0
    # The rows held, in one query (a query per name cost ~6 us each, on the refresher's path).
    pairs = list(wanted)
    rows = store.read(_held_rows(len(pairs)), [part for pair in pairs for part in pair])
    found_rows = {(db_key, raw) for db_key, raw in rows}
    held = [
        (db_key, raw, name, words.index(stamp_hash(name)))
        for (db_key, raw), name in wanted.items() if (db_key, raw) in found_rows
    ]
    if not held:
        return 0
    before = [stamps[index] for _, _, _, index in held]  # before Redis is asked
    found = remote.get_many([remote.name(name) for _, _, name, _ in held])
    limit = disk.min_file_size
    now = time.time()
    renewed: list[tuple[Any, ...]] = []
    charge = 0
    for (db_key, raw, _, index), stamp, data in zip(held, before, found):
        if data is None or stamps[index] != stamp:
            continue  # gone from Redis, or changed again: the next reader asks Redis
        item = decode_item(data)
        db_value = item.db_value
        inline = len(db_value) if type(db_value) in (bytes, str) else 0
        if (item.expire_time is not None and item.expire_time <= now) or inline >= limit > 0:
            continue
        renewed.append((db_key, raw, now, item.expire_time, stamp, 0, item.mode, None, db_value))
        charge += max(inline, MIN_WRITE_CHARGE)
    if not renewed:
        return 0
    # One call for the batch, as `write_copies` (a write per row cost ~20 us each). Rows the
    # memory tiers of the host hold are validated by the stamps, not by the version words.
    try:
        with store.transaction(timeout=_REFRESH_WAIT, counted=False) as state:
            _upsert_rows(state, renewed, charge)
    except sqlite3.Error:  # (executemany's own, untranslated: a full disk, say) not renewed
        return 0
    return len(renewed)


def _upsert_rows(state: ThreadState, rows: list[tuple[Any, ...]], charge: int) -> None:
    """Upsert inline `rows` in the open transaction of `state` (`Store.transaction`'s) in one
    call, their `charge` bytes counted as its writes are (sqlite3.Error raised as it is)."""
    state.con.executemany(sql.UPSERT, rows)
    state.txn.charge += charge
    state.txn.logged += charge


def _held_rows(count: int) -> str:
    """The query for which of `count` (key, raw) pairs this host holds an inline row of."""
    # The pairs first, each looked up in the (key, raw) index (CROSS JOIN keeps that order:
    # ``(key, raw) IN (VALUES ...)`` scanned the whole table).
    return (
        "SELECT c.key, c.raw FROM (VALUES " + ", ".join(["(?, ?)"] * count) + ") AS v"
        " CROSS JOIN Cache AS c ON c.key = v.column1 AND c.raw = v.column2"
        " WHERE c.filename IS NULL"
    )


def _drop_files(store: Store, file_rows: list[tuple[tuple[Any, ...], str, int]]) -> None:
    """Value files written for copies that were not stored after all."""
    for _, filename, _ in file_rows:
        store.forget_new_file(filename)


_WRITER = _Writer()
_all: "weakref.WeakSet[Fills]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """The parent's writer may have held a tier's lock at the fork: it would never be released."""
    for fills in list(_all):
        fills._lock = threading.Lock()
    _WRITER._pid = 0  # (the parent's writer thread is not in this process)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
