"""Cross-process synchronization built on a cache: Lock, RLock, BoundedSemaphore, Averager,
throttle and barrier (python-diskcache's recipes, same signatures).

Every primitive keeps its state in one cache item, changed atomically with ``add`` or inside
``transact``, so it works across threads and processes sharing the cache directory — and, on a
cache with a remote, across hosts (compare-and-set in Redis instead of ``transact``). What this
module adds to the peer's recipes:

- ``acquire(blocking=True, timeout=None)`` returns a bool, and ``locked()`` exists on every lock;
- waiting polls with capped exponential backoff and jitter (1 ms doubling to 50 ms) and reads
  before it writes, so waiters do not hammer the database write lock the holder needs;
- with ``expire``, a holder that dies never blocks the others for longer than that: a Lock's
  item expires, and a BoundedSemaphore keeps one lease per holder, each with its own expiry;
- a lock is released only by its holder (RuntimeError otherwise), so a holder whose lock
  expired cannot release the next holder's lock.

Keep lock keys out of eviction's way: use ``eviction_policy='none'`` or a generous size limit.
"""

from __future__ import annotations

import functools
import math
import os
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from ._arguments import check_seconds
from ._disk import DELETE, KEEP
from ._errors import FloatOverflowError

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "Averager",
    "BoundedSemaphore",
    "Lock",
    "RLock",
    "backoff_delays",
    "barrier",
    "full_name",
    "lease_seconds",
    "throttle",
]

F = TypeVar("F", bound=Callable[..., Any])

FIRST_DELAY = 0.001  # seconds before the first retry of a contended acquire
MAX_DELAY = 0.05  # backoff cap: a released lock is noticed within this (plus jitter)


def _change(
    cache: Any, key: Any, function: Callable[[Any], tuple[Any, Any]], default: Any,
    expire: float | None, tag: Any,
) -> Any:
    """Atomically: ``new, result = function(value or default)``, then store `new` (with
    `expire` and `tag`), delete the item for DELETE, or leave it for KEEP; return `result`.

    In one transaction; on a cache with a remote, where a transaction cannot span hosts, as a
    compare-and-set in Redis (retried when another writer got in between).
    """
    shard = cache.shard_for(key) if hasattr(cache, "shard_for") else cache
    if getattr(shard, "remote", None) is not None:
        return shard._remote.change(key, function, default, expire, tag)  # noqa: SLF001
    with cache.transact(retry=True):
        value, result = function(cache.get(key, default=default))
        if value is DELETE:
            cache.delete(key)
        elif value is not KEEP:
            cache.set(key, value, expire=expire, tag=tag)
    return result


def full_name(func: Callable[..., Any]) -> str:
    """``module.qualname`` of `func`: the default key name of the decorators."""
    return f"{func.__module__}.{func.__qualname__}"


def backoff_delays(first: float = FIRST_DELAY, cap: float = MAX_DELAY) -> Iterator[float]:
    """Endless sleep times for a polling wait: doubling from `first` up to `cap`, jittered.

    The jitter (each delay drawn from its upper half) keeps waiters that started together
    from polling in lock step.
    """
    delay = first
    while True:
        yield random.uniform(delay / 2, delay)
        delay = min(delay * 2, cap)


def lease_seconds(name: str, expire: Any) -> float:
    """A lifetime in seconds long enough to move ``time.time()`` (so > 0, not NaN): a lock held,
    or an item stored, that has expired as it is written excludes nobody and keeps nothing."""
    seconds = check_seconds(name, expire)
    now = time.time()
    if not now + seconds > now:
        raise ValueError(f"{name} must be > 0 seconds, enough to move time.time(), not {expire!r}")
    return seconds


def _lease(expire: Any) -> float | None:
    """A recipe's `expire`: None (held or kept until released or replaced) or `lease_seconds`."""
    return None if expire is None else lease_seconds("expire", expire)


def _poll(attempt: Callable[[], bool], blocking: bool, timeout: float | None) -> bool:
    """Call `attempt` until it returns True, sleeping with backoff; False on timeout."""
    if not blocking and timeout is not None:
        raise ValueError("cannot specify a timeout for a non-blocking acquire")
    if timeout is not None:
        timeout = check_seconds("timeout", timeout)  # (a float from here on)
        if timeout < 0:
            raise ValueError(f"timeout must be >= 0 or None, not {timeout!r}")
    if attempt():
        return True
    if not blocking:
        return False
    deadline = None if timeout is None else time.monotonic() + timeout
    for delay in backoff_delays():
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            delay = min(delay, remaining)
        time.sleep(delay)
        if attempt():
            return True
    raise AssertionError("unreachable: backoff_delays never ends")  # pragma: no cover


# An RLock owner is a thread of a process. The random part tells apart a process that reuses a
# dead one's pid (a lock without expiry would otherwise be inherited); a forked child gets its own.
_process_identity = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"


