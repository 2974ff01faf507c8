"""Rate limits and running averages kept in one cache item: `Averager` and `throttle`
(python-diskcache's recipes, same signatures), each state changed atomically through
`locks.change`, which is the cache's public ``update`` (a transaction, or a compare-and-set in
Redis on a cache with a remote)."""

from __future__ import annotations

import functools
import math
import time
from typing import Any, Callable, TypeVar

from .._arguments import check_seconds
from .._disk.disk import KEEP
from .._errors import FloatOverflowError
from .locks import change, check_expire, full_name
from .._reprs import ItemRepr

__all__ = ["Averager", "throttle"]

F = TypeVar("F", bound=Callable[..., Any])


class Averager(ItemRepr):
    """Running average kept in the cache: ``add`` values, read the mean with ``get``.

    ``Averager(cache, 'latency')``, then ``add(0.08)`` and ``add(0.12)``: ``get()`` is 0.1.
    The item holds ``(total, count)``, updated in a transaction.
    """

    def __init__(self, cache: Any, key: Any, expire: float | None = None, tag: Any = None) -> None:
        self._cache = cache
        self._key = key
        self._expire = check_expire(expire)
        self._tag = tag

    def add(self, value: float) -> None:
        """Add `value` to the average (an int too large for a float: FloatOverflowError)."""
        if isinstance(value, int):
            try:
                float(value)  # what adding it to the float total does
            except OverflowError:
                bits = value.bit_length()  # (not its digits: str() of a huge int is limited)
                raise FloatOverflowError(
                    f"value (an int of {bits} bits) is too large for a float average"
                ) from None

        def added(current: tuple[float, int]) -> tuple[Any, None]:
            total, count = current
            return (total + value, count + 1), None

        change(self._cache, self._key, added, (0.0, 0), self._expire, self._tag)

    def get(self) -> float | None:
        """The current average, or None when nothing was added."""
        total, count = self._cache.get(self._key, default=(0.0, 0), retry=True)
        return None if count == 0 else total / count

    def pop(self) -> float | None:
        """Return the current average (None when empty) and delete it."""
        total, count = self._cache.pop(self._key, default=(0.0, 0), retry=True)
        return None if count == 0 else total / count


# Seconds (or a throttle's period, if longer) by which the bucket's time may lead a reading of
# time_func before that clock is taken to be another one (see `throttle`).
_CLOCK_CHANGE = 60.0


def throttle(
    cache: Any,
    count: int,
    seconds: float,
    name: str | None = None,
    expire: float | None = None,
    tag: Any = None,
    time_func: Callable[[], float] = time.time,
    sleep_func: Callable[[float], Any] = time.sleep,
) -> Callable[[F], F]:
    """Decorator: at most `count` calls per `seconds`, across threads and processes.

    A token bucket in one item: it holds ``(last_time, tokens)``, refills at
    ``count / seconds`` tokens a second up to `count`, and each call takes one token, sleeping
    until one is available. A missing item is a full bucket, so a fresh cache starts with a
    burst of `count` calls (as python-diskcache's does after decoration). The bucket outlives
    the process (python-diskcache's starts full at each decoration): a restart does not reset
    the limit. A `time_func` reading earlier than the bucket's time (another clock) counts on
    from its own reading.
    """
    calls, period = check_seconds("count", count, "calls"), check_seconds("seconds", seconds)
    rate = calls / period if period > 0 else 0.0
    # Refused: a count or period of 0 or less, an infinite one, and a rate a float cannot hold
    # (0 would never let a call through).
    if not 0 < rate < math.inf:
        raise ValueError(
            f"throttle needs finite count > 0 and seconds > 0 with a rate a float can hold, "
            f"not {count!r}, {seconds!r}"
        )
    # A call takes one token when the bucket holds one, or is full (a `count` below 1: a call
    # every 1 / rate seconds). The margin absorbs float rounding.
    needed = min(1.0, calls)
    expire = check_expire(expire)  # (a bucket that expires as it is stored would never limit)
    clock_change = max(period, _CLOCK_CHANGE)

    def decorator(func: F) -> F:
        key = full_name(func) if name is None else name

        def take_token() -> float:
            """Take a token if one is there (0.0), else return how long to wait for one."""
            now = time_func()

            def take(current: tuple[float, float]) -> tuple[Any, float]:
                last, stored = current
                keep: Any
                if last - now > clock_change:  # time_func is another clock now (a restart):
                    last, keep = now, (now, stored)  # count from its reading, never wait out
                else:  # the difference (a thread that read its clock, then lost a race to
                    # the item, reads a little earlier: it finds fewer tokens, as it must)
                    keep = KEEP
                tokens: float = min(calls, stored + (now - last) * rate)
                if tokens >= needed - 1e-9:
                    return (now, tokens - 1), 0.0
                # A wait the clock can tell from none: a far smaller one (a rounding remainder)
                # leaves a clock reading 1.7e9 (or one a sleep_func advances) where it was.
                return keep, max((needed - tokens) / rate, 4 * math.ulp(now))

            return float(change(cache, key, take, (now, calls), expire, tag))

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            delay = take_token()
            while delay:
                sleep_func(delay)
                delay = take_token()
            return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorator
