"""Checks and shapes shared by the cache's methods: expiry, tags, queue sides and ranges.

Each raises a clear TypeError/ValueError naming the argument, before anything is stored.
"""

from __future__ import annotations

import numbers
from typing import Any

from ._errors import FloatOverflowError

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "MAX_TAGS",
    "MAX_TIMEOUT",
    "QUEUE_BOUNDS",
    "QUEUE_START",
    "SideError",
    "TextError",
    "check_bindable",
    "check_expire",
    "check_key",
    "check_seconds",
    "check_side",
    "check_tag",
    "check_tags",
    "check_text",
    "check_time",
    "check_timeout",
    "expire_at",
    "key_range",
    "shape",
    "shape_stored",
    "whole_number",
]

_TAG_TYPES = (str, bytes, int, float)
INT64_MIN = -(2**63)  # the range of an SQLite INTEGER
INT64_MAX = 2**63 - 1
QUEUE_BOUNDS = (0, 999999999999999)
QUEUE_START = 500000000000000
# sqlite3 hands SQLite the timeout as a C int of milliseconds: a larger one (or inf, or NaN)
# wraps around to "never wait" instead of waiting longer.
MAX_TIMEOUT = (2**31 - 1) / 1000


def check_timeout(timeout: Any) -> float:
    """A cache's write timeout: a number of seconds from 0 to MAX_TIMEOUT (about 24.8 days).

    Returns it as an int or float (a numpy number is made a float).
    """
    if type(timeout) not in (int, float):
        if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
            raise TypeError(f"timeout must be a number of seconds, not {timeout!r}")
        timeout = float(timeout)
    seconds: float = timeout
    if not 0 <= seconds <= MAX_TIMEOUT:  # NaN fails both comparisons
        raise ValueError(
            f"timeout must be from 0 to {MAX_TIMEOUT} seconds, got {timeout} (SQLite counts it "
            "in 32-bit milliseconds: beyond that it would not wait at all)"
        )
    return seconds


class TextError(UnicodeEncodeError):
    """A str SQLite cannot take (lone surrogates): the UnicodeEncodeError python-diskcache lets
    through from SQLite (a ValueError too), with a message naming the argument."""

    def __init__(self, message: str, cause: UnicodeEncodeError) -> None:
        super().__init__(cause.encoding, cause.object, cause.start, cause.end, cause.reason)
        self.message = message

    def __str__(self) -> str:
        return self.message


