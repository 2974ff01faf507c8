"""Memoizing decorators backed by a cache: `memoize` and `memoize_stampede`.

Each part is written once and shared by every decorator, every cache type and both kinds of
function:

- Keys: `make_key` (see _recipes/memokeys.py).
- Procedures. A generator per strategy says *what* to do — look up, compute, store, sleep, start
  a background refresh — by yielding requests, and receives the results.
- Drivers. `_drive` carries the requests out for a plain function (direct calls, ``time.sleep``,
  a thread); `_adrive` for an ``async def`` function (awaits the function, runs cache I/O in the
  thread pool of `_async`, ``asyncio.sleep``, a task), so the event loop never blocks.

The cache is used only through its public methods (``get``, ``set``, ``add``, and for the
single-flight lock ``__contains__``, ``transact``, ``delete``), so Cache, FanoutCache, Index and
the Django backend can all hand themselves (or their store) to these functions.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import math
import numbers
import random
import threading
import time
from collections.abc import Callable, Generator, Iterable
from typing import Any, Concatenate, NamedTuple, ParamSpec, Protocol, TypeVar, overload

from .._arguments import check_expire, check_tag, check_tags
from .._store.workers import start_sync
from .._disk.disk import ENOVAL
from .._errors import FloatOverflowError, RemoteOutcomeUnknownError, Timeout
from .memokeys import check_ignore, encode_value, make_key, quote_text, with_positions
from .locks import Lock, backoff_delays, full_name, lease_seconds

__all__ = [
    "MemoizeDecorator", "MemoizeForms", "Memoized", "memoize", "memoize_stampede", "typed_memoize",
]

P = ParamSpec("P")
Q = ParamSpec("Q")
R = TypeVar("R")
R2 = TypeVar("R2")
R_co = TypeVar("R_co", covariant=True)
S = TypeVar("S")


class Memoized(Protocol[P, R_co]):
    """A memoized function: called like the original, plus ``__cache_key__`` and ``__wrapped__``."""

    def __call__(self, /, *args: P.args, **kwargs: P.kwargs) -> R_co: ...

    def __cache_key__(self, /, *args: P.args, **kwargs: P.kwargs) -> str:
        """The cache key the call with these arguments reads and writes."""
        ...

    @property
    def __wrapped__(self) -> Callable[P, R_co]: ...

    # Looked up on an instance, a memoized method binds like a function (``self`` drops out).
    @overload
    def __get__(self, instance: None, owner: Any = None, /) -> Memoized[P, R_co]: ...

    @overload
    def __get__(
        self: Memoized[Concatenate[S, Q], R2], instance: S, owner: Any = None, /
    ) -> Callable[Q, R2]: ...


class MemoizeDecorator(Protocol):
    """What `memoize` returns: a decorator keeping the decorated function's signature."""

    def __call__(self, func: Callable[P, R], /) -> Memoized[P, R]: ...


class MemoizeForms(Protocol):
    """A cache's ``memoize``: ``@cache.memoize(...)`` gives a decorator; bare, ``@cache.memoize``
    memoizes the function with the default options."""

    @overload
    def __call__(self, name: Callable[P, R], /) -> Memoized[P, R]: ...
    @overload
    def __call__(
        self, name: str | None = None, typed: bool = False, expire: float | None = None,
        tag: Any = None, ignore: Iterable[int | str] = (), *,
        key: Callable[..., Any] | None = None, should_cache: Callable[[Any], bool] | None = None,
        tags: Iterable[Any] | None = None,
    ) -> MemoizeDecorator: ...


def typed_memoize(method: Callable[..., Any]) -> MemoizeForms:
    """`method` (a cache's ``memoize``), unchanged, typed as `MemoizeForms`."""
    return method


# --- what every memoized function shares -------------------------------------------------------


