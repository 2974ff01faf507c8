"""Checks and shapes shared by the cache's methods: expiry, tags, queue sides and ranges.

Each raises a clear TypeError/ValueError naming the argument, before anything is stored.
"""

from __future__ import annotations

import numbers
from typing import Any

__all__ = [
    "QUEUE_BOUNDS", "QUEUE_START", "check_side", "check_tag", "check_timeout", "expire_at", "key_range",
    "shape",
]  # fmt: skip

_TAG_TYPES = (str, bytes, int, float)
QUEUE_BOUNDS = (0, 999999999999999)
QUEUE_START = 500000000000000


def check_timeout(timeout: Any) -> None:
    """A cache's write timeout: a non-negative number of seconds."""
    if type(timeout) not in (int, float):  # not bool, not a numeric string
        raise TypeError(f"timeout must be a number of seconds, not {timeout!r}")
    if timeout < 0:
        raise ValueError(f"timeout must be >= 0, got {timeout}")


def key_range(prefix: str | None) -> tuple[Any, Any]:
    if prefix is None:
        return QUEUE_BOUNDS
    if type(prefix) is not str:
        raise TypeError(f"queue prefix must be a str or None, not {type(prefix).__name__}")
    return prefix + "-000000000000000", prefix + "-999999999999999"


def check_side(side: str, allowed: tuple[str, str]) -> str:
    if side not in allowed:
        raise ValueError(f"side must be {allowed[0]!r} or {allowed[1]!r}, not {side!r}")
    return side


def expire_at(now: float, expire: Any) -> float | None:
    if expire is None:
        return None
    if type(expire) not in (int, float) and not isinstance(expire, numbers.Real):
        raise TypeError(f"expire must be a number of seconds or None, not {type(expire).__name__}")
    return now + float(expire)


def check_tag(tag: Any) -> None:
    if tag is not None and type(tag) not in _TAG_TYPES:
        raise TypeError(f"tag must be str, bytes, int, float or None, not {type(tag).__name__}")


def shape(value: Any, expire_time: Any, tag: Any, want_expire: bool, want_tag: bool) -> Any:
    """python-diskcache's return shape for reads with the expire_time/tag flags."""
    if want_expire:
        return (value, expire_time, tag) if want_tag else (value, expire_time)
    return (value, tag) if want_tag else value
