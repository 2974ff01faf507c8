"""One SQLite connection per thread per cache, safe across fork().

SQLite forbids using — or closing — a connection inherited across ``fork()`` (invariant 4).
Instead of checking ``os.getpid()`` on every call (a system call on the hot path), a fork hook
tells every live pool in the child to drop its connections: they are parked in a module list
for the life of the child, so that not even garbage collection closes them, and the child opens
fresh ones on first use. Where a parked connection leaves SQLite's per-process state of a
database in the child, the child takes the file locks that state claims (`_hold_inherited`).
"""

from __future__ import annotations

import contextlib
import os
import os.path as op
import sqlite3
import stat
import threading
import time
import warnings
import weakref
from typing import Any, Callable, Iterator

from . import _workers
from ._checkpointer import BACKSTOP_PAGES
from ._dbfile import in_wal_mode, open_if_exists, refuse_special_file
from ._errors import (
    DatabaseError, ReadOnlyCacheWarning, is_busy, note_interrupt, translate_sqlite_error,
)
from ._memory import change_recorder
from ._ownership import ownership_of
from ._schema import (
    NEW_VALUE_FUNCTION,
    RELEASE_FUNCTION,
    RELEASE_TRIGGERS,
    VERSION_FUNCTION,
    VERSION_INSERT_FUNCTION,
    VERSION_TRIGGERS,
    database_uri,
    set_pragma,
)
from ._versionfile import open_versions, versions_identity
from ._workers import close_if_idle

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
_UNINDEXED_READ_TRIES = 10  # an immutable read whose file changed meanwhile is read again

__all__ = ["RECHECK_INTERVAL", "ConnectionPool", "FetchedRows", "NO_VALUE", "ThreadState"]

# Connections inherited from a parent process: never used, never closed, never collected.
_INHERITED: list[Any] = []
# SQLite's POSIX locks (os_unix.c; the lock-byte page of its file format): a connection's SHARED
# lock on a database is a read lock on these bytes of the file, and each connection that maps a
# WAL index holds a read lock on its "dead man switch" byte while it does.
_SHARED_FIRST = 2**30 + 2
_SHARED_SIZE = 510
_WAL_INDEX_DMS = 128
_LOCK_TRIES = 200  # a lock held exclusively for a moment (a closing connection's check) is retried
# Descriptors of the databases (and WAL indexes) whose SQLite state a child inherited, kept open
# for the life of the process (closing one would drop all its locks on that file), per file.
_HELD: dict[tuple[int, int], tuple[int, int]] = {}
_live_pools: "weakref.WeakSet[ConnectionPool]" = weakref.WeakSet()


class ThreadState:
    """One thread's connection to one cache, and the files its open transaction touched."""

    __slots__ = (
        "con", "execute", "read", "released", "created", "depth", "thread", "new_value",
        "versions", "charge", "logged", "inserted", "reader", "close_after", "inherited",
        "identity", "recheck_at", "words",
    )  # fmt: skip

    def __init__(self, con: sqlite3.Connection, thread: threading.Thread) -> None:
        self.con = con
        self.execute: Callable[..., sqlite3.Cursor] = con.execute
        # For reads whose rows are all fetched at once (``fetchall``: the statement has then run
        # to its end and been reset, so no read transaction stays open between calls): one
        # cursor, reused, saves ``con.execute`` making a new one (~0.2 us a get, measured).
        self.read: Callable[..., Any] = con.cursor().execute
        # Value files that committed-or-pending statements stopped naming (filled by a trigger).
        self.released: list[str] = []
        # Value files written for rows of the open transaction (removed if it rolls back).
        self.created: list[str] = []
        # Nesting depth of explicit transactions (0: autocommit).
        self.depth = 0
        self.thread = thread
        # The last value passed through NEW_VALUE_FUNCTION by this connection's statements.
        self.new_value: Any = NO_VALUE
        # Memory-tier buckets bumped by the open transaction or statement: version-word index
        # -> nonce (filled by VERSION_FUNCTION, published after the commit; see _memory.py).
        self.versions: dict[int, int] = {}
        # Bytes written by the open transaction: counted towards the size check at its commit.
        self.charge = 0
        # Of those, the bytes written to the WAL: values stored inline (not in value files).
        self.logged = 0
        # Whether the latest `Store.write` inserted a row (set by the insert trigger's function).
        self.inserted = False
        # Runs the statements instead of `con` where this process may only read the database.
        self.reader: ReadOnlyReader | None = None
        # close() was called inside this thread's transaction: closed once the transaction ends.
        self.close_after = False
        # Parked in a forked child (see the module docstring): the parent's, never used here.
        self.inherited = False
        # The database file it opened, and when to look again that it is the cache's (`moved`);
        # the version words its triggers bump (a memory tier keeps what it reads only if the same).
        self.identity: Any = None
        self.recheck_at = 0.0
        self.words: memoryview | None = None

    def close(self) -> None:
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

    def insert_recorder(self, item_changed: Callable[[Any], None]) -> Callable[[Any], None]:
        """The insert trigger's SQL function: `item_changed`, and note the insert."""

        def item_inserted(db_key: Any) -> None:
            try:
                self.inserted = True
                item_changed(db_key)
            except BaseException as exc:  # (as in capture)
                note_interrupt(exc)
                raise

        return item_inserted


