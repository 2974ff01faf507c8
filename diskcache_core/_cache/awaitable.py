"""Awaitable twins of the cache's data methods: ``await cache.aget(key)`` and friends.

One implementation: each twin runs its synchronous method (``aget`` runs ``get``) with
`run_sync`, in the library's small thread pool (`_store.workers`), so a coroutine never blocks the event
loop on disk I/O or on the database lock, whatever the cache's timeout. Cache and FanoutCache
get their twins by inheriting `AsyncDataMixin` (Cache also `AsyncCacheMixin`, for the queue
methods); the Django backend writes its own twins over `run_sync`.

Every twin is written out with its sync method's parameters and result type, so a type checker
reports ``await cache.aget("k", defualt=1)`` as it reports ``cache.get("k", defualt=1)``. A
factory (``aget = twin(get)``) cannot do that everywhere: a mixin has no sync method to copy a
signature from, and pyright prefers a base class's declared method over a factory-made
attribute. The `SyncData` and `SyncQueue` protocols name what the mixins' twins call, and
`run_sync`'s typing checks that each twin passes its arguments on as its method takes them.

Why a pool of our own rather than ``asyncio.to_thread``: the loop's default executor is shared
with the application, and a cache call may wait up to the cache's timeout for the database lock;
a separate pool keeps the two from starving each other. The pool is recreated after ``fork()``
(an inherited executor's threads do not exist in the child).

Not twinned: ``transact`` (a transaction belongs to one thread, and an ``await`` inside it could
resume on another) and iteration. Cancelling an awaiting task does not stop the call already
running in the pool; it completes (or times out) in the background.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any, ParamSpec, Protocol, TypeVar

from .getforms import typed_aget
from .._store.workers import run_sync

__all__ = ["AsyncCacheMixin", "AsyncDataMixin", "SyncData", "SyncQueue", "run_sync"]

P = ParamSpec("P")
R = TypeVar("R")


class SyncData(Protocol):
    """The sync data methods `AsyncDataMixin`'s twins run (Cache's and FanoutCache's)."""

    def get(
        self, key: Any, default: Any = None, read: bool = False, expire_time: bool = False,
        tag: bool = False, retry: bool = False, store_time: bool = False, *, tags: bool = False,
    ) -> Any: ...
    def set(
        self, key: Any, value: Any, expire: float | None = None, read: bool = False,
        tag: Any = None, retry: bool = False, *, tags: Any = None,
    ) -> bool: ...
    def add(
        self, key: Any, value: Any, expire: float | None = None, read: bool = False,
        tag: Any = None, retry: bool = False, *, tags: Any = None,
    ) -> bool: ...
    def delete(self, key: Any, retry: bool = False) -> bool: ...
    def pop(
        self, key: Any, default: Any = None, expire_time: bool = False, tag: bool = False,
        retry: bool = False,
    ) -> Any: ...
    def touch(self, key: Any, expire: float | None = None, retry: bool = False) -> bool: ...
    def incr(
        self, key: Any, delta: float = 1, default: float | None = 0, retry: bool = False
    ) -> Any: ...
    def decr(
        self, key: Any, delta: float = 1, default: float | None = 0, retry: bool = False
    ) -> Any: ...
    def read(self, key: Any, retry: bool = False) -> Any: ...
    def __contains__(self, key: Any) -> bool: ...
    def expire(self, *args: Any, **kwargs: Any) -> int: ...  # FanoutCache's takes retry first
    def evict(self, tag: Any, retry: bool = False) -> int: ...
    def evict_tags(self, tags: Iterable[Any], retry: bool = False) -> int: ...
    def clear(self, retry: bool = False) -> int: ...
    def cull(self, retry: bool = False) -> int: ...
    def check(self, fix: bool = False, retry: bool = False) -> list[warnings.WarningMessage]: ...
    def stats(self, enable: bool = True, reset: bool = False) -> tuple[int, int]: ...
    def volume(self) -> int: ...


class SyncQueue(SyncData, Protocol):
    """SyncData plus the queue methods `AsyncCacheMixin`'s twins run (Cache's)."""

    def push(
        self, value: Any, prefix: str | None = None, side: str = "back",
        expire: float | None = None, read: bool = False, tag: Any = None, retry: bool = False,
    ) -> Any: ...
    def pull(
        self, prefix: str | None = None, default: Any = (None, None), side: str = "front",
        expire_time: bool = False, tag: bool = False, retry: bool = False,
    ) -> Any: ...
    def peek(
        self, prefix: str | None = None, default: Any = (None, None), side: str = "front",
        expire_time: bool = False, tag: bool = False, retry: bool = False,
    ) -> Any: ...
    def peekitem(
        self, last: bool = True, expire_time: bool = False, tag: bool = False, retry: bool = False
    ) -> Any: ...


