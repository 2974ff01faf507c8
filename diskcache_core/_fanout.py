"""FanoutCache: keys hashed across several Cache shards, each with its own short write timeout.

Why shards: SQLite lets one writer at a time into a database. Spreading keys over N databases
lets N writers proceed at once, and a short per-shard timeout turns a busy shard into a quick,
reported give-up (``set`` returns False, ``get`` returns the default) instead of a wait that
blocks the caller. Code written for python-diskcache's FanoutCache runs unchanged.

Placement. A key goes to shard ``placement_hash(stored key) % shards``: CRC-32 of the key's
stored form (as the Disk stores it), spread by a multiplicative (Fibonacci) mix. It is the same
in every process and Python version, costs ~0.2 us (a cryptographic hash costs twice that on
every call, a fifth of a get), and is uniform for integer keys with a stride (python-diskcache
hashes an integer key to itself, so keys 0, 8, 16, ... all land on one of 8 shards). The layout is recorded in ``fanout.json`` when the
directory is created; reopening with another shard count raises ValueError instead of silently
missing every moved key. A directory python-diskcache created (shards but no ``fanout.json``)
keeps python-diskcache's placement, so its items stay reachable.

Size limit. ``size_limit`` is split evenly across the shards; an item larger than one shard's
share is refused with ValueError before anything is stored (it would otherwise be evicted at
once, a silent loss).
"""

from __future__ import annotations

import contextlib
import json
import os
import os.path as op
import struct
import tempfile
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any, Iterator

from . import _schema as sql
from ._arguments import check_text, check_timeout, shape
from ._async import AsyncDataMixin
from ._cache import Cache
from ._disk import ENOVAL, Disk, open_cache_directory
from ._errors import Timeout
from ._memo import MemoizeDecorator
from ._memo import memoize as _memoize
from ._memory import MemoryStats
from ._settings import DEFAULT_SETTINGS, MEMORY_DEFAULTS, validate_settings
from ._persistent import Deque, Index

__all__ = ["MAX_SHARDS", "FanoutCache", "FanoutStats", "placement_hash"]

LAYOUT_FILE = "fanout.json"
# Shards live in directories 000-999 (the three digits python-diskcache's layout has too). Each
# is a database, its WAL and version files: a few file descriptors per thread that uses it.
MAX_SHARDS = 1000
_HASH_CRC = "crc32-fibonacci-v1"
_HASH_PEER = "python-diskcache-adler32"
_U32 = 0xFFFFFFFF
_U64 = 0xFFFFFFFFFFFFFFFF
_GOLDEN = 0x9E3779B97F4A7C15  # 2**64 / golden ratio: multiplying spreads nearby CRCs apart
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_crc32 = zlib.crc32


class FanoutStats(tuple):  # type: ignore[type-arg]
    """``(hits, misses)`` like Cache.stats(), plus ``timeouts``: writes and reads this process
    gave up on because a shard stayed busy past the timeout (counted since the last reset)."""

    timeouts: int

    def __new__(cls, hits: int, misses: int, timeouts: int) -> "FanoutStats":
        stats = super().__new__(cls, (hits, misses))
        stats.timeouts = timeouts
        return stats

    @property
    def hits(self) -> int:
        return int(self[0])

    @property
    def misses(self) -> int:
        return int(self[1])

    def __repr__(self) -> str:
        return f"FanoutStats(hits={self[0]}, misses={self[1]}, timeouts={self.timeouts})"


def placement_hash(db_key: Any) -> int:
    """A 32-bit hash of a stored key (as `Disk.put` returns it), stable across processes.

    Keys the database treats as equal hash equally (``1`` and ``1.0``); each stored type
    starts the CRC from a different value, so ``'1'``, ``b'1'`` and ``1`` are unrelated.
    """
    kind = type(db_key)
    if kind is str:
        try:
            crc = _crc32(db_key.encode("utf-8"))
        except UnicodeEncodeError:
            check_text("key", db_key)  # ValueError naming the key
            raise
    elif kind is bytes:
        crc = _crc32(db_key, 1)
    else:
        if kind is float and db_key.is_integer() and _INT64_MIN <= db_key <= _INT64_MAX:
            db_key, kind = int(db_key), int
        if kind is int:
            crc = _crc32(db_key.to_bytes(8, "little", signed=True), 2)
        else:
            crc = _crc32(struct.pack("<d", db_key), 3)
    return ((crc * _GOLDEN) & _U64) >> 32