def check_text(name: str, text: str) -> None:
    """`text` must encode as UTF-8, SQLite's text encoding: a str with lone surrogates does not.

    Raises `TextError` naming the argument (`name`), before SQLite's parameter binding would
    raise its UnicodeEncodeError, after a value file may have been written.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        message = (
            f"{name} {text[:50]!r} is not valid UTF-8 text ({exc.reason} at position"
            f" {exc.start}): SQLite can neither store nor look it up"
        )
        raise TextError(message, exc) from None


def check_bindable(name: str, value: Any) -> None:
    """`value` (a str or int SQLite is given as it is) must fit SQLite: UTF-8 text, 64-bit int.

    ValueError naming the argument `name`; other types pass (SQLite reports its own errors).
    """
    kind = type(value)
    if kind is str:
        if not value.isascii():
            check_text(name, value)
    elif kind is int and not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{name} {value} is outside SQLite's 64-bit integer range")


def check_key(db_key: Any) -> None:
    """A key as `Disk.put` stores it must be one SQLite can store and find again.

    Not NaN: SQLite stores a NaN as NULL, which no lookup ever matches.
    """
    if type(db_key) is float and db_key != db_key:
        raise ValueError("key must not be NaN: SQLite stores NaN as NULL, which no lookup finds")
    check_bindable("key", db_key)


def put_key(disk: Any, key: Any) -> tuple[Any, int]:
    """``disk.put(key)``, checked (`check_key`) before anything is written for it. ASCII text,
    the usual key, needs no check. `raw` comes back as the int SQLite stores, 1 or 0: binding a
    bool costs the sqlite3 module an adapter lookup (~0.4 us here, as a None or bytes parameter
    does), an int binds directly."""
    db_key, raw = disk.put(key)
    if type(db_key) is not str or not db_key.isascii():
        check_key(db_key)
    return db_key, 1 if raw else 0


def key_range(prefix: str | None) -> tuple[Any, Any]:
    if prefix is None:
        return QUEUE_BOUNDS
    if not isinstance(prefix, str):
        raise TypeError(f"queue prefix must be a str or None, not {type(prefix).__name__}")
    prefix = str.__str__(prefix)  # a str subclass's (a StrEnum member's) text, as python-diskcache
    check_bindable("queue prefix", prefix)
    return prefix + "-000000000000000", prefix + "-999999999999999"


class SideError(ValueError, KeyError):
    """A queue side that is neither end: a ValueError, and the KeyError python-diskcache raises."""

    __str__ = ValueError.__str__  # the message, not KeyError's quoted form


def check_side(side: str, allowed: tuple[str, str]) -> str:
    if side not in allowed:
        raise SideError(f"side must be {allowed[0]!r} or {allowed[1]!r}, not {side!r}")
    return side


def check_seconds(name: str, value: Any, unit: str = "seconds") -> float:
    """A duration given to a recipe: a real number of seconds (not bool, not NaN), as a float.
    (`unit` names what else such a number counts, for the message.)"""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number of {unit}, not {type(value).__name__}")
    return float_seconds(name, value)


def expire_at(now: float, expire: Any) -> float | None:
    """The expire time of an item stored at `now` that lives `expire` seconds (None: never).

    NaN is refused: SQLite would store it as NULL, an item that never expires.
    """
    if expire is None:
        return None
    if type(expire) not in (int, float) and not isinstance(expire, numbers.Real):
        raise TypeError(f"expire must be a number of seconds or None, not {type(expire).__name__}")
    return now + float_seconds("expire", expire, ": SQLite would store it as 'never expires'")


def float_seconds(name: str, value: Any, why_not_nan: str = "") -> float:
    """`value` (a real number) as a float: ValueError naming `name` when too large, or NaN
    (where ``float()`` would raise OverflowError, which names nothing)."""
    try:
        seconds = float(value)
    except OverflowError:  # (an int of over 4300 digits cannot even be shown: its size is)
        shown = f"(an int of {value.bit_length()} bits)" if isinstance(value, int) else value
        raise FloatOverflowError(f"{name} {shown} is too large for a float number of seconds") from None
    if seconds != seconds:
        raise ValueError(f"{name} must not be NaN{why_not_nan}")
    return seconds


def check_time(name: str, value: Any) -> float:
    """A point in time, in seconds since the epoch as ``time.time()`` gives it.

    A real number, not NaN, not bool: SQLite would compare a string or NaN with the stored
    times in a way that silently selects the wrong items.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        kind = type(value).__name__
        raise TypeError(f"{name} must be a time in seconds since the epoch, not {kind}: {value!r}")
    return float_seconds(name, value)


def check_expire(expire: Any) -> None:
    """`expire` as `expire_at` accepts it (None or a number of seconds, not NaN)."""
    expire_at(0.0, expire)


def check_tag(tag: Any, name: str = "tag") -> Any:
    """A tag as SQLite stores it: str (UTF-8), bytes, 64-bit int, float (not NaN) or None.

    Returns it as that base type: what SQLite would store for a subclass (an ``enum`` member
    of str or int, ``True``, numpy's float64) or a bytes-like object (bytearray, memoryview),
    which python-diskcache's tags take too.
    """
    kind = type(tag)
    if tag is None or kind is bytes:
        return tag
    if kind not in _TAG_TYPES:
        if isinstance(tag, str):
            tag = str.__str__(tag)
        elif isinstance(tag, int):
            tag = int.__index__(tag)
        elif isinstance(tag, float):
            tag = float.__float__(tag)
        elif isinstance(tag, (bytearray, memoryview)):
            return bytes(tag)
        else:
            raise TypeError(f"{name} must be str, bytes, int, float or None, not {kind.__name__}")
        kind = type(tag)
    if kind is float:
        if tag != tag:
            raise ValueError(f"{name} must not be NaN: SQLite stores it as NULL, which evict never finds")
    else:
        check_bindable(name, tag)
    return tag