class AsyncDataMixin:
    """The awaitable twins (``aget``, ``aset``, ...) of a cache's sync data methods.

    Each ``a<name>`` takes the arguments of ``<name>`` and returns its result, running it in a
    worker thread so the event loop never waits on disk I/O or the database lock; ``acontains``
    is the twin of ``key in cache``.
    """

    @typed_aget
    async def aget(
        self: SyncData, key: Any, default: Any = None, read: bool = False,
        expire_time: bool = False, tag: bool = False, retry: bool = False,
        store_time: bool = False, *, tags: bool = False,
    ) -> Any:
        """Awaitable `get`."""
        if tags:
            return await run_sync(
                self.get, key, default, read, expire_time, tag, retry, store_time, tags=True
            )
        return await run_sync(self.get, key, default, read, expire_time, tag, retry, store_time)

    async def aset(
        self: SyncData, key: Any, value: Any, expire: float | None = None, read: bool = False,
        tag: Any = None, retry: bool = False, *, tags: Any = None,
    ) -> bool:
        """Awaitable `set`."""
        return await run_sync(self.set, key, value, expire, read, tag, retry, tags=tags)

    async def aadd(
        self: SyncData, key: Any, value: Any, expire: float | None = None, read: bool = False,
        tag: Any = None, retry: bool = False, *, tags: Any = None,
    ) -> bool:
        """Awaitable `add`."""
        return await run_sync(self.add, key, value, expire, read, tag, retry, tags=tags)

    async def adelete(self: SyncData, key: Any, retry: bool = False) -> bool:
        """Awaitable `delete`."""
        return await run_sync(self.delete, key, retry)

    async def apop(
        self: SyncData, key: Any, default: Any = None, expire_time: bool = False,
        tag: bool = False, retry: bool = False,
    ) -> Any:
        """Awaitable `pop`."""
        return await run_sync(self.pop, key, default, expire_time, tag, retry)

    async def atouch(
        self: SyncData, key: Any, expire: float | None = None, retry: bool = False
    ) -> bool:
        """Awaitable `touch`."""
        return await run_sync(self.touch, key, expire, retry)

    async def aincr(
        self: SyncData, key: Any, delta: float = 1, default: float | None = 0,
        retry: bool = False,
    ) -> Any:
        """Awaitable `incr`."""
        return await run_sync(self.incr, key, delta, default, retry)

    async def adecr(
        self: SyncData, key: Any, delta: float = 1, default: float | None = 0,
        retry: bool = False,
    ) -> Any:
        """Awaitable `decr`."""
        return await run_sync(self.decr, key, delta, default, retry)

    async def aread(self: SyncData, key: Any, retry: bool = False) -> Any:
        """Awaitable `read`."""
        return await run_sync(self.read, key, retry)

    async def acontains(self: SyncData, key: Any) -> bool:
        """Awaitable `__contains__` (``key in cache``)."""
        return await run_sync(self.__contains__, key)

    async def aexpire(self: SyncData, now: float | None = None, retry: bool = False) -> int:
        """Awaitable `expire`."""
        return await run_sync(self.expire, now=now, retry=retry)

    async def aevict(self: SyncData, tag: Any, retry: bool = False) -> int:
        """Awaitable `evict`."""
        return await run_sync(self.evict, tag, retry)

    async def aevict_tags(self: SyncData, tags: Iterable[Any], retry: bool = False) -> int:
        """Awaitable `evict_tags`."""
        return await run_sync(self.evict_tags, tags, retry)

    async def aclear(self: SyncData, retry: bool = False) -> int:
        """Awaitable `clear`."""
        return await run_sync(self.clear, retry)

    async def acull(self: SyncData, retry: bool = False) -> int:
        """Awaitable `cull`."""
        return await run_sync(self.cull, retry)

    async def acheck(
        self: SyncData, fix: bool = False, retry: bool = False
    ) -> list[warnings.WarningMessage]:
        """Awaitable `check`."""
        return await run_sync(self.check, fix, retry)

    async def astats(self: SyncData, enable: bool = True, reset: bool = False) -> tuple[int, int]:
        """Awaitable `stats`."""
        return await run_sync(self.stats, enable, reset)

    async def avolume(self: SyncData) -> int:
        """Awaitable `volume`."""
        return await run_sync(self.volume)


class AsyncCacheMixin(AsyncDataMixin):
    """The data twins plus those of Cache's queue methods (``apush``, ``apull``, ...)."""

    async def apush(
        self: SyncQueue, value: Any, prefix: str | None = None, side: str = "back",
        expire: float | None = None, read: bool = False, tag: Any = None, retry: bool = False,
    ) -> Any:
        """Awaitable `push`."""
        return await run_sync(self.push, value, prefix, side, expire, read, tag, retry)

    async def apull(
        self: SyncQueue, prefix: str | None = None, default: Any = (None, None),
        side: str = "front", expire_time: bool = False, tag: bool = False, retry: bool = False,
    ) -> Any:
        """Awaitable `pull`."""
        return await run_sync(self.pull, prefix, default, side, expire_time, tag, retry)

    async def apeek(
        self: SyncQueue, prefix: str | None = None, default: Any = (None, None),
        side: str = "front", expire_time: bool = False, tag: bool = False, retry: bool = False,
    ) -> Any:
        """Awaitable `peek`."""
        return await run_sync(self.peek, prefix, default, side, expire_time, tag, retry)

    async def apeekitem(
        self: SyncQueue, last: bool = True, expire_time: bool = False, tag: bool = False,
        retry: bool = False,
    ) -> Any:
        """Awaitable `peekitem`."""
        return await run_sync(self.peekitem, last, expire_time, tag, retry)
