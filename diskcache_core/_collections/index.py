"""Index: a persistent, insertion-ordered mapping on a Cache, and its views.

An Index's items are ordinary cache items; insertion order is row order. Overwriting a key
updates its row in place (an UPSERT), so the key keeps its position, as in a dict. popitem runs
in one ``transact(retry=True)``, so other processes see it whole. See `_collection` for what
Index shares with Deque.
"""

from __future__ import annotations

import contextlib
import os
from collections import OrderedDict
from collections.abc import (
    Callable,
    ItemsView,
    Iterable,
    Iterator,
    KeysView,
    Mapping,
    MutableMapping,
    ValuesView,
)
from typing import Any, ParamSpec, TypeVar, overload

from .._cache.cache import Cache
from .collection import MISSING, open_collection_cache, store_in_batches
from .._disk.disk import ENOVAL, Disk
from .._recipes.memo import MemoizeDecorator, Memoized
from .._recipes.memo import memoize as _memoize

__all__ = ["Index", "IndexItemsView", "IndexKeysView", "IndexValuesView"]

K = TypeVar("K")
V = TypeVar("V")
P = ParamSpec("P")
R = TypeVar("R")


class Index(MutableMapping[K, V]):
    """A mapping (like `dict`) whose items live in a cache directory, in insertion order.

    Keys are compared by their serialized form (see `Disk`), not by hashing: ``1`` and ``1.0``
    name one item, ``True`` another. Several processes may use one directory at once.
    """

    _cache: Cache

    def __init__(self, *args: Any, **kwargs: V) -> None:
        """``Index([directory], [mapping or pairs], **items)``.

        A first argument that is a path (str, bytes or os.PathLike) or None names the directory
        (None or absent: a new temporary one, not removed afterwards); the rest are added as by
        `dict.update`. A keyword ``disk`` that is a Disk type is the Disk type of its cache, as
        in diskcache-community (any other ``disk`` value is an item, as in python-diskcache).
        """
        directory = None
        if args and (args[0] is None or isinstance(args[0], (str, bytes, os.PathLike))):
            directory, args = args[0], args[1:]
        disk = kwargs.get("disk")
        if isinstance(disk, type) and issubclass(disk, Disk):
            del kwargs["disk"]
        else:
            disk = None
        self._cache = open_collection_cache(directory, disk)
        self.update(*args, **kwargs)

    @classmethod
    def fromcache(cls, cache: Cache, *args: Any, **kwargs: V) -> Index[K, V]:
        """An Index whose items live in `cache` (which it should have to itself); then add the
        items of `args` and `kwargs` as `dict.update` does. Keeps the cache's Disk and settings."""
        self = cls.__new__(cls)
        self._cache = cache
        self.update(*args, **kwargs)
        return self

    @property
    def cache(self) -> Cache:
        """The cache holding the items."""
        return self._cache

    @property
    def directory(self) -> str:
        """The directory holding the items."""
        return self._cache.directory

    # --- items -------------------------------------------------------------------------------

    def __getitem__(self, key: K) -> V:
        """``index[key]``; KeyError when missing."""
        return self._cache[key]  # type: ignore[no-any-return]

    def __setitem__(self, key: K, value: V) -> None:
        """``index[key] = value``; a key already present keeps its position."""
        self._cache.set(key, value, retry=True)

    def __delitem__(self, key: K) -> None:
        """``del index[key]``; KeyError when missing."""
        if not self._cache.delete(key, retry=True):
            raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        """True when `key` is present (without reading its value)."""
        return key in self._cache

    def get(self, key: K, default: Any = None) -> Any:
        """The value of `key`, or `default` when missing."""
        return self._cache.get(key, default, retry=True)

    def update(self, other: Any = (), /, **kwds: V) -> None:
        """Add the items of a mapping, or of an iterable of pairs, then `kwds`, as
        `dict.update` does; written in batches of 100 per transaction."""
        pairs: Iterable[Any]
        if isinstance(other, Mapping):
            pairs = ((key, other[key]) for key in other)
        elif hasattr(other, "keys"):
            pairs = ((key, other[key]) for key in other.keys())  # noqa: SIM118 - dict.update's protocol
        else:
            pairs = other
        cache = self._cache

        def store(pair: Any) -> None:
            key, value = pair
            cache.set(key, value, retry=True)

        store_in_batches(cache, pairs, store, lambda: None)
        if kwds:
            store_in_batches(cache, kwds.items(), store, lambda: None)

    def setdefault(self, key: K, default: V = None) -> V:  # type: ignore[assignment]
        """The value of `key`; when missing, first store `default` there. Atomic."""
        value = self._cache.get(key, MISSING, retry=True)
        if value is not MISSING:
            return value  # type: ignore[no-any-return]
        with self._cache.transact(retry=True):  # no other writer between the look and the store
            value = self._cache.get(key, MISSING, retry=True)
            if value is not MISSING:
                return value  # type: ignore[no-any-return]
            # set, not add: a row whose value file is lost reads as missing but is not expired,
            # so add would refuse to replace it (a get-then-add loop never ended).
            self._cache.set(key, default, retry=True)
            return default

    def pop(self, key: K, default: Any = ENOVAL) -> Any:
        """Remove `key` and return its value; `default` when missing, or KeyError if none given."""
        value = self._cache.pop(key, MISSING, retry=True)
        if value is MISSING:
            if default is ENOVAL:
                raise KeyError(key)
            return default
        return value

    def peekitem(self, last: bool = True) -> tuple[K, V]:
        """The newest (``last=False``: the oldest) ``(key, value)``; KeyError when empty."""
        return self._cache.peekitem(last, retry=True)  # type: ignore[no-any-return]

    def popitem(self, last: bool = True) -> tuple[K, V]:
        """Remove and return the newest (``last=False``: the oldest) ``(key, value)``: a stack,
        or a queue. KeyError when empty. Atomic."""
        with self._cache.transact(retry=True):
            key, value = self._cache.peekitem(last, retry=True)
            self._cache.delete(key, retry=True)
        return key, value

    def push(self, value: V, prefix: str | None = None, side: str = "back") -> Any:
        """Push `value` onto a queue kept among the items; return its key (see `Cache.push`)."""
        return self._cache.push(value, prefix, side, retry=True)

    def pull(
        self, prefix: str | None = None, default: Any = (None, None), side: str = "front"
    ) -> Any:
        """Remove and return ``(key, value)`` from a queue's `side`; `default` when it is empty
        (see `Cache.pull`)."""
        return self._cache.pull(prefix, default, side, retry=True)

    def clear(self) -> None:
        """Remove every item."""
        self._cache.clear(retry=True)

    # --- iteration and views -----------------------------------------------------------------

    def __iter__(self) -> Iterator[K]:
        """Iterate keys in insertion order."""
        return iter(self._cache)

    def __reversed__(self) -> Iterator[K]:
        """Iterate keys newest first."""
        return reversed(self._cache)

    def __len__(self) -> int:
        """Number of items."""
        return len(self._cache)

    def _items(self, reverse: bool) -> Iterator[tuple[K, V]]:
        cache = self._cache
        for key in reversed(cache) if reverse else iter(cache):
            value = cache.get(key, MISSING, retry=True)
            if value is not MISSING:  # deleted by someone else meanwhile
                yield key, value

    def keys(self) -> IndexKeysView[K]:
        """A live, reversible view of the keys."""
        return IndexKeysView(self)

    def values(self) -> IndexValuesView[V]:
        """A live, reversible view of the values."""
        return IndexValuesView(self)

    def items(self) -> IndexItemsView[K, V]:
        """A live, reversible view of the ``(key, value)`` pairs."""
        return IndexItemsView(self)

    # --- comparison and the rest -------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        """Equal to a mapping with equal items; against another Index or an OrderedDict the
        order must match too (as in python-diskcache)."""
        if not isinstance(other, Mapping):
            return NotImplemented
        if len(self) != len(other):
            return False
        if isinstance(other, (Index, OrderedDict)):
            return all(
                key == other_key and value == other_value
                for (key, value), (other_key, other_value) in zip(self.items(), other.items())
            )
        for key, value in self.items():
            other_value = other.get(key, MISSING)
            if other_value is MISSING or not value == other_value:
                return False
        return True

    def __ne__(self, other: object) -> bool:
        """The opposite of ``==``."""
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = None  # type: ignore[assignment]

    @overload
    def memoize(self, name: Callable[P, R], /) -> Memoized[P, R]: ...
    @overload
    def memoize(
        self, name: str | None = None, typed: bool = False, ignore: Iterable[int | str] = ()
    ) -> MemoizeDecorator: ...
    def memoize(
        self, name: str | Callable[..., Any] | None = None, typed: bool = False,
        ignore: Iterable[int | str] = (),
    ) -> Any:
        """Decorator: remember a function's results in this index, keyed by its arguments
        (`Cache.memoize` without expiry; results stay until removed); ``@index.memoize``
        without parentheses memoizes with the default options."""
        return _memoize(self._cache, name, typed, ignore=ignore)

    @contextlib.contextmanager
    def transact(self) -> Iterator[None]:
        """Context manager: what runs inside is atomic; other writers wait (keep it short)."""
        with self._cache.transact(retry=True):
            yield

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.directory!r})"

    def __getstate__(self) -> Cache:
        return self._cache

    def __setstate__(self, cache: Cache) -> None:
        self._cache = cache


class IndexKeysView(KeysView[K]):
    """The keys of an Index, live, in insertion order; ``reversed()`` gives newest first."""

    _mapping: Index[K, Any]

    def __reversed__(self) -> Iterator[K]:
        return reversed(self._mapping)


class IndexValuesView(ValuesView[V]):
    """The values of an Index, live, in insertion order; reversible."""

    _mapping: Index[Any, V]

    def __iter__(self) -> Iterator[V]:
        return (value for _, value in self._mapping._items(reverse=False))

    def __contains__(self, value: object) -> bool:
        return any(item is value or item == value for item in self)

    def __reversed__(self) -> Iterator[V]:
        return (value for _, value in self._mapping._items(reverse=True))


class IndexItemsView(ItemsView[K, V]):
    """The ``(key, value)`` pairs of an Index, live, in insertion order; reversible."""

    _mapping: Index[K, V]

    def __iter__(self) -> Iterator[tuple[K, V]]:
        return self._mapping._items(reverse=False)

    def __reversed__(self) -> Iterator[tuple[K, V]]:
        return self._mapping._items(reverse=True)