class _Memo:
    """One memoized function's cache, key building and storage policy."""

    def __init__(
        self,
        cache: Any,
        func: Callable[..., Any],
        name: str | None,
        typed: bool,
        ignore: Iterable[int | str],
        key: Callable[..., Any] | None,
        expire: float | None,
        tag: Any,
        should_cache: Callable[[Any], bool] | None,
        tags: tuple[Any, ...] = (),
    ) -> None:
        self.cache = cache
        self.base = full_name(func) if name is None else name
        self.typed = typed
        self.ignore = with_positions(func, check_ignore(ignore))
        self.key = key
        self.expire = expire
        self.tag = tag
        self.tags = tags  # extra tags (checked): passed to set only when there are some
        self.should_cache = should_cache

    def cache_key(self, /, *args: Any, **kwargs: Any) -> str:
        """The cache key for a call with these arguments."""
        if self.key is not None:
            # Namespaced by the function's name, so two functions sharing a key function
            # never read each other's results.
            return "[" + quote_text(self.base) + "," + encode_value(self.key(*args, **kwargs)) + "]"
        return make_key(self.base, args, kwargs, self.typed, self.ignore)

    def worth_storing(self, result: Any) -> bool:
        """False for ``expire=0`` (look up, never store) or when `should_cache` says no."""
        if self.expire is not None and self.expire <= 0:
            return False
        return self.should_cache is None or bool(self.should_cache(result))

    def lookup(self, key: str) -> functools.partial[Any]:
        return functools.partial(self.cache.get, key, default=ENOVAL, retry=True)

    def store(self, key: str, value: Any) -> None:
        if self.tags:
            self.cache.set(key, value, expire=self.expire, tag=self.tag, retry=True, tags=self.tags)
        else:
            self.cache.set(key, value, expire=self.expire, tag=self.tag, retry=True)


def _check_options(name: Any, typed: bool, ignore: Any, key: Any, should_cache: Any) -> None:
    check_ignore(ignore)
    if callable(name):
        # `memoize_stampede(cache, expire, function)`: no bare form (the cache comes first).
        raise TypeError("name cannot be callable")
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be a str or None, not {type(name).__name__}")
    if key is not None:
        if not callable(key):
            raise TypeError("key must be a callable taking the function's arguments")
        if typed or ignore:
            raise ValueError("key= builds the whole key: do not combine it with typed or ignore")
    if should_cache is not None and not callable(should_cache):
        raise TypeError("should_cache must be a callable taking the result")


def _check_storage(expire: Any, tag: Any, tags: Any = None) -> tuple[Any, ...]:
    """`expire`, `tag` and `tags` as ``set`` takes them: refused when decorating, not after a
    first call. Returns the tags to store besides `tag` (a tuple, checked)."""
    check_expire(expire)
    check_tag(tag)
    if tags is None:
        return ()
    first, extras = check_tags(tag, tags)
    return extras if tag is not None else (first, *extras)


# --- procedures --------------------------------------------------------------------------------
#
# A procedure yields requests and receives their results: a callable is cache I/O (its return
# value comes back), `_COMPUTE` calls the wrapped function (its result comes back; an exception it
# raises is thrown in), `_Sleep` waits, `_Detach` runs another procedure in the background.

Steps = Generator[Any, Any, Any]


class _Compute:
    def __repr__(self) -> str:
        return "COMPUTE"


_COMPUTE = _Compute()


class _Sleep(NamedTuple):
    seconds: float


class _Detach(NamedTuple):
    steps: Steps


_LOCK_SUFFIX = "#lock"  # keys are JSON arrays, so a suffixed key is never another call's key
_REFRESH_SUFFIX = "#refresh"


def _compute_and_store(memo: _Memo, key: str, timed: bool) -> Steps:
    """Call the function and store its result (with its compute time when `timed`)."""
    start = time.perf_counter()
    result = yield _COMPUTE
    if memo.worth_storing(result):
        value = (result, time.perf_counter() - start) if timed else result
        yield functools.partial(memo.store, key, value)
    return result


def _refresh(memo: _Memo, key: str, marker: str) -> Steps:
    """A background refresh: compute and store, then remove the key's refresh marker."""
    try:
        result = yield from _compute_and_store(memo, key, timed=True)
    except BaseException:  # CancelledError too: an event loop that ends cancels the refresh
        yield functools.partial(memo.cache.delete, marker, retry=True)
        raise
    yield functools.partial(memo.cache.delete, marker, retry=True)
    return result


def _memoize_steps(memo: _Memo, key: str) -> Steps:
    """Plain memoization: a hit returns the stored result, a miss computes and stores it."""
    found = yield memo.lookup(key)
    if found is not ENOVAL:
        return found
    return (yield from _compute_and_store(memo, key, timed=False))