def _new_process_identity() -> None:
    global _process_identity
    _process_identity = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_process_identity)


def _owner() -> str:
    return f"{_process_identity}-{threading.get_ident()}"


def _token() -> str:
    """A value naming one acquisition, unique across processes and time."""
    return f"{_process_identity}-{uuid.uuid4().hex}"


class Averager:
    """Running average kept in the cache: ``add`` values, read the mean with ``get``.

    ``Averager(cache, 'latency')``, then ``add(0.08)`` and ``add(0.12)``: ``get()`` is 0.1.
    The item holds ``(total, count)``, updated in a transaction.
    """

    def __init__(self, cache: Any, key: Any, expire: float | None = None, tag: Any = None) -> None:
        self._cache = cache
        self._key = key
        self._expire = _lease(expire)
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

        _change(self._cache, self._key, added, (0.0, 0), self._expire, self._tag)

    def get(self) -> float | None:
        """The current average, or None when nothing was added."""
        total, count = self._cache.get(self._key, default=(0.0, 0), retry=True)
        return None if count == 0 else total / count

    def pop(self) -> float | None:
        """Return the current average (None when empty) and delete it."""
        total, count = self._cache.pop(self._key, default=(0.0, 0), retry=True)
        return None if count == 0 else total / count


class Lock:
    """Lock shared by the threads and processes using the cache; one item holds it.

    Acquiring adds the item (an atomic insert-if-missing) holding a token for this acquisition;
    releasing deletes it only if it still holds that token. With `expire`, a holder that dies
    releases the lock `expire` seconds after acquiring it; choose it above the longest hold.
    Use it as a context manager (``with Lock(cache, 'report-123', expire=60): ...``) or call
    ``acquire``/``release``. One Lock object may be shared by threads: each thread's acquisition
    keeps its own token, so a thread whose hold expired cannot release the next holder's lock; a
    thread that acquired nothing through the object releases the hold it has (as
    ``threading.Lock`` lets any thread release).
    """

    def __init__(self, cache: Any, key: Any, expire: float | None = None, tag: Any = None) -> None:
        self._cache = cache
        self._key = key
        self._expire = _lease(expire)
        self._tag = tag
        self._tokens: dict[int, str] = {}  # thread ident -> the token its acquisition holds

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Take the lock; True when taken.

        Waits (polling with backoff) unless `blocking` is False; gives up after `timeout`
        seconds (None: no limit).
        """
        token = _token()

        def attempt() -> bool:
            # Read first: a waiter takes the write lock only when the lock looks free.
            if self._key in self._cache:
                return False
            return bool(
                self._cache.add(self._key, token, expire=self._expire, tag=self._tag, retry=True)
            )

        if not _poll(attempt, blocking, timeout):
            return False
        self._tokens[threading.get_ident()] = token
        return True

    def release(self) -> None:
        """Release the lock; RuntimeError when this object does not hold it (or it expired)."""
        own = self._tokens.pop(threading.get_ident(), None)
        # The calling thread's own hold only; a thread with none may release another's.
        tokens = {own} if own is not None else set(self._tokens.values())
        if not tokens:
            raise RuntimeError(
                f"release of lock {self._key!r} by a Lock object that did not acquire it"
                " (it may be held through another object: that one releases it)"
            )
        found: list[Any] = []

        def released(current: Any) -> tuple[Any, bool]:
            if isinstance(current, str) and current in tokens:
                found.append(current)
                return DELETE, True
            return KEEP, False

        if not _change(self._cache, self._key, released, None, None, None):
            raise RuntimeError(
                f"lock {self._key!r} expired before release: another holder may have taken it"
            )
        if own is None:
            for ident, token in list(self._tokens.items()):
                if token in found:
                    self._tokens.pop(ident, None)

    def locked(self) -> bool:
        """True when some thread or process holds the lock."""
        return self._key in self._cache

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


class RLock:
    """Re-entrant lock: its owner (one thread of one process) may acquire it again.

    The item holds ``(owner, count)``; each acquire by the owner adds one, each release takes
    one away and the last deletes the item. Only the owner may release (RuntimeError
    otherwise). With `expire`, the lock is freed `expire` seconds after the owner's last
    acquire or release, so a dead owner does not hold it forever.
    """

    def __init__(self, cache: Any, key: Any, expire: float | None = None, tag: Any = None) -> None:
        self._cache = cache
        self._key = key
        self._expire = _lease(expire)
        self._tag = tag

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Take the lock, or count one more hold if this thread owns it; True when taken."""
        me = _owner()

        def attempt() -> bool:
            owner, count = self._cache.get(self._key, default=(None, 0), retry=True)
            if count and owner != me:
                return False  # held by another: do not take the write lock to find out
            return bool(_change(self._cache, self._key, take, (None, 0), self._expire, self._tag))

        def take(current: tuple[Any, int]) -> tuple[Any, bool]:
            owner, count = current
            if count and owner != me:
                return KEEP, False
            return (me, count + 1), True

        return _poll(attempt, blocking, timeout)

    def release(self) -> None:
        """Give up one hold; RuntimeError when the calling thread does not own the lock."""
        me = _owner()

        def give_back(current: tuple[Any, int]) -> tuple[Any, None]:
            owner, count = current
            if owner != me or count <= 0:
                raise RuntimeError("cannot release un-acquired lock")
            return (DELETE if count == 1 else (me, count - 1)), None

        _change(self._cache, self._key, give_back, (None, 0), self._expire, self._tag)

    def locked(self) -> bool:
        """True when some thread or process holds the lock."""
        _, count = self._cache.get(self._key, default=(None, 0), retry=True)
        return bool(count > 0)

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


