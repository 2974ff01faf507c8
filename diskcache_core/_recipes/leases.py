"""Holds of the recipes (locks, semaphore slots) on a cache with a remote: a lease on each,
renewed while it is held, and the settling of a hold whose write had an unknown outcome.

A remote write can time out and still be applied by Redis later (`RemoteOutcomeUnknownError`):
a lock item stored that way is held by nobody. So, on a cache with a remote only:

- every hold is a value unique to it (a token), so that whether it is stored can be asked;
- every hold carries an expiry. Without the recipe's ``expire``, it is `REMOTE_LEASE` seconds,
  renewed every third of that by this process's *keeper* thread while the hold lasts: a host
  that dies holding a lock frees it within `REMOTE_LEASE` seconds;
- after a write of unknown outcome, the recipe reads the item once Redis answers again
  (`settled_read`) and holds the lock if its token is there; when Redis does not answer in
  the time the caller allowed, the keeper is handed the undoing of the hold (`Keeper.settle`),
  run as soon as Redis answers, and the caller is told it holds nothing.

The keeper is one daemon thread per process, started at the first remote hold; a forked child
starts with none (the parent's holds are not its own). A local cache never uses this module.
"""

from __future__ import annotations

import heapq
import itertools
import os
import threading
import time
from typing import Any, Callable

from .._errors import RemoteUnavailableError

__all__ = [
    "REMOTE_LEASE", "UNSETTLED", "Keeper", "keeper", "remote_shard", "resolve", "settled_read",
]

REMOTE_LEASE = 30.0  # seconds a remote hold without `expire` lasts unless its holder renews it
_FIRST_RETRY = 0.01  # seconds before a settle (or settled read) asks an unanswering Redis again
_LAST_RETRY = 1.0  # the cap of its doubling
_LATE = 1.0  # seconds after a hold was found not stored that its token is removed if it is
UNSETTLED = object()  # `settled_read`: Redis did not answer before the deadline


def remote_shard(cache: Any, key: Any) -> Any:
    """The Cache holding `key` in `cache` if that Cache has a remote, else None."""
    shard = cache.shard_for(key) if hasattr(cache, "shard_for") else cache
    return shard if getattr(shard, "remote", None) is not None else None


def settled_read(shard: Any, key: Any, default: Any, deadline: float | None) -> Any:
    """`key`'s value in Redis (`default` when missing), read once a write sent before the call
    has been applied or never will be; UNSETTLED if Redis did not answer by `deadline`
    (``time.monotonic()``; None: no limit; one try at least).

    Redis runs, in each turn of its event loop, the requests of every connection that has one:
    a request sent after a first answer came runs in a later turn than the stalled request
    (which was waiting from before), so the second answer is the settled one. ``tag=True``
    makes each read ask Redis, never a copy of this host.
    """
    answers = 0
    delay = _FIRST_RETRY
    while True:
        try:
            value, _ = shard.get(key, default, tag=True)
        except RemoteUnavailableError:
            answers = 0
        else:
            answers += 1
            if answers == 2:
                return value
            continue
        if deadline is not None and time.monotonic() >= deadline:
            return UNSETTLED
        pause = delay if deadline is None else min(delay, max(0.0, deadline - time.monotonic()))
        time.sleep(pause)
        delay = min(delay * 2, _LAST_RETRY)


def resolve(
    shard: Any, key: Any, default: Any, holds: Callable[[Any], bool], deadline: float | None,
    undo: Callable[[], Any], within: float, unique: bool,
) -> bool:
    """After a write taking a hold had an unknown outcome: whether the hold was taken, read from
    Redis once it answers (`settled_read`, `holds` tells from the stored value).

    If Redis did not answer by `deadline`, `undo` (which takes the hold back if it is stored,
    and does nothing otherwise) is handed to the keeper and the answer is False: the caller
    never holds it. With a `unique` token, `undo` also runs a moment after a False answer,
    should the write have been applied after all the reads.
    """
    value = settled_read(shard, key, default, deadline)
    if value is not UNSETTLED and holds(value):
        return True
    if value is UNSETTLED:
        keeper().settle(undo, within)
    elif unique:
        keeper().settle(undo, within, delay=_LATE)
    return False


class _Task:
    """A renewal (`period` set: run again each period until it returns False) or a settle (run
    until it returns without RemoteUnavailableError, or until `give_up` passes)."""

    __slots__ = ("action", "period", "give_up", "retry", "ended")

    def __init__(self, action: Callable[[], Any], period: float | None, give_up: float) -> None:
        self.action = action
        self.period = period
        self.give_up = give_up
        self.retry = _FIRST_RETRY
        self.ended = False  # dropped, or run for the last time


class Keeper:
    """One thread running the renewals and settles of this process's remote holds."""

    def __init__(self) -> None:
        self._wake = threading.Condition(threading.Lock())
        self._due: list[tuple[float, int, _Task]] = []  # a heap, by when each is next due
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def keep(self, renew: Callable[[], bool], lease: float) -> _Task:
        """Run `renew` every third of `lease` until it returns False or `drop`; the handle."""
        now = time.monotonic()
        task = _Task(renew, lease / 3, now + lease)
        self._add(task, now + lease / 3)
        return task

    @staticmethod
    def drop(task: _Task) -> None:
        """Stop renewing (the hold was released, or handed to `settle`)."""
        task.ended = True

    def settle(self, action: Callable[[], Any], within: float, delay: float = 0.0) -> None:
        """Run `action` (after `delay` seconds) until Redis answers it, trying for `within`
        seconds at most: by then the hold it undoes has expired."""
        now = time.monotonic()
        self._add(_Task(action, None, now + delay + within), now + delay)

    def _add(self, task: _Task, when: float) -> None:
        with self._wake:
            heapq.heappush(self._due, (when, next(self._order), task))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="diskcache_core-lease-keeper", daemon=True
                )
                self._thread.start()
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._due or self._due[0][0] > time.monotonic():
                    self._wake.wait(self._due[0][0] - time.monotonic() if self._due else None)
                _, _, task = heapq.heappop(self._due)
            if task.ended:
                continue
            later = self._attempt(task)
            if later is None:
                task.ended = True
            else:
                self._add(task, later)

    @staticmethod
    def _attempt(task: _Task) -> float | None:
        """Run `task` once; when to run it again (None: done)."""
        now = time.monotonic()
        try:
            result = task.action()
        except RemoteUnavailableError:  # Redis does not answer: again soon, while it matters
            if now >= task.give_up:
                return None
            task.retry = min(task.retry * 2, _LAST_RETRY)
            return now + task.retry
        except Exception:  # noqa: BLE001 - the cache was closed, or holds something else now
            return None
        task.retry = _FIRST_RETRY
        if task.period is None or not result or task.ended:
            return None
        task.give_up = now + task.period * 3
        return now + task.period


_keeper = Keeper()


def keeper() -> Keeper:
    """This process's keeper."""
    return _keeper


def _new_keeper() -> None:
    global _keeper
    _keeper = Keeper()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_keeper)
