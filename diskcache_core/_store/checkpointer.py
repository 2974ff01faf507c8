"""WAL checkpoints and free-page trimming, off the writers' path.

SQLite checkpoints a WAL database on the connection whose commit takes the WAL past
``wal_autocheckpoint`` pages: that writer copies about a thousand pages into the database file
and waits for two fsyncs, milliseconds in the middle of one ``set``. Here one thread per
process does that work for every cache the process writes:

- While a cache is being written, every `INTERVAL` the thread runs a PASSIVE checkpoint on a
  connection of its own (again while writers added many pages meanwhile). It takes no lock a
  writer needs, so writers go on. The writers' own connections checkpoint only past
  `BACKSTOP_PAGES`: by then the thread has copied nearly all of the WAL, so the writer that
  crosses it copies a short tail (and its checkpoint, complete, lets the next writer start the
  WAL over, which the thread's alone, with writers adding pages meanwhile, cannot); and the WAL
  stays bounded when the thread is kept off the CPU.
- Under a stream of commits no PASSIVE checkpoint reaches the WAL's end (a commit comes while it
  waits for its fsyncs), so no writer could start the WAL over: it grew to `BACKSTOP_PAGES`,
  and each commit past that ran a checkpoint of its own until one happened to reach the end.
  So a round that finds the WAL past `CLOSE_PAGES` and all but copied *closes* it: it copies
  the last pages with the write lock held for that moment (one short checkpoint, only while a
  short checkpoint just before took under `_CLOSE_PASS_LIMIT`: writers would wait for its
  fsyncs), then starts the WAL over itself, so that the fsync of a new WAL's header is its own.
  Likewise when writes have stopped and a round's checkpoint copied the whole WAL (the end of a
  burst): the next writer would start the WAL over, waiting in its set for that fsync.
- Where the database uses incremental auto-vacuum (the default for new caches), freed pages stay
  in the file's free list, and the next writes reuse them: no commit relocates pages to shrink
  the file, as full auto-vacuum does in the middle of a cull. When the free list exceeds
  `TRIM_MIN_PAGES` and an eighth of the file, the thread returns `TRIM_PAGES` of them to the
  file system per round, under the cache's write lock, taken in one try (busy: next round).

The thread never opens SQLite's files itself (closing a descriptor of a file drops every POSIX
lock the process holds on it, SQLite's included): it asks SQLite. Since SQLite tells how long
the WAL is only by checkpointing it, each Store counts what its commits wrote (`wal_bytes`),
and a round checkpoints from `PASS_BYTES` on.

A commit notes its cache only once a round has work on it (`is_due`: `PASS_BYTES` written, or
free pages known to be left). The note wakes the thread, which sleeps on a condition between
rounds, and the round begins `INTERVAL` later, so that caches noted meanwhile share it. The
thread exits after `IDLE_EXIT` with no round due, and the next note starts it again. (A thread
woken every `INTERVAL` while writes went on, to find nothing due, lengthened the writers'
slowest sets: see "Checkpoints" in docs/design.rst.) It holds `busy` for a round, and fork()
waits for that: a child never inherits SQLite in the middle of a statement.
Each round opens and closes its own connections, so none is left to a fork, and ``close()``
waits only for a round working on its own cache, and makes a round that took it before skip it
(so that the cache's last close is SQLite's last: it checkpoints and removes the WAL).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import weakref
from typing import Any, Callable, ContextManager, Protocol

from . import schema as sql
from .._errors import DiskCacheError, Timeout, is_busy

__all__ = [
    "BACKSTOP_PAGES", "CLOSE_PAGES", "PASS_BYTES", "forget", "is_due", "note_commit", "rounds",
]

INTERVAL = 0.010  # seconds between rounds while caches are being written
IDLE_EXIT = 1.0  # seconds without a round due after which the thread exits (restarted on demand)
BACKSTOP_PAGES = 2000  # the writers' connections' wal_autocheckpoint (SQLite's: 1000)
_PASSES = 20  # checkpoints per round at most, while writers keep adding pages
_PASS_PAUSE = 0.001  # seconds between them
PASS_BYTES = 2**20  # bytes this process wrote to the WAL from which a round checkpoints
_AGAIN_BYTES = 2**18  # written during a checkpoint: another one in the same round
_TAIL_PAGES = 64  # pages a round may leave uncopied
CLOSE_PAGES = BACKSTOP_PAGES // 2  # a WAL this long, all but copied: the round closes it
# Seconds a short checkpoint may take for a round to close the WAL: writers wait for the close's
# fsyncs. A device stalled by writeback is skipped; a merely loaded machine is not (2 ms let
# almost no round close at a load of 5 on 2 cores, and the writers' own checkpoints came back).
_CLOSE_PASS_LIMIT = 0.050
_CLOSE_TRIES = 5  # tries for the write lock to close the WAL, `_PASS_PAUSE` apart
_PASSIVE = "PRAGMA wal_checkpoint(PASSIVE)"
_USER_VERSION = "PRAGMA user_version"  # unused by either library: rewritten to start the WAL over
TRIM_MIN_PAGES = 256  # free pages kept at least (the next writes reuse them)
TRIM_PAGES = 128  # free pages returned per round: the write lock is held briefly


class Checkpointed(Protocol):
    """What the thread needs of a cache's Store."""

    path: str
    wal_noted: bool
    wal_bytes: int  # written to the WAL since the last checkpoint, roughly
    free_pages_left: bool  # the last round left many free pages
    pool: Any

    def return_free_pages(
        self, pages: int, timeout: float | None = None, counted: bool = True
    ) -> None: ...

    def transaction(
        self, retry: bool = False, new_file: str | None = None, timeout: float | None = None,
        counted: bool = True,
    ) -> ContextManager[Any]: ...


