"""FanoutCache: keys spread over several Cache shards, each with its own short write timeout.

Why shards: SQLite lets one writer at a time into a database. Spreading keys over N databases
lets N writers proceed at once, and a short per-shard timeout turns a busy shard into a quick,
reported give-up (``set`` returns False, ``get`` returns the default) instead of a wait that
blocks the caller. Code written for python-diskcache's FanoutCache runs unchanged.

A give-up is only ever reported for a write that certainly did not happen: a remote write whose
outcome is unknown (sent to Redis, no reply in time) raises `RemoteOutcomeUnknownError`, since
False or None there would be read as "not stored" while Redis may store it.

Placement: one function (`_fanout.layout.placement`, fixed by the directory's layout file) maps a key
to its shard; every keyed operation goes through it, and every operation that may give up runs
through `FanoutCache._on_shard`, which turns the shard's `Timeout` into the documented result.

Size limit: ``size_limit`` is split evenly across the shards; an item larger than one shard's
share is refused with ValueError before anything is stored (a Cache would store it and evict it
at its next size check: a silent loss). `FanoutCache.check_fits` states the rule for callers
that want to refuse a whole batch before storing any of it.
"""

from __future__ import annotations

import contextlib
import os
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar, cast

from .._arguments import check_text, check_timeout, shape, shape_stored
from .._cache.awaitable import AsyncDataMixin, run_sync
from .._cache.cache import Cache
from .._cache.check import check_layout_leftovers
from .._disk.directories import open_cache_directory
from .._disk.default import disk_type
from .._disk.disk import DELETE, ENOVAL, KEEP, Disk
from .._errors import RemoteOutcomeUnknownError, Timeout
from .._metrics import CacheMetrics
from .._cache.getforms import typed_get
from .._cache.metrics import combined_metrics
from .layout import (
    GOLDEN,
    LAYOUT_FILE,
    MASK64,
    MAX_SHARDS,
    crc32,
    hashes_text_inline,
    placement,
)
from .layout import bind_layout, check_shard_count, placement_hash, read_layout
from .._reprs import opened_as
from .._recipes.memo import typed_memoize
from .._recipes.memo import memoize as _memoize
from .._settings import CODE_ONLY_SETTINGS, MEMORY_DEFAULTS, ShardSetting, validate_settings
from .._collections.persistent import Deque, Index
from .removals import ShardRemovals
from .shards import ShardMemoryTiers, check_share, open_shards, split_evenly
from .subcaches import SubCollections

# LAYOUT_FILE: Cache.check skips the layout file of a FanoutCache directory.
__all__ = ["LAYOUT_FILE", "MAX_SHARDS", "FanoutCache", "FanoutStats", "placement_hash"]

R = TypeVar("R")
# Settings rows `reset` reads as the sum over the shards (each holds its part), not shard 0's.
_TOTALS = frozenset({"size_limit", "size", "count", "hits", "misses"})


class FanoutStats(tuple[int, int]):
    """``(hits, misses)`` like Cache.stats(), plus ``timeouts``: writes and reads this process
    gave up on because a shard stayed busy past the timeout (counted since the last reset)."""

    timeouts: int

    def __new__(cls, hits: int, misses: int, timeouts: int) -> FanoutStats:
        stats = super().__new__(cls, (hits, misses))
        stats.timeouts = timeouts
        return stats

    @property
    def hits(self) -> int:
        return self[0]

    @property
    def misses(self) -> int:
        return self[1]

    def __repr__(self) -> str:
        return f"FanoutStats(hits={self[0]}, misses={self[1]}, timeouts={self.timeouts})"