class ConnectionPool:
    """Opens, hands out and closes the per-thread connections of one cache database."""

    def __init__(self, path: str, timeout: float, configure: Callable[[sqlite3.Connection], None]):
        self.path = path
        self.timeout = timeout
        # Seconds SQLite's busy handler waits on the per-thread connections (0 where the lock
        # handoff wakes waiting writers instead; see _store.Store).
        self.busy_wait = timeout
        self._configure = configure
        self.local = threading.local()
        self._states: list[ThreadState] = []
        self._lock = threading.Lock()
        self.read_only = False
        self.immutable = False  # opening: the database cannot be read through a WAL index
        # The memory tier's version words (see _versionfile); None while none is open. Their
        # file's identity, and who is told when they are mapped anew (`_check_versions`).
        self.words: memoryview | None = None
        self.words_identity: tuple[int, int] | None = None
        self.rebinds: list[Callable[[memoryview], None]] = []
        # Makes the directory and database anew, removed while open (None: stays an error);
        # checks the directory before each connection (None: any directory).
        self.recreate: Callable[[], None] | None = None
        self.guard: Callable[[], None] | None = None
        _live_pools.add(self)
        # Dropped unclosed: its connections close (their SQL functions' cycle evades the gc).
        weakref.finalize(self, _close_states, self._states).atexit = False

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
            state.execute = state.read = state.reader.execute
            return state
        if self.guard is not None:
            self.guard()  # (a FanoutCache's shard: its directory must not be a link)
        refuse_special_file(self.path)  # never a planted link, even swapped in while open
        if self.recreate is not None and not op.exists(self.path):
            self.recreate()  # the directory was removed while open: the cache goes on, empty
        con = self.connect(timeout=wait)  # the setup below may find the database busy
        try:
            # The checkpoint thread copies the WAL as it grows; a writer does it only past this
            # (``sqlite_wal_autocheckpoint``, applied next, overrides it).
            con.execute(set_pragma("wal_autocheckpoint", BACKSTOP_PAGES)).fetchall()
            self._configure(con)
            con.execute(set_pragma("journal_size_limit", WAL_SIZE_LIMIT)).fetchall()
            state = ThreadState(con, threading.current_thread())
            con.create_function(RELEASE_FUNCTION, 1, state.released.append)
            con.create_function(NEW_VALUE_FUNCTION, 1, state.capture)
            for statement in RELEASE_TRIGGERS:
                con.execute(statement)
            if self.words is None:
                raise RuntimeError("the version file must be open before the first write connection")
            self._check_versions()
            state.words = self.words
            item_changed = change_recorder(state, self.words)
            con.create_function(VERSION_FUNCTION, 1, item_changed)
            con.create_function(VERSION_INSERT_FUNCTION, 1, state.insert_recorder(item_changed))
            for statement in VERSION_TRIGGERS:
                con.execute(statement)
            con.execute(set_pragma("busy_timeout", int(self.busy_wait * 1000))).fetchall()
            state.identity = self._database_file()
            state.recheck_at = time.monotonic() + RECHECK_INTERVAL
        except BaseException:
            con.close()
            raise
        return state

    def moved(self, state: ThreadState) -> bool:
        """Whether the file at the cache's path is no longer the database `state`'s connection
        opened: the directory was removed (and perhaps made anew by another process), and
        that connection reads and writes a deleted file no other process sees."""
        return state.identity is None or self._database_file() != state.identity

    def _database_file(self) -> tuple[int, int] | None:
        """The file at the cache's path, not following a link (None: none, or no directory)."""
        try:
            info = os.stat(self.path, follow_symlinks=False)
        except OSError:
            return None
        return (info.st_dev, info.st_ino)

    def _check_versions(self) -> None:
        """Before a new connection's triggers are bound to the version words: if the cache
        directory was removed and made anew since they were mapped (this object closed, or a new
        thread), the connection has opened the new database, whose writers bump the new version
        file; map that, and tell the store and the memory tier (`rebinds`)."""
        directory = op.dirname(self.path)
        if versions_identity(directory) == self.words_identity:
            return
        self.words, self.words_identity = open_versions(directory, ownership_of(self.path))
        for rebind in self.rebinds:
            rebind(self.words)

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
        if mine is not None and (mine.depth or mine.con.in_transaction):
            mine.close_after = True  # inside this thread's transaction: closed when it ends
        with _workers.lock, self._lock:
            keep = []
            for state in self._states:
                thread = state.thread
                if state.close_after:
                    keep.append(state)
                elif thread is current or not thread.is_alive() or close_if_idle(thread, self):
                    state.close()
                else:
                    keep.append(state)
            self._states[:] = keep
        if mine is None or not mine.close_after:
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
                    state.thread is current and not state.depth and not state.con.in_transaction
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
        if self._states:
            _hold_inherited(self.path)
        for state in self._states:
            state.inherited = True
        _INHERITED.extend(self._states)
        self._states.clear()
        self._lock = threading.Lock()
        # Only the forking thread lives on in the child; `local` stays the same object (caches
        # hold it for speed), so clearing that thread's entries is enough.
        self._forget_thread_state()