def _recompute_early(compute_time: float, beta: float, expire_time: float) -> bool:
    """XFetch (Vattani et al., VLDB 2015): True with a probability rising towards expiry.

    ``-log(U)`` is exponentially distributed, so a result that takes `compute_time` to compute
    is refreshed about ``beta * compute_time`` before it expires, by one caller in most cases.
    """
    return -compute_time * beta * math.log(1.0 - random.random()) >= expire_time - time.time()


def _single_flight(
    memo: _Memo, key: str, timed: bool, lock_expire: float, wait_timeout: float | None
) -> Steps:
    """On a miss: one caller (holding a Lock on the key) computes; the others wait, then read."""
    lock = Lock(memo.cache, key + _LOCK_SUFFIX, expire=lock_expire)
    lookup = memo.lookup(key)
    deadline = None if wait_timeout is None else time.monotonic() + wait_timeout
    delays = backoff_delays()
    while True:
        if (yield functools.partial(lock.acquire, blocking=False)):
            try:
                found = yield lookup  # the previous holder may have stored it just now
                if found is not ENOVAL:
                    return found[0] if timed else found
                return (yield from _compute_and_store(memo, key, timed))
            finally:
                yield functools.partial(_release_quietly, lock)
        delay = next(delays)
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Timeout(f"waited {wait_timeout} s for another caller to compute {key}")
            delay = min(delay, remaining)
        yield _Sleep(delay)
        found = yield lookup
        if found is not ENOVAL:
            return found[0] if timed else found


def _release_quietly(lock: Lock) -> None:
    try:
        lock.release()
    except RuntimeError:
        pass  # it expired while computing: the result is still good, and stored


def _stampede_steps(
    memo: _Memo,
    key: str,
    beta: float,
    single_flight: bool,
    lock_expire: float,
    wait_timeout: float | None,
) -> Steps:
    """XFetch early recomputation on hits; on a miss, compute (once, with `single_flight`)."""
    pair, expire_time = yield functools.partial(
        memo.cache.get, key, default=ENOVAL, expire_time=True, retry=True
    )
    if pair is not ENOVAL:
        result, compute_time = pair
        if expire_time is not None and _recompute_early(compute_time, beta, expire_time):
            # One refresher per key: the marker stays until the refresh ends (at most
            # `lock_expire`, should the refresher die), however long the computation takes.
            marker = key + _REFRESH_SUFFIX
            try:
                added = yield functools.partial(
                    memo.cache.add, marker, None, expire=lock_expire, retry=True
                )
            except RemoteOutcomeUnknownError:  # no refresh now: the marker expires by itself
                added = False
            if added:
                try:
                    yield _Detach(_refresh(memo, key, marker))
                except BaseException:  # (cancelled as its marker was added: no refresh runs)
                    yield functools.partial(memo.cache.delete, marker, retry=True)
                    raise
        return result
    if single_flight:
        return (yield from _single_flight(memo, key, True, lock_expire, wait_timeout))
    return (yield from _compute_and_store(memo, key, timed=True))


# --- drivers -----------------------------------------------------------------------------------