class ShardSettings:
    """Each stored setting as an attribute of a FanoutCache, read from its first shard (the
    shards share them; ``size_limit``, their total, is FanoutCache's own). Descriptors, not a
    ``__getattr__``: a class with one loses CPython's fast attribute access on every ``self.``
    of the hot path."""

    tag_index = ShardSetting[int]("tag_index")
    cull_limit = ShardSetting[int]("cull_limit")
    exact_size_limit = ShardSetting[int]("exact_size_limit")
    eviction_policy = ShardSetting[str]("eviction_policy")
    statistics = ShardSetting[int]("statistics")
    sqlite_auto_vacuum = ShardSetting[int]("sqlite_auto_vacuum")
    sqlite_cache_size = ShardSetting[int]("sqlite_cache_size")
    sqlite_journal_mode = ShardSetting[str]("sqlite_journal_mode")
    sqlite_mmap_size = ShardSetting[int]("sqlite_mmap_size")
    sqlite_secure_delete = ShardSetting[int]("sqlite_secure_delete")
    sqlite_synchronous = ShardSetting[int]("sqlite_synchronous")
    disk_min_file_size = ShardSetting[int]("disk_min_file_size")
    disk_pickle_protocol = ShardSetting[int]("disk_pickle_protocol")
    disk_compress = ShardSetting["str | None"]("disk_compress")
    disk_compress_level = ShardSetting["int | None"]("disk_compress_level")
    disk_compress_threshold = ShardSetting[int]("disk_compress_threshold")


def _on_every_shard(
    shards: Sequence[Cache], write: Callable[[Cache, Any], Any], values: list[Any]
) -> Any:
    """``write(shard, value)`` for every shard and its value, each until the shard's lock is had
    (a setting must reach every shard: one busy for a moment does not end the call); the last
    result."""
    result = None
    for shard, value in zip(shards, values):
        while True:
            try:
                result = write(shard, value)
            except Timeout:
                continue
            break
    return result


