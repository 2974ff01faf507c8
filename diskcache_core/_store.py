"""Store: running statements on this thread's connection, transactions, and value-file upkeep.

The base of Cache (and of its queue and eviction faces). A write runs as one autocommit
statement, or inside `transact`; afterwards the value files it released are removed — only
once it has committed (invariant 2), and never when it rolled back — and the bytes it wrote
count towards the next size check.

The memory tier's version words: triggers bump a changed key's bucket inside each statement
(``state.versions``); every place below where a transaction ends — an autocommit statement done,
a COMMIT, a ROLLBACK — publishes them (`_memory.publish`). A statement with RETURNING commits only
when its rows have been read, so `_write(..., settle=False)` leaves that to `_settle`.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from typing import Any, Iterator

from . import _reaper
from ._connections import ConnectionPool, ThreadState
from ._disk import Disk
from ._errors import is_busy, translate_sqlite_error
from ._memory import publish

__all__ = ["MIN_WRITE_CHARGE", "Store"]

MIN_WRITE_CHARGE = 1024  # each write counts at least this many bytes towards the next size check


class Store:
    """Statement execution and transactions over a ConnectionPool; see the module docstring."""

    _pool: ConnectionPool
    _local: threading.local
    _disk: Disk
    _timeout: float
    _unchecked: int  # bytes written since the last size check
    _check_every: int
    _words: memoryview | None  # the memory tier's version words (None on read-only media)

    def _check_size(self) -> None:
        """The write path's periodic size and expiry check (EvictionMixin provides it)."""
        raise NotImplementedError

    def _state(self) -> ThreadState:
        try:
            return self._local.state
        except AttributeError:
            return self._pool.state()

    def _read(self, statement: str, params: Any = ()) -> list[Any]:
        """Run a read statement; reads never wait on writers in WAL mode, but may retry."""
        try:
            execute = self._local.execute
        except AttributeError:
            execute = self._pool.state().execute
        try:
            return execute(statement, params).fetchall()
        except sqlite3.Error as exc:
            return self._retry_read(exc, statement, params)

    def _retry_read(self, exc: sqlite3.Error, statement: str, params: Any) -> list[Any]:
        if isinstance(exc, sqlite3.ProgrammingError) and "closed" in str(exc):
            # Another thread's close() closed this connection under us: read on a new one.
            return self._pool.state().execute(statement, params).fetchall()
        deadline = time.monotonic() + self._timeout
        while is_busy(exc) and time.monotonic() < deadline:
            time.sleep(0.001)
            try:
                return self._state().execute(statement, params).fetchall()
            except sqlite3.Error as again:
                exc = again
        raise translate_sqlite_error(exc, self._pool.path) from exc

    def _write(
        self,
        statement: str,
        params: Any,
        retry: bool,
        new_file: str | None = None,
        charge: int = 0,
        settle: bool = True,
    ) -> sqlite3.Cursor:
        """Run one write statement (autocommit unless inside `transact`) and settle its files.

        `new_file` is the value file the statement makes a row name: removed if the statement
        fails. `charge` is the bytes written, counted towards the next size check. With
        `settle=False` the caller reads the rows (RETURNING) and then calls `_settle`.
        """
        try:
            state = self._local.state
        except AttributeError:
            state = self._pool.state()
        mark = len(state.released) if state.depth else 0
        try:
            cursor = state.execute(statement, params)
        except sqlite3.Error as exc:
            cursor = self._write_failed(state, exc, statement, params, retry, new_file, mark)
        if state.depth:
            if new_file is not None:
                state.created.append(new_file)
            state.charge += charge
        elif settle:
            # Committed: publish the memory-tier versions it bumped, before anything else runs.
            versions = state.versions
            if versions:
                state.versions = {}
                words = self._words
                for index, nonce in versions.items():  # _memory.publish, inline
                    if words[index] == nonce:  # type: ignore[index]
                        words[index + 1] = nonce  # type: ignore[index]
                state.written = versions
            else:
                state.written = None
            if state.released:
                self._remove_released(state)
            if charge:  # removals (charge 0) never trigger the size check themselves
                self._unchecked += charge
                if self._unchecked >= self._check_every:
                    self._check_size()
        return cursor

    def _write_failed(
        self,
        state: ThreadState,
        exc: sqlite3.Error,
        statement: str,
        params: Any,
        retry: bool,
        new_file: str | None,
        mark: int,
    ) -> sqlite3.Cursor:
        while retry and is_busy(exc) and not state.depth:
            try:
                return state.execute(statement, params)
            except sqlite3.Error as again:
                exc = again
        if not state.depth and not state.con.in_transaction:
            self._publish(state)  # the failed statement ended: it bumped for nothing, harmlessly
        del state.released[mark:]  # the failed statement's changes were rolled back
        if new_file is not None:
            self._remove_file(new_file)
        raise translate_sqlite_error(exc, self._pool.path) from exc

    def _settle(self, state: ThreadState, charge: int = 0) -> None:
        """After a statement committed: publish its versions; remove the files it released;
        count its bytes."""
        if state.depth:
            return
        if state.versions:
            self._publish(state)
        if state.released:
            self._remove_released(state)
        if charge:
            self._unchecked += charge
            if self._unchecked >= self._check_every:
                self._check_size()

    def _publish(self, state: ThreadState) -> None:
        """The transaction that bumped ``state.versions`` has ended: publish them."""
        versions = state.versions
        if versions:
            state.versions = {}
            publish(self._words, versions)  # type: ignore[arg-type]

    def _remove_released(self, state: ThreadState) -> None:
        names = list(state.released)
        state.released.clear()
        _reaper.remove_later(self._disk, names)

    def _remove_file(self, name: str) -> None:
        _reaper.remove_now(self._disk, name)

    @contextlib.contextmanager
    def _transaction(self, retry: bool = False, new_file: str | None = None) -> Iterator[ThreadState]:
        """BEGIN IMMEDIATE ... COMMIT on this thread's connection; nested calls join the outer."""
        state = self._state()
        if state.depth:
            if new_file is not None:
                state.created.append(new_file)  # the outer transaction's rollback removes it
            state.depth += 1
            try:
                yield state
            finally:
                state.depth -= 1
            return
        while True:
            try:
                state.execute("BEGIN IMMEDIATE")
                break
            except sqlite3.Error as exc:
                if retry and is_busy(exc):
                    continue
                if new_file is not None:
                    self._remove_file(new_file)
                raise translate_sqlite_error(exc, self._pool.path) from exc
        state.depth = 1
        if new_file is not None:
            state.created.append(new_file)
        try:
            yield state
        except BaseException:
            state.depth = 0
            self._rollback(state)
            raise
        state.depth = 0
        try:
            state.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback(state)
            raise translate_sqlite_error(exc, self._pool.path) from exc
        self._publish(state)
        state.created.clear()
        if state.released:
            self._remove_released(state)
        charge, state.charge = state.charge, 0
        if charge:  # what the transaction wrote counts towards the next size check
            self._unchecked += charge
            if self._unchecked >= self._check_every:
                self._check_size()

    def _rollback(self, state: ThreadState) -> None:
        if state.con.in_transaction:
            state.execute("ROLLBACK")  # if this fails, the buckets stay unpublished: safe
        self._publish(state)  # nothing changed; the buckets may be filled again
        state.released.clear()  # nothing stopped naming them after all
        state.charge = 0
        created = list(state.created)
        state.created.clear()
        for name in created:
            self._remove_file(name)

    @contextlib.contextmanager
    def transact(self, retry: bool = False) -> Iterator[None]:
        """Context manager: a write transaction; what runs inside is atomic.

        Other writers wait while it is open (keep it short); readers do not. Transactions nest
        and belong to the thread that opened them. Raises Timeout when the lock cannot be had
        within the cache's timeout and `retry` is False.
        """
        with self._transaction(retry):
            yield
