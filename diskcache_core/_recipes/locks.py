"""Cross-process synchronization built on a cache: Lock, RLock, BoundedSemaphore and barrier
(python-diskcache's recipes, same signatures; Averager and throttle are in _recipes/ratelimit.py), and
the atomic change of one item they all use.

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
  expired cannot release the next holder's lock;
- on a cache with a remote, a hold is never left held by nobody (_recipes/leases.py): each carries a
  token and an expiry (a lease renewed while held, without `expire`); a write whose outcome is
  unknown is settled by reading the token back once Redis answers; a release Redis does not
  answer is completed in the background.

Keep lock keys out of eviction's way: use ``eviction_policy='none'`` or a generous size limit.
"""

from __future__ import annotations

import functools
import os
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from . import leases as _leases
from .._arguments import check_seconds
from .._disk.disk import DELETE, KEEP
from .._errors import RemoteOutcomeUnknownError, RemoteUnavailableError
from .leases import keeper, remote_shard, resolve
from .._reprs import ItemRepr

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "BoundedSemaphore",
    "Lock",
    "RLock",
    "backoff_delays",
    "barrier",
    "change",
    "full_name",
    "check_expire",
    "lease_seconds",
]

F = TypeVar("F", bound=Callable[..., Any])

FIRST_DELAY = 0.001  # seconds before the first retry of a contended acquire
MAX_DELAY = 0.05  # backoff cap: a released lock is noticed within this (plus jitter)