class ReadOnlyReader:
    """Reads, for one thread, a database this process may not write (another user's cache, a
    read-only mount of a cache that is written elsewhere), never from a frozen snapshot.

    SQLite lets such a reader use the writers' WAL index (``-shm``) read-only; but when the last
    writer closes, the index is removed, and a later writer makes a new one that a connection
    opened before never sees. So each statement first checks that the index file is still the
    one its connection opened (one ``stat``), and reconnects when it is not. With no index at all
    (no writer has the database open), the file is the whole truth: it is read as immutable, on a
    connection of its own, and read again if the file changed meanwhile.
    """

    __slots__ = ("_pool", "_shm", "_con", "_opened_with", "_pin", "_bounced")

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool
        self._shm = pool.path + "-shm"
        self._con: sqlite3.Connection | None = None
        self._opened_with: tuple[int, int] | None = None  # the index file `_con` was opened with
        # A descriptor of that file, held so that its inode number cannot name a new file.
        self._pin = -1
        self._bounced = False  # reading with the index, after reading without it failed

    def execute(self, statement: str, params: Any = ()) -> Any:
        con = self._con
        if con is not None and _identity(self._shm) == self._opened_with:
            return con.execute(statement, params)
        self.close()
        pin = open_if_exists(self._shm)
        if pin != -1:
            try:
                con, cursor = self._run_on_new_connection(statement, params)
            except BaseException as exc:
                os.close(pin)
                if not (isinstance(exc, sqlite3.OperationalError) and _cannot_open_wal_index(exc)):
                    raise
            else:
                info = os.fstat(pin)
                self._con, self._opened_with, self._pin = con, (info.st_dev, info.st_ino), pin
                return cursor
        if not in_wal_mode(self._pool.path):
            # A rollback journal: SQLite's file locks keep reads whole; no index to follow.
            self._con, cursor = self._run_on_new_connection(statement, params)
            self._opened_with = None
            return cursor
        return self._read_unindexed(statement, params)

    def _run_on_new_connection(self, statement: str, params: Any) -> tuple[sqlite3.Connection, Any]:
        """A new configured connection and the cursor of `statement` run on it (the connection
        is closed again if that fails)."""
        con = self._pool.connect()
        try:
            self._pool.configure(con)
            return con, con.execute(statement, params)
        except BaseException:
            con.close()
            raise

    def _read_unindexed(self, statement: str, params: Any) -> FetchedRows:
        path = self._pool.path
        for _ in range(_UNINDEXED_READ_TRIES):
            before = _identity(path, with_time=True)
            con = sqlite3.connect(database_uri(path, "mode=ro&immutable=1"), uri=True,
                                  isolation_level=None, check_same_thread=False)
            try:
                rows = con.execute(statement, params).fetchall()
            finally:
                con.close()
            if before == _identity(path, with_time=True) and _identity(self._shm) is None:
                return FetchedRows(rows)
            if _identity(self._shm) is not None:  # a writer started meanwhile: use its index
                if self._bounced:  # it was there, and could not be used, just now
                    raise DatabaseError(
                        f"{path!r} cannot be read here: its WAL index is there, but neither it"
                        " nor the WAL can be opened (a -wal planted as a link, or unreadable?)"
                    )
                self._bounced = True
                try:
                    return FetchedRows(self.execute(statement, params).fetchall())
                finally:
                    self._bounced = False
        raise sqlite3.OperationalError("the database kept changing during a read-only read")

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None
        if self._pin != -1:
            os.close(self._pin)
            self._pin = -1


