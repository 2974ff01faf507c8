"""Atomic changes of one item: counters (incr, and so decr) on one cache's Store, and `update`,
the public read-modify-write the recipes build on (`AtomicChanges`, a base class of Cache).

The common case is one statement: the stored value is a native number and the sum stays a
64-bit integer (or a float), so SQLite adds it in place and hands the new value back through a
function call (`Store.write_capturing`). Anything else — a custom Disk, a big integer, a
Decimal, an overflow — reads, adds in Python and writes back in one transaction.
"""

from __future__ import annotations

import numbers
import time
from typing import TYPE_CHECKING, Any, Callable, cast

from .._store import schema as sql
from .._store.connections import NO_VALUE
from .._arguments import put_key
from .._disk.disk import DELETE, ENOVAL, KEEP, Disk
from .._errors import FloatOverflowError
from .._store.rows import raise_decode_error
from .._store.store import MIN_WRITE_CHARGE, Store

if TYPE_CHECKING:
    from .._eviction.evictor import Evictor
    from .cache import Cache

__all__ = ["AtomicChanges", "check_delta", "increment"]

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


def check_delta(name: str, delta: Any, default: Any) -> None:
    """TypeError/ValueError for a `delta` or `default` an incr cannot add."""
    kind = type(delta)
    if kind is not int and kind is not float and not isinstance(delta, numbers.Number):
        raise TypeError(f"{name} delta must be a number, not {kind.__name__}")
    if default is not None and type(default) is not int and not isinstance(default, numbers.Number):
        raise TypeError(f"{name} default must be a number or None, not {type(default).__name__}")
    # NaN would make the count NaN for good (and SQLite stores a NaN number as NULL).
    if kind is float and delta != delta:
        raise ValueError(f"{name} delta must not be NaN")
    if type(default) is float and default != default:
        raise ValueError(f"{name} default must not be NaN")


def increment(
    store: Store, disk: Disk, native: bool, key: Any, stored_as: tuple[Any, Any], delta: Any,
    default: Any, retry: bool, spared: tuple[Any, Any] | None = None,
    serialize: Callable[..., tuple[int, int, str | None, Any]] | None = None,
) -> Any:
    """Add `delta` to the number at `key` (from `default` when missing; KeyError when that is
    None); return the new value. `stored_as`: the key's ``(db_key, raw)``; `native`: the Disk
    stores numbers natively; `spared`: the write context for the size check (`Store.write`);
    `serialize`: the cache's write-path serializer (`serializer`; None: ``disk.store``)."""
    db_key, raw = stored_as
    kind = type(delta)
    if native and (kind is float or (kind is int and _INT64_MIN <= delta <= _INT64_MAX)):
        now = time.time()
        params: tuple[Any, ...]
        if default is None:
            start = None
            statement, params = sql.INCR_NATIVE, (delta, now, db_key, raw)
        else:
            start = default + delta
            if not (
                (type(start) is float and start == start)  # inf + -inf is NaN: pickled
                or (type(start) is int and _INT64_MIN <= start <= _INT64_MAX)
            ):
                return _increment_in_python(
                    store, disk, key, db_key, raw, delta, default, retry, serialize
                )
            statement, params = sql.INCR_UPSERT, (delta, now, db_key, raw, start)
        rowcount, value = store.write_capturing(
            statement, params, retry, MIN_WRITE_CHARGE, spared
        )
        if rowcount == 1:
            return start if value is NO_VALUE else value
    return _increment_in_python(
        store, disk, key, db_key, raw, delta, default, retry, serialize
    )


def _increment_in_python(
    store: Store, disk: Disk, key: Any, db_key: Any, raw: Any, delta: Any, default: Any,
    retry: bool, serialize: Callable[..., tuple[int, int, str | None, Any]] | None,
) -> Any:
    # Any Disk, any number type: read, add in Python, write back, in one transaction.
    store_value = disk.store if serialize is None else serialize
    with store.transaction(retry) as state:
        now = time.time()
        row = state.execute(sql.SELECT_FOR_UPDATE, (db_key, raw)).fetchone()
        current: Any = NO_VALUE
        if row is not None and (row[1] is None or row[1] > now):  # row[1]: its expire_time
            rowid, _, mode, filename, db_value = row
            try:
                current = disk.fetch(mode, filename, db_value, False)
            except FileNotFoundError:
                pass  # its value file is lost: the item reads as missing, as a get finds it
            except Exception as exc:
                raise_decode_error(exc, disk, mode, filename, db_value, rowid, key, store.pool.path)
        if current is NO_VALUE:
            if default is None:
                raise KeyError(key)
            value = _add(key, default, delta)
            size, mode, filename, db_value = store_value(value, False, key=key)
            params = (db_key, raw, now, None, None, size, mode, filename, db_value)
            store.write(sql.UPSERT, params, retry, filename)  # joins the transaction
            return value
        if not isinstance(current, numbers.Number):
            raise TypeError(
                f"cannot increment the value of {key!r}: it is a {type(current).__name__},"
                " not a number"
            )
        value = _add(key, current, delta)
        size, mode, new_file, db_value = store_value(value, False, key=key)
        update = (now, size, mode, new_file, db_value, rowid)
        store.write(sql.UPDATE_VALUE, update, retry, new_file)
        return value


