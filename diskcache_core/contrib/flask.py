"""Flask-Caching backend: ``CACHE_TYPE = 'diskcache_core.contrib.flask.DiskCache'``.

Configuration read from the Flask app's config::

    CACHE_TYPE = "diskcache_core.contrib.flask.DiskCache"
    CACHE_DIR = "/var/tmp/flask_cache"   # required: the cache directory, shared by processes
    CACHE_DEFAULT_TIMEOUT = 300          # seconds; 0 never expires
    CACHE_THRESHOLD = 500                # most items kept (0: no limit)
    CACHE_OPTIONS = {"size_limit": 2**30, "database_timeout": 1.0}  # settings, see DiskCache

Decisions, and why:

- One `Cache` (a single SQLite database) underneath, not a FanoutCache. A Flask-Caching cache
  reads far more than it writes; one database keeps insertion order global, which the
  threshold needs (oldest items go first), and writes that find the database busy wait up to
  ``database_timeout`` (1 s by default) instead of FanoutCache's 10 ms before giving up.
- Semantics are cachelib's: timeout None means the default timeout, 0 never expires, a negative
  timeout stores the item already expired; a write that cannot get the database lock in time
  returns its failure value (False, None or an empty list) rather than raising, as cachelib's
  backends do for backend errors.
- CACHE_THRESHOLD is a real item limit, as in cachelib's FileSystemCache: after writes, when the
  cache holds more items than the threshold, expired items are removed and then the oldest
  (by first insertion) until the threshold is met, in one transaction. Counting costs a few
  microseconds per thousand items, so the count is checked after every
  ``max(1, threshold // 256)``-th write of a process: the cache overshoots by at most that
  many items per writing process (none for thresholds below 512).
- Bulk writes (``set_many``, ``delete_many``) are one transaction each.
- CACHE_SERIALIZER (Flask-Caching 2.5): unset, values are stored by the cache's `Disk` (ints,
  strs and bytes as themselves, others pickled), readable by any `Cache` on the directory, and
  ``serializer`` is a cachelib `SimpleSerializer`, the pickle format it stands for. Set, every
  value goes through its ``dumps`` and is stored as the bytes it makes (``loads`` on the way
  back); a value it cannot serialize (``dumps`` returns None) is not stored.
"""

from __future__ import annotations

import contextlib
import itertools
import numbers
import threading
import time
from collections.abc import Callable
from typing import Any, ContextManager, ParamSpec, TypeVar

from flask import Flask
from cachelib.serializers import BaseSerializer, SimpleSerializer
from flask_caching.backends.base import BaseCache
from werkzeug.utils import import_string

from .. import Cache, Disk, RemoteOutcomeUnknownError, Timeout
from .._arguments import float_seconds
from .._reprs import opened_as

__all__ = ["DiskCache"]

P = ParamSpec("P")
R = TypeVar("R")

_EXPIRED = -1.0  # expire argument for negative timeouts: stored already expired
_CHECKS_PER_THRESHOLD = 256
_PICKLE = SimpleSerializer()  # what `DiskCache.serializer` says where none was set
_UNSERIALIZABLE = object()  # a value the set serializer's dumps refused
# The parameters after the directory, in order: what CACHE_ARGS gives by position.
_POSITIONAL = ("threshold", "default_timeout", "ignore_delete_many_errors", "database_timeout", "disk")