class FanoutCache(ShardSettings, ShardMemoryTiers, ShardRemovals, AsyncDataMixin):
    """A cache sharded over several `Cache` databases in subdirectories ``000``, ``001``, ...

    Writes that cannot take their shard's lock within `timeout` give up and say so in their
    result (False, None or the default) rather than raising `Timeout`; ``[]`` access,
    assignment and ``del`` retry instead.
    """

    KEEP, DELETE = KEEP, DELETE  # what an `update` function returns to keep, or remove, the item

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        shards: int = 8,
        timeout: float = 0.010,
        disk: type[Disk] | None = None,
        **settings: Any,
    ) -> None:
        """Open (creating if needed) a sharded cache in `directory`.

        :param shards: number of Cache databases keys are spread over, 1 to `MAX_SHARDS` (1000)
        :param timeout: seconds a write waits for its shard's lock before giving up
        :param disk: Disk subclass for serialization; None: `default_disk()`
        :param settings: any of DEFAULT_SETTINGS; ``size_limit`` is the total, split evenly
        """
        check_shard_count(shards)  # before any directory is made
        disk = disk_type(disk)
        timeout = check_timeout(timeout)
        checked = validate_settings(settings)
        # Without an explicit size_limit, an existing shard keeps its stored share.
        total = checked.pop("size_limit", None)
        # The memory tier's bounds are totals for this object too, split like size_limit.
        memory_limits = {name: checked.pop(name, default) for name, default in MEMORY_DEFAULTS.items()}
        self._code_only = {n: checked[n] for n in CODE_ONLY_SETTINGS if n in checked}  # (pickling)
        read_only = bool(checked.get("read_only"))  # (nothing made nor written: see Cache)
        directory = open_cache_directory(directory, create=not read_only)
        layout = read_layout(directory, shards, read_only)

        self._directory = directory
        self._count = shards
        self._timeout = timeout
        self._disk_type = disk
        self._shards = open_shards(
            directory, shards, timeout, disk, checked, total, memory_limits, layout
        )
        bind_layout(directory, layout, self._shards)
        self._number = placement(layout, self._shards[0].disk, shards)
        self._text_inline = hashes_text_inline(layout, self._shards[0].disk)  # for get
        self._named = SubCollections(
            directory, disk, self._code_only.get("remote") is not None, self.read_only
        )
        self._timeouts = 0
        self._timeouts_lock = threading.Lock()

    # --- properties and placement ------------------------------------------------------------

    @property
    def directory(self) -> str:
        """Cache directory (the shards are its subdirectories)."""
        return self._directory

    @property
    def read_only(self) -> bool:
        """Whether the shards were opened read-only (see `Cache.read_only`)."""
        return all(shard.read_only for shard in self._shards)

    @property
    def timeout(self) -> float:
        """Seconds a write waits for its shard's lock before giving up."""
        return self._timeout

    @property
    def disk(self) -> Disk:
        """Disk used for serialization (shard 0's; every shard has one of the same type)."""
        return self._shards[0].disk

    @property
    def size_limit(self) -> int:
        """Total size limit in bytes: the sum of the shards' (each holds ``size_limit // shards``)."""
        return sum(shard.size_limit for shard in self._shards)

    @property
    def shards(self) -> tuple[Cache, ...]:
        """The Cache shards, in placement order."""
        return self._shards

    def shard_for(self, key: Any) -> Cache:
        """The shard that holds `key`."""
        return self._shards[self._number(key)]

    # Every keyed operation indexes ``self._shards`` when it runs (as python-diskcache's
    # FanoutCache does, whose own tests stand a mock in for it).
    _place = shard_for

    def check_fits(self, key: Any, value: Any) -> None:
        """Raise ValueError if `value` is bytes or str longer than `key`'s shard's size limit.

        The shard size rule, checked before anything is stored: for refusing a batch whole
        rather than part-way (the Django backend's ``set_many``). A value of another type is
        measured when it is serialized, and refused then if too large.
        """
        if type(value) in (bytes, str):
            check_share(len(value), self._place(key).size_limit)

    def _on_shard(self, gave_up: R, method: str, key: Any, /, *args: Any) -> R:
        """`method` of `key`'s shard; `gave_up` when the shard stayed busy.

        `gave_up` is the method's documented result for giving up (False, None, or the default
        in the shape a success would have); each give-up is counted for ``stats().timeouts``.
        A remote write whose outcome is unknown is no give-up: it raises.
        """
        shard = self._shards[self._number(key)]
        try:
            return cast(R, getattr(shard, method)(key, *args))
        except RemoteOutcomeUnknownError:
            raise
        except Timeout:
            self._gave_up()
            return gave_up

    def _gave_up(self) -> None:
        with self._timeouts_lock:
            self._timeouts += 1

    # --- data methods ------------------------------------------------------------------------

    @typed_get
    def get(
        self,
        key: Any,
        default: Any = None,
        read: bool = False,
        expire_time: bool = False,
        tag: bool = False,
        retry: bool = False,
        store_time: bool = False,
        *,
        tags: bool = False,
    ) -> Any:
        """Return the value for `key`, or `default` if missing, expired or its shard is busy.

        `expire_time`, `tag`, `store_time` and `tags` add those to the result, as `Cache.get`
        does."""
        if tags:
            return self._get_tagged(key, default, read, expire_time, tag, retry, store_time)
        # The hot path: _on_shard written out, and so is placement's arithmetic for str and
        # bytes keys (see hashes_text_inline). Each saves a call, measured at ~0.5 us and
        # ~0.07 us (3%) of a ~2 us memory-tier hit. The give-up result is shaped on a give-up.
        kind = type(key)
        try:
            if kind is str and self._text_inline:
                shard = self._shards[(((crc32(key.encode()) * GOLDEN) & MASK64) >> 32) % self._count]
            elif kind is bytes and self._text_inline:
                shard = self._shards[(((crc32(key, 1) * GOLDEN) & MASK64) >> 32) % self._count]
            else:
                shard = self._shards[self._number(key)]
        except UnicodeEncodeError:
            check_text("key", key)  # lone surrogates: ValueError naming the key
            raise
        try:
            return shard.get(key, default, read, expire_time, tag, retry, store_time)
        except Timeout:
            self._gave_up()
            if store_time:
                return shape_stored(default, None, None, None, expire_time, tag)
            return shape(default, None, None, expire_time, tag)

    def _get_tagged(
        self, key: Any, default: Any, read: bool, expire_time: bool, tag: bool, retry: bool,
        store_time: bool,
    ) -> tuple[Any, ...]:
        """get(tags=True) on `key`'s shard; a give-up has the shape of a miss."""
        shard = self._shards[self._number(key)]
        try:
            return shard.get(key, default, read, expire_time, tag, retry, store_time, tags=True)
        except Timeout:
            self._gave_up()
            return (default, *[None] * (expire_time + tag + store_time), frozenset())

    def __getitem__(self, key: Any) -> Any:
        """Return the value for `key` (retrying while its shard is busy); KeyError if missing."""
        return self._place(key)[key]

    def read(self, key: Any, retry: bool = True) -> Any:
        """Return the value for `key` as a binary file object; KeyError if missing. Waits for a
        busy shard by default, as python-diskcache's does (a give-up would read as missing)."""
        handle = self.get(key, ENOVAL, read=True, retry=retry)
        if handle is ENOVAL:
            raise KeyError(key)
        return handle

    def __contains__(self, key: Any) -> bool:
        """True when `key` is present and not expired."""
        return key in self._place(key)

    def set(
        self,
        key: Any,
        value: Any,
        expire: float | None = None,
        read: bool = False,
        tag: Any = None,
        retry: bool = False,
        *,
        tags: Any = None,
    ) -> bool:
        """Store `value` under `key`; True, or False when its shard stayed busy (a remote write
        whose outcome is unknown raises `RemoteOutcomeUnknownError`). `tags` as `Cache.set`."""
        shard = self._shards[self._number(key)]  # _on_shard written out, as in get
        try:
            return shard.set(key, value, expire, read, tag, retry, tags=tags)
        except RemoteOutcomeUnknownError:
            raise
        except Timeout:
            self._gave_up()
            return False

    def __setitem__(self, key: Any, value: Any) -> None:
        """Store `value` under `key`, retrying while its shard is busy."""
        self._place(key)[key] = value

    def add(
        self,
        key: Any,
        value: Any,
        expire: float | None = None,
        read: bool = False,
        tag: Any = None,
        retry: bool = False,
        *,
        tags: Any = None,
    ) -> bool:
        """Store `value` only if `key` is missing; False when present or its shard was busy."""
        shard = self._shards[self._number(key)]  # _on_shard written out: `tags` is by keyword
        try:
            return shard.add(key, value, expire, read, tag, retry, tags=tags)
        except RemoteOutcomeUnknownError:
            raise
        except Timeout:
            self._gave_up()
            return False

    def touch(self, key: Any, expire: float | None = None, retry: bool = False) -> bool:
        """Set a new expiry for `key`; False when missing or its shard was busy."""
        return self._on_shard(False, "touch", key, expire, retry)

    def incr(
        self, key: Any, delta: float = 1, default: float | None = 0, retry: bool = False
    ) -> Any:
        """Add `delta` to the number at `key` atomically; the new value, or None when busy."""
        return self._on_shard(None, "incr", key, delta, default, retry)

    def decr(
        self, key: Any, delta: float = 1, default: float | None = 0, retry: bool = False
    ) -> Any:
        """Subtract `delta` from the number at `key` atomically; the new value, or None when busy."""
        return self._on_shard(None, "decr", key, delta, default, retry)

    def update(
        self, key: Any, function: Callable[[Any], Any], default: Any = None, expire: Any = KEEP,
        tag: Any = KEEP, retry: bool = False,
    ) -> Any:
        """`Cache.update` on `key`'s shard; a shard busy past `timeout` raises Timeout."""
        return self._place(key).update(key, function, default, expire, tag, retry)

    def pop(
        self,
        key: Any,
        default: Any = None,
        expire_time: bool = False,
        tag: bool = False,
        retry: bool = False,
    ) -> Any:
        """Remove `key` and return its value, or `default` if missing or its shard was busy."""
        gave_up = shape(default, None, None, expire_time, tag)
        return self._on_shard(gave_up, "pop", key, default, expire_time, tag, retry)

    def delete(self, key: Any, retry: bool = False) -> bool:
        """Remove `key`; True when it was present, False when missing or its shard was busy."""
        return self._on_shard(False, "delete", key, retry)

    def __delitem__(self, key: Any) -> None:
        """Remove `key` (retrying while its shard is busy); KeyError if missing."""
        del self._place(key)[key]

    @typed_memoize
    def memoize(
        self,
        name: str | Callable[..., Any] | None = None,
        typed: bool = False,
        expire: float | None = None,
        tag: Any = None,
        ignore: Any = (),
        *,
        key: Any = None,
        should_cache: Any = None,
        tags: Any = None,
    ) -> Any:
        """Decorator: remember the function's results in this cache (see ``Cache.memoize``)."""
        return _memoize(
            self, name, typed, expire, tag, ignore, key=key, should_cache=should_cache, tags=tags
        )

    # --- maintenance -------------------------------------------------------------------------

    def check(self, fix: bool = False, retry: bool = False) -> list[warnings.WarningMessage]:
        """Check every shard (see ``Cache.check``) and the top directory (layout files an opener
        killed mid-write left); return all warnings."""
        found = check_layout_leftovers(self._directory, fix)
        return found + [warning for shard in self._shards for warning in shard.check(fix, retry)]

    def create_tag_index(self) -> None:
        """Create the tag index on every shard."""
        self.reset("tag_index", 1)

    def drop_tag_index(self) -> None:
        """Drop the tag index on every shard."""
        self.reset("tag_index", 0)

    def stats(self, enable: bool = True, reset: bool = False) -> FanoutStats:
        """``(hits, misses)`` summed over shards, with ``.timeouts`` (this process's give-ups)."""
        hits = misses = 0
        for shard in self._shards:
            shard_hits, shard_misses = shard.stats(enable, reset)
            hits += shard_hits
            misses += shard_misses
        with self._timeouts_lock:
            timeouts = self._timeouts
            if reset:
                self._timeouts = 0
        return FanoutStats(hits, misses, timeouts)

    def metrics(self) -> CacheMetrics:
        """The shards' `Cache.metrics` summed, each shard's own in ``shards``."""
        return combined_metrics([shard.metrics() for shard in self._shards])

    async def aexpire(  # type: ignore[override]  # retry first, as python-diskcache's
        self, retry: bool = False, now: float | None = None
    ) -> int:
        """Awaitable `expire` (`retry` first, as `expire` takes it)."""
        return await run_sync(self.expire, retry, now)

    async def aread(self, key: Any, retry: bool = True) -> Any:
        """Awaitable `read` (waits for a busy shard by default, as `read` does)."""
        return await run_sync(self.read, key, retry)

    async def astats(self, enable: bool = True, reset: bool = False) -> FanoutStats:
        """Awaitable `stats` (its result has ``.timeouts``, unlike Cache's)."""
        return await run_sync(self.stats, enable, reset)

    def volume(self) -> int:
        """Bytes on disk, summed over shards."""
        return sum(shard.volume() for shard in self._shards)

    def reset(self, key: str, value: Any = ENOVAL) -> Any:
        """Read or change a setting on every shard; ``size_limit`` is split across them, and a
        counter (``hits``, ...) is written to the first shard (they read back as their sum)."""
        if value is ENOVAL:
            results = [shard.reset(key) for shard in self._shards]
            return sum(results) if key in _TOTALS else results[0]
        if key == "size_limit":
            value = validate_settings({key: value})[key]
            values = split_evenly(value, self._count)
        else:
            values = [value] + [0 if key in _TOTALS else value] * (self._count - 1)
        result = _on_every_shard(self._shards, lambda shard, each: shard.reset(key, each), values)
        return value if key in _TOTALS else result

    def flush_access_log(self, timeout: float | None = None) -> None:
        """Write every shard's batched access bookkeeping now (every shard is tried; the first
        error, a busy shard's Timeout say, is raised after)."""
        failed: list[Exception] = []
        for shard in self._shards:
            try:
                shard.flush_access_log(timeout)
            except Exception as exc:  # noqa: BLE001 - raised below, once the rest are written
                failed.append(exc)
        if failed:
            raise failed[0]

    @contextlib.contextmanager
    def transact(self, retry: bool = True) -> Iterator[None]:
        """Hold every shard's write lock, in shard order (no deadlock); shards commit one by one."""
        with contextlib.ExitStack() as stack:
            for shard in self._shards:
                stack.enter_context(shard.transact(retry))
            yield

    # --- sub-collections ---------------------------------------------------------------------

    def cache(
        self, name: str, timeout: float = 60, disk: type[Disk] | None = None, **settings: Any
    ) -> Cache:
        """The Cache named `name` in subdirectory ``cache/<name>`` (created on first use).

        `disk` defaults to this cache's Disk type. The same object is returned for a name.
        """
        return self._named.cache(name, timeout, disk, **settings)

    def deque(self, name: str, maxlen: int | None = None, disk: type[Disk] | None = None) -> Deque[Any]:
        """The Deque named `name` in subdirectory ``deque/<name>`` (created on first use; `disk`
        defaults to this cache's Disk type, and applies when it is made)."""
        return self._named.deque(name, maxlen, disk)

    def index(self, name: str, disk: type[Disk] | None = None) -> Index[Any, Any]:
        """The Index named `name` in subdirectory ``index/<name>`` (created on first use; `disk`
        defaults to this cache's Disk type, and applies when it is made)."""
        return self._named.index(name, disk)

    # --- iteration and lifecycle -------------------------------------------------------------

    def iterkeys(self, reverse: bool = False, *, tag: Any = ENOVAL) -> Iterator[Any]:
        """Iterate keys shard by shard, each shard's in `Cache.iterkeys` order: key order, or
        with `tag` the keys carrying it (``tag=None``: with no tag) in insertion order."""
        for shard in reversed(self._shards) if reverse else self._shards:
            yield from shard.iterkeys(reverse, tag=tag)

    def __iter__(self) -> Iterator[Any]:
        """Iterate keys shard by shard (insertion order within a shard)."""
        for shard in self._shards:
            yield from shard

    def __reversed__(self) -> Iterator[Any]:
        """Iterate keys in the reverse of `__iter__`'s order."""
        for shard in reversed(self._shards):
            yield from reversed(shard)

    def __len__(self) -> int:
        """Count of items in every shard, expired items included."""
        return sum(len(shard) for shard in self._shards)

    def close(self) -> None:
        """Close every shard and sub-collection (they reopen on next use)."""
        for shard in self._shards:
            shard.close()
        self._named.close()

    def __enter__(self) -> FanoutCache:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __getstate__(self) -> tuple[Any, ...]:
        options = {**self._code_only, **{name: getattr(self, name) for name in MEMORY_DEFAULTS}}
        return (self._directory, self._count, self._timeout, self._disk_type, options)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        directory, shards, timeout, disk, options = state
        self.__init__(directory, shards, timeout, disk, **options)  # type: ignore[misc]

    def __repr__(self) -> str:
        opened = opened_as(self._shards[0].remote, self.read_only)
        return f"{type(self).__name__}({self._directory!r}, shards={self._count}{opened})"