def _drive(steps: Steps, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run a procedure for a plain function, in the calling thread."""
    reply: Any = None
    error: BaseException | None = None
    thrown: BaseException | None = None  # the latest exception thrown in
    while True:
        thrown = error if error is not None else thrown
        try:
            request = steps.send(reply) if error is None else steps.throw(error)
        except StopIteration as stop:
            return stop.value
        except RuntimeError as exc:
            if exc.__cause__ is not None and exc.__cause__ is thrown:
                raise thrown from None  # the function's StopIteration (PEP 479 renamed it)
            raise
        reply = error = None
        try:
            if request is _COMPUTE:
                reply = func(*args, **kwargs)
            elif type(request) is _Sleep:
                time.sleep(request.seconds)
            elif type(request) is _Detach:
                worker = threading.Thread(
                    target=_drive, args=(request.steps, func, args, kwargs), daemon=True,
                    name=f"diskcache_core-refresh-{getattr(func, '__name__', 'function')}",
                )
                worker.start()
            else:
                reply = request()
        except BaseException as exc:  # noqa: BLE001
            error = exc  # thrown into the procedure: it cleans up (releases a lock) and re-raises


_background_tasks: set[asyncio.Task[Any]] = set()  # strong references until they finish


async def _adrive(
    steps: Steps, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """Run a procedure for an ``async def`` function: cache I/O never runs on the event loop."""
    reply: Any = None
    error: BaseException | None = None
    while True:
        try:
            request = steps.send(reply) if error is None else steps.throw(error)
        except StopIteration as stop:
            return stop.value
        reply = error = handed_over = None
        try:
            if request is _COMPUTE:
                reply = await func(*args, **kwargs)
            elif type(request) is _Sleep:
                await asyncio.sleep(request.seconds)
            elif type(request) is _Detach:
                task = asyncio.get_running_loop().create_task(_adrive(request.steps, func, args, kwargs))
                _background_tasks.add(task)
                task.add_done_callback(_background_tasks.discard)
            else:
                pending = start_sync(request)
                try:
                    reply = await asyncio.shield(pending)
                except asyncio.CancelledError as cancel:
                    # The call runs on in its thread (it may take the lock, add the marker):
                    # once it ends, the procedure gets its outcome, then the cancel, and cleans up.
                    pending.add_done_callback(functools.partial(_settle_cancelled, steps, cancel))
                    handed_over = cancel
        except BaseException as exc:  # noqa: BLE001
            error = exc  # CancelledError too: a held lock is still released
        if handed_over is not None:
            raise handed_over


def _settle_cancelled(steps: Steps, cancel: BaseException, pending: asyncio.Future[Any]) -> None:
    """The pool call a cancelled caller awaited has ended: run the procedure on to its end."""
    reply, error = None, (cancel if pending.cancelled() else pending.exception())
    if error is None:
        reply = pending.result()
    threading.Thread(target=_finish_cancelled, args=(steps, reply, error, cancel), daemon=True,
                     name="diskcache_core-memoize-cancelled").start()


def _finish_cancelled(steps: Steps, reply: Any, error: BaseException | None, cancel: BaseException) -> None:
    """In a thread of its own: the step's outcome goes in, then the cancellation, and the clean-up
    steps the procedure yields for it (a lock's release, a marker's removal) run."""
    try:
        steps.send(reply) if error is None else steps.throw(error)
        request = steps.throw(cancel)
        while callable(request):
            try:
                reply, error = request(), None
            except BaseException as exc:  # noqa: BLE001 - thrown in, as _drive does
                reply, error = None, exc
            request = steps.send(reply) if error is None else steps.throw(error)
        steps.close()
    except BaseException:  # noqa: BLE001 - the cancellation, re-raised: its caller has gone
        pass


def _wrap(func: Callable[..., Any], memo: _Memo, procedure: Callable[[_Memo, str], Steps]) -> Any:
    """The memoized function: same name, docstring, signature and kind (sync or async)."""
    cache_key = memo.cache_key
    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            return await _adrive(procedure(memo, cache_key(*args, **kwargs)), func, args, kwargs)

        wrapper: Any = async_wrapper
    elif procedure is _memoize_steps:  # the commonest: _memoize_steps written out, so that a
        get = memo.cache.get  # recursive function nests two frames a call (not three), as it
        # does with python-diskcache: the same recursion limit lets it go as deep.

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            key = cache_key(*args, **kwargs)
            found = get(key, default=ENOVAL, retry=True)
            if found is not ENOVAL:
                return found
            result = func(*args, **kwargs)
            if memo.worth_storing(result):
                memo.store(key, result)
            return result

    else:

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return _drive(procedure(memo, cache_key(*args, **kwargs)), func, args, kwargs)

    wrapper.__cache_key__ = cache_key
    return wrapper


# --- public decorators -------------------------------------------------------------------------


def memoize(
    cache: Any,
    name: str | Callable[..., Any] | None = None,
    typed: bool = False,
    expire: float | None = None,
    tag: Any = None,
    ignore: Iterable[int | str] = (),
    *,
    key: Callable[..., Any] | None = None,
    should_cache: Callable[[Any], bool] | None = None,
    tags: Iterable[Any] | None = None,
) -> Any:
    """Decorator: remember a function's results in `cache`, keyed by its arguments.

    Works on functions, methods (``self`` is part of the key, as in python-diskcache; put 0 in
    `ignore` to leave it out) and ``async def`` functions (the awaited result is stored; cache
    I/O runs off the event loop). The result keeps the function's name, docstring and
    signature, and has ``__cache_key__(*args, **kwargs)`` and ``__wrapped__``.

    :param name: key prefix (default: ``module.qualname`` of the function)
    :param typed: store arguments of different types separately (``f(3)`` vs ``f(3.0)``)
    :param expire: seconds results live (None: no expiry; 0: look up but never store)
    :param tag: tag of the stored results, for ``cache.evict(tag)``
    :param tags: more tags of the stored results (as ``set``'s `tags`), for ``evict_tags``
    :param ignore: positions and keyword names left out of the key
    :param key: ``key(*args, **kwargs)`` returns the key part for a call, replacing the
        argument encoding (not combinable with `typed`/`ignore`)
    :param should_cache: ``should_cache(result)`` returns False for results not to store
        (e.g. ``lambda result: result is not None``)

    Without parentheses (``@cache.memoize``) the function arrives as `name`: it is memoized
    with the default options (python-diskcache raises ``TypeError('name cannot be callable')``).
    """
    if callable(name):
        return memoize(
            cache, None, typed, expire, tag, ignore, key=key, should_cache=should_cache, tags=tags
        )(name)
    _check_options(name, typed, ignore, key, should_cache)
    extra_tags = _check_storage(expire, tag, tags)

    def decorator(func: Callable[P, R]) -> Memoized[P, R]:
        memo = _Memo(cache, func, name, typed, ignore, key, expire, tag, should_cache, extra_tags)
        return _wrap(func, memo, _memoize_steps)  # type: ignore[no-any-return]

    return decorator


def _check_number(option: str, number: Any) -> float:
    """`number` as a float >= 0, when decorating (used later, too large an int overflows)."""
    if isinstance(number, bool) or not isinstance(number, numbers.Real):
        raise TypeError(f"{option} must be a number, not {type(number).__name__}: {number!r}")
    try:
        value = float(number)
    except OverflowError:
        raise FloatOverflowError(f"{option} is too large for a float") from None
    if not value >= 0:  # NaN too
        raise ValueError(f"{option} must be >= 0, not {number!r}")
    return value


def memoize_stampede(
    cache: Any,
    expire: float | None,
    name: str | None = None,
    typed: bool = False,
    tag: Any = None,
    beta: float = 1,
    ignore: Iterable[int | str] = (),
    *,
    key: Callable[..., Any] | None = None,
    should_cache: Callable[[Any], bool] | None = None,
    single_flight: bool = False,
    lock_expire: float = 60.0,
    wait_timeout: float | None = None,
    tags: Iterable[Any] | None = None,
) -> MemoizeDecorator:
    """Decorator like `memoize`, protected against cache stampedes (many callers recomputing
    one expired or missing result at once).

    Early recomputation (python-diskcache's recipe): results are stored as ``(result,
    compute_time)``; as expiry nears, a hit decides at random — more likely the closer expiry and
    the slower the function, scaled by `beta` — to recompute the result in the background
    (a thread, or a task for ``async def``) while returning the current one. One refresh runs
    per key at a time: a marker item (the key plus ``#refresh``) is held until it ends, or for
    at most `lock_expire` seconds should its process die.

    Single flight (``single_flight=True``): on a miss, exactly one caller among all threads and
    processes computes; it holds a `Lock` on the key, which expires after `lock_expire`
    seconds so that a caller that dies while computing blocks the others no longer than that
    (keep it above the longest computation, or a second caller starts computing). The others
    poll with backoff (1 ms doubling to 50 ms) and return the stored result as soon as it
    appears, or take the lock if it is freed without one. With `wait_timeout` (seconds), a
    waiter gives up with `Timeout`; None waits for as long as some caller holds the lock.

    Other parameters as for `memoize`; `expire` is required (seconds, None for no expiry).
    """
    _check_options(name, typed, ignore, key, should_cache)
    extra_tags = _check_storage(expire, tag, tags)
    beta = _check_number("beta", beta)
    lock_expire = lease_seconds("lock_expire", lock_expire)  # the Lock's check, when decorating
    wait_timeout = None if wait_timeout is None else _check_number("wait_timeout", wait_timeout)
    procedure = functools.partial(
        _stampede_steps, beta=beta, single_flight=single_flight, lock_expire=lock_expire,
        wait_timeout=wait_timeout,
    )

    def decorator(func: Callable[P, R]) -> Memoized[P, R]:
        memo = _Memo(cache, func, name, typed, ignore, key, expire, tag, should_cache, extra_tags)
        return _wrap(func, memo, procedure)  # type: ignore[no-any-return]

    return decorator