def _unless_busy(failure: R, operation: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """``operation(...)``, or `failure` when the database stayed busy past its timeout: cachelib's
    backends return their failure value (False, None) rather than raise. A remote write whose
    outcome is unknown raises: False would say "not stored" where Redis may store it."""
    try:
        return operation(*args, **kwargs)
    except RemoteOutcomeUnknownError:
        raise
    except Timeout:
        return failure


class DiskCache(BaseCache):
    """Flask-Caching (cachelib API) backend storing items in a diskcache_core `Cache`.

    :param directory: cache directory (CACHE_DIR); every process using it shares the items
    :param threshold: most items the cache keeps (CACHE_THRESHOLD); 0 for no limit
    :param default_timeout: seconds items live when ``set`` gets no timeout; 0 never expires
    :param ignore_delete_many_errors: if False, ``delete_many`` raises RuntimeError when a key
        could not be deleted (Flask-Caching's CACHE_IGNORE_ERRORS)
    :param database_timeout: seconds a write waits for the database lock before giving up
    :param disk: Disk subclass (or its dotted path) serializing keys and values
    :param settings: Cache settings (``size_limit``, ``eviction_policy``, ...), from
        CACHE_OPTIONS
    """

    def __init__(
        self,
        directory: str,
        threshold: int = 500,
        default_timeout: int = 300,
        ignore_delete_many_errors: bool = False,
        database_timeout: float = 1.0,
        disk: type[Disk] | str = Disk,
        **settings: Any,
    ) -> None:
        if not directory:
            raise ValueError("DiskCache needs a directory: set CACHE_DIR in the app's config")
        if type(threshold) is not int or threshold < 0:
            raise ValueError(f"threshold (CACHE_THRESHOLD) must be an int >= 0, not {threshold!r}")
        super().__init__(
            default_timeout=default_timeout, ignore_delete_many_errors=ignore_delete_many_errors
        )
        if isinstance(disk, str):
            disk = import_string(disk)
        self._cache = Cache(directory, timeout=database_timeout, disk=disk, **settings)  # type: ignore[arg-type]
        # With a remote, Redis holds every host's items: a count of this host's copies would
        # bound nothing (bound Redis with its maxmemory policy instead).
        self._remote = settings.get("remote") is not None
        self._threshold = 0 if self._remote else threshold
        self._check_every = max(1, threshold // _CHECKS_PER_THRESHOLD)
        self._unchecked = 0  # writes since the count was last checked
        self._unchecked_lock = threading.Lock()
        # CACHE_SERIALIZER's serializer, once Flask-Caching sets one; None: the Disk's format.
        self._serializer: BaseSerializer | None = None

    @property
    def serializer(self) -> BaseSerializer:
        """The cachelib serializer values go through: the one set (Flask-Caching sets
        CACHE_SERIALIZER's here), else a `SimpleSerializer`, standing for the Disk's pickling."""
        return _PICKLE if self._serializer is None else self._serializer

    @serializer.setter
    def serializer(self, serializer: BaseSerializer) -> None:
        if not isinstance(serializer, BaseSerializer):
            raise TypeError(
                f"serializer must be a cachelib BaseSerializer, not {type(serializer).__name__}"
            )
        self._serializer = serializer

    @classmethod
    def factory(
        cls, app: Flask, config: dict[str, Any], args: list[Any], kwargs: dict[str, Any]
    ) -> DiskCache:
        """Build the backend from Flask-Caching's config: CACHE_DIR, CACHE_THRESHOLD, and
        CACHE_DEFAULT_TIMEOUT, CACHE_IGNORE_ERRORS and CACHE_OPTIONS (in `kwargs`).

        CACHE_ARGS name the parameters after the directory by position; Flask-Caching passes
        some of them by name too (default_timeout...), so they are bound to their names here,
        and a positional one wins (the more specific setting)."""
        if len(args) > len(_POSITIONAL):
            raise TypeError(
                f"CACHE_ARGS takes at most {len(_POSITIONAL)} values ({', '.join(_POSITIONAL)}),"
                f" not {len(args)}"
            )
        kwargs.setdefault("threshold", config.get("CACHE_THRESHOLD", 500))
        kwargs.update(zip(_POSITIONAL, args))
        return cls(config.get("CACHE_DIR", ""), **kwargs)

    @property
    def cache(self) -> Cache:
        """The diskcache_core Cache underneath (for its other methods: ``evict``, ``stats``...)."""
        return self._cache

    @property
    def directory(self) -> str:
        """The cache directory."""
        return self._cache.directory

    @property
    def threshold(self) -> int:
        """Most items kept (0: no limit)."""
        return self._threshold

    def __repr__(self) -> str:
        opened = opened_as(self._cache.remote, self._cache.read_only)
        return (
            f"{type(self).__name__}({self._cache.directory!r}, threshold={self._threshold},"
            f" default_timeout={self.default_timeout}{opened})"
        )

    # --- helpers -----------------------------------------------------------------------------

    def _expire(self, timeout: Any) -> float | None:
        """A cachelib timeout (None: the default; 0: never) as the cache's ``expire``."""
        seconds = self._normalize_timeout(timeout)
        if seconds == 0:
            return None
        return float_seconds("timeout", seconds) if seconds > 0 else _EXPIRED

    def _encoded(self, value: Any) -> Any:
        """`value` as stored: itself, or the set serializer's bytes (`_UNSERIALIZABLE` where
        its ``dumps`` failed: it returns None and logs why)."""
        if self._serializer is None:
            return value
        data = self._serializer.dumps(value)
        return _UNSERIALIZABLE if data is None else data

    def _decoded(self, stored: Any) -> Any:
        """A stored value (None: missing) as the caller's value."""
        if self._serializer is None or stored is None:
            return stored
        return self._serializer.loads(stored)

    def _batch(self) -> ContextManager[Any]:
        """One transaction for a bulk write; with a remote (where a transaction cannot span
        hosts) each write stands alone."""
        if self._remote:
            return contextlib.nullcontext()
        return self._cache.transact()

    def _wrote(self, count: int = 1) -> None:
        """Count writes; every `_check_every` of them, bring the cache back to the threshold."""
        if not self._threshold:
            return
        with self._unchecked_lock:
            self._unchecked += count
            due = self._unchecked >= self._check_every
            if due:
                self._unchecked = 0
        if due:
            self._prune()

    def _prune(self) -> None:
        """Remove expired items, then the oldest, until at most `threshold` remain."""
        cache = self._cache
        if len(cache) <= self._threshold:
            return
        try:
            cache.expire()
            with cache.transact():  # count and delete in one go: no two processes overshoot
                excess = len(cache) - self._threshold
                if excess > 0:
                    for key in list(itertools.islice(cache, excess)):
                        cache.delete(key)
        except Timeout:
            self._unchecked = self._check_every  # busy: try again on the next write

    # --- cachelib's API ----------------------------------------------------------------------

    def get(self, key: str) -> Any:
        """The value of `key`, or None when it is missing or expired."""
        return self._decoded(_unless_busy(None, self._cache.get, key))

    def has(self, key: str) -> bool:
        """True when `key` is present and not expired (without reading its value)."""
        return _unless_busy(False, self._cache.__contains__, key)

    def set(self, key: str, value: Any, timeout: Any = None) -> bool:
        """Store `value` under `key`; False when the database stayed busy (or the serializer
        refused the value)."""
        value = self._encoded(value)
        if value is _UNSERIALIZABLE:
            return False
        stored = _unless_busy(False, self._cache.set, key, value, expire=self._expire(timeout))
        if stored:
            self._wrote()
        return stored

    def add(self, key: str, value: Any, timeout: Any = None) -> bool:
        """Store `value` only if `key` is missing or expired (atomically); True when stored."""
        value = self._encoded(value)
        if value is _UNSERIALIZABLE:
            return False
        stored = _unless_busy(False, self._cache.add, key, value, expire=self._expire(timeout))
        if stored:
            self._wrote()
        return stored

    def delete(self, key: str) -> bool:
        """Remove `key`; True when it was present."""
        return _unless_busy(False, self._cache.delete, key)

    def get_many(self, *keys: str) -> list[Any]:
        """The values of `keys`, in order (None for missing ones)."""
        return [self.get(key) for key in keys]

    def set_many(self, mapping: dict[str, Any], timeout: Any = None) -> list[Any]:
        """Store every item in one transaction; return the keys stored (all, or none when the
        database stayed busy; those the serializer refused are left out)."""
        expire = self._expire(timeout)
        cache = self._cache
        encoded = {key: self._encoded(value) for key, value in mapping.items()}
        stored = [key for key, value in encoded.items() if value is not _UNSERIALIZABLE]
        try:
            with self._batch():
                for key in stored:
                    cache.set(key, encoded[key], expire=expire)
        except RemoteOutcomeUnknownError:
            raise
        except Timeout:
            return []
        self._wrote(len(stored))
        return stored

    def delete_many(self, *keys: str) -> list[Any]:
        """Remove every key in one transaction; return the keys deleted (absent ones count).

        When the database stays busy, falls back to cachelib's key-by-key deletion, which
        raises RuntimeError for keys left behind unless ``ignore_delete_many_errors``.
        """
        cache = self._cache
        try:
            with self._batch():
                for key in keys:
                    cache.delete(key)
        except RemoteOutcomeUnknownError:
            raise
        except Timeout:
            return super().delete_many(*keys)
        return list(keys)

    def clear(self) -> bool:
        """Remove every item; False when the database stayed busy part-way."""
        return _unless_busy(None, self._cache.clear) is not None

    def inc(self, key: str, delta: int = 1) -> int | None:
        """Add `delta` to the number at `key` atomically; the new value, or None when nothing
        was stored: the database stayed busy, or the set serializer refused the new number (as
        cachelib's backends answer None when their ``set`` fails; the two are not told apart).
        As in cachelib's backends (``(get(key) or 0) + delta``, then ``set``), a missing key or
        one holding None (or another empty value: ``""``, ``[]``) starts at 0 and is stored
        with the default timeout; a number keeps its expiry."""
        value: int | None = _unless_busy(None, self._add, key, delta)
        if value is not None:
            self._wrote()
        return value

    def dec(self, key: str, delta: int = 1) -> int | None:
        """Subtract `delta` from the number at `key` atomically; see `inc`."""
        return self.inc(key, -delta)

    def _add(self, key: str, delta: int) -> Any:
        if self._serializer is not None:  # values are the serializer's bytes: read, add, write
            return self._add_serialized(key, delta)
        try:
            return self._cache.incr(key, delta, default=None)  # a number: its expiry stays
        except (KeyError, TypeError):  # missing, or not a number
            with self._cache.transact():
                current = self._cache.get(key)
                if isinstance(current, numbers.Number):  # stored meanwhile
                    return self._cache.incr(key, delta, default=None)
                if current:
                    raise  # a value that is not empty: cachelib's ``+`` fails as well
                self._cache.set(key, delta, expire=self._expire(None))
                return delta

    def _add_serialized(self, key: str, delta: int) -> Any:
        """`_add` where values are the set serializer's bytes, in one transaction: a number
        keeps its expiry; a missing or empty value starts at 0 with the default timeout."""
        cache = self._cache
        with cache.transact():
            stored, expire_time = cache.get(key, expire_time=True)
            current = self._decoded(stored)
            if current and not isinstance(current, numbers.Number):
                raise TypeError(f"cannot add {delta!r} to the value of {key!r}: {current!r}")
            value = (current or 0) + delta
            if isinstance(current, numbers.Number) and expire_time is not None:
                expire: float | None = max(expire_time - time.time(), 0.0) or _EXPIRED
            elif isinstance(current, numbers.Number):
                expire = None
            else:
                expire = self._expire(None)
            data = self._encoded(value)
            if data is _UNSERIALIZABLE:
                return None
            cache.set(key, data, expire=expire)
            return value

    def close(self) -> None:
        """Close the calling thread's database connection (reopened on next use)."""
        self._cache.close()

