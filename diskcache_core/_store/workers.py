"""The library's own worker threads (the awaitable twins' pool): which of them run a task now.

``close()`` in another thread may close a worker's connections only while that worker is idle
between tasks; the worker is then told to forget them, and opens new ones on its next task.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import Iterator
from typing import Protocol

__all__ = ["close_if_idle", "lock", "worker_task"]


class _Pool(Protocol):
    def _forget_thread_state(self) -> None: ...


lock = threading.Lock()  # guards the three below (a module attribute: made anew in a child)
_workers: "weakref.WeakSet[threading.Thread]" = weakref.WeakSet()
_busy: set[threading.Thread] = set()
_closed_for: dict[threading.Thread, list[_Pool]] = {}  # pools to reopen, per worker


@contextlib.contextmanager
def worker_task() -> Iterator[None]:
    """Wrap one task of a library worker thread: its connections are in use until it ends."""
    thread = threading.current_thread()
    with lock:
        _workers.add(thread)
        _busy.add(thread)
        closed = _closed_for.pop(thread, ())
    for pool in closed:
        pool._forget_thread_state()
    try:
        yield
    finally:
        with lock:
            _busy.discard(thread)


def close_if_idle(thread: threading.Thread, pool: _Pool) -> bool:
    """With `lock` held: whether `thread` is an idle worker, whose connection of `pool` the
    caller may close (the worker forgets it before its next task)."""
    if thread not in _workers or thread in _busy:
        return False
    _closed_for.setdefault(thread, []).append(pool)
    return True


def _after_fork_in_child() -> None:
    global lock  # another thread may have held it at the fork: it would never be released
    lock = threading.Lock()
    _busy.clear()
    _closed_for.clear()  # (the parent's workers do not run here)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
