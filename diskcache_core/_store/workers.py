"""The library's own worker threads (the awaitable twins' pool): the pool, a call run in it
(`run_sync`, `start_sync`), and which of its threads run a task now.

``close()`` in another thread may close a worker's connections only while that worker is idle
between tasks; the worker is then told to forget them, and opens new ones on its next task.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import os
import threading
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, Protocol, TypeVar

__all__ = ["close_if_idle", "lock", "run_sync", "start_sync", "worker_task"]


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


P = ParamSpec("P")
R = TypeVar("R")

# Enough threads for concurrent reads (WAL readers do not wait for each other); writes serialize
# on the database lock anyway.
MAX_WORKERS = min(16, (os.cpu_count() or 1) + 4)

_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _executor
    executor = _executor
    if executor is None:
        with _executor_lock:
            if _executor is None:
                _executor = ThreadPoolExecutor(MAX_WORKERS, thread_name_prefix="diskcache_core-async")
            executor = _executor
    return executor


def _forget_pool_in_child() -> None:
    global _executor, _executor_lock
    _executor = None
    _executor_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_in_child)


async def run_sync(func: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """Run ``func(*args, **kwargs)`` in the module's thread pool and await its result.

    The caller's context variables are visible to `func`, as with ``asyncio.to_thread``.
    """
    return await start_sync(func, *args, **kwargs)


def start_sync(func: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> asyncio.Future[R]:
    """`run_sync`'s call, started: the future of its result (to be shielded from a cancel)."""
    loop = asyncio.get_running_loop()
    call = functools.partial(contextvars.copy_context().run, _as_worker_task, func, *args, **kwargs)
    return loop.run_in_executor(_pool(), call)


def _as_worker_task(func: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
    with worker_task():  # close() elsewhere leaves this thread's connections alone meanwhile
        return func(*args, **kwargs)