def change(
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


def check_expire(expire: Any) -> float | None:
    """A recipe's `expire`: None (held or kept until released or replaced) or `lease_seconds`."""
    return None if expire is None else lease_seconds("expire", expire)


def _poll(attempt: Callable[[float | None], bool], blocking: bool, timeout: float | None) -> bool:
    """Call `attempt` until it returns True, sleeping with backoff; False on timeout. `attempt`
    is given the deadline (``time.monotonic()``; None: none) for settling an unknown outcome."""
    if not blocking and timeout is not None:
        raise ValueError("cannot specify a timeout for a non-blocking acquire")
    if timeout is not None:
        timeout = check_seconds("timeout", timeout)  # (a float from here on)
        if timeout < 0:
            raise ValueError(f"timeout must be >= 0 or None, not {timeout!r}")
    now = time.monotonic()
    deadline = now if not blocking else None if timeout is None else now + timeout
    if attempt(deadline):
        return True
    if not blocking:
        return False
    for delay in backoff_delays():
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            delay = min(delay, remaining)
        time.sleep(delay)
        if attempt(deadline):
            return True
    raise AssertionError("unreachable: backoff_delays never ends")  # pragma: no cover


def _hold_seconds(shard: Any, expire: float | None) -> float | None:
    """How long a hold lasts: `expire`; on a remote (`shard`) always `_remote_hold`."""
    return expire if shard is None else _remote_hold(expire)


def _remote_hold(expire: float | None) -> float:
    """How long a hold on a remote lasts: `expire`, else the lease its holder renews."""
    return _leases.REMOTE_LEASE if expire is None else expire


def _taken_back(tokens: set[str], found: list[str]) -> Callable[[Any], tuple[Any, bool]]:
    """A change function deleting a Lock's item if it holds one of `tokens` (noted in `found`)."""

    def released(current: Any) -> tuple[Any, bool]:
        if isinstance(current, str) and current in tokens:
            found.append(current)
            return DELETE, True
        return KEEP, False

    return released


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


class Lock(ItemRepr):
    """Lock shared by the threads and processes using the cache; one item holds it.

    Acquiring adds the item (an atomic insert-if-missing) holding a token for this acquisition;
    releasing deletes it only if it still holds that token. With `expire`, a holder that dies
    releases the lock `expire` seconds after acquiring it; choose it above the longest hold.
    Use it as a context manager (``with Lock(cache, 'report-123', expire=60): ...``) or call
    ``acquire``/``release``. One Lock object may be shared by threads: each thread's acquisition
    keeps its own token, so a thread whose hold expired cannot release the next holder's lock; a
    thread that acquired nothing through the object releases the hold it has (as
    ``threading.Lock`` lets any thread release). On a cache with a remote the item always
    expires: after `expire`, or without it at the end of a lease this process renews while it
    holds the lock (:doc:`remote`, guarantee 5), so a host that dies holding it frees it.
    """

    def __init__(self, cache: Any, key: Any, expire: float | None = None, tag: Any = None) -> None:
        self._cache = cache
        self._key = key
        self._expire = check_expire(expire)
        self._tag = tag
        self._tokens: dict[int, str] = {}  # thread ident -> the token its acquisition holds
        self._renewals: dict[str, Any] = {}  # token -> its renewal (on a remote, no `expire`)

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Take the lock; True when taken.

        Waits (polling with backoff) unless `blocking` is False; gives up after `timeout`
        seconds (None: no limit). On a remote, an add whose outcome is unknown is settled by
        reading the lock once Redis answers, within the same time.
        """
        shard = remote_shard(self._cache, self._key)
        hold = _hold_seconds(shard, self._expire)
        won: list[str] = []

        def attempt(deadline: float | None) -> bool:
            # Read first: a waiter takes the write lock only when the lock looks free.
            if self._key in self._cache:
                return False
            token = _token()
            try:
                taken = bool(
                    self._cache.add(self._key, token, expire=hold, tag=self._tag, retry=True)
                )
            except RemoteOutcomeUnknownError:
                undo = functools.partial(
                    change, self._cache, self._key, _taken_back({token}, []), None, None, None
                )
                taken = resolve(
                    shard, self._key, None, lambda held: held == token, deadline, undo,
                    _remote_hold(self._expire), True,
                )
            if taken:
                won.append(token)
            return taken

        if not _poll(attempt, blocking, timeout):
            return False
        token = won[-1]
        self._tokens[threading.get_ident()] = token
        if shard is not None and self._expire is None:
            lease = _remote_hold(None)
            renew = functools.partial(self._renew, token, lease)
            self._renewals[token] = keeper().keep(renew, lease)
        return True

    def _renew(self, token: str, lease: float) -> bool:
        """Store the lock's item again with a fresh lease while it holds `token`."""

        def renewed(current: Any) -> tuple[Any, bool]:
            return (current, True) if current == token else (KEEP, False)

        return bool(change(self._cache, self._key, renewed, None, lease, KEEP))

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
        found: list[str] = []
        for token in tokens:  # (the lease of a token not released ends: it is not held)
            renewal = self._renewals.pop(token, None)
            if renewal is not None:
                keeper().drop(renewal)
        try:
            released = change(self._cache, self._key, _taken_back(tokens, found), None, None, None)
        except RemoteUnavailableError:
            # Redis did not answer (or may have released it): done once it answers, and by
            # the end of the lease at the latest; the caller holds nothing from now on.
            undo = _taken_back(tokens, [])
            keeper().settle(
                functools.partial(change, self._cache, self._key, undo, None, None, None),
                _remote_hold(self._expire),
            )
            found.extend(tokens)
            released = True
        if not released:
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


class RLock(ItemRepr):
    """Re-entrant lock: its owner (one thread of one process) may acquire it again.

    The item holds ``(owner, count)``; each acquire by the owner adds one, each release takes
    one away and the last deletes the item. Only the owner may release (RuntimeError
    otherwise). With `expire`, the lock is freed `expire` seconds after the owner's last
    acquire or release, so a dead owner does not hold it forever; on a cache with a remote,
    without `expire`, at the end of a lease the owner's process renews (as `Lock`'s).
    """

    def __init__(self, cache: Any, key: Any, expire: float | None = None, tag: Any = None) -> None:
        self._cache = cache
        self._key = key
        self._expire = check_expire(expire)
        self._tag = tag
        self._renewals: dict[str, Any] = {}  # owner -> its renewal (on a remote, no `expire`)

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Take the lock, or count one more hold if this thread owns it; True when taken.
        (On a remote, an outcome unknown is settled as `Lock.acquire` settles it.)"""
        me = _owner()
        shard = remote_shard(self._cache, self._key)
        hold = _hold_seconds(shard, self._expire)
        wrote: list[tuple[str, int]] = []

        def attempt(deadline: float | None) -> bool:
            owner, count = self._cache.get(self._key, default=(None, 0), retry=True)
            if count and owner != me:
                return False  # held by another: do not take the write lock to find out
            try:
                return bool(change(self._cache, self._key, take, (None, 0), hold, self._tag))
            except RemoteOutcomeUnknownError:
                new = wrote[-1]  # the owner's own count: no other writer stores this value
                lease = _remote_hold(self._expire)
                undo = self._step_back(me, new, lease)
                return resolve(
                    shard, self._key, (None, 0), lambda held: held == new, deadline, undo, lease,
                    False,
                )

        def take(current: tuple[Any, int]) -> tuple[Any, bool]:
            owner, count = current
            if count and owner != me:
                return KEEP, False
            wrote.append((me, count + 1))
            return (me, count + 1), True

        if not _poll(attempt, blocking, timeout):
            return False
        renewal = self._renewals.get(me)
        if shard is not None and self._expire is None and (renewal is None or renewal.ended):
            lease = _remote_hold(None)
            self._renewals[me] = keeper().keep(functools.partial(self._renew, me, lease), lease)
        return True

    def _renew(self, me: str, lease: float) -> bool:
        """Store the lock's item again with a fresh lease while `me` owns it."""

        def renewed(current: tuple[Any, int]) -> tuple[Any, bool]:
            owner, count = current
            return (current, True) if owner == me and count > 0 else (KEEP, False)

        return bool(change(self._cache, self._key, renewed, (None, 0), lease, KEEP))

    def _step_back(
        self, me: str, before: tuple[str, int] | None, hold: float
    ) -> Callable[[], Any]:
        """A call taking one hold of `me` back if the item is still `before` (None: the value
        `me` holds when it is first read), for the keeper: it may run more than once."""
        state = [before]

        def step_back(current: tuple[Any, int]) -> tuple[Any, None]:
            owner, count = current
            if state[0] is None and owner == me and count > 0:
                state[0] = (owner, count)
            if state[0] is None or tuple(current) != state[0]:
                return KEEP, None
            return (DELETE if count == 1 else (me, count - 1)), None

        return functools.partial(
            change, self._cache, self._key, step_back, (None, 0), hold, self._tag
        )

    def release(self) -> None:
        """Give up one hold; RuntimeError when the calling thread does not own the lock. (On a
        remote Redis does not answer: completed once it does, as `Lock.release`.)"""
        me = _owner()
        shard = remote_shard(self._cache, self._key)
        hold = _hold_seconds(shard, self._expire)
        seen: list[tuple[str, int]] = []

        def give_back(current: tuple[Any, int]) -> tuple[Any, None]:
            owner, count = current
            if owner != me or count <= 0:
                raise RuntimeError("cannot release un-acquired lock")
            seen.append((owner, count))
            return (DELETE if count == 1 else (me, count - 1)), None

        try:
            change(self._cache, self._key, give_back, (None, 0), hold, self._tag)
        except RemoteUnavailableError:  # (on a remote) completed once Redis answers, as Lock's
            lease = _remote_hold(self._expire)
            keeper().settle(self._step_back(me, seen[-1] if seen else None, lease), lease)
            return
        renewal = self._renewals.get(me)
        if renewal is not None and seen and seen[-1][1] == 1:
            keeper().drop(renewal)

    def locked(self) -> bool:
        """True when some thread or process holds the lock."""
        _, count = self._cache.get(self._key, default=(None, 0), retry=True)
        return bool(count > 0)

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


class BoundedSemaphore(ItemRepr):
    """Semaphore allowing `value` concurrent holders across threads and processes.

    The item holds one lease per holder, ``{token: expire_time}``. A lease expires `expire`
    seconds after it was taken, so a holder that dies frees its own slot, whatever the others
    do (a single counter would leak that slot while the others keep the item fresh).
    ``release`` returns a lease this object took; releasing more than were taken is a ValueError.
    On a cache with a remote, a lease without `expire` lasts while its process renews it (as
    `Lock`'s).
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
        self._expire = check_expire(expire)
        self._tag = tag
        self._tokens: list[str] = []  # leases this object holds, newest last
        self._renewals: dict[str, Any] = {}  # token -> its renewal (on a remote, no `expire`)

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
        """Take a slot; True when taken (waits with backoff unless `blocking` is False). (On a
        remote, an outcome unknown is settled as `Lock.acquire` settles it.)"""
        shard = remote_shard(self._cache, self._key)
        hold = _hold_seconds(shard, self._expire)
        won: list[str] = []

        def attempt(deadline: float | None) -> bool:
            if len(self._live_leases(self._cache.get(self._key, default={}, retry=True))) >= self._value:
                return False  # full: do not take the write lock to find out
            token = _token()

            def take(current: dict[str, float | None]) -> tuple[Any, bool]:
                leases = self._live_leases(current)
                if len(leases) >= self._value:
                    return KEEP, False
                leases[token] = None if hold is None else time.time() + hold
                # The item outlives its newest lease; expired leases are dropped on each write.
                return leases, True

            try:
                taken = bool(change(self._cache, self._key, take, {}, self._expire, self._tag))
            except RemoteOutcomeUnknownError:
                taken = resolve(
                    shard, self._key, {}, lambda held: isinstance(held, dict) and token in held,
                    deadline, self._give_back(token), _remote_hold(self._expire), True,
                )
            if taken:
                won.append(token)
            return taken

        if not _poll(attempt, blocking, timeout):
            return False
        self._tokens.append(won[-1])
        if shard is not None and self._expire is None:
            lease = _remote_hold(None)
            renew = functools.partial(self._renew, won[-1], lease)
            self._renewals[won[-1]] = keeper().keep(renew, lease)
        return True

    def _renew(self, token: str, lease: float) -> bool:
        """Push `token`'s lease `lease` seconds ahead while the item holds it."""

        def renewed(current: dict[str, float | None]) -> tuple[Any, bool]:
            leases = self._live_leases(current)
            if token not in leases:
                return KEEP, False
            leases[token] = time.time() + lease
            return leases, True

        return bool(change(self._cache, self._key, renewed, {}, self._expire, KEEP))

    def _give_back(self, token: str) -> Callable[[], Any]:
        """A call removing `token`'s lease if the item holds it (for the keeper)."""

        def without(current: dict[str, float | None]) -> tuple[Any, None]:
            leases = self._live_leases(current)
            if token not in leases:
                return KEEP, None
            del leases[token]
            return (leases if leases else DELETE), None

        return functools.partial(
            change, self._cache, self._key, without, {}, self._expire, self._tag
        )

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

        renewal = self._renewals.pop(token, None)
        if renewal is not None:
            keeper().drop(renewal)
        try:
            held = change(self._cache, self._key, give_back, {}, self._expire, self._tag)
        except RemoteUnavailableError:  # (on a remote) completed once Redis answers, as Lock's
            keeper().settle(self._give_back(token), _remote_hold(self._expire))
            return
        if not held:
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
    check_expire(expire)

    def decorator(func: F) -> F:
        key = full_name(func) if name is None else name
        lock = lock_factory(cache, key, expire=expire, tag=tag)

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with lock:
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorator
