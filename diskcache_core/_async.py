"""Awaitable twins of the cache's data methods: ``await cache.aget(key)`` and friends.

One implementation: each twin runs its synchronous method (``aget`` runs ``get``) in a small
thread pool owned by this module, so a coroutine never blocks the event loop on disk I/O or on
the database lock, whatever the cache's timeout. Any class with the sync methods (Cache,
FanoutCache) gets the twins by inheriting `AsyncDataMixin` (and Cache's queue methods through
`AsyncCacheMixin`).

Why a pool of our own rather than ``asyncio.to_thread``: the loop's default executor is shared
with the application, and a cache call may wait up to the cache's timeout for the database lock;
a separate pool keeps the two from starving each other. The pool is recreated after ``fork()``
(an inherited executor's threads do not exist in the child).

Not twinned: ``transact`` (a transaction belongs to one thread, and an ``await`` inside it could
resume on another) and iteration. Cancelling an awaiting task does not stop the call already
running in the pool; it completes (or times out) in the background.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ._connections import worker_task

__all__ = ["AsyncCacheMixin", "AsyncDataMixin", "run_sync"]

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


async def run_sync(func: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
    """Run ``func(*args, **kwargs)`` in the module's thread pool and await its result.

    The caller's context variables are visible to `func`, as with ``asyncio.to_thread``.
    """
    loop = asyncio.get_running_loop()
    call = functools.partial(contextvars.copy_context().run, _as_worker_task, func, *args, **kwargs)
    return await loop.run_in_executor(_pool(), call)


def _as_worker_task(func: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
    with worker_task():  # close() elsewhere leaves this thread's connections alone meanwhile
        return func(*args, **kwargs)


def _twin(method: str) -> Callable[..., Coroutine[Any, Any, Any]]:
    """An ``async def a<method>(self, *args, **kwargs)`` that awaits ``self.<method>(...)``."""

    async def twin(self: Any, *args: Any, **kwargs: Any) -> Any:
        return await run_sync(getattr(self, method), *args, **kwargs)

    shown = method.strip("_")  # __contains__ -> acontains
    twin.__name__ = f"a{shown}"
    twin.__qualname__ = f"AsyncDataMixin.a{shown}"
    twin.__doc__ = (
        f"Awaitable :meth:`{method}`, same arguments and result; runs in a worker thread so the"
        " event loop never waits on disk I/O or the database lock."
    )
    return twin


class AsyncDataMixin:
    """Adds the awaitable twins (``aget``, ``aset``, ...) of a cache's sync data methods.

    Each ``a<name>`` takes the arguments of ``<name>`` and returns its result; ``acontains``
    is the twin of ``key in cache``.
    """

    # Written out (rather than set in a loop) so that type checkers and readers see every name.
    aadd = _twin("add")
    acheck = _twin("check")
    aclear = _twin("clear")
    acontains = _twin("__contains__")
    acull = _twin("cull")
    adecr = _twin("decr")
    adelete = _twin("delete")
    aevict = _twin("evict")
    aexpire = _twin("expire")
    aget = _twin("get")
    aincr = _twin("incr")
    apop = _twin("pop")
    aread = _twin("read")
    aset = _twin("set")
    astats = _twin("stats")
    atouch = _twin("touch")
    avolume = _twin("volume")


class AsyncCacheMixin(AsyncDataMixin):
    """The data twins plus those of Cache's queue methods (``apush``, ``apull``, ...)."""

    apeek = _twin("peek")
    apeekitem = _twin("peekitem")
    apull = _twin("pull")
    apush = _twin("push")