class FetchedRows:
    """The rows of a statement already run, with the cursor methods that readers use."""

    __slots__ = ("_rows", "rowcount")

    def __init__(self, rows: list[Any], rowcount: int = -1) -> None:
        self._rows = rows
        self.rowcount = rowcount  # rows a write changed (-1: a read), as a cursor's

    def fetchone(self) -> Any:
        return self._rows[0] if self._rows else None

    def fetchall(self) -> list[Any]:
        return self._rows

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows)


def _cannot_open_wal_index(exc: sqlite3.Error) -> bool:
    """Whether a read-only connection failed for want of a WAL index it could open or make
    (SQLITE_CANTOPEN, or SQLITE_READONLY_DIRECTORY/_CANTINIT and the like)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:  # Python 3.10
        return "unable to open" in str(exc) or "readonly" in str(exc)
    return (code & 0xFF) in (8, 14)  # SQLITE_READONLY, SQLITE_CANTOPEN


def _identity(path: str, with_time: bool = False) -> Any:
    """Which file `path` names now (None: none); `with_time` adds its size and change time."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    if with_time:
        return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
    return (info.st_dev, info.st_ino)


def _close_states(states: list[ThreadState]) -> None:
    """Close the connections of a pool no one can use any more (not at exit: a daemon thread
    may be in a statement)."""
    for state in states:
        with contextlib.suppress(Exception):
            state.close()  # (a finalizer: nothing to report to)
    states.clear()


def _before_fork() -> None:
    for pool in list(_live_pools):
        pool._close_idle_before_fork()


def _after_fork_in_child() -> None:
    for db_fd, shm_fd in _HELD.values():  # inherited by this process's parent, parked here too
        _take_read_locks(db_fd, shm_fd)
    for pool in list(_live_pools):
        pool._forget_inherited()


def _hold_inherited(path: str) -> None:
    """In a forked child that parks connections to the database `path`: take the read locks that
    SQLite's inherited per-process state says this process holds.

    POSIX locks are not inherited by a child, but SQLite's record of them is: the child's new
    connections share it, and so take no SHARED lock on the database and no lock on the WAL
    index's dead man switch. Without those, the parent's last close would checkpoint and remove
    the WAL and its index under the child (whose later writes would go to a deleted file), and a
    later opener would reset the index the child still maps. The locks last as long as the child.
    """
    try:
        info = os.stat(path, follow_symlinks=False)
    except OSError:
        return
    identity = (info.st_dev, info.st_ino)
    if identity in _HELD:
        return  # its locks are taken (a second cache on the same database)
    try:
        db_fd = open_if_exists(path)
        shm_fd = open_if_exists(path + "-shm") if db_fd != -1 else -1
    except DatabaseError:
        return  # not a regular file: no connection of ours was open to it
    if db_fd == -1:
        return
    _HELD[identity] = (db_fd, shm_fd)
    _take_read_locks(db_fd, shm_fd)


def _take_read_locks(db_fd: int, shm_fd: int) -> None:
    """Read-lock SQLite's SHARED bytes of a database and the dead man switch of its WAL index."""
    import fcntl  # POSIX only, as fork() is

    for fd, start, length in ((db_fd, _SHARED_FIRST, _SHARED_SIZE), (shm_fd, _WAL_INDEX_DMS, 1)):
        if fd == -1:
            continue
        for _ in range(_LOCK_TRIES):
            try:
                fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, length, start)
                break
            except OSError:
                time.sleep(0.001)  # another process holds it exclusively, for a moment


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)