class _Checkpointer:
    """The per-process thread; see the module docstring."""

    def __init__(self) -> None:
        self.noted: dict[int, weakref.ref[Any]] = {}
        # Stores closed since they were noted: a round that took them before the close skips
        # them, or its connection, opened after the close, would outlive the cache's last one.
        self.closed: weakref.WeakSet[Any] = weakref.WeakSet()
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()  # guards `noted`, `thread` and `current`
        self.round_done = threading.Condition(self.lock)
        self.wakeup = threading.Condition(self.lock)  # notified when a cache is noted
        self.current: Any = None  # the store a round is working on
        self.cut_short = False  # its cache is closing: no more passes on it
        self.busy = threading.Lock()  # held for a round: fork() waits for it
        self.rounds = 0  # rounds done (for tests and diagnostics)

    def note(self, store: Checkpointed) -> None:
        with self.lock:
            self.noted[id(store)] = weakref.ref(store)
            self.closed.discard(store)
            _known.add(store)
            if self.thread is None:
                self.thread = threading.Thread(
                    target=self._run, name="diskcache_core-checkpoint", daemon=True
                )
                self.thread.start()
            else:
                self.wakeup.notify()

    def forget(self, store: Checkpointed) -> None:
        """Drop `store` until its next write, once no round is working on it."""
        with self.lock:
            self.noted.pop(id(store), None)
            self.closed.add(store)
            store.wal_noted = False
            while self.current is store:
                self.cut_short = True  # no further passes: the round ends after this one
                self.round_done.wait()

    def _run(self) -> None:
        while True:
            with self.lock:
                if not self.noted:
                    self.wakeup.wait(IDLE_EXIT)
                if not self.noted:  # idle: a process that forks later has no thread to copy
                    self.thread = None
                    return
            time.sleep(INTERVAL)  # caches noted meanwhile join this round
            with self.busy:
                with self.lock:
                    stores = [ref() for ref in self.noted.values()]
                    self.noted.clear()
                    for store in stores:
                        if store is not None:
                            store.wal_noted = False  # its next commit notes it again
                for store in stores:
                    if store is not None:
                        self._work_on(store)
                self.rounds += 1

    def _work_on(self, store: Checkpointed) -> None:
        with self.lock:
            if store in self.closed:
                return  # closed since this round took it
            self.current = store
            self.cut_short = False
        more = False
        try:
            more = _round(store, lambda: not self.cut_short)
        except Exception:  # noqa: BLE001 - the thread must go on; a writer's backstop
            pass  # checkpoint bounds the WAL meanwhile
        finally:
            with self.lock:
                self.current = None
                if more and not store.wal_noted and not self.cut_short:  # pages left: again
                    self.noted[id(store)] = weakref.ref(store)
                    store.wal_noted = True
                self.round_done.notify_all()


def _close_wal(store: Checkpointed, con: sqlite3.Connection) -> None:
    """Copy the last pages of `store`'s WAL with writers held off for that moment, so that the
    WAL ends fully copied and the next writer starts it over; busy: a later round tries again.

    Under a stream of commits a PASSIVE checkpoint never ends at the WAL's end (a commit comes
    while it syncs), so the WAL grew to `BACKSTOP_PAGES` and each commit past it ran a
    checkpoint of its own, two fsyncs inside a ``set``, until one happened to end it. Here the
    pages are all but copied already: the write lock (one try, on this thread's connection, its
    release waking waiters as any writer's) is held for one short checkpoint of the tail. Then
    this thread starts the WAL over itself (`_start_wal_over`) unless a writer comes first.
    """
    try:
        for _ in range(_CLOSE_TRIES):
            try:
                with store.transaction(timeout=0.0, counted=False):
                    busy, log, copied = con.execute(_PASSIVE).fetchone()
            except Timeout:
                time.sleep(_PASS_PAUSE)  # a writer holds the lock: after its commit
                continue
            if not busy and log == copied:
                _start_wal_over(store)
            return
    except (DiskCacheError, sqlite3.Error, OSError):
        pass  # read-only now, full disk: the writers' backstop checkpoints meanwhile
    finally:
        store.pool.close_current()  # none left open to a fork or to close()