def _plain_key_hash(disk: Disk) -> Callable[[Any], int]:
    """placement_hash for the plain Disk, skipping `put` for keys it stores as they are."""

    def key_hash(key: Any) -> int:
        kind = type(key)
        if kind is str:
            try:
                return ((_crc32(key.encode("utf-8")) * _GOLDEN) & _U64) >> 32
            except UnicodeEncodeError:
                check_text("key", key)  # ValueError naming the key
                raise
        if kind is bytes:
            return ((_crc32(key, 1) * _GOLDEN) & _U64) >> 32
        return placement_hash(disk.put(key)[0])

    return key_hash


def _peer_hash(disk: Disk) -> Callable[[Any], int]:
    """python-diskcache's shard placement, for directories it created."""

    def peer_hash(key: Any) -> int:
        db_key, _ = disk.put(key)
        kind = type(db_key)
        if kind is bytes:
            return zlib.adler32(db_key) & _U32
        if kind is str:
            try:
                return zlib.adler32(db_key.encode("utf-8")) & _U32
            except UnicodeEncodeError:
                check_text("key", db_key)  # ValueError naming the key
                raise
        if kind is int:
            return db_key % _U32
        return zlib.adler32(struct.pack("!d", db_key)) & _U32

    return peer_hash


def _split(total: int, shards: int) -> list[int]:
    """`total` bytes in `shards` near-equal shares that add up to it exactly."""
    share, extra = divmod(total, shards)
    return [share + (number < extra) for number in range(shards)]


def _memory_shares(total: int, shards: int) -> list[int]:
    """A memory-tier bound split over shards; never 0 for a shard unless the total is 0 (which
    turns the tier off)."""
    if 0 < total < shards:
        return [1] * shards
    return _split(total, shards)


def _shard_name(number: int) -> str:
    return "%03d" % number


