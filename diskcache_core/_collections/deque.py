"""Deque: a persistent double-ended queue on a Cache.

A Deque's items are queue items of the cache (`Cache.push`/`Cache.pull`): integer keys that grow
at the back and shrink at the front, so key order is deque order. An index is found by walking
keys from the nearer end, never by reading the values in between. Operations that take several
statements (rotate, reverse, remove, indexed writes, trimming to maxlen) run in one
``transact(retry=True)``, so other processes see them whole. See `_collection` for what Deque
shares with Index.
"""

from __future__ import annotations

import contextlib
import operator
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from typing import Any, TypeVar

from .._arguments import QUEUE_START
from .._cache.cache import Cache
from .collection import MISSING, open_collection_cache, store_in_batches
from .._disk.disk import Disk

__all__ = ["Deque"]

T = TypeVar("T")

_INFINITY = float("inf")


def _check_maxlen(maxlen: Any) -> float:
    """maxlen as stored: a non-negative int, or infinity for None (python-diskcache's value)."""
    if maxlen is None or maxlen == _INFINITY:
        return _INFINITY
    if type(maxlen) is float and maxlen.is_integer():
        maxlen = int(maxlen)  # a whole float, as python-diskcache takes it
    try:
        number = operator.index(maxlen)
    except TypeError:
        raise TypeError(f"maxlen must be an integer or None, not {type(maxlen).__name__}") from None
    if number < 0:
        raise ValueError("maxlen must be non-negative")
    return number


def _check_index(index: Any) -> int:
    """`index` as an int, with list's TypeError for anything that is not an integer."""
    try:
        return operator.index(index)
    except TypeError:
        raise TypeError(f"deque indices must be integers, not {type(index).__name__}") from None


