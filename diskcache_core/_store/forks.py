"""Fork handling for the connection pools: what a forked child does with its parent's connections.

SQLite forbids using — or closing — a connection inherited across ``fork()`` (invariant 4).
Instead of checking ``os.getpid()`` on every call (a system call on the hot path), the fork hooks
here tell every live pool (`register`) to close its idle connections before the fork and, in the
child, to drop its connections: they are parked (`park`) in a module list for the life of the
child, so that not even garbage collection closes them, and the child opens fresh ones on first
use. Where a parked connection leaves SQLite's per-process state of a database in the child, the
child takes the file locks that state claims (`_hold_inherited`).
"""

from __future__ import annotations

import os
import time
import weakref
from typing import Any, Protocol

from .dbfile import open_if_exists
from .._errors import DatabaseError

__all__ = ["park", "register"]


class _Pool(Protocol):
    """A pool's part in a fork (`connections.ConnectionPool`)."""

    def _close_idle_before_fork(self) -> None: ...

    def _forget_inherited(self) -> None: ...


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
_live_pools: "weakref.WeakSet[Any]" = weakref.WeakSet()


def register(pool: _Pool) -> None:
    """Take part in every later fork of this process (held weakly)."""
    _live_pools.add(pool)


def park(path: str, states: list[Any]) -> None:
    """In a forked child: keep the parent's connections to the database `path` for the life of
    the process, never used nor closed, holding the locks SQLite's inherited state claims."""
    if states:
        _hold_inherited(path)
    _INHERITED.extend(states)


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

