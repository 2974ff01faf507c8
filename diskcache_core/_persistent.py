"""Deque and Index: a persistent double-ended queue and an insertion-ordered mapping on a Cache.

Both keep their items in one `Cache` (its directory is theirs alone) and hold no state of their
own beyond `Deque.maxlen`, so any number of objects, threads and processes may use one
directory at once.

- A Deque's items are queue items of the cache (`Cache.push`/`Cache.pull`): integer keys that
  grow at the back and shrink at the front, so key order is deque order. An index is found by
  walking keys from the nearer end, never by reading the values in between.
- An Index's items are ordinary cache items; insertion order is row order. Overwriting a key
  updates its row in place (an UPSERT), so the key keeps its position, as in a dict.

Operations that take several statements (rotate, reverse, remove, indexed writes, trimming to
maxlen, popitem) run in one ``transact(retry=True)``, so other processes see them whole. Every
cache call passes ``retry=True``: these collections wait for the lock rather than raise
`Timeout`. Items never expire and, with eviction policy ``'none'``, are never evicted.
"""

from __future__ import annotations

import contextlib
import operator
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
    Sequence,
    ValuesView,
)
from itertools import islice
from typing import Any, TypeVar

from ._cache import Cache
from ._disk import ENOVAL
from ._errors import DiskCacheError
from ._memo import MemoizeDecorator
from ._memo import memoize as _memoize

__all__ = ["Deque", "Index", "IndexItemsView", "IndexKeysView", "IndexValuesView"]

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")

_MISSING: Any = object()  # "no item": a get that found nothing (ENOVAL stays the caller's)
_BATCH = 100  # items written per transaction by extend and update: bounded lock hold time
_LOCK_FREE_TRIES = 3  # d[i] tries without the write lock before it takes it
_INFINITY = float("inf")


def _open(directory: str | bytes | os.PathLike[str] | None) -> Cache:
    if isinstance(directory, bytes):
        directory = os.fsdecode(directory)
    return Cache(directory, eviction_policy="none")


def _store_in_batches(
    cache: Cache, items: Iterable[Any], store: Callable[[Any], object], after: Callable[[], None]
) -> None:
    """Store `items` one by one, `_BATCH` to a transaction, calling `after` in each.

    Like ``deque.extend`` and ``dict.update``, a failure part-way (the iterable raising, or an
    item that cannot be serialized) keeps the items before it, then raises.
    """
    iterator = iter(items)
    while True:
        batch: list[Any] = []
        failure: Exception | None = None
        try:
            for item in iterator:
                batch.append(item)
                if len(batch) == _BATCH:
                    break
        except Exception as exc:  # noqa: BLE001 - re-raised below, after the items before it
            failure = exc
        if batch:
            with cache.transact(retry=True):
                for item in batch:
                    try:
                        store(item)
                    except DiskCacheError:
                        raise  # the database failed: roll the batch back
                    except Exception as exc:  # noqa: BLE001 - unserializable: keep what came before
                        failure = exc
                        break
                after()
        if failure is not None:
            raise failure
        if len(batch) < _BATCH:
            return


def _check_maxlen(maxlen: Any) -> float:
    """maxlen as stored: a non-negative int, or infinity for None (python-diskcache's value)."""
    if maxlen is None or maxlen == _INFINITY:
        return _INFINITY
    try:
        number = operator.index(maxlen)
    except TypeError:
        raise TypeError(f"maxlen must be an integer or None, not {type(maxlen).__name__}") from None
    if number < 0:
        raise ValueError("maxlen must be non-negative")
    return number


def _check_index(index: Any) -> int:
    try:
        return operator.index(index)
    except TypeError:
        raise TypeError(f"deque indices must be integers, not {type(index).__name__}") from None