def _same_directory(first: str, second: str) -> bool:
    """Whether two paths name one directory (however spelled: a trailing slash, a link)."""
    if first == second:
        return True
    try:
        return os.path.samefile(first, second)
    except OSError:
        return False


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
        disk: type[Disk] | None = None,
    ) -> None:
        """Open the deque stored in `directory` (a new temporary one when None), then append
        the items of `iterable`.

        :param maxlen: the most items kept: appending to a full deque drops an item from the
            other end, and items beyond it are dropped from the front now (None: no limit)
        :param disk: the Disk type of its cache (None: the process's default, see `configure`),
            as diskcache-community's
        """
        maxlen_checked = _check_maxlen(maxlen)
        self._attach(open_collection_cache(directory, disk), maxlen_checked, iterable)

    @classmethod
    def fromcache(cls, cache: Cache, iterable: Iterable[T] = (), maxlen: int | None = None) -> Deque[T]:
        """A Deque whose items live in `cache` (which it should have to itself); then extend it
        with `iterable`. Keeps the cache's Disk, timeout and settings."""
        maxlen_checked = _check_maxlen(maxlen)
        self = cls.__new__(cls)
        self._attach(cache, maxlen_checked, iterable)
        return self

    def _attach(self, cache: Cache, maxlen: float, iterable: Iterable[T]) -> None:
        if not isinstance(cache, Cache):  # (python-diskcache's Cache, a FanoutCache: d[i] fails)
            raise TypeError(f"a Deque needs a diskcache_core.Cache, not {type(cache).__name__}")
        if cache.disk.put(QUEUE_START) != (QUEUE_START, True):
            # A Disk that encodes int keys (JSONDisk) looks up another key than the integer
            # `push` stores: every indexed read and write would miss, and d[i] never return.
            raise TypeError(
                f"a Deque needs a cache whose Disk stores int keys as they are;"
                f" {type(cache.disk).__name__} encodes them"
            )
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
                self._cache.pop(key, retry=True)

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
        if isinstance(iterable, Deque) and _same_directory(iterable.directory, self.directory):
            iterable = list(iterable)  # would grow while we read it: ``d.extend(d)`` doubles d
        cache = self._cache

        def store(value: T) -> None:
            cache.push(value, side=side, retry=True)

        def trim() -> None:
            if self._maxlen != _INFINITY:
                self._trim(front=side == "back")

        store_in_batches(cache, iterable, store, trim)

    def __iadd__(self, iterable: Iterable[T]) -> Deque[T]:
        """``d += iterable`` extends the back."""
        self._extend(iterable, "back")
        return self

    def _end(self, remove: bool, side: str) -> T:
        """The item at one end (removed when `remove`); IndexError when empty."""
        take = self._cache.pull if remove else self._cache.peek
        _, value = take(default=(None, MISSING), side=side, retry=True)
        if value is MISSING:
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
        # One statement finds and reads it: the item was at `index` in that snapshot, whatever
        # other threads and processes push and pop meanwhile (an item whose value file is lost
        # goes, as iteration passes over it, and the index is looked up again).
        index = _check_index(index)
        if not -(2**63) <= index < 2**63:  # (no deque is that long; SQLite could not bind it)
            raise IndexError("deque index out of range")
        found = self._cache._queues.item_at(index, retry=True)
        if found is None:
            raise IndexError("deque index out of range")
        return found[1]  # type: ignore[no-any-return]

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
        # Up to the far end's item as the iteration starts: items added meanwhile at that end
        # are not reached, so ``d.extend(x for x in d)`` ends, as with an Index (the builtin
        # raises RuntimeError there instead).
        cache = self._cache
        last = next(cache.iterkeys(reverse=not reverse), MISSING)
        for key in cache.iterkeys(reverse=reverse):
            if type(key) is int and type(last) is int and (key < last if reverse else key > last):
                return  # (last itself was popped meanwhile)
            value = cache.get(key, MISSING, retry=True)
            if value is not MISSING:  # popped by someone else meanwhile
                yield value
            if key == last:
                return

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
        stop = max(stop + size, 0) if stop < 0 else min(stop, size)  # as list.index clamps it
        start = min(start, size)
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
                item = cache.get(key, MISSING, retry=True)
                if item is not MISSING and item == value:
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
                _, value = cache.pull(default=(None, MISSING), side=source, retry=True)
                if value is MISSING:
                    return  # only unreadable items (lost value files) were left: pull removed them
                cache.push(value, side=target, retry=True)

    def reverse(self) -> None:
        """Reverse the items in place, by swapping values pairwise from both ends. Atomic."""
        cache = self._cache
        with cache.transact(retry=True):
            fronts, backs = enumerate(cache.iterkeys()), enumerate(cache.iterkeys(reverse=True))
            size = len(cache)
            low, high = -1, size  # the positions of the front and back items read last
            front_value = back_value = MISSING
            while True:  # an unreadable item (its value file lost) goes, as iteration passes it
                while front_value is MISSING and low + 1 < high:
                    low, front = next(fronts)
                    front_value = self._readable(front)
                while back_value is MISSING and high - 1 > low:
                    from_back, back = next(backs)
                    high = size - 1 - from_back
                    back_value = self._readable(back)
                if front_value is MISSING or back_value is MISSING:
                    return
                cache.set(front, back_value, retry=True)
                cache.set(back, front_value, retry=True)
                front_value = back_value = MISSING

    def _readable(self, key: Any) -> Any:
        """The value at `key`, or MISSING after removing an item that cannot be read."""
        value = self._cache.get(key, MISSING, retry=True)
        if value is MISSING:
            self._cache.pop(key, retry=True)
        return value

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
        # python-diskcache's form, with maxlen where set (its own repr has no maxlen).
        maxlen = "" if self._maxlen == _INFINITY else f", maxlen={int(self._maxlen)}"
        return f"{type(self).__name__}(directory={self.directory!r}{maxlen})"

    def __getstate__(self) -> tuple[Cache, int | None]:
        return self._cache, None if self._maxlen == _INFINITY else int(self._maxlen)

    def __setstate__(self, state: tuple[Cache, int | None]) -> None:
        # Reattach only: unpickling writes nothing (no trimming, no settings).
        cache, maxlen = state
        self._cache = cache
        self._maxlen = _check_maxlen(maxlen)
