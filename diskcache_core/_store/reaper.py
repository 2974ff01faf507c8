"""Value files released by committed statements are removed off the caller's path.

Unlinking a large file frees its page-cache pages, which costs the kernel about as much as
writing the file did (~300 us for 1 MiB here): a third of a 1 MiB set. The file is already
unnamed by then (its row changed in a committed transaction, invariant 2), so nothing needs it
before the call returns. One daemon thread per process removes released files in order.

Bounds: past `MAX_PENDING` queued files the caller removes its own (back-pressure, so disk use
cannot run away). `drain()` waits until the queue is empty; Cache.close(), check() and the bulk
removals call it, so their callers see the files gone. A crash can leave queued files behind:
they are unnamed, and check(fix=True) removes them.
"""

from __future__ import annotations

import atexit
import collections
import math
import os
import sys
import threading
import time
import warnings
from typing import Any, Iterable

from .._errors import UnsafeValueFileError
from .._log import DISK as _LOG
from .._log import RateLimit

__all__ = ["drain", "remove_later", "remove_now"]

MAX_PENDING = 1024
_POLL = 0.002  # seconds between the remover's rounds while it has work
_IDLE_EXIT = 1.0  # seconds without work after which the thread exits (restarted on demand)
_EXIT_WAIT = 5.0  # seconds the interpreter's exit waits for queued removals
# A removal that failed for want of a resource (no descriptor left, EMFILE; ENOMEM; EIO) is
# tried again, every _RETRY_GAP seconds, up to _TRIES times in all, then reported.
_TRIES = 30
_RETRY_GAP = 1.0
_NOT_REMOVED = RateLimit()  # one log line a minute for value files left behind


def remove_now(disk: Any, name: str, tries: int = 1) -> None:
    """Remove one released value file through its Disk; a file already gone is no error, one
    that could not be removed now (no descriptor left, say) is tried again later."""
    try:
        disk.remove(name)
    except UnsafeValueFileError as exc:
        warnings.warn(str(exc), RuntimeWarning, stacklevel=2)
        _log_not_removed(name, exc)
    except FileNotFoundError:
        pass  # already gone
    except OSError as exc:
        if tries >= _TRIES:
            _report(disk, name, exc)
        else:
            _reaper.retry_later(disk, name, tries + 1)


def _report(disk: Any, name: str, exc: Exception) -> None:
    """Say that a Disk's ``remove`` raised (the thread goes on with the next file)."""
    warnings.warn(
        f"value file {name!r} was not removed: {type(disk).__name__}.remove raised {exc!r}",
        RuntimeWarning,
        stacklevel=2,
    )
    _log_not_removed(name, exc)


def _log_not_removed(name: str, exc: Exception) -> None:
    """A WARNING that a released value file stays (check(fix=True) removes it), at most one
    a minute (the others counted into the next)."""
    _NOT_REMOVED.warn(
        _LOG, "value file %r could not be removed (%r): it stays until check(fix=True)", name, exc
    )


class _Reaper:
    """The queue and its thread. The thread polls every `_POLL` seconds rather than being woken
    per file: a wake-up (a condition notify, then a GIL hand-over) cost the writer ~30 us."""

    def __init__(self) -> None:
        self.pending: collections.deque[tuple[Any, str]] = collections.deque()
        self.queued = 0  # files queued since the process started (or forked)
        self.removed = 0  # of those, how many the thread has removed (in queue order)
        self.done = threading.Condition()
        self.thread: threading.Thread | None = None
        # Files to try again (see remove_now): (when, disk, name, tries so far + 1).
        self.again: list[tuple[float, Any, str, int]] = []

    def retry_later(self, disk: Any, name: str, tries: int) -> None:
        with self.done:
            self.again.append((time.monotonic() + _RETRY_GAP, disk, name, tries))
            if self.thread is None:
                self._start()  # (none to be had: the file stays, for check(fix=True))

    def remove_later(self, disk: Any, names: Iterable[str]) -> None:
        names = list(names)
        with self.done:
            if self.queued - self.removed < MAX_PENDING:
                # Under the lock: a thread deciding to exit cannot miss what is queued here.
                if self.thread is not None or self._start():
                    self.pending.extend((disk, name) for name in names)
                    self.queued += len(names)
                    return
        for name in names:  # back-pressure, or no thread to be had: the writer removes its own
            remove_now(disk, name)

    def _start(self) -> bool:
        """Start the thread; False when none could be started (the writer's commit stands)."""
        thread = threading.Thread(target=self._run, name="diskcache_core-file-remover", daemon=True)
        try:
            thread.start()
        except BaseException as exc:
            if thread.ident is None:  # it never ran: start another next time
                if not isinstance(exc, Exception):
                    raise  # (a KeyboardInterrupt is the caller's to see)
                return False
            self.thread = thread  # it runs: interrupted only while start() waited for it
            raise
        self.thread = thread
        return True

    def _run(self) -> None:
        # Exits when idle, so a process that forks later usually has no extra thread left.
        idle = 0.0
        while True:
            time.sleep(_POLL)
            removed = 0
            while self.pending:
                disk, name = self.pending.popleft()
                try:
                    remove_now(disk, name)
                except Exception as exc:  # noqa: BLE001 - a Disk's remove(): reported, not fatal
                    _report(disk, name, exc)
                finally:
                    removed += 1
                    with self.done:
                        self.removed += 1
                        self.done.notify_all()
            if self.again:
                self._retry_due()
            idle = 0.0 if removed else idle + _POLL
            if idle >= _IDLE_EXIT:
                with self.done:
                    if not self.pending and not self.again:
                        self.thread = None
                        return

    def _retry_due(self, everything: bool = False) -> None:
        now = math.inf if everything else time.monotonic()
        with self.done:
            due = [entry for entry in self.again if entry[0] <= now]
            self.again = [entry for entry in self.again if entry[0] > now]
        for _, disk, name, tries in due:
            try:
                remove_now(disk, name, tries)
            except Exception as exc:  # noqa: BLE001 - as in _run
                _report(disk, name, exc)

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every file queued before this call is removed (files queued meanwhile by
        other writers do not keep it waiting); False if `timeout` ran out first."""
        with self.done:
            target = self.queued
            drained = self.done.wait_for(lambda: self.removed >= target, timeout)
        if self.again:
            self._retry_due(everything=True)  # (close() and check() see them gone if they can be)
        return drained


_reaper = _Reaper()


def remove_later(disk: Any, names: Iterable[str]) -> None:
    """Queue released value files for removal by the background thread."""
    _reaper.remove_later(disk, names)


def drain(timeout: float | None = None) -> bool:
    """Wait until every value file queued in this process is removed."""
    return _reaper.drain(timeout)


def _after_fork_in_child() -> None:
    # The parent's queue is the parent's to empty; the child starts with none and no thread.
    global _reaper
    _reaper = _Reaper()
    util = sys.modules.get("multiprocessing.util")
    if util is not None:
        # A multiprocessing child ends with os._exit, which runs no atexit handler but the
        # finalizers multiprocessing registers; its start clears the parent's, then runs these.
        util.register_after_fork(_reaper, _drain_in_multiprocessing_child)


def _drain_in_multiprocessing_child(_: Any) -> None:
    sys.modules["multiprocessing.util"].Finalize(None, _drain_at_exit, exitpriority=0)


@atexit.register
def _drain_at_exit() -> None:
    _reaper.drain(_EXIT_WAIT)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
