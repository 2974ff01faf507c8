"""Store: one cache database — statements on this thread's connection, transactions, and the
one after-commit hook.

A write runs as one autocommit statement, or inside `transaction`. A write that finds the write
lock taken waits for it in `wait_for_lock` (woken by the lock handoff where the platform has one,
see _store/handoff.py; SQLite's busy handler waits otherwise). When its transaction has
ended, `_after_commit` does, in this order: publish the memory-tier versions its statements
bumped (the triggers record them in ``state.txn.versions``; see versions.py), hand the value files
it released to the reaper (only once committed, invariant 2 — never after a rollback), and
count the bytes it wrote towards the next size check (the `SizeBudget` the Store was made with:
the eviction part's, which it hands itself, the count and the writer's context).
"""

from __future__ import annotations

import contextlib
import os.path as op
import sqlite3
import threading
import time
from typing import Any, Iterator, Protocol

from . import reaper as _reaper
from .checkpointer import PASS_BYTES, note_commit
from .connections import NO_VALUE, OPEN_WAIT, RECHECK_INTERVAL, ConnectionPool, ThreadState
from .._disk.disk import Disk
from .._errors import (
    DatabaseError, is_busy, is_readonly_rollback, read_only_error, translate_sqlite_error,
)
from .handoff import WAITING_WORD, LockHandoff, lock_handoff, wait_for_lock
from .versions import publish
from .versionfile import FILE_SIZE
from .._metrics import ReadCounts, WriteCounts
from .schema import FREELIST_COUNT, RETURN_FREE_PAGE, set_pragma

__all__ = ["MIN_WRITE_CHARGE", "SizeBudget", "Store", "Written"]

MIN_WRITE_CHARGE = 1024  # each write counts at least this many bytes towards the next size check
_COMMIT_PAGE = 4096  # WAL bytes a commit writes besides its values, at least
_FORKED = (
    "this process was forked inside a transaction: the transaction is the parent's, which commits"
    " or rolls it back (writes made here since the fork were not part of it)"
)
_ABORTED = (
    "the transaction was rolled back after an error in it (a full disk, say): nothing written"
    " in it is kept, and nothing more can be; leave the transact() block"
)


# What a write statement did: ``(rows changed, the memory-tier versions it published)``, the
# latter None inside a transaction (they are published at its end). A plain pair, unpacked by
# every caller: a named tuple costs a Python-level constructor call on every write.
Written = tuple[int, "dict[int, int] | None"]


_monotonic = time.monotonic


class SizeBudget(Protocol):
    """What a Store is made with to keep its cache within a size: every `every` bytes its
    writes store, `check` (handed the store, the bytes counted, and the ``(db_key, raw)`` the
    write must not lose, or None) culls; it returns True while still over (then the next write
    checks again)."""

    every: int

    def check(self, store: Store, unchecked: int, spared: tuple[Any, Any] | None) -> bool: ...