class BoundedSemaphore:
    """Semaphore allowing `value` concurrent holders across threads and processes.

    The item holds one lease per holder, ``{token: expire_time}``. A lease expires `expire`
    seconds after it was taken, so a holder that dies frees its own slot, whatever the others
    do (a single counter would leak that slot while the others keep the item fresh).
    ``release`` returns a lease this object took; releasing more than were taken is a ValueError.
    """

    def __init__(
        self, cache: Any, key: Any, value: int = 1, expire: float | None = None, tag: Any = None
    ) -> None:
        if type(value) is float and value.is_integer():
            value = int(value)  # a whole float, as python-diskcache takes it
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"semaphore value must be an int >= 0, not {value!r}")
        value = int(value)
        self._cache = cache
        self._key = key
        self._value = value
        self._expire = _lease(expire)
        self._tag = tag
        self._tokens: list[str] = []  # leases this object holds, newest last

    def _live_leases(self, stored: Any) -> dict[str, float | None]:
        now = time.time()
        if type(stored) is int:
            # python-diskcache's state, the count of free slots: the others are held by its
            # processes, which release them in its own format only (see migrating.rst).
            return {f"python-diskcache:{n}": None for n in range(self._value - stored)}
        if not isinstance(stored, dict):
            raise TypeError(
                f"semaphore {self._key!r}: the cache holds a {type(stored).__name__} there,"
                " not a semaphore's leases"
            )
        return {token: until for token, until in stored.items() if until is None or until > now}

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Take a slot; True when taken (waits with backoff unless `blocking` is False)."""
        token = _token()

        def attempt() -> bool:
            if len(self._live_leases(self._cache.get(self._key, default={}, retry=True))) >= self._value:
                return False  # full: do not take the write lock to find out
            return bool(_change(self._cache, self._key, take, {}, self._expire, self._tag))

        def take(current: dict[str, float | None]) -> tuple[Any, bool]:
            leases = self._live_leases(current)
            if len(leases) >= self._value:
                return KEEP, False
            leases[token] = None if self._expire is None else time.time() + self._expire
            # The item outlives its newest lease; expired leases are dropped on each write.
            return leases, True

        if not _poll(attempt, blocking, timeout):
            return False
        self._tokens.append(token)
        return True

    def release(self) -> None:
        """Give back the newest slot this object took; ValueError if it holds none."""
        try:
            token = self._tokens.pop()
        except IndexError:
            raise ValueError("semaphore released too many times") from None

        def give_back(current: dict[str, float | None]) -> tuple[Any, bool]:
            leases = self._live_leases(current)
            held = token in leases
            leases.pop(token, None)
            return (leases if leases else DELETE), held

        if not _change(self._cache, self._key, give_back, {}, self._expire, self._tag):
            raise ValueError(f"semaphore {self._key!r}: the lease expired before release")

    def locked(self) -> bool:
        """True when every slot is taken (an acquire would wait)."""
        leases = self._live_leases(self._cache.get(self._key, default={}, retry=True))
        return len(leases) >= self._value

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


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
    expire = _lease(expire)  # (a bucket that expires as it is stored would never limit)
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

            return float(_change(cache, key, take, (now, calls), expire, tag))

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            delay = take_token()
            while delay:
                sleep_func(delay)
                delay = take_token()
            return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorator


def barrier(
    cache: Any,
    lock_factory: Callable[..., Any],
    name: str | None = None,
    expire: float | None = None,
    tag: Any = None,
) -> Callable[[F], F]:
    """Decorator: calls to the function hold a lock (``Lock``, ``RLock``, ``BoundedSemaphore``
    or any factory ``lock_factory(cache, key, expire=, tag=)``), so they run one at a time
    (or `value` at a time) across threads and processes."""
    _lease(expire)

    def decorator(func: F) -> F:
        key = full_name(func) if name is None else name
        lock = lock_factory(cache, key, expire=expire, tag=tag)

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with lock:
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorator
