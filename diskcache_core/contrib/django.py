"""Django cache backend: ``'BACKEND': 'diskcache_core.contrib.django.DjangoCache'``.

Configuration (every key but BACKEND and LOCATION is optional)::

    CACHES = {
        "default": {
            "BACKEND": "diskcache_core.contrib.django.DjangoCache",
            "LOCATION": "/var/tmp/django_cache",  # a directory, shared by every process
            "TIMEOUT": 300,              # Django's default expiry (None: never expire)
            "SHARDS": 8,                 # FanoutCache shards
            "DATABASE_TIMEOUT": 0.010,   # seconds a write waits for its shard's lock
            "DISK": "diskcache_core.SafeDisk",  # a Disk type or its dotted path (default_disk())
            "OPTIONS": {"size_limit": 2**30},  # FanoutCache settings (and "disk")
        },
    }

Decisions, and why:

- One FanoutCache per configuration per process. Django builds a backend object per thread (and
  per async context), so construction must be cheap: the FanoutCache (which opens databases)
  lives in a module-level table keyed by (LOCATION, SHARDS, DATABASE_TIMEOUT, OPTIONS), and
  every backend object with that configuration shares it. A backend object costs what
  ``BaseCache.__init__`` costs; its first use, reading the entry and a dictionary lookup.
- Nothing is opened before first use, as Django's FileBasedCache does: ``manage.py check``
  builds every cache, and reports what is wrong with ours (`DiskCacheCoreConfig`).
- ``close()`` keeps connections. Django calls it after every request; the connection pool
  already gives each thread its own connection and closes those of finished threads, so
  closing and reopening SQLite databases per request would only cost time.
- Bulk writes (``set_many``, ``delete_many``) group keys by shard and run one transaction per
  shard, instead of one autocommit write per key. ``get_many`` reads key by key: a read is one
  SELECT and never waits for writers, while a transaction would take the shard's write lock.
- Timeouts follow Django: DEFAULT_TIMEOUT is the configured TIMEOUT, None never expires, and 0
  or less stores the item already expired (so ``set(key, value, 0)`` hides any previous value,
  as LocMemCache does).
- ``incr``/``decr`` are single atomic statements on the database; a missing key raises
  ValueError, as Django requires. Integers are stored natively, so values stored by ``set``
  can be incremented.
"""

from __future__ import annotations

import contextlib
import functools
import numbers
import time
from collections.abc import Callable, Iterable
from typing import Any, ContextManager, ParamSpec, TypeVar, overload

from django.apps import AppConfig
from django.core import checks
from django.core.cache.backends.base import (
    DEFAULT_TIMEOUT,
    MEMCACHE_MAX_KEY_LENGTH,
    BaseCache,
    InvalidCacheKey,
)

from .. import ENOVAL, Cache, CacheMetrics, Disk, FanoutCache, RemoteOutcomeUnknownError, Timeout
from .._arguments import check_tags, float_seconds
from .._cache.awaitable import run_sync
from .._recipes.memo import MemoizeDecorator, Memoized
from .._recipes.memo import memoize as _memoize
from .._fanout.shards import ItemTooLargeError
from ._django_checks import check_caches
from ._django_options import CacheEntry, checked_entry, shared_fanout

__all__ = ["DiskCacheCoreConfig", "DjangoCache"]

P = ParamSpec("P")
R = TypeVar("R")
_EXPIRED = -1.0  # expire argument for Django timeouts of 0 or less: stored already expired


class _VersionedKeys:
    """What `memoize` uses of a cache (get and set), on this backend's keys at one version.

    Memoized keys go through KEY_PREFIX, VERSION and KEY_FUNCTION like every other key, but
    are not validated: their length comes from the arguments, not from the programmer, and a
    CacheKeyWarning about them could not be acted upon.
    """

    __slots__ = ("_backend", "_version")

    def __init__(self, backend: DjangoCache, version: int | None) -> None:
        self._backend = backend
        self._version = version

    def get(self, key: str, default: Any = None, retry: bool = False, **flags: Any) -> Any:
        backend = self._backend
        return backend.fanout.get(backend.make_key(key, self._version), default, retry=retry, **flags)

    def set(self, key: str, value: Any, expire: float | None = None, tag: Any = None,
            retry: bool = False) -> bool:
        backend = self._backend
        full_key = backend.make_key(key, self._version)
        try:
            return backend.fanout.set(full_key, value, expire, tag=tag, retry=retry)
        except ItemTooLargeError:  # not cached, as DjangoCache.set: a memoized call still returns
            backend.fanout.delete(full_key, retry=retry)
            return False


