"""One SQLite connection per thread per cache, safe across fork().

SQLite forbids using — or closing — a connection inherited across ``fork()`` (invariant 4).
Instead of checking ``os.getpid()`` on every call (a system call on the hot path), a fork hook
tells every live pool in the child to drop its connections: they are parked in a module list
for the life of the child, so that not even garbage collection closes them, and the child opens
fresh ones on first use (the fork hooks and the parking are `forks`'; each pool's part is
`_close_idle_before_fork` and `_forget_inherited`).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import os.path as op
import sqlite3
import threading
import time
import warnings
import weakref
from typing import Any, Callable, NamedTuple

from . import workers as _workers
from .checkpointer import BACKSTOP_PAGES
from . import forks
from .dbfile import refuse_special_file
from .._log import lost_file
from .._errors import (
    DatabaseError, ReadOnlyCacheWarning, is_busy, note_interrupt, translate_sqlite_error,
)
from .creation import (
    RELEASE_FUNCTION, RELEASE_TRIGGERS, VERSION_FUNCTION, VERSION_INSERT_FUNCTION, VERSION_TRIGGERS,
)
from .schema import NEW_VALUE_FUNCTION, database_uri, set_pragma
from .mapwatch import watch
from .readonly import FetchedRows, ReadOnlyReader
from .versions import change_recorder
from .versionfile import (
    FILE_SIZE, LOST_WORDS, VERSION_FILE, WordsCell, remap_versions, versions_intact, weak_method, write_locked,
)
from .workers import close_if_idle

NO_VALUE = object()  # ThreadState.new_value before a statement sets it
# Bytes of WAL kept after a checkpoint: a bulk write may grow it far beyond, but not for good.
WAL_SIZE_LIMIT = 2**23
# Seconds between a thread's looks that its connection's database file is still the cache's
# (one stat, before a write): a removed directory is followed within this.
RECHECK_INTERVAL = 0.1
# Seconds at least that a read opening its thread's connection waits for a lock (another
# process's WAL recovery, or the checkpoint its last connection makes at close): never a false
# miss or a Timeout while no writer holds the data (python-diskcache retries 60 s too).
OPEN_WAIT = 60.0

__all__ = [
    "RECHECK_INTERVAL", "ConnectionPool", "FetchedRows", "NO_VALUE", "Opening", "PoolHooks",
    "ThreadState",
    "Transaction",
]



class Transaction:
    """What this thread's open transaction (or autocommit statement) has done so far: settled by
    `Store._after_commit` once it ends, undone by a rollback."""

    __slots__ = ("depth", "released", "created", "versions", "charge", "logged", "close_after")

    def __init__(self) -> None:
        # Nesting depth of explicit transactions (0: autocommit).
        self.depth = 0
        # Value files that committed-or-pending statements stopped naming (filled by a trigger).
        self.released: list[str] = []
        # Value files written for rows of the open transaction (removed if it rolls back).
        self.created: list[str] = []
        # Memory-tier buckets bumped by the open transaction or statement: version-word index
        # -> nonce (filled by VERSION_FUNCTION, published after the commit; see versions.py).
        self.versions: dict[int, int] = {}
        # Bytes written by the open transaction: counted towards the size check at its commit.
        self.charge = 0
        # Of those, the bytes written to the WAL: values stored inline (not in value files).
        self.logged = 0
        # close() was called inside this thread's transaction: closed once the transaction ends.
        self.close_after = False


class Opening:
    """What a connection was opened on, and when to look again that it still is the cache's."""

    __slots__ = ("identity", "recheck_at", "words", "inherited")

    def __init__(self) -> None:
        # The database file it opened, and when to look again that it is the cache's (`moved`).
        self.identity: Any = None
        self.recheck_at = 0.0
        # The version words its triggers bump (a memory tier keeps what it reads only if the
        # same).
        self.words: memoryview | None = None
        # Parked in a forked child (see the module docstring): the parent's, never used here.
        self.inherited = False


