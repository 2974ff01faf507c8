"""One SQLite connection per thread per cache, safe across fork().

SQLite forbids using — or closing — a connection inherited across ``fork()`` (invariant 4).
Instead of checking ``os.getpid()`` on every call (a system call on the hot path), a fork hook
tells every live pool in the child to drop its connections: they are parked in a module list
for the life of the child, so that not even garbage collection closes them, and the child opens
fresh ones on first use.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import weakref
from typing import Any, Callable

from ._memory import change_recorder
from ._schema import (
    NEW_VALUE_FUNCTION,
    RELEASE_FUNCTION,
    RELEASE_TRIGGERS,
    VERSION_FUNCTION,
    VERSION_TRIGGERS,
)

NO_VALUE = object()  # ThreadState.new_value before a statement sets it

__all__ = ["ConnectionPool", "NO_VALUE", "ThreadState"]

# Connections inherited from a parent process: never used, never closed, never collected.
_INHERITED: list[Any] = []
_live_pools: "weakref.WeakSet[ConnectionPool]" = weakref.WeakSet()


class ThreadState:
    """One thread's connection to one cache, and the files its open transaction touched."""

    __slots__ = (
        "con", "execute", "released", "created", "depth", "thread", "new_value", "versions",
        "written", "charge",
    )  # fmt: skip

    def __init__(self, con: sqlite3.Connection, thread: threading.Thread) -> None:
        self.con = con
        self.execute: Callable[..., sqlite3.Cursor] = con.execute
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
        # The versions the last autocommit write published (for its write-through), or None.
        self.written: dict[int, int] | None = None

    def capture(self, value: Any) -> Any:
        """SQL function body: remember `value` and pass it through."""
        self.new_value = value
        return value


class ConnectionPool:
    """Opens, hands out and closes the per-thread connections of one cache database."""

    def __init__(self, path: str, timeout: float, configure: Callable[[sqlite3.Connection], None]):
        self.path = path
        self.timeout = timeout
        self._configure = configure
        self.local = threading.local()
        self._states: list[ThreadState] = []
        self._lock = threading.Lock()
        self.read_only = False
        self.immutable = False  # read-only media without a WAL index: see Cache._open_database
        # The memory tier's version words (see _memory.open_versions); None while none is open.
        self.words: memoryview | None = None
        _live_pools.add(self)

    def connect(self, timeout: float | None = None) -> sqlite3.Connection:
        """A new connection in autocommit mode (transactions are explicit ``BEGIN IMMEDIATE``)."""
        wait = self.timeout if timeout is None else timeout
        if self.read_only:
            uri = "file:" + self.path + ("?mode=ro&immutable=1" if self.immutable else "?mode=ro")
            return sqlite3.connect(uri, timeout=wait, isolation_level=None, uri=True,
                                   check_same_thread=False)
        return sqlite3.connect(self.path, timeout=wait, isolation_level=None,
                               check_same_thread=False)

    def state(self) -> ThreadState:
        """This thread's state, opening its connection on first use."""
        try:
            return self.local.state
        except AttributeError:
            pass
        con = self.connect()
        self._configure(con)
        state = ThreadState(con, threading.current_thread())
        con.create_function(RELEASE_FUNCTION, 1, state.released.append)
        con.create_function(NEW_VALUE_FUNCTION, 1, state.capture)
        for statement in RELEASE_TRIGGERS:
            con.execute(statement)
        if not self.read_only:
            if self.words is None:
                raise RuntimeError("the version file must be open before the first write connection")
            con.create_function(VERSION_FUNCTION, 1, change_recorder(state, self.words))
            for statement in VERSION_TRIGGERS:
                con.execute(statement)
        with self._lock:
            self._close_dead_threads()
            self._states.append(state)
        self.local.state = state
        self.local.execute = state.execute
        return state

    def _close_dead_threads(self) -> None:
        # Threads come and go (a web server's workers): close what finished threads left open.
        alive = []
        for state in self._states:
            if state.thread.is_alive():
                alive.append(state)
            else:
                state.con.close()
        self._states = alive

    def close_current(self) -> None:
        """Close the calling thread's connection; the next call opens a new one."""
        state = getattr(self.local, "state", None)
        if state is None:
            return
        del self.local.state
        del self.local.execute
        with self._lock:
            if state in self._states:
                self._states.remove(state)
        state.con.close()

    def _forget_inherited(self) -> None:
        """In a forked child: park the parent's connections and start afresh."""
        _INHERITED.extend(state.con for state in self._states)
        self._states = []
        self._lock = threading.Lock()
        # Only the forking thread lives on in the child; `local` stays the same object (caches
        # hold it for speed), so clearing that thread's entries is enough.
        for name in ("state", "execute"):
            try:
                delattr(self.local, name)
            except AttributeError:
                pass


def _after_fork_in_child() -> None:
    for pool in list(_live_pools):
        pool._forget_inherited()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