def _check_name(name: Any) -> list[str]:
    """Split a sub-collection name into path parts that stay inside the cache directory."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, not {type(name).__name__}")
    parts = name.split("/")
    if not name or any(part in ("", ".", "..") or "\\" in part or "\0" in part for part in parts):
        raise ValueError(f"name must be relative path parts without '.', '..' or '', got {name!r}")
    return parts


class _Shard(Cache):
    """A Cache that refuses an item larger than its size limit instead of storing it and
    evicting it at the next size check (a silent loss). Used for FanoutCache's shards, whose
    limit is a fraction of the total the user chose."""

    _oversize_message = (
        "item of {size} bytes exceeds its shard's size limit of {limit} bytes (FanoutCache"
        " splits size_limit evenly over its shards)"
    )


class FanoutCache(AsyncDataMixin):
    """A cache sharded over several `Cache` databases in subdirectories ``000``, ``001``, ...

    Writes that cannot take their shard's lock within `timeout` give up and say so in their
    result (False, None or the default) rather than raising `Timeout`; ``[]`` access,
    assignment and ``del`` retry instead.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        shards: int = 8,
        timeout: float = 0.010,
        disk: type[Disk] = Disk,
        **settings: Any,
    ) -> None:
        """Open (creating if needed) a sharded cache in `directory`.

        :param shards: number of Cache databases keys are spread over, 1 to `MAX_SHARDS` (1000)
        :param timeout: seconds a write waits for its shard's lock before giving up
        :param disk: Disk subclass for serialization
        :param settings: any of DEFAULT_SETTINGS; ``size_limit`` is the total, split evenly
        """
        if type(shards) is not int:
            raise TypeError(f"shards must be an int, not {type(shards).__name__}")
        if not 1 <= shards <= MAX_SHARDS:  # checked before any directory is made
            raise ValueError(f"shards must be from 1 to {MAX_SHARDS}, got {shards}")
        if not (isinstance(disk, type) and issubclass(disk, Disk)):
            raise TypeError(f"disk must be a subclass of diskcache_core.Disk, not {disk!r}")
        check_timeout(timeout)
        checked = validate_settings(settings)
        # Without an explicit size_limit, an existing shard keeps its stored share.
        total = checked.pop("size_limit", None)
        # The memory tier's bounds are totals for this object too, split like size_limit.
        memory_limits = {name: checked.pop(name, default) for name, default in MEMORY_DEFAULTS.items()}
        directory = open_cache_directory(directory)
        layout = self._layout(directory, shards)

        self._directory = directory
        self._count = shards
        self._timeout = timeout
        self._disk_type = disk
        default_total = DEFAULT_SETTINGS["size_limit"] if total is None else total
        shares = _split(default_total, shards)
        memory_shares = {name: _memory_shares(value, shards) for name, value in memory_limits.items()}
        cache_list = []
        for number in range(shards):
            path = op.join(directory, _shard_name(number))
            shard_settings = dict(checked)
            shard_settings.update((name, split[number]) for name, split in memory_shares.items())
            if total is not None or not op.exists(op.join(path, sql.DBNAME)):
                shard_settings["size_limit"] = shares[number]
            cache_list.append(_Shard(path, timeout=timeout, disk=disk, **shard_settings))
        self._shards = tuple(cache_list)
        disk0 = self._shards[0].disk
        self._inline_str = False  # get/set may place str and bytes keys without a call (hot path)
        if layout == _HASH_PEER:
            self._hash = _peer_hash(disk0)
        elif type(disk0).put is Disk.put:
            self._hash = _plain_key_hash(disk0)
            self._inline_str = True
        else:
            self._hash = lambda key: placement_hash(disk0.put(key)[0])
        self._collections: dict[tuple[str, str], Any] = {}
        self._collections_lock = threading.Lock()
        self._timeouts = 0
        self._timeouts_lock = threading.Lock()

    @staticmethod
    def _layout(directory: str, shards: int) -> str:
        """Read, or record, how keys are placed in `directory`; returns the hash's name."""
        path = op.join(directory, LAYOUT_FILE)
        # Shards first, then the layout file: ours writes the file before any shard, so a shard
        # seen without a layout file was made by python-diskcache.
        existing = sum(
            len(name) == 3 and name.isdigit() and op.isdir(op.join(directory, name))
            for name in os.listdir(directory)
        )
        try:
            with open(path, encoding="utf-8") as handle:
                layout = json.load(handle)
        except FileNotFoundError:
            if existing:
                if existing != shards:
                    raise ValueError(
                        f"{directory!r} holds a python-diskcache FanoutCache with {existing} "
                        f"shards; open it with shards={existing}"
                    ) from None
                return _HASH_PEER
            layout = {"format": 1, "shards": shards, "hash": _HASH_CRC}
            fd, temp = tempfile.mkstemp(dir=directory, prefix=".fanout-", suffix=".tmp")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    json.dump(layout, handle)
                try:
                    os.link(temp, path)  # atomic, and never replaces another opener's file
                except FileExistsError:
                    return FanoutCache._layout(directory, shards)
            finally:
                os.unlink(temp)
        except (ValueError, OSError) as exc:
            raise ValueError(f"cannot read the shard layout {path!r}: {exc}") from exc
        if not isinstance(layout, dict) or layout.get("hash") not in (_HASH_CRC, _HASH_PEER):
            raise ValueError(f"unknown shard layout in {path!r}: {layout!r}")
        if layout.get("shards") != shards:
            raise ValueError(
                f"{directory!r} was created with shards={layout.get('shards')}; "
                f"opening it with shards={shards} would misplace every key"
            )
        return str(layout["hash"])

    # --- properties and placement ------------------------------------------------------------

    @property
    def directory(self) -> str:
        """Cache directory (the shards are its subdirectories)."""
        return self._directory

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
        return self._shards[self._hash(key) % self._count]

    def __getattr__(self, name: str) -> Any:
        # Settings read through to shard 0, as in python-diskcache (all shards share them).
        if name in DEFAULT_SETTINGS:
            return getattr(self._shards[0], name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _gave_up(self) -> None:
        with self._timeouts_lock:
            self._timeouts += 1

    # --- data methods ------------------------------------------------------------------------

    def get(
        self,
        key: Any,
        default: Any = None,
        read: bool = False,
        expire_time: bool = False,
        tag: bool = False,
        retry: bool = False,
    ) -> Any:
        """Return the value for `key`, or `default` if missing, expired or its shard is busy."""
        kind = type(key)
        try:
            if kind is str and self._inline_str:
                shard = self._shards[(((_crc32(key.encode()) * _GOLDEN) & _U64) >> 32) % self._count]
            elif kind is bytes and self._inline_str:
                shard = self._shards[(((_crc32(key, 1) * _GOLDEN) & _U64) >> 32) % self._count]
            else:
                shard = self._shards[self._hash(key) % self._count]
        except UnicodeEncodeError:
            check_text("key", key)  # a str key with lone surrogates: ValueError naming it
            raise
        try:
            return shard.get(key, default, read, expire_time, tag, retry)
        except Timeout:
            self._gave_up()
            return shape(default, None, None, expire_time, tag)

    def __getitem__(self, key: Any) -> Any:
        """Return the value for `key` (retrying while its shard is busy); KeyError if missing."""
        return self._shards[self._hash(key) % self._count][key]

    def read(self, key: Any, retry: bool = False) -> Any:
        """Return the value for `key` as a binary file object; KeyError if missing."""
        handle = self.get(key, ENOVAL, read=True, retry=retry)
        if handle is ENOVAL:
            raise KeyError(key)
        return handle

    def __contains__(self, key: Any) -> bool:
        """True when `key` is present and not expired."""
        return key in self._shards[self._hash(key) % self._count]

    def set(
        self,
        key: Any,
        value: Any,
        expire: float | None = None,
        read: bool = False,
        tag: Any = None,
        retry: bool = False,
    ) -> bool:
        """Store `value` under `key`; True, or False when its shard stayed busy."""
        kind = type(key)
        try:
            if kind is str and self._inline_str:
                shard = self._shards[(((_crc32(key.encode()) * _GOLDEN) & _U64) >> 32) % self._count]
            elif kind is bytes and self._inline_str:
                shard = self._shards[(((_crc32(key, 1) * _GOLDEN) & _U64) >> 32) % self._count]
            else:
                shard = self._shards[self._hash(key) % self._count]
        except UnicodeEncodeError:
            check_text("key", key)  # a str key with lone surrogates: ValueError naming it
            raise
        try:
            return shard.set(key, value, expire, read, tag, retry)
        except Timeout:
            self._gave_up()
            return False

    def __setitem__(self, key: Any, value: Any) -> None:
        """Store `value` under `key`, retrying while its shard is busy."""
        self._shards[self._hash(key) % self._count][key] = value

    def add(
        self,
        key: Any,
        value: Any,
        expire: float | None = None,
        read: bool = False,
        tag: Any = None,
        retry: bool = False,
    ) -> bool:
        """Store `value` only if `key` is missing; False when present or its shard was busy."""
        shard = self._shards[self._hash(key) % self._count]
        try:
            return shard.add(key, value, expire, read, tag, retry)
        except Timeout:
            self._gave_up()
            return False

    def touch(self, key: Any, expire: float | None = None, retry: bool = False) -> bool:
        """Set a new expiry for `key`; False when missing or its shard was busy."""
        try:
            return self._shards[self._hash(key) % self._count].touch(key, expire, retry)
        except Timeout:
            self._gave_up()
            return False

    def incr(self, key: Any, delta: Any = 1, default: Any = 0, retry: bool = False) -> Any:
        """Add `delta` to the number at `key` atomically; the new value, or None when busy."""
        try:
            return self._shards[self._hash(key) % self._count].incr(key, delta, default, retry)
        except Timeout:
            self._gave_up()
            return None

    def decr(self, key: Any, delta: Any = 1, default: Any = 0, retry: bool = False) -> Any:
        """Subtract `delta` from the number at `key` atomically; the new value, or None when busy."""
        try:
            return self._shards[self._hash(key) % self._count].decr(key, delta, default, retry)
        except Timeout:
            self._gave_up()
            return None

    def pop(
        self,
        key: Any,
        default: Any = None,
        expire_time: bool = False,
        tag: bool = False,
        retry: bool = False,
    ) -> Any:
        """Remove `key` and return its value, or `default` if missing or its shard was busy."""
        try:
            return self._shards[self._hash(key) % self._count].pop(
                key, default, expire_time, tag, retry
            )
        except Timeout:
            self._gave_up()
            return shape(default, None, None, expire_time, tag)

    def delete(self, key: Any, retry: bool = False) -> bool:
        """Remove `key`; True when it was present, False when missing or its shard was busy."""
        try:
            return self._shards[self._hash(key) % self._count].delete(key, retry)
        except Timeout:
            self._gave_up()
            return False

    def __delitem__(self, key: Any) -> None:
        """Remove `key` (retrying while its shard is busy); KeyError if missing."""
        del self._shards[self._hash(key) % self._count][key]

    def memoize(
        self,
        name: str | None = None,
        typed: bool = False,
        expire: float | None = None,
        tag: Any = None,
        ignore: Any = (),
        *,
        key: Any = None,
        should_cache: Any = None,
    ) -> MemoizeDecorator:
        """Decorator: remember the function's results in this cache (see ``Cache.memoize``)."""
        return _memoize(self, name, typed, expire, tag, ignore, key=key, should_cache=should_cache)

    # --- maintenance -------------------------------------------------------------------------

    def _each_until_done(self, method: str, *args: Any, retry: bool) -> int:
        """Run a bulk removal on every shard, resuming after timeouts; the total removed."""
        total = 0
        for shard in self._shards:
            while True:
                try:
                    total += getattr(shard, method)(*args, retry=retry)
                except Timeout as exc:
                    total += exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
                else:
                    break
        return total

    def expire(self, now: float | None = None, retry: bool = False) -> int:
        """Remove expired items from every shard; return how many."""
        return self._each_until_done("expire", time.time() if now is None else now, retry=retry)

    def evict(self, tag: Any, retry: bool = False) -> int:
        """Remove every item with `tag` from every shard; return how many."""
        return self._each_until_done("evict", tag, retry=retry)

    def cull(self, retry: bool = False) -> int:
        """Remove expired items, then evict by policy until each shard is within its limit."""
        return self._each_until_done("cull", retry=retry)

    def clear(self, retry: bool = False) -> int:
        """Remove every item from every shard; return how many."""
        return self._each_until_done("clear", retry=retry)

    def check(self, fix: bool = False, retry: bool = False) -> list[Any]:
        """Check every shard (see ``Cache.check``); return all warnings."""
        found: list[Any] = []
        for shard in self._shards:
            found.extend(shard.check(fix, retry))
        return found

    def create_tag_index(self) -> None:
        """Create the tag index on every shard."""
        for shard in self._shards:
            shard.create_tag_index()

    def drop_tag_index(self) -> None:
        """Drop the tag index on every shard."""
        for shard in self._shards:
            shard.drop_tag_index()

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

    def volume(self) -> int:
        """Bytes on disk, summed over shards."""
        return sum(shard.volume() for shard in self._shards)

    @property
    def memory_size_limit(self) -> int:
        """Bytes the shards' memory tiers may hold in this process, in total (0: off)."""
        return sum(shard.memory_size_limit for shard in self._shards)

    @memory_size_limit.setter
    def memory_size_limit(self, value: int) -> None:
        self._split_memory_limit("memory_size_limit", value)

    @property
    def memory_item_limit(self) -> int:
        """Items the shards' memory tiers may hold in this process, in total (0: off)."""
        return sum(shard.memory_item_limit for shard in self._shards)

    @memory_item_limit.setter
    def memory_item_limit(self, value: int) -> None:
        self._split_memory_limit("memory_item_limit", value)

    def _split_memory_limit(self, name: str, value: int) -> None:
        shares = _memory_shares(validate_settings({name: value})[name], self._count)
        for shard, share in zip(self._shards, shares):
            setattr(shard, name, share)

    def memory_stats(self, reset: bool = False) -> MemoryStats:
        """The shards' memory tiers in this process, summed (see ``Cache.memory_stats``)."""
        totals = [0] * len(MemoryStats._fields)
        for shard in self._shards:
            for position, number in enumerate(shard.memory_stats(reset)):
                totals[position] += number
        return MemoryStats(*totals)

    def reset(self, key: str, value: Any = ENOVAL) -> Any:
        """Read or change a setting on every shard; ``size_limit`` is split across them."""
        if value is ENOVAL:
            results = [shard.reset(key) for shard in self._shards]
            return sum(results) if key == "size_limit" else results[0]
        if key == "size_limit":
            shares = _split(validate_settings({key: value})[key], self._count)
            for shard, share in zip(self._shards, shares):
                shard.reset(key, share)
            return value
        result = None
        for shard in self._shards:
            result = shard.reset(key, value)
        return result

    def flush_access_log(self, timeout: float | None = None) -> None:
        """Write every shard's batched access bookkeeping now."""
        for shard in self._shards:
            shard.flush_access_log(timeout)

    @contextlib.contextmanager
    def transact(self, retry: bool = True) -> Iterator[None]:
        """Hold every shard's write lock (taken in shard order, so two callers cannot deadlock)."""
        with contextlib.ExitStack() as stack:
            for shard in self._shards:
                stack.enter_context(shard.transact(retry))
            yield

    # --- sub-collections ---------------------------------------------------------------------

    def _collection(self, kind: str, name: str, make: Callable[[str], Any]) -> Any:
        parts = _check_name(name)
        with self._collections_lock:
            found = self._collections.get((kind, name))
            if found is None:
                found = make(op.join(self._directory, kind, *parts))
                self._collections[(kind, name)] = found
            return found

    def cache(
        self, name: str, timeout: float = 60, disk: type[Disk] | None = None, **settings: Any
    ) -> Cache:
        """The Cache named `name` in subdirectory ``cache/<name>`` (created on first use).

        `disk` defaults to this cache's Disk type. The same object is returned for a name.
        """
        disk_type = self._disk_type if disk is None else disk
        return self._collection(
            "cache", name, lambda path: Cache(path, timeout=timeout, disk=disk_type, **settings)
        )

    def deque(self, name: str, maxlen: int | None = None) -> Deque[Any]:
        """The Deque named `name` in subdirectory ``deque/<name>`` (created on first use)."""
        def make(path: str) -> Deque[Any]:
            store = Cache(path, disk=self._disk_type, eviction_policy="none")
            return Deque.fromcache(store, maxlen=maxlen)

        return self._collection("deque", name, make)  # type: ignore[no-any-return]

    def index(self, name: str) -> Index[Any, Any]:
        """The Index named `name` in subdirectory ``index/<name>`` (created on first use)."""
        def make(path: str) -> Index[Any, Any]:
            store = Cache(path, disk=self._disk_type, eviction_policy="none")
            return Index.fromcache(store)

        return self._collection("index", name, make)  # type: ignore[no-any-return]

    # --- iteration and lifecycle -------------------------------------------------------------

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
        with self._collections_lock:
            collections = list(self._collections.values())
        for collection in collections:
            closing = getattr(collection, "close", None) or getattr(collection.cache, "close")
            closing()

    def __enter__(self) -> "FanoutCache":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __getstate__(self) -> tuple[Any, ...]:
        memory = {name: getattr(self, name) for name in MEMORY_DEFAULTS}
        return (self._directory, self._count, self._timeout, self._disk_type, memory)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        directory, shards, timeout, disk, memory = state
        self.__init__(directory, shards, timeout, disk, **memory)  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._directory!r}, shards={self._count})"