class ThreadState:
    """One thread's connection to one cache: the connection and its shortcuts, what its latest
    statement reported, its open transaction (`txn`) and what it was opened on (`opening`)."""

    __slots__ = ("con", "execute", "read", "write", "reader", "thread", "new_value", "inserted",
                 "txn", "opening")

    def __init__(self, con: sqlite3.Connection, thread: threading.Thread) -> None:
        self.con = con
        self.execute: Callable[..., sqlite3.Cursor] = con.execute
        # For reads whose rows are all fetched at once (``fetchall``: the statement has then run
        # to its end and been reset, so no read transaction stays open between calls): one
        # cursor, reused, saves ``con.execute`` making a new one (~0.2 us a get, measured).
        self.read: Callable[..., Any] = con.cursor().execute
        # For `Store.write`'s statements (none returns rows, so each has run to its end and been
        # reset when ``execute`` returns): one cursor, reused, as for reads (~0.2 us a write).
        self.write: Callable[..., sqlite3.Cursor] = con.cursor().execute
        # Runs the statements instead of `con` where this process may only read the database.
        self.reader: ReadOnlyReader | None = None
        self.thread = thread
        # The last value passed through NEW_VALUE_FUNCTION by this connection's statements.
        self.new_value: Any = NO_VALUE
        # Whether the latest `Store.write` inserted a row (set by the insert trigger's function).
        self.inserted = False
        self.txn = Transaction()
        self.opening = Opening()

    def close(self) -> None:
        writer = getattr(self.write, "__self__", None)
        if isinstance(writer, sqlite3.Cursor):
            # Its last statement, unfinalized, would keep the database open (a zombie of
            # sqlite3_close_v2) until the cursor is collected.
            writer.close()
        self.con.close()
        if self.reader is not None:
            self.reader.close()

    def capture(self, value: Any) -> Any:
        """SQL function body: remember `value` and pass it through."""
        try:
            self.new_value = value
        except BaseException as exc:  # (a signal handler's: see _errors.note_interrupt)
            note_interrupt(exc)
            raise
        return value


class PoolHooks(NamedTuple):
    """What a pool calls on its owner's behalf, given when it is made (each None: nothing)."""

    #: Told when the version words are mapped anew (the store, the memory tier: `_rebind`).
    rebind: Callable[[memoryview], None] | None = None
    #: Makes the directory and database anew, removed while open (None: that stays an error).
    recreate: Callable[[], None] | None = None
    #: Checks the directory before each connection opens (None: any directory).
    guard: Callable[[], None] | None = None