def _add(key: Any, current: Any, delta: Any) -> Any:
    """``current + delta``, or an error where the sum does not fit the result's type: never a
    fixed-width integer (numpy's int64) wrapped round to a wrong count."""
    integral = isinstance(current, numbers.Integral) and isinstance(delta, numbers.Integral)
    try:
        value = current + delta
    except OverflowError:
        if integral:  # (numpy: a Python int beyond its type)
            raise ValueError(
                f"cannot increment the value of {key!r}: {int(current)} + {int(delta)} does not"
                f" fit in {type(current).__name__}"
            ) from None
        # A float plus an int beyond floats (not shown: str() may refuse it).
        raise FloatOverflowError(
            f"cannot increment the value of {key!r}: the sum is too large for a float"
        ) from None
    if type(value) is not int and integral and isinstance(value, numbers.Integral):
        if int(value) != int(current) + int(delta):
            raise ValueError(
                f"cannot increment the value of {key!r}: {int(current)} + {int(delta)} does not"
                f" fit in {type(value).__name__}"
            )
    return value


class AtomicChanges:
    """Cache's atomic changes of one item: a base class of Cache, over the parts CacheBase
    composes (a cache with a remote has its own: `RemoteItems`)."""

    _store: Store
    _disk: Disk
    _evictor: Evictor
    _native_numbers: bool
    _serialize: Callable[..., Any]

    def incr(
        self, key: Any, delta: float = 1, default: float | None = 0, retry: bool = False
    ) -> Any:
        """Add `delta` to the number stored at `key`, atomically; return the new value.

        A missing key starts from `default` (KeyError when `default` is None). Works like
        Python's ``+``: integers past 64 bits stay exact.
        """
        if type(delta) is not int or (default is not None and type(default) is not int):
            check_delta("incr", delta, default)  # (plain ints, the usual case, need no check)
        stored_as = put_key(self._disk, key)
        store, evictor = self._store, self._evictor
        refresh = evictor.tracks_writes  # noted before the write, as a set's (see _store_item)
        before = evictor.note_write(*stored_as, time.time()) if refresh else None
        try:
            result = increment(
                store, self._disk, self._native_numbers, key, stored_as, delta, default, retry,
                evictor.spares(*stored_as) if evictor.read_counts else None, self._serialize,
            )
        except BaseException:
            if refresh:
                evictor.undo_write(*stored_as, before)
            raise
        if refresh:
            evictor.wrote(*stored_as, before, store.inserted())
        elif evictor.access.read_column is not None:  # least-frequently-used: a use
            evictor.note_use(*stored_as, time.time())
        return result

    def decr(
        self, key: Any, delta: float = 1, default: float | None = 0, retry: bool = False
    ) -> Any:
        """Subtract `delta` from the number stored at `key`, atomically; see `incr`."""
        check_delta("decr", delta, default)
        return self.incr(key, -delta, default, retry)

    def update(
        self,
        key: Any,
        function: Callable[[Any], Any],
        default: Any = None,
        expire: Any = KEEP,
        tag: Any = KEEP,
        retry: bool = False,
    ) -> Any:
        """Replace the value at `key` by ``function(value)``, atomically; return the new value.

        `function` is given the current value (`default` when `key` is missing or expired) and
        returns the value to store, or ``Cache.KEEP`` to leave the item as it is (the current
        value is returned), or ``Cache.DELETE`` to remove it (`default` is returned). The item
        keeps its expire time and tag unless `expire` (seconds; None: never) or `tag` is given.
        Atomic across processes (one write transaction; `function` runs once, inside it: keep
        it short); on a cache with a remote, across hosts (a compare-and-set in Redis, where
        `function` runs again whenever another writer got in between: the value stored is its
        last call's). Raises Timeout as `transact` does.
        """
        cache = cast("Cache", self)  # (a base class of Cache: its item methods)
        with self._store.transaction(retry):
            found = cache.get(key, ENOVAL, expire_time=True, tag=True, retry=retry)
            if found[0] is ENOVAL:
                current, expires, item_tag = default, None, None
            else:
                current, expires, item_tag = found
            new = function(current)
            if new is KEEP:
                return current
            if new is DELETE:
                cache.delete(key, retry)
                return default
            if expire is KEEP:
                expire = None if expires is None else expires - time.time()
            cache.set(key, new, expire, False, item_tag if tag is KEEP else tag, retry)
        return new