class Deque(Sequence[T]):
    """A double-ended queue (like `collections.deque`) whose items live in a cache directory.

    Fast at both ends; ``d[i]`` walks keys from the nearer end. Several processes may append and
    pop on one directory at once. ``Deque()`` uses a new temporary directory, which is not
    removed afterwards.
    """

    _cache: Cache
    _maxlen: float

    def __init__(
        self,
        iterable: Iterable[T] = (),
        directory: str | bytes | os.PathLike[str] | None = None,
        maxlen: int | None = None,
    ) -> None:
        """Open the deque stored in `directory` (a new temporary one when None), then append
        the items of `iterable`.

        :param maxlen: the most items kept: appending to a full deque drops an item from the
            other end, and items beyond it are dropped from the front now (None: no limit)
        """
        maxlen_checked = _check_maxlen(maxlen)
        self._attach(_open(directory), maxlen_checked, iterable)

    @classmethod
    def fromcache(cls, cache: Cache, iterable: Iterable[T] = (), maxlen: int | None = None) -> Deque[T]:
        """A Deque whose items live in `cache` (which it should have to itself); then extend it
        with `iterable`. Keeps the cache's Disk, timeout and settings."""
        maxlen_checked = _check_maxlen(maxlen)
        self = cls.__new__(cls)
        self._attach(cache, maxlen_checked, iterable)
        return self

    def _attach(self, cache: Cache, maxlen: float, iterable: Iterable[T]) -> None:
        self._cache = cache
        self._maxlen = maxlen
        if maxlen != _INFINITY:
            with cache.transact(retry=True):
                self._trim(front=True)
        self._extend(iterable, "back")

    # --- properties --------------------------------------------------------------------------

    @property
    def cache(self) -> Cache:
        """The cache holding the items."""
        return self._cache

    @property
    def directory(self) -> str:
        """The directory holding the items."""
        return self._cache.directory

    @property
    def maxlen(self) -> float:
        """The most items kept; ``float('inf')`` when unbounded (python-diskcache's value,
        where `collections.deque` says None)."""
        return self._maxlen

    @maxlen.setter
    def maxlen(self, value: int | None) -> None:
        """Set the limit; items beyond it are removed from the front."""
        self._maxlen = _check_maxlen(value)
        if self._maxlen != _INFINITY:
            with self._cache.transact(retry=True):
                self._trim(front=True)

    def _trim(self, front: bool) -> None:
        """Remove items from the front (or back) until at most maxlen remain; in a transaction."""
        excess = len(self._cache) - self._maxlen
        if excess > 0:
            for key in list(islice(self._cache.iterkeys(reverse=not front), int(excess))):
                self._cache.delete(key, retry=True)

    # --- the ends ----------------------------------------------------------------------------

    def append(self, value: T) -> None:
        """Add `value` at the back (dropping the front item when full)."""
        if self._maxlen == _INFINITY:
            self._cache.push(value, retry=True)
            return
        with self._cache.transact(retry=True):
            self._cache.push(value, retry=True)
            self._trim(front=True)

    def appendleft(self, value: T) -> None:
        """Add `value` at the front (dropping the back item when full)."""
        if self._maxlen == _INFINITY:
            self._cache.push(value, side="front", retry=True)
            return
        with self._cache.transact(retry=True):
            self._cache.push(value, side="front", retry=True)
            self._trim(front=False)

    def extend(self, iterable: Iterable[T]) -> None:
        """Append the items of `iterable` at the back, in order."""
        self._extend(iterable, "back")

    def extendleft(self, iterable: Iterable[T]) -> None:
        """Append the items of `iterable` at the front, one by one (so they end up reversed)."""
        self._extend(iterable, "front")

    def _extend(self, iterable: Iterable[T], side: str) -> None:
        if isinstance(iterable, Deque) and iterable.directory == self.directory:
            iterable = list(iterable)  # would grow while we read it: ``d.extend(d)`` doubles d
        cache = self._cache

        def store(value: T) -> None:
            cache.push(value, side=side, retry=True)

        def trim() -> None:
            if self._maxlen != _INFINITY:
                self._trim(front=side == "back")

        _store_in_batches(cache, iterable, store, trim)

    def __iadd__(self, iterable: Iterable[T]) -> Deque[T]:
        """``d += iterable`` extends the back."""
        self._extend(iterable, "back")
        return self

    def _end(self, remove: bool, side: str) -> T:
        """The item at one end (removed when `remove`); IndexError when empty."""
        take = self._cache.pull if remove else self._cache.peek
        _, value = take(default=(None, _MISSING), side=side, retry=True)
        if value is _MISSING:
            raise IndexError(f"{'pop' if remove else 'peek'} from an empty deque")
        return value  # type: ignore[no-any-return]

    def pop(self) -> T:
        """Remove and return the back item; IndexError when empty."""
        return self._end(True, "back")

    def popleft(self) -> T:
        """Remove and return the front item; IndexError when empty."""
        return self._end(True, "front")

    def peek(self) -> T:
        """Return the back item without removing it; IndexError when empty."""
        return self._end(False, "back")

    def peekleft(self) -> T:
        """Return the front item without removing it; IndexError when empty."""
        return self._end(False, "front")

    # --- indexing ----------------------------------------------------------------------------

    def _key_at(self, index: int) -> Any:
        """The cache key of item `index` (IndexError when out of range), walking from the nearer
        end; None when the deque shrank during the walk (possible outside a transaction)."""
        size = len(self._cache)
        if index < 0:
            index += size
        if not 0 <= index < size:
            raise IndexError("deque index out of range")
        if index < size // 2:
            keys = self._cache.iterkeys()
        else:
            keys = self._cache.iterkeys(reverse=True)
            index = size - 1 - index
        return next(islice(keys, index, None), None)

    def __getitem__(self, index: int) -> T:  # type: ignore[override]
        """``d[index]``: the item at `index` (negative counts from the back); IndexError when
        out of range."""
        index = _check_index(index)
        # Lock-free first: another process may pop the item between finding its key and reading
        # it; then look again, and after a few misses read under the write lock.
        for _ in range(_LOCK_FREE_TRIES):
            key = self._key_at(index)
            if key is not None:
                value = self._cache.get(key, _MISSING, retry=True)
                if value is not _MISSING:
                    return value  # type: ignore[no-any-return]
        with self._cache.transact(retry=True):
            return self._cache[self._key_at(index)]  # type: ignore[no-any-return]

    def __setitem__(self, index: int, value: T) -> None:
        """``d[index] = value``: replace the item at `index`; IndexError when out of range."""
        index = _check_index(index)
        with self._cache.transact(retry=True):
            self._cache.set(self._key_at(index), value, retry=True)

    def __delitem__(self, index: int) -> None:
        """``del d[index]``: remove the item at `index`; IndexError when out of range."""
        index = _check_index(index)
        with self._cache.transact(retry=True):
            self._cache.delete(self._key_at(index), retry=True)

    # --- reading -----------------------------------------------------------------------------

    def _values(self, reverse: bool) -> Iterator[T]:
        cache = self._cache
        for key in cache.iterkeys(reverse=reverse):
            value = cache.get(key, _MISSING, retry=True)
            if value is not _MISSING:  # popped by someone else meanwhile
                yield value

    def __iter__(self) -> Iterator[T]:
        """Iterate from front to back (items popped meanwhile are skipped)."""
        return self._values(reverse=False)

    def __reversed__(self) -> Iterator[T]:
        """Iterate from back to front."""
        return self._values(reverse=True)

    def __len__(self) -> int:
        """Number of items."""
        return len(self._cache)

    def count(self, value: Any) -> int:
        """Number of items equal to `value`."""
        return sum(1 for item in self if item == value)

    def index(self, value: Any, start: int = 0, stop: int | None = None) -> int:
        """Position of the first item equal to `value` in ``d[start:stop]``; ValueError if none."""
        size = len(self)
        start = operator.index(start)
        start = max(start + size, 0) if start < 0 else start
        stop = size if stop is None else operator.index(stop)
        stop = max(stop + size, 0) if stop < 0 else stop
        for position, item in enumerate(islice(self, start, max(start, stop)), start):
            if item == value:
                return position
        raise ValueError(f"{value!r} is not in deque")

    # --- rearranging -------------------------------------------------------------------------

    def remove(self, value: Any) -> None:
        """Remove the first item equal to `value`; ValueError if there is none. Atomic."""
        cache = self._cache
        with cache.transact(retry=True):
            for key in cache.iterkeys():
                item = cache.get(key, _MISSING, retry=True)
                if item is not _MISSING and item == value:
                    cache.delete(key, retry=True)
                    return
        raise ValueError("deque.remove(x): x not in deque")

    def rotate(self, steps: int = 1) -> None:
        """Rotate `steps` to the right (negative: to the left). Atomic.

        Moves at most half the items: rotating right by k is rotating left by ``len - k``.
        """
        try:
            steps = operator.index(steps)
        except TypeError:
            raise TypeError(f"integer argument expected, got {type(steps).__name__}") from None
        cache = self._cache
        with cache.transact(retry=True):
            size = len(cache)
            if size < 2:
                return
            steps %= size
            if steps <= size // 2:
                moves, source, target = steps, "back", "front"
            else:
                moves, source, target = size - steps, "front", "back"
            for _ in range(moves):
                _, value = cache.pull(side=source, retry=True)
                cache.push(value, side=target, retry=True)

    def reverse(self) -> None:
        """Reverse the items in place, by swapping values pairwise from both ends. Atomic."""
        cache = self._cache
        with cache.transact(retry=True):
            pairs = zip(cache.iterkeys(), cache.iterkeys(reverse=True))
            for front, back in islice(pairs, len(cache) // 2):
                front_value = cache[front]
                cache.set(front, cache[back], retry=True)
                cache.set(back, front_value, retry=True)

    def clear(self) -> None:
        """Remove every item."""
        self._cache.clear(retry=True)

    def copy(self) -> Deque[T]:
        """Another Deque on the same cache and maxlen (the items are shared, not copied, as in
        python-diskcache)."""
        maxlen = None if self._maxlen == _INFINITY else int(self._maxlen)
        return type(self).fromcache(self._cache, maxlen=maxlen)

    @contextlib.contextmanager
    def transact(self) -> Iterator[None]:
        """Context manager: what runs inside is atomic; other writers wait (keep it short)."""
        with self._cache.transact(retry=True):
            yield

    # --- comparison, representation, pickling -------------------------------------------------

    def _compare(self, other: object, compare: Callable[[Any, Any], bool]) -> bool:
        """Compare as sequences do, item by item, against any Sequence."""
        if not isinstance(other, Sequence):
            return NotImplemented  # type: ignore[no-any-return]
        size, other_size = len(self), len(other)
        if size != other_size and compare in (operator.eq, operator.ne):
            return compare is operator.ne
        for mine, theirs in zip(self, other):
            if mine != theirs:
                return compare(mine, theirs)
        return compare(size, other_size)

    def __eq__(self, other: object) -> bool:
        """Equal to a sequence with equal items in the same order."""
        return self._compare(other, operator.eq)

    def __ne__(self, other: object) -> bool:
        """Not equal to `other`, as a sequence."""
        return self._compare(other, operator.ne)

    def __lt__(self, other: object) -> bool:
        """Lexicographically less than the sequence `other`."""
        return self._compare(other, operator.lt)

    def __le__(self, other: object) -> bool:
        """Lexicographically less than or equal to the sequence `other`."""
        return self._compare(other, operator.le)

    def __gt__(self, other: object) -> bool:
        """Lexicographically greater than the sequence `other`."""
        return self._compare(other, operator.gt)

    def __ge__(self, other: object) -> bool:
        """Lexicographically greater than or equal to the sequence `other`."""
        return self._compare(other, operator.ge)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(directory={self.directory!r})"

    def __getstate__(self) -> tuple[Cache, int | None]:
        return self._cache, None if self._maxlen == _INFINITY else int(self._maxlen)

    def __setstate__(self, state: tuple[Cache, int | None]) -> None:
        # Reattach only: unpickling writes nothing (no trimming, no settings).
        cache, maxlen = state
        self._cache = cache
        self._maxlen = _check_maxlen(maxlen)


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
        `dict.update`.
        """
        directory = None
        if args and (args[0] is None or isinstance(args[0], (str, bytes, os.PathLike))):
            directory, args = args[0], args[1:]
        self._cache = _open(directory)
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

        _store_in_batches(cache, pairs, store, lambda: None)
        if kwds:
            _store_in_batches(cache, kwds.items(), store, lambda: None)

    def setdefault(self, key: K, default: V = None) -> V:  # type: ignore[assignment]
        """The value of `key`; when missing, first store `default` there. Atomic."""
        while True:
            value = self._cache.get(key, _MISSING, retry=True)
            if value is not _MISSING:
                return value  # type: ignore[no-any-return]
            if self._cache.add(key, default, retry=True):
                return default
            # Another writer added it between our get and add (and may have removed it again).

    def pop(self, key: K, default: Any = ENOVAL) -> Any:
        """Remove `key` and return its value; `default` when missing, or KeyError if none given."""
        value = self._cache.pop(key, _MISSING, retry=True)
        if value is _MISSING:
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
            value = cache.get(key, _MISSING, retry=True)
            if value is not _MISSING:  # deleted by someone else meanwhile
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
            other_value = other.get(key, _MISSING)
            if other_value is _MISSING or not value == other_value:
                return False
        return True

    def __ne__(self, other: object) -> bool:
        """The opposite of ``==``."""
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = None  # type: ignore[assignment]

    def memoize(
        self, name: str | None = None, typed: bool = False, ignore: Iterable[int | str] = ()
    ) -> MemoizeDecorator:
        """Decorator: remember a function's results in this index, keyed by its arguments
        (`Cache.memoize` without expiry; results stay until removed)."""
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
