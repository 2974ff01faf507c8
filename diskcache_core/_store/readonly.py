"""Reads of a database this process may not write: `ReadOnlyReader`, and `FetchedRows`, the
rows of a statement already run (what such reads, and a few others, hand back)."""

from __future__ import annotations

import os
import sqlite3
from typing import Any, Iterator, Protocol

from .dbfile import in_wal_mode, open_if_exists
from .._errors import DatabaseError
from .schema import database_uri

__all__ = ["FetchedRows", "ReadOnlyReader"]

_UNINDEXED_READ_TRIES = 10  # an immutable read whose file changed meanwhile is read again


class _Pool(Protocol):
    """What a reader needs of its ConnectionPool."""

    path: str

    def connect(self, timeout: float | None = None) -> sqlite3.Connection: ...

    def configure(self, con: sqlite3.Connection) -> None: ...


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

    def __init__(self, pool: _Pool) -> None:
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