class DjangoCache(BaseCache):  # Django ships no type information: see pyproject's mypy section
    """Django cache backend storing items in a `FanoutCache` in the LOCATION directory.

    Implements Django's cache API (with awaitable ``a*`` methods that never block the event
    loop) plus python-diskcache's DjangoCache extras: ``read``, ``pop``, ``expire``, ``evict``,
    ``cull``, ``stats``, ``memoize``, tag indexes and named sub-caches, deques and indexes.
    """

    def __init__(self, directory: str, params: dict[str, Any]) -> None:
        """Called by Django with LOCATION and the rest of the CACHES entry; see the module doc.

        Nothing is checked or opened here but on first use, as Django's FileBasedCache does:
        Django builds every cache while it runs its system checks, and those report what is
        wrong with the entry (see `DiskCacheCoreConfig`) instead of dying with a traceback.
        """
        super().__init__(params)
        self._location = directory
        self._params = params

    @functools.cached_property
    def _entry(self) -> CacheEntry:
        """The CACHES entry, checked (ImproperlyConfigured names its first error)."""
        return checked_entry(self._location, self._params)

    @functools.cached_property
    def _fanout(self) -> FanoutCache:
        return shared_fanout(self._entry)

    # --- helpers -----------------------------------------------------------------------------

    @property
    def directory(self) -> str:
        """The cache directory (LOCATION, made absolute)."""
        return self._fanout.directory

    @property
    def fanout(self) -> FanoutCache:
        """The FanoutCache underneath, shared by every backend object with this configuration."""
        return self._fanout

    def validate_key(self, key: Any) -> None:
        """Warn (CacheKeyWarning) about keys memcached would reject, exactly as Django does.

        Django's check (a generator and a regular expression) costs more than a whole cache
        read; a key that is short, printable ASCII without spaces cannot draw a warning, so only
        other keys go through it. A key no backend here can store (text that is not valid
        UTF-8: lone surrogates) raises InvalidCacheKey, as Django's memcached backends do for
        keys they cannot store.
        """
        if type(key) is str and len(key) <= MEMCACHE_MAX_KEY_LENGTH and key.isascii() \
                and key.isprintable() and " " not in key:
            return
        super().validate_key(key)
        if type(key) is str and not key.isascii():
            try:
                key.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise InvalidCacheKey(
                    "Cache key contains characters that cannot be stored (not valid UTF-8: "
                    f"{exc.reason} at position {exc.start}): {key!r}"
                ) from None

    def _expire(self, timeout: Any) -> float | None:
        """A Django timeout as the cache's ``expire`` (seconds from now, or None)."""
        if timeout is DEFAULT_TIMEOUT:
            timeout = self.default_timeout
        if timeout is None:
            return None
        if not isinstance(timeout, numbers.Real):  # a str, a Decimal: as Django's own refuse
            raise TypeError(f"timeout must be a number of seconds or None, not {timeout!r}")
        seconds = float_seconds("timeout", timeout)  # NaN would store it expired, silently
        return seconds if seconds > 0 else _EXPIRED

    def _batch(self, shard: Cache, retry: bool) -> ContextManager[Any]:
        """One transaction for a shard's part of a bulk write; with a remote (where a transaction
        cannot span hosts) each write stands alone."""
        if self._entry.remote:
            return contextlib.nullcontext()
        return shard.transact(retry=retry)

    def _by_shard(self, keys: Iterable[Any]) -> dict[Cache, list[Any]]:
        """Items grouped by the shard of their first element (the made key)."""
        groups: dict[Cache, list[Any]] = {}
        shard_for = self._fanout.shard_for
        for item in keys:
            groups.setdefault(shard_for(item[0]), []).append(item)
        return groups

    # --- Django's API -----------------------------------------------------------------------

    def add(
        self,
        key: str,
        value: Any,
        timeout: Any = DEFAULT_TIMEOUT,
        version: int | None = None,
        read: bool = False,
        tag: Any = None,
        retry: bool = True,
        *,
        tags: Any = None,
    ) -> bool:
        """Store `value` only if `key` is missing or expired; True when stored. Atomic. Room
        (MAX_ENTRIES) is made for a missing key only: a cull could remove the key itself.
        `tags`: the item's tags besides `tag` (``Cache.set``)."""
        key = self.make_and_validate_key(key, version=version)
        if self._entry.limit.max_entries is not None:
            if key in self._fanout:
                return False
            self._entry.limit.make_room(self._fanout)
        try:
            return self._fanout.add(key, value, self._expire(timeout), read, tag, retry, tags=tags)
        except ItemTooLargeError:
            return False

    def get(
        self,
        key: str,
        default: Any = None,
        version: int | None = None,
        read: bool = False,
        expire_time: bool = False,
        tag: bool = False,
        retry: bool = False,
        store_time: bool = False,
        *,
        tags: bool = False,
    ) -> Any:
        """The value of `key`, or `default`; with `expire_time`/`tag`/`store_time`/`tags`, a
        tuple (`tags`: the item's tags, a frozenset, last)."""
        key = self.make_and_validate_key(key, version=version)
        if tags:
            return self._fanout.get(key, default, read, expire_time, tag, retry, store_time, tags=True)
        return self._fanout.get(key, default, read, expire_time, tag, retry, store_time)

    def get_or_set(
        self, key: str, default: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None,
        *, tags: Any = None,
    ) -> Any:
        """Django's `get_or_set`: the value of `key`, else `default` (called if callable) added
        with `tags` and read back (another writer's value, if it added first)."""
        value = self.get(key, ENOVAL, version=version)
        if value is not ENOVAL:
            return value
        if callable(default):
            default = default()
        self.add(key, default, timeout=timeout, version=version, tags=tags)
        return self.get(key, default, version=version)

    def set(
        self,
        key: str,
        value: Any,
        timeout: Any = DEFAULT_TIMEOUT,
        version: int | None = None,
        read: bool = False,
        tag: Any = None,
        retry: bool = True,
        *,
        tags: Any = None,
    ) -> bool:
        """Store `value` under `key`; True, or False when its shard stayed busy (retry=False)
        or the value is too large for it (not cached, no older value kept; no error: Django's
        backends do not fail a request, ``cache_page``, for a large value)."""
        key = self.make_and_validate_key(key, version=version)
        self._entry.limit.make_room(self._fanout)
        try:
            return self._fanout.set(key, value, self._expire(timeout), read, tag, retry, tags=tags)
        except ItemTooLargeError:
            self._fanout.delete(key, retry)
            return False

    def touch(
        self,
        key: str,
        timeout: Any = DEFAULT_TIMEOUT,
        version: int | None = None,
        retry: bool = True,
    ) -> bool:
        """Give `key` a new expiry; True when it was present."""
        key = self.make_and_validate_key(key, version=version)
        return self._fanout.touch(key, self._expire(timeout), retry)

    def delete(self, key: str, version: int | None = None, retry: bool = True) -> bool:
        """Remove `key`; True when a live item was removed."""
        key = self.make_and_validate_key(key, version=version)
        return self._fanout.delete(key, retry)

    def has_key(self, key: str, version: int | None = None) -> bool:
        """True when `key` is present and not expired."""
        return self.make_and_validate_key(key, version=version) in self._fanout

    def incr(
        self,
        key: str,
        delta: float = 1,
        version: int | None = None,
        default: float | None = None,
        retry: bool = True,
    ) -> Any:
        """Add `delta` to the number at `key`, atomically; return the new value.

        A missing key raises ValueError (Django's contract) unless `default` is given, in which
        case it starts from `default`.
        """
        made = self.make_and_validate_key(key, version=version)
        try:
            return self._fanout.incr(made, delta, default, retry)
        except KeyError:
            raise ValueError(f"Key '{made}' not found") from None

    def decr(
        self,
        key: str,
        delta: float = 1,
        version: int | None = None,
        default: float | None = None,
        retry: bool = True,
    ) -> Any:
        """Subtract `delta` from the number at `key`, atomically; see `incr`."""
        return self.incr(key, -delta, version, default, retry)

    def get_many(self, keys: Iterable[str], version: int | None = None) -> dict[str, Any]:
        """A dict of the present keys' values (missing and expired keys are left out)."""
        found = {}
        get, make = self._fanout.get, self.make_and_validate_key
        for key in keys:
            value = get(make(key, version=version), ENOVAL)
            if value is not ENOVAL:
                found[key] = value
        return found

    def set_many(
        self,
        data: dict[str, Any],
        timeout: Any = DEFAULT_TIMEOUT,
        version: int | None = None,
        retry: bool = True,
        *,
        tags: Any = None,
    ) -> list[str]:
        """Store every item, one transaction per shard; return the keys that were not stored.
        `tags`: the tags of every item (``Cache.set``).

        With the default ``retry=True`` every item is stored (the list is empty) but a value
        too large for its shard (see `set`); with ``retry=False`` a shard that stays busy past
        DATABASE_TIMEOUT stores none of its items, and their keys are returned. With
        MAX_ENTRIES, each item is set in turn, making room as Django's own backends do.
        """
        if tags is not None:
            check_tags(None, tags)  # a bad tag stores nothing (else some shards would commit)
        if self._entry.limit.max_entries is not None:  # room for each item, as Django's backends
            return [key for key, value in data.items()  # make it: one set at a time
                    if not self.set(key, value, timeout, version, retry=retry, tags=tags)]
        expire = self._expire(timeout)
        made = [(self.make_and_validate_key(key, version=version), key, value)
                for key, value in data.items()]
        failed: list[str] = []
        for shard, items in self._by_shard(made).items():
            try:
                with self._batch(shard, retry):
                    for made_key, key, value in items:
                        try:
                            shard.set(made_key, value, expire, retry=retry, tags=tags)
                        except ItemTooLargeError:  # not cached, and no older value left
                            shard.delete(made_key, retry=retry)
                            failed.append(key)
            except RemoteOutcomeUnknownError:
                raise  # a key listed as failed would read "not stored" where Redis may store it
            except Timeout:
                failed.extend(key for _, key, _ in items if key not in failed)
        return failed

    def delete_many(self, keys: Iterable[str], version: int | None = None, retry: bool = True) -> None:
        """Remove every key, one transaction per shard (with ``retry=False`` a busy shard is
        skipped, failing silently as Django's contract allows)."""
        made = [(self.make_and_validate_key(key, version=version),) for key in keys]
        for shard, items in self._by_shard(made).items():
            try:
                with self._batch(shard, retry):
                    for (made_key,) in items:
                        shard.delete(made_key, retry=retry)
            except RemoteOutcomeUnknownError:
                raise
            except Timeout:
                pass

    def incr_version(self, key: str, delta: int = 1, version: int | None = None) -> int:
        """Move `key` to version ``version + delta``; return the new version.

        Unlike Django's default (which re-stores the value with the default timeout), the item
        keeps its remaining lifetime and its tag.
        """
        if version is None:
            version = self.version
        old = self.make_and_validate_key(key, version=version)
        new = self.make_and_validate_key(key, version=version + delta)
        value, expire_time, tag = self._fanout.get(old, ENOVAL, expire_time=True, tag=True, retry=True)
        if value is ENOVAL:
            raise ValueError(f"Key '{old}' not found")
        remaining = None
        if expire_time is not None:
            remaining = expire_time - time.time()
            if remaining <= 0:
                remaining = _EXPIRED
        self._fanout.set(new, value, remaining, tag=tag, retry=True)
        self._fanout.delete(old, retry=True)
        return version + delta

    def decr_version(self, key: str, delta: int = 1, version: int | None = None) -> int:
        """Move `key` to version ``version - delta``; return the new version (see `incr_version`)."""
        return self.incr_version(key, -delta, version)

    def clear(self) -> int:
        """Remove every item; return how many were removed."""
        return self._fanout.clear(retry=True)

    def close(self, **kwargs: Any) -> None:
        """Nothing to do: connections stay open for the next request (see the module doc).

        Django calls this after every request. To release the calling thread's connections
        explicitly, call ``cache.fanout.close()``.
        """

    # --- python-diskcache's DjangoCache extras ------------------------------------------------

    def read(self, key: str, version: int | None = None) -> Any:
        """The value of `key` as a binary file object (values stored with ``read=True``);
        KeyError when missing."""
        return self._fanout.read(self.make_and_validate_key(key, version=version))

    def pop(
        self,
        key: str,
        default: Any = None,
        version: int | None = None,
        expire_time: bool = False,
        tag: bool = False,
        retry: bool = True,
    ) -> Any:
        """Remove `key` and return its value (or `default`); atomic."""
        key = self.make_and_validate_key(key, version=version)
        return self._fanout.pop(key, default, expire_time, tag, retry)

    def expire(self) -> int:
        """Remove expired items now; return how many."""
        return self._fanout.expire(retry=True)

    def evict(self, tag: Any) -> int:
        """Remove every item carrying `tag`; return how many."""
        return self._fanout.evict(tag, retry=True)

    def evict_tags(self, tags: Iterable[Any]) -> int:
        """Remove every item carrying any of `tags` (one transaction per shard); how many."""
        return self._fanout.evict_tags(tags, retry=True)

    def cull(self) -> int:
        """Remove expired items, then evict by policy until within size_limit; return how many."""
        return self._fanout.cull(retry=True)

    def stats(self, enable: bool = True, reset: bool = False) -> tuple[int, int]:
        """``(hits, misses)``; turns statistics on or off; `reset` zeroes them."""
        return self._fanout.stats(enable=enable, reset=reset)

    def create_tag_index(self) -> None:
        """Create the index that makes `evict` fast."""
        self._fanout.create_tag_index()

    def drop_tag_index(self) -> None:
        """Drop the tag index."""
        self._fanout.drop_tag_index()

    def metrics(self) -> CacheMetrics:
        """The FanoutCache's `metrics` (:doc:`observing`); ``cache(name)`` is a named cache."""
        return self._fanout.metrics()

    def cache(self, name: str, timeout: float = 60, disk: type[Disk] | None = None,
              **settings: Any) -> Cache:
        """The Cache named `name` inside LOCATION (see ``FanoutCache.cache``)."""
        return self._fanout.cache(name, timeout, disk, **settings)

    def deque(self, name: str, maxlen: int | None = None) -> Any:
        """The Deque named `name` inside LOCATION."""
        return self._fanout.deque(name, maxlen=maxlen)

    def index(self, name: str) -> Any:
        """The Index named `name` inside LOCATION."""
        return self._fanout.index(name)

    @overload
    def memoize(self, name: Callable[P, R], /) -> Memoized[P, R]: ...
    @overload
    def memoize(
        self, name: str | None = None, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None,
        typed: bool = False, tag: Any = None, ignore: Any = (), *,
        key: Callable[..., Any] | None = None, should_cache: Callable[[Any], bool] | None = None,
    ) -> MemoizeDecorator: ...
    def memoize(
        self,
        name: str | Callable[..., Any] | None = None,
        timeout: Any = DEFAULT_TIMEOUT,
        version: int | None = None,
        typed: bool = False,
        tag: Any = None,
        ignore: Any = (),
        *,
        key: Callable[..., Any] | None = None,
        should_cache: Callable[[Any], bool] | None = None,
    ) -> Any:
        """Decorator: remember results in this cache, under KEY_PREFIX and `version`.

        `timeout` as for `set` (0 looks results up but never stores them); the other options
        are those of ``Cache.memoize``. Without parentheses (``@cache.memoize``), the
        function is memoized with the default options.
        """
        return _memoize(
            _VersionedKeys(self, version), name, typed, self._expire(timeout), tag, ignore,
            key=key, should_cache=should_cache,
        )

    # --- awaitable twins (Django's a* API) -------------------------------------------------
    # Each runs its sync method in diskcache_core's thread pool (`run_sync`). Django's defaults
    # use ``sync_to_async(thread_sensitive=True)``, which funnels every cache call of the process
    # through one thread; our connections are per thread, so the calls can run side by side.
    # Written out so that type checkers see each sync method's parameters (a twin made by a
    # factory would lose, in pyright, to the untyped twin BaseCache declares). aclose keeps
    # Django's version: it has nothing to do, like close.

    async def aadd(self, key: str, value: Any, timeout: Any = DEFAULT_TIMEOUT,
                   version: int | None = None, read: bool = False, tag: Any = None,
                   retry: bool = True, *, tags: Any = None) -> bool:
        """Awaitable `add`."""
        return await run_sync(self.add, key, value, timeout, version, read, tag, retry, tags=tags)

    async def aget_or_set(self, key: str, default: Any, timeout: Any = DEFAULT_TIMEOUT,
                          version: int | None = None, *, tags: Any = None) -> Any:
        """Awaitable `get_or_set` (Django's own would drop `tags`; a callable `default` is
        called in the pool's thread, as Django 6 calls a backend's own get_or_set)."""
        return await run_sync(self.get_or_set, key, default, timeout, version, tags=tags)

    async def aget(self, key: str, default: Any = None, version: int | None = None,
                   read: bool = False, expire_time: bool = False, tag: bool = False,
                   retry: bool = False, store_time: bool = False, *,
                   tags: bool = False) -> Any:
        """Awaitable `get`."""
        return await run_sync(self.get, key, default, version, read, expire_time, tag, retry,
                              store_time, tags=tags)

    async def aset(self, key: str, value: Any, timeout: Any = DEFAULT_TIMEOUT,
                   version: int | None = None, read: bool = False, tag: Any = None,
                   retry: bool = True, *, tags: Any = None) -> bool:
        """Awaitable `set`."""
        return await run_sync(self.set, key, value, timeout, version, read, tag, retry, tags=tags)

    async def atouch(self, key: str, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None,
                     retry: bool = True) -> bool:
        """Awaitable `touch`."""
        return await run_sync(self.touch, key, timeout, version, retry)

    async def adelete(self, key: str, version: int | None = None, retry: bool = True) -> bool:
        """Awaitable `delete`."""
        return await run_sync(self.delete, key, version, retry)

    async def ahas_key(self, key: str, version: int | None = None) -> bool:
        """Awaitable `has_key`."""
        return await run_sync(self.has_key, key, version)

    async def aincr(self, key: str, delta: float = 1, version: int | None = None, default: float | None = None,
                    retry: bool = True) -> Any:
        """Awaitable `incr`."""
        return await run_sync(self.incr, key, delta, version, default, retry)

    async def adecr(self, key: str, delta: float = 1, version: int | None = None, default: float | None = None,
                    retry: bool = True) -> Any:
        """Awaitable `decr`."""
        return await run_sync(self.decr, key, delta, version, default, retry)

    async def aget_many(self, keys: Iterable[str], version: int | None = None) -> dict[str, Any]:
        """Awaitable `get_many`."""
        return await run_sync(self.get_many, keys, version)

    async def aset_many(self, data: dict[str, Any], timeout: Any = DEFAULT_TIMEOUT,
                        version: int | None = None, retry: bool = True, *,
                        tags: Any = None) -> list[str]:
        """Awaitable `set_many`."""
        return await run_sync(self.set_many, data, timeout, version, retry, tags=tags)

    async def aevict_tags(self, tags: Iterable[Any]) -> int:
        """Awaitable `evict_tags`."""
        return await run_sync(self.evict_tags, tags)

    async def adelete_many(self, keys: Iterable[str], version: int | None = None,
                           retry: bool = True) -> None:
        """Awaitable `delete_many`."""
        return await run_sync(self.delete_many, keys, version, retry)

    async def aincr_version(self, key: str, delta: int = 1, version: int | None = None) -> int:
        """Awaitable `incr_version`."""
        return await run_sync(self.incr_version, key, delta, version)

    async def adecr_version(self, key: str, delta: int = 1, version: int | None = None) -> int:
        """Awaitable `decr_version`."""
        return await run_sync(self.decr_version, key, delta, version)

    async def aclear(self) -> int:
        """Awaitable `clear`."""
        return await run_sync(self.clear)

    async def apop(self, key: str, default: Any = None, version: int | None = None,
                   expire_time: bool = False, tag: bool = False, retry: bool = True) -> Any:
        """Awaitable `pop`."""
        return await run_sync(self.pop, key, default, version, expire_time, tag, retry)


class DiskCacheCoreConfig(AppConfig):
    """The app that adds DjangoCache's system checks to ``manage.py check`` (ids
    ``diskcache_core.E001``...): ``"diskcache_core.contrib.django.DiskCacheCoreConfig"`` in
    INSTALLED_APPS. No models. (Django imports a cache backend's module when the cache is
    first used, after the checks to run are chosen: only an app can register them in time.)"""

    name = "diskcache_core.contrib.django"
    label = "diskcache_core"
    verbose_name = "diskcache_core"

    def ready(self) -> None:
        checks.register(_check_caches, checks.Tags.caches)


def _check_caches(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Django's check function: every CACHES alias whose BACKEND is DjangoCache (by any of
    its paths) or a subclass (see ``_django_checks``)."""
    return check_caches(DjangoCache)