MAX_TAGS = 64  # tags on one item, its first tag included (docs/tags.rst)


def check_tags(tag: Any, tags: Any) -> tuple[Any, tuple[Any, ...]]:
    """An item's tags, ``{tag} | set(tags)``, checked: its first tag (the Cache table's ``tag``
    column, where python-diskcache reads it: `tag`, else the first of `tags`) and the others,
    each once (equal by SQLite's rule, which Python's ``==`` and hash agree with for these types).

    Raises TypeError for a tag of another type (None among `tags` too, and a str or bytes given
    as `tags`: an iterable of its characters is never meant), ValueError for a value SQLite
    cannot store or more than MAX_TAGS tags — before anything is stored.
    """
    first = None if tag is None else check_tag(tag)
    if tags is None:
        return first, ()
    if isinstance(tags, (str, bytes, bytearray, memoryview)):
        raise TypeError(f"tags must be an iterable of tags, not a single {type(tags).__name__}")
    try:
        items = iter(tags)
    except TypeError:
        raise TypeError(f"tags must be an iterable of tags, not {type(tags).__name__}") from None
    seen: dict[Any, None] = {} if first is None else {first: None}
    for item in items:
        if item is None:
            raise TypeError("tags must not contain None (an item without tags: tags=None or ())")
        seen[check_tag(item, "tags")] = None
        if len(seen) > MAX_TAGS:
            raise ValueError(f"tags: at most {MAX_TAGS} tags per item (tag included)")
    ordered = tuple(seen)
    if not ordered:
        return None, ()
    return ordered[0], ordered[1:]


def shape(value: Any, expire_time: Any, tag: Any, want_expire: bool, want_tag: bool) -> Any:
    """python-diskcache's return shape for reads with the expire_time/tag flags."""
    if want_expire:
        return (value, expire_time, tag) if want_tag else (value, expire_time)
    return (value, tag) if want_tag else value


def shape_stored(
    value: Any, expire_time: Any, tag: Any, store_time: Any, want_expire: bool, want_tag: bool
) -> tuple[Any, ...]:
    """diskcache-community's return shape for a read with ``store_time=True``: `shape`'s, with
    the store time last."""
    if want_expire:
        return (value, expire_time, tag, store_time) if want_tag else (value, expire_time, store_time)
    return (value, tag, store_time) if want_tag else (value, store_time)


def whole_number(
    name: str, value: Any, minimum: int | None = 0, maximum: int | None = None,
    what: str = "setting",
) -> int:
    """`value` as an int within bounds; TypeError or ValueError naming the `what` `name`.

    Integral floats (``size_limit=1e9``) and other integer types (numpy's) are the int they
    equal; bool is not a size.
    """
    if type(value) is float and value.is_integer():
        value = int(value)
    elif type(value) is not int:  # (a subclass of int included: made an int below)
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            kind = type(value).__name__
            raise TypeError(f"{what} {name!r} must be an int, not {kind}: {value!r}")
        value = int(value)
    number: int = value
    if maximum is None or maximum > INT64_MAX:
        maximum = INT64_MAX  # what an SQLite INTEGER holds
    if minimum is not None and number < minimum:
        raise ValueError(f"{what} {name!r} must be >= {minimum}, got {number}")
    if number > maximum:
        raise ValueError(f"{what} {name!r} must be <= {maximum}, got {number}")
    return number