class Store:
    """Statement execution and transactions over a ConnectionPool; see the module docstring."""

    def __init__(
        self, pool: ConnectionPool, timeout: float, disk: Disk, handoff: LockHandoff | None = None,
        budget: SizeBudget | None = None,
    ) -> None:
        """`handoff` wakes the directory's waiting writers (None: SQLite's busy handler waits);
        `budget` is the size check its writes run (None: none, as for the CLI's own store)."""
        self.pool = pool
        self.timeout = timeout
        self.disk = disk
        # A Disk naming value files its own way may name a new file as a released one (after
        # its key, say): released files go before the call returns, not off the caller's path,
        # where their removal could come after the new file's write.
        self.names_reused = type(disk).filename is not Disk.filename
        self.local: threading.local = pool.local
        self.path = pool.path
        # Whether the checkpoint thread knows of a commit since its last round (_store/checkpointer.py).
        self.wal_noted = False
        self.wal_bytes = 0  # bytes committed since its last checkpoint, roughly
        self.free_pages_left = False  # the checkpoint thread has free pages to return
        # The memory tier's version words (None where this process may only read), set when the
        # database was opened.
        self.words = pool.words
        # Bytes written since the last size check, and the check.
        self.unchecked = 0
        self.budget = budget
        # Wakes this directory's writers waiting for the write lock; with it, the connections
        # have no busy handler of their own (they are opened after the Store is made).
        self.handoff = handoff
        if handoff is not None:
            pool.wait_by_handoff()
        # For `Cache.metrics`: the facade's reads of the database, and the waits for its lock.
        self.reads, self.writes = ReadCounts(), WriteCounts()

    def state(self, retry: bool = False, wait: float | None = None) -> ThreadState:
        """This thread's connection state (opened on first use; see `ConnectionPool.state`)."""
        try:
            state: ThreadState = self.local.state
            return state
        except AttributeError:
            return self.pool.state(retry, wait)

    def reader(self, retry: bool = False) -> ThreadState:
        """This thread's state for a read: opening it waits out a closing process's checkpoint."""
        return self.state(retry, max(self.timeout, OPEN_WAIT))

    # --- reads --------------------------------------------------------------------------------

    def read(self, statement: str, params: Any = ()) -> list[Any]:
        """Run a read statement; reads never wait on writers in WAL mode, but may retry."""
        try:
            execute = self.local.read
        except AttributeError:
            execute = self.reader().read
        try:
            rows: list[Any] = execute(statement, params).fetchall()
            return rows
        except sqlite3.Error as exc:
            return self.retry_read(exc, statement, params)

    def retry_read(
        self, exc: sqlite3.Error, statement: str, params: Any, retry: bool = False
    ) -> list[Any]:
        """After a read failed with `exc`: the rows of a new attempt (on a new connection when
        this one was closed; again while busy, until the timeout unless `retry`)."""
        if isinstance(exc, sqlite3.ProgrammingError) and "closed" in str(exc):
            # Another thread's close() closed this connection under us: read on a new one.
            rows: list[Any] = self.reader().execute(statement, params).fetchall()
            return rows
        deadline = time.monotonic() + self.timeout
        while (is_busy(exc) or is_readonly_rollback(exc)) and (
            retry or time.monotonic() < deadline
        ):
            time.sleep(0.001)
            try:
                rows = self.state(retry).execute(statement, params).fetchall()
                return rows
            except sqlite3.Error as again:
                exc = again
        raise translate_sqlite_error(exc, self.pool.path) from exc

    # --- writes -------------------------------------------------------------------------------

    def write(
        self, statement: str, params: Any, retry: bool, new_file: str | None = None, charge: int = 0,
        spared: tuple[Any, Any] | None = None,
    ) -> Written:
        """Run one write statement (autocommit unless inside `transaction`).

        `new_file` is the value file the statement makes a row name: removed if the statement
        fails (or if the enclosing transaction rolls back). `charge` is the bytes written,
        counted towards the next size check; `spared` the writer's context for that check (the
        key it stored, which the check must not evict: see `SizeBudget`).
        """
        try:
            state: ThreadState = self.local.state  # inline: the hot path
        except AttributeError:
            state = self._state_for(retry, new_file)
        mapped = self.pool.mapped  # pool.versions_shrunk, inline: one fstat, every write
        if mapped is not None and mapped.size() < FILE_SIZE:  # (a store past the end: SIGBUS)
            self._recover_versions(state, new_file)
        txn = state.txn
        if txn.depth:
            self._check_joinable(state, new_file)
            mark = len(txn.released)
        else:
            mark = 0
            if _monotonic() >= state.opening.recheck_at:
                state = self._recheck(state, retry, new_file)
                txn = state.txn
        state.inserted = False
        try:
            cursor = state.write(statement, params)
        except sqlite3.Error as exc:
            cursor = self._write_failed(state, exc, statement, params, retry, new_file, mark)
        if txn.depth:
            if new_file is not None:
                txn.created.append(new_file)
            else:
                txn.logged += charge
            txn.charge += charge
            return cursor.rowcount, None
        # A value in a value file is not written to the WAL: only its row is.
        return cursor.rowcount, self._after_commit(state, charge, 0 if new_file else charge, spared)

    def _recheck(self, state: ThreadState, retry: bool, new_file: str | None) -> ThreadState:
        """Outside a transaction, every RECHECK_INTERVAL: this thread's connection, or a new one
        where the cache's directory was removed since it opened (the pool makes it anew, or
        opens what another process made; the memory tier forgets what it held). A version file
        found lost is mapped anew first (`_recover_versions`)."""
        if not state.con.in_transaction:
            if self.pool.moved(state):
                self.pool.close_current()  # the new connection checks again from its own opening
                return self._state_for(retry, new_file)
            if self.pool.versions_lost():
                self._recover_versions(state, new_file)
        state.opening.recheck_at = _monotonic() + RECHECK_INTERVAL
        return state

    def _recover_versions(self, state: ThreadState, new_file: str | None) -> None:
        """`ConnectionPool.recover_versions` before a statement; `new_file` goes if it raises."""
        try:
            self.pool.recover_versions(bool(state.txn.depth or state.con.in_transaction))
        except BaseException:
            if new_file is not None:
                self.remove_file(new_file)
            raise

    def follow_removed_directory(self) -> bool:
        """Where the cache directory is gone (removed while open) and this thread is in no
        transaction: make it anew now, with a new connection (as `_recheck` does); True then."""
        if op.isdir(op.dirname(self.path)):
            return False
        state = self.state()
        if state.txn.depth or state.con.in_transaction:
            return False
        self.pool.close_current()
        self.state()  # the pool makes the directory and database anew as it connects
        return True

    def inserted(self) -> bool:
        """Whether this thread's latest `write` inserted a row (rather than updated one)."""
        state: ThreadState = self.local.state
        return state.inserted

    def write_capturing(
        self, statement: str, params: Any, retry: bool, charge: int = 0,
        spared: tuple[Any, Any] | None = None,
    ) -> tuple[int, Any]:
        """`write` a statement that passes a value through NEW_VALUE_FUNCTION (see schema.py);
        return its rowcount and that value (NO_VALUE when the function was not called)."""
        if self.pool.read_only:  # (its function exists only on connections that may write)
            raise read_only_error(self.path)
        state = self.state(retry)
        state.new_value = NO_VALUE
        rowcount, _ = self.write(statement, params, retry, None, charge, spared)
        return rowcount, state.new_value

    def _write_failed(
        self, state: ThreadState, exc: sqlite3.Error, statement: str, params: Any, retry: bool,
        new_file: str | None, mark: int,
    ) -> sqlite3.Cursor:
        if isinstance(exc, sqlite3.ProgrammingError):
            # Refused before it ran. The write cursor may be busy with the statement this one
            # interrupted (a signal handler's write, run inside that statement's trigger
            # function): a cursor of its own then (any other refusal is raised again by it).
            try:
                return state.execute(statement, params)
            except sqlite3.Error as again:
                exc = again
        if is_busy(exc) and not state.txn.depth:
            try:
                return wait_for_lock(
                    self.handoff, lambda: state.execute(statement, params), exc, retry,
                    self.timeout, self.writes,
                )
            except sqlite3.Error as again:
                exc = again
        if not state.txn.depth and not state.con.in_transaction:
            self._publish(state)  # the failed statement ended: it bumped for nothing, harmlessly
            self._released()
        del state.txn.released[mark:]  # the failed statement's changes were rolled back
        if new_file is not None:
            self.remove_file(new_file)
        raise translate_sqlite_error(exc, self.pool.path) from exc

    def _state_for(self, retry: bool, new_file: str | None) -> ThreadState:
        """This thread's state for a write or transaction that makes a row name `new_file`,
        which is removed if no connection can be had."""
        try:
            return self.state(retry)
        except BaseException:
            if new_file is not None:
                self.remove_file(new_file)
            raise

    def _check_joinable(self, state: ThreadState, new_file: str | None) -> None:
        """Before a statement or transaction joins this thread's open transaction: refuse it
        if SQLite has rolled that back already (an error in it, a full disk say, ended it), or
        it would commit on its own."""
        if not state.con.in_transaction:
            self._rollback(state)  # the bookkeeping of the rollback SQLite made (once)
            if new_file is not None:
                self.remove_file(new_file)
            raise DatabaseError(_ABORTED)

    def _released(self) -> None:
        """This thread's connection released the write lock: pass it on to a waiting writer."""
        handoff = self.handoff
        if handoff is not None and handoff.words[WAITING_WORD]:
            handoff.released()

    def _after_commit(
        self, state: ThreadState, charge: int, logged: int,
        spared: tuple[Any, Any] | None = None,
    ) -> dict[int, int] | None:
        """THE after-commit hook (see the module docstring); returns the versions published.

        `charge`: the bytes the transaction stored; `logged`: those of them in the WAL;
        `spared`: the writer's context for the size check."""
        handoff = self.handoff
        if handoff is not None and handoff.words[WAITING_WORD]:  # _released, inline: every write
            handoff.released()
        txn = state.txn
        published = txn.versions or None
        if published:
            txn.versions = {}
            words = self.words
            if words is not None:
                for index, nonce in published.items():  # versions.publish, inline: every write
                    if words[index] == nonce:
                        words[index + 1] = nonce
        released = txn.released
        if released:
            names = list(released)
            released.clear()
            if self.names_reused:
                for name in names:
                    _reaper.remove_now(self.disk, name)
            else:
                _reaper.remove_later(self.disk, names)
        self.wal_bytes += logged + _COMMIT_PAGE  # a commit writes a page or more
        if not self.wal_noted and (self.wal_bytes >= PASS_BYTES or self.free_pages_left):
            note_commit(self)  # the checkpoint thread has work (_checkpointer.is_due, inline)
        budget = self.budget
        if charge and budget is not None:  # removals (charge 0) never trigger the check
            self.unchecked += charge
            if self.unchecked >= budget.every:
                unchecked, self.unchecked = self.unchecked, 0
                if budget.check(self, unchecked, spared):
                    self.unchecked = budget.every  # still over: check again on the next write
        return published

    def rebind(self, words: memoryview) -> None:
        """The pool mapped the version words anew (the directory was made anew): use those
        (called by the pool's `rebind` hook, which the store's owner gives it)."""
        self.words = words
        if self.handoff is not None:
            self.handoff = lock_handoff(words)

    def return_free_pages(
        self, pages: int, timeout: float | None = None, counted: bool = True
    ) -> None:
        """Return up to `pages` free pages to the file system, in one transaction. Only a
        database with incremental auto-vacuum returns any: callers check that first (elsewhere
        each step of the loop does nothing). `timeout`, `counted`: as for `transaction`."""
        with self.transaction(timeout=timeout, counted=counted) as state:
            (free,) = state.execute(FREELIST_COUNT).fetchone()
            for _ in range(min(int(pages), free)):
                state.execute(RETURN_FREE_PAGE).fetchall()

    def _publish(self, state: ThreadState) -> None:
        """The transaction that bumped ``state.txn.versions`` has ended without commit work."""
        versions = state.txn.versions
        if versions:
            state.txn.versions = {}
            if self.words is not None:
                publish(self.words, versions)

    def remove_file(self, name: str) -> None:
        """Remove a value file no committed row names, now."""
        _reaper.remove_now(self.disk, name)

    def forget_new_file(self, filename: str) -> None:
        """A value file written for a row that was not stored after all."""
        state = self.state()
        if state.txn.depth and filename in state.txn.created:
            state.txn.created.remove(filename)
        self.remove_file(filename)

    # --- transactions ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(
        self, retry: bool = False, new_file: str | None = None, timeout: float | None = None,
        counted: bool = True,
    ) -> Iterator[ThreadState]:
        """BEGIN IMMEDIATE ... COMMIT on this thread's connection; nested calls join the outer.

        `new_file` is the value file the block's last statement makes a row name: removed if
        the block raises, even when it joined an outer transaction that goes on to commit.

        Statements run with ``state.execute``; bytes they write are added to ``state.txn.charge``.
        `timeout` replaces the cache's wait for the write lock, for this transaction.
        `counted`: its wait for the lock counts in ``writes`` (`Cache.metrics`); False for the
        library's background work, whose one-try waits are not the application's.
        """
        if self.pool.read_only:  # (else SQLite's refusal would read as a rolled-back block)
            if new_file is not None:
                self.remove_file(new_file)
            raise read_only_error(self.path)
        state = self._state_for(retry, new_file)
        if not state.txn.depth and (_monotonic() >= state.opening.recheck_at or self.pool.versions_shrunk()):
            state = self._recheck(state, retry, new_file)
        if state.txn.depth:
            self._check_joinable(state, new_file)
            if new_file is not None:
                state.txn.created.append(new_file)  # the outer transaction's rollback removes it
            state.txn.depth += 1
            try:
                yield state
            except Exception:
                if new_file is not None:  # the block failed: no row names it, and the outer
                    self.forget_new_file(new_file)  # transaction may still commit
                raise
            finally:
                state.txn.depth -= 1
            return
        try:
            try:
                self._begin(state, retry, timeout, self.writes if counted else WriteCounts())
            except BaseException as exc:
                # A signal handler may raise just as BEGIN returned: leave no transaction open.
                self._rollback(state)
                if new_file is not None:
                    self.remove_file(new_file)
                if isinstance(exc, sqlite3.Error):
                    raise translate_sqlite_error(exc, self.pool.path) from exc
                raise
            state.txn.depth = 1
            if new_file is not None:
                state.txn.created.append(new_file)
            try:
                yield state
            except BaseException as exc:
                if state.opening.inherited:
                    raise  # a child forked inside the block: the transaction is the parent's
                state.txn.depth = 0
                self._rollback(state)
                if isinstance(exc, sqlite3.Error):  # a statement of the block: the library's error
                    raise translate_sqlite_error(exc, self.pool.path) from exc
                raise
            if state.opening.inherited:  # neither committed nor rolled back here: the parent does that
                raise DatabaseError(_FORKED)
            state.txn.depth = 0
            self._check_joinable(state, None)  # nothing to commit if SQLite rolled it back
            created = state.txn.created
            try:
                # Emptied before COMMIT: once it has run, nothing may remove these files, not even
                # a rollback after a signal that lands right after it (a committed row's files).
                state.txn.created = []
                state.execute("COMMIT")
            except BaseException as exc:
                if isinstance(exc, sqlite3.Error) or state.con.in_transaction:
                    state.txn.created = created  # COMMIT failed, or never ran: undo the block
                    self._rollback(state)
                else:  # a signal just after COMMIT ran: the transaction stands
                    state.txn.charge = state.txn.logged = 0
                    self._after_commit(state, 0, 0)
                if isinstance(exc, sqlite3.Error):
                    raise translate_sqlite_error(exc, self.pool.path) from exc
                raise
            charge, logged, state.txn.charge, state.txn.logged = state.txn.charge, state.txn.logged, 0, 0
            self._after_commit(state, charge, logged)
        except BaseException:
            # An exception between the steps above (a signal handler's, a KeyboardInterrupt):
            # no transaction may stay open on this connection, holding the write lock while
            # later writes "commit" into it; nor a committed one's after-commit work be skipped.
            if not state.opening.inherited:
                self._settle_interrupted(state)
            raise
        finally:
            if state.txn.close_after:  # close() was called inside it
                self.pool.close_current()

    def _settle_interrupted(self, state: ThreadState) -> None:
        """After a transaction block was left by an exception at any point: roll back what is
        still open, or finish what committed (its versions and released files)."""
        state.txn.depth = 0
        if state.con.in_transaction:
            self._rollback(state)
        elif state.txn.versions or state.txn.released:
            state.txn.charge = state.txn.logged = 0
            self._after_commit(state, 0, 0)

    def _begin(
        self, state: ThreadState, retry: bool, timeout: float | None, counts: WriteCounts
    ) -> None:
        begin = "BEGIN IMMEDIATE"
        if timeout is not None and self.handoff is None:  # the busy handler waits: shorten it
            state.execute(set_pragma("busy_timeout", int(timeout * 1000)))
        try:
            try:
                state.execute(begin)
            except sqlite3.Error as exc:
                if not is_busy(exc):
                    raise
                wait_for_lock(
                    self.handoff, lambda: state.execute(begin), exc, retry,
                    self.timeout if timeout is None else timeout, counts,
                )
        finally:
            if timeout is not None and self.handoff is None:
                state.execute(set_pragma("busy_timeout", int(self.pool.busy_wait * 1000)))

    def _rollback(self, state: ThreadState) -> None:
        if state.con.in_transaction:
            state.execute("ROLLBACK")  # if this fails, the buckets stay unpublished: safe
        self._released()
        self._publish(state)  # nothing changed; the buckets may be filled again
        state.txn.released.clear()  # nothing stopped naming them after all
        state.txn.charge = state.txn.logged = 0
        created = list(state.txn.created)
        state.txn.created.clear()
        for name in created:
            self.remove_file(name)