class ConnectionPool:
    """Opens, hands out and closes the per-thread connections of one cache database."""

    def __init__(
        self, path: str, timeout: float, configure: Callable[[sqlite3.Connection], None],
        hooks: PoolHooks = PoolHooks(),
    ) -> None:
        self.path = path
        self.timeout = timeout
        # Seconds SQLite's busy handler waits on the per-thread connections (0 once the lock
        # handoff wakes waiting writers instead: `wait_by_handoff`).
        self.busy_wait = timeout
        self._configure = configure
        self.local = threading.local()
        self._states: list[ThreadState] = []
        self._lock = threading.Lock()
        self.read_only = False
        self.immutable = False  # opening: the database cannot be read through a WAL index
        # The memory tier's version words (see versionfile.py; `words`); None while none is open.
        # Their file's identity, and who is told when they are mapped anew (`_check_versions`).
        self.cell = WordsCell()
        self.cell.remap = weak_method(self._remap_in_statement)
        self.words_identity: tuple[int, int] | None = None
        self.mapped: mmap.mmap | None = None  # their mapping (None: none, or LOST_WORDS)
        # Held to find them lost and to map them anew: one thread decides at a time (a check
        # made before another thread's recovery must not undo it).
        self._versions_lock = threading.RLock()
        self.hooks = hooks
        forks.register(self)
        # Dropped unclosed: its connections close (their SQL functions' cycle evades the gc).
        weakref.finalize(self, _close_states, self._states).atexit = False

    def wait_by_handoff(self) -> None:
        """Give the connections no busy handler of their own: this directory's lock handoff
        wakes a waiting writer when the lock is released (connections opened from now on;
        the Store calls this before it opens any)."""
        self.busy_wait = 0.0

    def connect(self, timeout: float | None = None) -> sqlite3.Connection:
        """A new connection in autocommit mode (transactions are explicit ``BEGIN IMMEDIATE``)."""
        wait = self.timeout if timeout is None else timeout
        if self.read_only:
            uri = database_uri(self.path, "mode=ro&immutable=1" if self.immutable else "mode=ro")
            return sqlite3.connect(uri, timeout=wait, isolation_level=None, uri=True,
                                   check_same_thread=False)
        return sqlite3.connect(self.path, timeout=wait, isolation_level=None,
                               check_same_thread=False)

    def state(self, retry: bool = False, wait: float | None = None) -> ThreadState:
        """This thread's state, opening its connection on first use. Opening waits the cache's
        timeout (`wait`, for a read) while the database is locked (another process's WAL
        recovery, or its last connection's checkpoint at close), and again and again with
        `retry`."""
        try:
            current: ThreadState = self.local.state
            return current
        except AttributeError:
            pass
        while True:
            try:
                state = self._open_state(self.timeout if wait is None else wait)
                break
            except sqlite3.Error as exc:
                if not (retry and is_busy(exc)):
                    raise translate_sqlite_error(exc, self.path) from exc
        with self._lock:
            self._close_dead_threads()
            self._states.append(state)
        self.local.state = state
        self.local.execute = state.execute
        self.local.read = state.read
        return state

    def _open_state(self, wait: float) -> ThreadState:
        if self.read_only:
            state = ThreadState(sqlite3.connect(":memory:", check_same_thread=False),
                                threading.current_thread())  # stands in: never written
            state.reader = ReadOnlyReader(self)
            state.execute = state.read = state.write = state.reader.execute
            return state
        hooks = self.hooks
        if hooks.guard is not None:
            hooks.guard()  # (a FanoutCache's shard: its directory must not be a link)
        refuse_special_file(self.path)  # never a planted link, even swapped in while open
        if hooks.recreate is not None and not op.exists(self.path):
            hooks.recreate()  # the directory was removed while open: the cache goes on, empty
        con = self.connect(timeout=wait)  # the setup below may find the database busy
        try:
            # The checkpoint thread copies the WAL as it grows; a writer does it only past this
            # (``sqlite_wal_autocheckpoint``, applied next, overrides it).
            con.execute(set_pragma("wal_autocheckpoint", BACKSTOP_PAGES)).fetchall()
            self._configure(con)
            con.execute(set_pragma("journal_size_limit", WAL_SIZE_LIMIT)).fetchall()
            state = ThreadState(con, threading.current_thread())
            con.create_function(RELEASE_FUNCTION, 1, state.txn.released.append)
            con.create_function(NEW_VALUE_FUNCTION, 1, state.capture)
            for statement in RELEASE_TRIGGERS:
                con.execute(statement)
            if self.words is None:
                raise RuntimeError("the version file must be open before the first write connection")
            self._check_versions()
            state.opening.words = self.words
            con.create_function(VERSION_FUNCTION, 1, change_recorder(state.txn, self.cell))
            con.create_function(
                VERSION_INSERT_FUNCTION, 1, change_recorder(state.txn, self.cell, state)
            )
            for statement in VERSION_TRIGGERS:
                con.execute(statement)
            con.execute(set_pragma("busy_timeout", int(self.busy_wait * 1000))).fetchall()
            state.opening.identity = self._database_file()
            state.opening.recheck_at = time.monotonic() + RECHECK_INTERVAL
        except BaseException:
            con.close()
            raise
        return state

    def moved(self, state: ThreadState) -> bool:
        """Whether the file at the cache's path is no longer the database `state`'s connection
        opened: the directory was removed (and perhaps made anew by another process), and
        that connection reads and writes a deleted file no other process sees."""
        return state.opening.identity is None or self._database_file() != state.opening.identity

    def _database_file(self) -> tuple[int, int] | None:
        """The file at the cache's path, not following a link (None: none, or no directory)."""
        try:
            info = os.stat(self.path, follow_symlinks=False)
        except OSError:
            return None
        return (info.st_dev, info.st_ino)

    @property
    def words(self) -> memoryview | None:
        """The version words (`LOST_WORDS` while their file is lost and not yet mapped anew)."""
        return self.cell.words

    @words.setter
    def words(self, words: memoryview | None) -> None:
        if words is not None and self.cell.words is None:
            watch(self)  # (a pool whose words are dropped again is checked in vain: harmless)
        self.cell.words = words
        self.mapped = words.obj if words is not None and isinstance(words.obj, mmap.mmap) else None

    def _check_versions(self) -> None:
        """Before a new connection's triggers are bound to the version words: if the cache
        directory was removed and made anew since they were mapped (this object closed, or a new
        thread), the connection has opened the new database, whose writers bump the new version
        file; if the version file alone was shrunk or replaced, the directory's is the one
        other processes bump from now on. Map that, and tell the store and the memory tier
        (`ensure_versions`)."""
        if self.words is LOST_WORDS or not self._intact():
            self.ensure_versions()

    # --- a lost version file (see _store/mapwatch.py) -------------------------------------------

    def _intact(self) -> bool:
        words, identity = self.words, self.words_identity
        return (
            words is None or identity is None or words is LOST_WORDS
            or versions_intact(words, identity, op.dirname(self.path))
        )

    def check_mapping(self) -> None:
        """(_mapwatch's thread, every WATCH_INTERVAL) Whether the version file is whole and still
        the directory's; if not, stop using it at once, and map it anew if that can be done
        now (else the next round or write tries again; a write raises where it cannot).

        A pool whose database is gone (its directory removed) is left to the writes, which
        follow the removal (`Store._recheck`): its mapping, of a removed file, stays whole."""
        with self._versions_lock:
            if self.words is not LOST_WORDS:
                if self._intact() or not op.exists(self.path):
                    return
                self.lose_versions()
            elif not op.exists(self.path):
                return
        self.ensure_versions(wait=0.0)  # (a writer holds the lock: the next round again)

    def versions_shrunk(self) -> bool:
        """Whether the mapped version file is shorter than its words (one ``fstat``, before
        each write: a store past the file's end would kill the process with SIGBUS)."""
        mapped = self.mapped
        return mapped is not None and mapped.size() < FILE_SIZE

    def versions_lost(self) -> bool:
        """Whether the version file was lost and not yet mapped anew (a write must not run)."""
        return self.words is LOST_WORDS or not self._intact()

    def lose_versions(self) -> None:
        """Switch every user of the version words to `LOST_WORDS`: nothing is answered from
        memory, filled, or stored through the lost mapping from now on. Each connection's next
        write recovers first (`Store._recheck`): marked before the memory tier is told, so that
        a write after the tier was seen emptied never runs its statement on the lost file."""
        with self._lock:
            for state in self._states:
                state.opening.recheck_at = 0.0
        self._rebind(LOST_WORDS, self.words_identity)
        lost_file(op.join(op.dirname(self.path), VERSION_FILE), "the memory tier answers nothing")

    def recover_versions(self, in_transaction: bool) -> None:
        """Before a write, the version file was found shrunk or replaced: stop using it (a
        store past a shrunk file's end kills the process) and map the directory's anew — at
        once inside a transaction, which holds the write lock (see `WordsCell.writable`)."""
        with self._versions_lock:
            if self.words is not LOST_WORDS:
                self.lose_versions()
        if not in_transaction:
            self.ensure_versions()

    def ensure_versions(self, wait: float | None = None) -> None:
        """Map the directory's version file anew after it was lost, every word renewed under
        the database's write lock (`_store.versionfile.remap_versions`). `wait`: for the lock (None:
        the cache's timeout). Raises DatabaseError (or a storage error) when that cannot be
        done now; the words stay `LOST_WORDS` then."""
        if self.words is not LOST_WORDS and self._intact():
            return
        # The write lock first, then `_versions_lock`: the order of a writing statement's
        # trigger that maps the file anew (`_remap_in_statement`).
        with write_locked(self.path, self.timeout if wait is None else wait):
            self._remap()

    def _remap(self) -> memoryview:
        """With the write lock held by this thread: the version words, mapped anew if they are
        lost or their file is. Raises as `ensure_versions` (the words stay `LOST_WORDS`)."""
        with self._versions_lock:
            words = self.words
            if words is not None and words is not LOST_WORDS and self._intact():
                return words  # (another thread mapped it anew meanwhile)
            if words is not LOST_WORDS:
                self.lose_versions()
            words, identity = remap_versions(self.path)
            self._rebind(words, identity)
            return words

    def _remap_in_statement(self) -> memoryview | None:
        """`_remap` for a writing statement's trigger (`WordsCell.writable`); None: it failed."""
        try:
            return self._remap()
        except (OSError, DatabaseError):
            return None

    def _rebind(self, words: memoryview, identity: tuple[int, int] | None) -> None:
        """Use `words` from now on: this pool's connections (their triggers read `cell`), the
        fill checks of those connected to the cache's database now (one connected to a removed
        one must fill nothing: `MemoryTier.begin_fill`), and the `rebind` hook (the store; the
        memory tier forgets all)."""
        self.words, self.words_identity = words, identity
        database = None if words is LOST_WORDS else self._database_file()
        with self._lock:
            for state in self._states:
                if words is LOST_WORDS or state.opening.identity == database:
                    state.opening.words = words
        if self.hooks.rebind is not None:
            self.hooks.rebind(words)

    def configure(self, con: sqlite3.Connection) -> None:
        """Apply the per-connection settings to `con`."""
        self._configure(con)

    def warn_unindexed(self) -> None:
        """Say once that this read-only database has no WAL index that reads could use."""
        warnings.warn(
            f"{self.path!r} may only be read here and no writer has it open (no -shm): each read"
            " opens it afresh until a writer does (slow, never stale). Give this user write"
            " permission on the cache directory to read at full speed.",
            ReadOnlyCacheWarning,
            stacklevel=4,
        )

    def _close_dead_threads(self) -> None:
        # Threads come and go (a web server's workers): close what finished threads left open.
        alive = []
        for state in self._states:
            if state.thread.is_alive():
                alive.append(state)
            else:
                state.close()
        self._states[:] = alive

    def close_all(self) -> None:
        """Close every connection of this pool that no thread can be using: the calling
        thread's, those of finished threads, and those of the library's idle worker threads
        (see `worker_task`). Each reopens on its thread's next use.

        Another live thread's connection is left open: closing it while that thread may be
        inside a statement, or inside a transaction, is not safe. It is closed by that thread's
        own close(), or once the thread has finished.
        """
        current = threading.current_thread()
        mine = getattr(self.local, "state", None)
        if mine is not None and (mine.txn.depth or mine.con.in_transaction):
            mine.txn.close_after = True  # inside this thread's transaction: closed when it ends
        with _workers.lock, self._lock:
            keep = []
            for state in self._states:
                thread = state.thread
                if state.txn.close_after:
                    keep.append(state)
                elif thread is current or not thread.is_alive() or close_if_idle(thread, self):
                    state.close()
                else:
                    keep.append(state)
            self._states[:] = keep
        if mine is None or not mine.txn.close_after:
            self._forget_thread_state()

    def _forget_thread_state(self) -> None:
        """Forget the calling thread's connection (closed, or not its own to use): the next call
        opens a new one."""
        for name in ("state", "execute", "read"):
            with contextlib.suppress(AttributeError):
                delattr(self.local, name)

    def close_current(self) -> None:
        """Close the calling thread's connection; the next call opens a new one."""
        state = getattr(self.local, "state", None)
        if state is None:
            return
        del self.local.state
        del self.local.execute
        del self.local.read
        with self._lock:
            if state in self._states:
                self._states.remove(state)
        state.close()

    def _close_idle_before_fork(self) -> None:
        """In the parent, just before ``fork()``: close the connections that no thread can be
        using — the forking thread's (unless inside a transaction) and those of finished threads.

        A connection open at the fork leaves SQLite's per-process state of the database (which
        locks it holds, its mapping of the WAL index) in the child, where new connections share
        it: the child then takes no locks of its own, and when the parent closes, SQLite removes
        the WAL and its index under the child, whose later reads are stale and whose writes are
        lost. What is closed here is reopened on next use, in parent and child alike.
        """
        if not self._lock.acquire(blocking=False):
            return  # another thread is opening or closing a connection: leave them all
        try:
            current = threading.current_thread()
            keep = []
            for state in self._states:
                idle = not state.thread.is_alive() or (
                    state.thread is current and not state.txn.depth and not state.con.in_transaction
                )
                if idle:
                    state.close()
                else:
                    keep.append(state)
            self._states[:] = keep
            mine = getattr(self.local, "state", None)
            if mine is not None and mine not in keep:
                self._forget_thread_state()
        finally:
            self._lock.release()

    def _forget_inherited(self) -> None:
        """In a forked child: park the parent's connections and start afresh."""
        for state in self._states:
            state.opening.inherited = True
        forks.park(self.path, list(self._states))
        self._states.clear()
        self._lock = threading.Lock()
        self._versions_lock = threading.RLock()
        # Only the forking thread lives on in the child; `local` stays the same object (caches
        # hold it for speed), so clearing that thread's entries is enough.
        self._forget_thread_state()


def _close_states(states: list[ThreadState]) -> None:
    """Close the connections of a pool no one can use any more (not at exit: a daemon thread
    may be in a statement)."""
    for state in states:
        with contextlib.suppress(Exception):
            state.close()  # (a finalizer: nothing to report to)
    states.clear()