def _start_wal_over(store: Checkpointed) -> None:
    """Once a checkpoint has copied all of the WAL: commit one page (the database header,
    unchanged: ``user_version`` set to its own value) in a transaction that starts the WAL
    over, so that this thread, not a writer's ``set``, waits for the fsync SQLite makes of a
    new WAL's header. A writer that takes the lock first starts the WAL over itself."""
    try:
        with store.transaction(timeout=0.0, counted=False) as state:
            (version,) = state.execute(_USER_VERSION).fetchone()
            state.execute(f"{_USER_VERSION} = {int(version)}").fetchall()
    except (Timeout, DiskCacheError, sqlite3.Error, OSError):
        pass  # a writer holds the lock (it starts the WAL over); read-only now, full disk
    finally:
        store.pool.close_current()  # none left open to a fork or to close()


def _round(store: Checkpointed, go_on: Callable[[], bool]) -> bool:
    """Checkpoint `store`'s database (again while writers added many pages meanwhile and
    `go_on()`), and return some free pages if they are many; True when many are left."""
    if not is_due(store):
        return False  # a few pages: not worth two fsyncs yet (a later commit notes it again)
    try:
        con = sqlite3.connect(
            sql.database_uri(store.path, "mode=rw"), uri=True,
            isolation_level=None, timeout=0.0, check_same_thread=False,
        )
    except sqlite3.Error:
        return False  # gone, or not ours to open: the writers' backstop checkpoints
    try:
        busy, log, copied = 1, -1, -1
        for _ in range(_PASSES if store.wal_bytes >= PASS_BYTES else 0):
            store.wal_bytes = 0
            busy, log, copied = con.execute(_PASSIVE).fetchone()
            if busy or log - copied > _TAIL_PAGES or store.wal_bytes < _AGAIN_BYTES:
                break  # another checkpoint runs, not WAL (-1), held back, or little new
            if not go_on():
                return False  # its cache is closing
            time.sleep(_PASS_PAUSE)  # writers are adding pages: copy them as they come
        if not busy and log >= CLOSE_PAGES and log - copied <= _TAIL_PAGES and go_on():
            # One more pass copies what came meanwhile, and times what closing would take:
            # its two fsyncs, for which writers would wait. Slow now: not this round.
            began = time.monotonic()
            busy, log, copied = con.execute(_PASSIVE).fetchone()
            if not busy and time.monotonic() - began <= _CLOSE_PASS_LIMIT:
                _close_wal(store, con)
        elif not busy and log > 1 and log == copied and not store.wal_bytes and go_on():
            # All copied, and no commit of this process since (the end of a burst, say): unless
            # another's came (a checkpoint with nothing to copy syncs nothing), start the WAL
            # over here, or the next writer's set would wait for the new header's fsync.
            if tuple(con.execute(_PASSIVE).fetchone()) == (0, log, log):
                _start_wal_over(store)
        free = pages = 0
        if con.execute(sql.AUTO_VACUUM).fetchone()[0] == sql.INCREMENTAL_VACUUM:
            (free,) = con.execute(sql.FREELIST_COUNT).fetchone()
            (pages,) = con.execute(sql.PAGE_COUNT).fetchone()
    except sqlite3.Error as error:
        # Busy for a moment (another connection recovers or restarts the WAL): pages known to
        # be left are tried again next round. Another error: after the next commit.
        return is_busy(error) and store.free_pages_left
    finally:
        con.close()
    store.free_pages_left = free > TRIM_MIN_PAGES and free * 8 > pages
    if not store.free_pages_left or not go_on():
        return False
    try:
        store.return_free_pages(TRIM_PAGES, timeout=0.0, counted=False)  # one try for the lock
    except Timeout:
        return True  # the write lock was busy: again next round (the cache may go quiet now)
    except (DiskCacheError, sqlite3.Error, OSError):
        return False  # read-only now, full disk: a round after the next commit retries
    finally:
        store.pool.close_current()  # none left open to a fork or to close()
    return True


_checkpointer = _Checkpointer()
_known: "weakref.WeakSet[Any]" = weakref.WeakSet()  # every store noted in this process


def is_due(store: Checkpointed) -> bool:
    """Whether a round would have work on `store`: enough written to its WAL to checkpoint, or
    free pages known to be left (the test `_round` begins with)."""
    return store.wal_bytes >= PASS_BYTES or store.free_pages_left


def note_commit(store: Checkpointed) -> None:
    """`store` committed a write and `is_due` (called once per round at most: see
    ``Store.wal_noted``)."""
    store.wal_noted = True
    _checkpointer.note(store)


def forget(store: Checkpointed) -> None:
    """`store` is closing: no round works on it until it is written again."""
    _checkpointer.forget(store)


def rounds() -> int:
    """Rounds this process's thread has done."""
    return _checkpointer.rounds


def _before_fork() -> None:
    _checkpointer.busy.acquire()


def _after_fork_in_parent() -> None:
    _checkpointer.busy.release()


def _after_fork_in_child() -> None:
    global _checkpointer
    _checkpointer = _Checkpointer()  # no thread here; the child's writes start one
    for store in list(_known):
        store.wal_noted = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before_fork,
        after_in_parent=_after_fork_in_parent,
        after_in_child=_after_fork_in_child,
    )
