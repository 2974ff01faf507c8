"""memoize and memoize_stampede: keys, options, methods, async functions, stampede protection."""

from __future__ import annotations

import asyncio
import inspect
import json
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

import diskcache_core
from diskcache_core import Timeout, memoize_stampede

import memo_helpers

HELPERS = os.path.abspath(memo_helpers.__file__)


def counted(function):
    """Wrap `function` so that its executions are counted in ``wrapper.calls``."""

    def wrapper(*args, **kwargs):
        wrapper.calls += 1
        return function(*args, **kwargs)

    wrapper.calls = 0
    return wrapper


# --- memoize: basic contract ----------------------------------------------------------------------


def test_results_are_stored_under_cache_key(cache):
    body = counted(lambda a, b=1: a + b)

    @cache.memoize()
    def add(a, b=1):
        return body(a, b)

    assert add(1, b=2) == 3
    assert add(1, b=2) == 3
    assert body.calls == 1
    key = add.__cache_key__(1, b=2)
    assert cache[key] == 3
    assert add.__cache_key__(1, b=3) != key
    del cache[key]
    assert add(1, b=2) == 3
    assert body.calls == 2


def test_fibonacci_1000_recursing_through_the_cache(cache):
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20000))
    try:
        body = counted(lambda n: n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2))

        @cache.memoize(name='fib')
        def fibonacci(n):
            return body(n)

        result = fibonacci(1000)
    finally:
        sys.setrecursionlimit(limit)
    a, b = 0, 1
    for _ in range(1000):
        a, b = b, a + b
    assert result == a
    assert body.calls == 1001  # each number computed once, the rest were hits
    assert fibonacci(1000) == a and body.calls == 1001
    assert cache[fibonacci.__cache_key__(999)] == b - a


def test_memoize_without_parentheses_memoizes_with_the_defaults(cache):
    # It raised TypeError('name cannot be callable'), as python-diskcache's does.
    calls = []

    @cache.memoize
    def square(number):
        """Squares."""
        calls.append(number)
        return number * number

    @cache.memoize()
    def twin(number):
        return number * number

    assert [square(3), square(3), square(4)] == [9, 9, 16]
    assert calls == [3, 4]
    assert square.__name__ == 'square' and square.__doc__ == 'Squares.'
    assert square.__wrapped__(5) == 25 and calls == [3, 4, 5]
    assert cache[square.__cache_key__(3)] == 9
    # The same key as with empty parentheses (apart from the function's own name).
    assert square.__cache_key__(3).replace('square', 'twin') == twin.__cache_key__(3)


def test_a_bare_memoize_on_an_async_function(cache):
    import asyncio

    calls = []

    @cache.memoize
    async def fetch(number):
        calls.append(number)
        return number + 1

    assert asyncio.run(fetch(1)) == 2 and asyncio.run(fetch(1)) == 2
    assert calls == [1]


def test_wrapper_keeps_signature_docstring_and_kind(cache):
    def original(a: int, b: str = 'x', *args: float, c: bool = False, **kwargs: bytes) -> list:
        """The docstring."""
        return [a, b, args, c, kwargs]

    async def coroutine(a: int, *, b: int = 2) -> int:
        """Async docstring."""
        return a

    memoized = cache.memoize()(original)
    assert inspect.signature(memoized) == inspect.signature(original)
    assert memoized.__doc__ == 'The docstring.'
    assert memoized.__name__ == 'original' and memoized.__wrapped__ is original
    assert not inspect.iscoroutinefunction(memoized)
    amemoized = cache.memoize()(coroutine)
    assert inspect.signature(amemoized) == inspect.signature(coroutine)
    assert amemoized.__doc__ == 'Async docstring.'
    assert inspect.iscoroutinefunction(amemoized)


def test_name_replaces_function_name_in_key(cache):
    @cache.memoize(name='shared')
    def first(x):
        return 'first'

    @cache.memoize(name='shared')
    def second(x):
        return 'second'

    assert first(1) == 'first'
    assert second(1) == 'first'  # same name, same key: one result
    assert first.__cache_key__(1) == second.__cache_key__(1)
    with pytest.raises(TypeError):
        cache.memoize(name=42)


def test_typed_separates_equal_values_of_different_types(cache):
    plain_body = counted(lambda x: repr(x))
    typed_body = counted(lambda x: repr(x))
    plain = cache.memoize(name='plain')(plain_body)
    typed = cache.memoize(name='typed', typed=True)(typed_body)

    assert plain(1) == plain(1.0) == plain(True) == '1'
    assert plain_body.calls == 1  # equal numbers share a key when untyped
    assert plain.__cache_key__(3) == plain.__cache_key__(3.0)
    assert [typed(1), typed(1.0), typed(True)] == ['1', '1.0', 'True']
    assert typed_body.calls == 3
    assert typed(1) == '1' and typed_body.calls == 3
    assert typed.__cache_key__(3) != typed.__cache_key__(3.0)
    assert typed.__cache_key__(x=3) != typed.__cache_key__(x=3.0)


def test_typed_separates_types_inside_containers(cache):
    # The types of the arguments themselves were named, not those inside them: typed=True gave
    # f((1.0, 2.0)) the result computed for f((1, 2)).
    body = counted(lambda x: repr(x))
    typed = cache.memoize(name='typed-nested', typed=True)(body)
    calls = [(1, 2), (1.0, 2.0), (True, 2), [1], [1.0], [True], {'a': 1}, {'a': 1.0}, {1}, {1.0},
             frozenset({True}), ((1,), [2.0]), ((1.0,), [2])]  # fmt: skip
    assert [typed(value) for value in calls] == [repr(value) for value in calls]
    assert body.calls == len(calls)
    assert [typed(value) for value in calls] == [repr(value) for value in calls]
    assert body.calls == len(calls)  # every one a hit now
    keys = {typed.__cache_key__(value) for value in calls}
    assert len(keys) == len(calls)
    # Equal values of the same types still share a key, whatever the objects.
    assert typed.__cache_key__((1, 2.5)) == typed.__cache_key__(tuple([1, 2.5]))
    assert typed.__cache_key__({1: 2.0, 3: 4}) == typed.__cache_key__({3: 4, 1: 2.0})


def test_a_memoized_recursive_function_nests_two_frames_a_call(cache):
    # As with python-diskcache (and an undecorated function calling through one wrapper), so
    # that code memoizing a recursive function reaches the same depth: it nested three.
    @cache.memoize()
    def depth(n):
        return 0 if n == 0 else depth(n - 1) + 1

    here = len(inspect.stack(0))
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(here + 2 * 300 + 60)  # room for 300 levels of two frames, and a get
    try:
        assert depth(300) == 300
    finally:
        sys.setrecursionlimit(limit)
    assert depth(300) == 300  # stored


def test_ignore_positional_and_keyword_arguments(cache):
    body = counted(lambda a, b, c=None, d=None: a)

    @cache.memoize(ignore={1, 'd'})
    def function(a, b, c=None, d=None):
        return body(a, b, c, d)

    assert function(1, 'x', c=1, d='p') == 1
    assert function(1, 'y', c=1, d='q') == 1  # b (position 1) and d are not in the key
    assert body.calls == 1
    assert function(1, 'y', c=2, d='q') == 1  # c is
    assert body.calls == 2
    assert function.__cache_key__(5, object(), d=object()) == function.__cache_key__(5, 6)


@pytest.mark.parametrize('ignore', ['session', 's', b'ab', 0], ids=['str', 'letter', 'bytes', 'int'])
def test_ignore_that_is_not_a_collection_of_names_is_refused_when_decorating(cache, tmp_path, ignore):
    # Iterated, 'session' used to ignore the letters s, e, i, o, n: nothing of f(x, session=...).
    # python-diskcache tests names as substrings of it (ignore='session' drops a keyword `s`)
    # or fails at a call with a positional argument: no meaning to keep, so a TypeError.
    decorators = [
        lambda: cache.memoize(ignore=ignore),
        lambda: memoize_stampede(cache, 60, ignore=ignore),
        lambda: diskcache_core.Index(str(tmp_path / 'index')).memoize(ignore=ignore),
    ]
    if ignore:  # (args_to_key takes a falsy ignore, 0 too, as "nothing")
        decorators.append(lambda: diskcache_core.core.args_to_key(('f',), (1,), {}, False, ignore))
    for decorate in decorators:
        with pytest.raises(TypeError, match=r'^ignore must be a set of positions and names'):
            decorate()

    @cache.memoize(ignore=['session'])  # the way to say it
    def function(x, session=None):
        return session

    assert function(1, session='a') == 'a'
    assert function(1, session='b') == 'a'


def test_expire_makes_results_expire(cache):
    body = counted(lambda x: x)
    function = cache.memoize(expire=0.3)(body)
    function(1)
    function(1)
    assert body.calls == 1
    time.sleep(0.5)
    function(1)
    assert body.calls == 2


def test_expire_zero_looks_up_but_never_stores(cache):
    body = counted(lambda x: x * 2)
    function = cache.memoize(expire=0)(body)
    assert function(1) == 2 and function(1) == 2
    assert body.calls == 2
    assert len(cache) == 0
    cache.set(function.__cache_key__(1), 'stored elsewhere')
    assert function(1) == 'stored elsewhere'
    assert body.calls == 2


def test_tag_is_applied_to_stored_results(cache):
    function = cache.memoize(tag='results')(lambda x: x)
    function(1)
    function(2)
    assert cache.get(function.__cache_key__(1), tag=True) == (1, 'results')
    assert cache.evict('results') == 2


def test_exceptions_are_not_cached(cache):
    calls = []

    @cache.memoize()
    def failing(x):
        calls.append(x)
        raise ValueError(x)

    for _ in range(2):
        with pytest.raises(ValueError):
            failing(1)
    assert calls == [1, 1]
    assert len(cache) == 0


# --- keys -----------------------------------------------------------------------------------------


def test_keys_are_canonical_text_independent_of_object_identity(cache):
    function = cache.memoize(name='m.f')(lambda *args, **kwargs: None)
    one = 'x' * 40
    other = ''.join(['x'] * 40)
    assert one is not other
    assert function.__cache_key__(one, one) == function.__cache_key__(one, other)
    key = function.__cache_key__(1, 'a', b'\x00', 2.5, None, True, (1, 2.0), z=1, a='b')
    # The documented shape, fixed forever: existing caches depend on it.
    assert key == '["m.f",[1,"a",{"bytes":"00"},2.5,null,1,[1,2]],[["a","b"],["z",1]]]'
    assert json.loads(key)[0] == 'm.f'


def test_containers_are_told_apart_and_equal_ones_match(cache):
    key = cache.memoize(name='k')(lambda x: None).__cache_key__
    assert key((1, 2)) != key([1, 2])
    assert key([1, 2]) != key({1, 2})
    assert key({'a': 1, 'b': 2}) == key({'b': 2, 'a': 1})
    assert key({3, 1, 2}) == key(frozenset({1, 2, 3}))
    assert key(b'ab') != key('ab') and key('1') != key(1)
    assert key(2**70) != key(2**70 + 1)
    assert key(0.1) != key(0.1000000000001)


def test_other_argument_types_fall_back_to_pickle(cache):
    body = counted(lambda value: str(value))
    function = cache.memoize()(body)
    assert function(complex(1, 2)) == '(1+2j)'
    assert function(complex(1, 2)) == '(1+2j)'
    assert body.calls == 1
    assert '"pickle"' in function.__cache_key__(complex(1, 2))


@pytest.mark.slow
def test_keys_and_hits_are_stable_across_interpreter_processes(tmp_path):
    directory = str(tmp_path / 'cache')
    reports = []
    for seed in ('1', '2'):  # different str hashes in each interpreter
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=os.pathsep.join(sys.path))
        done = subprocess.run(
            [sys.executable, HELPERS, 'keys', directory],
            capture_output=True, text=True, env=env, timeout=60,
        )
        assert done.returncode == 0, done.stderr
        reports.append(json.loads(done.stdout))
    first, second = reports
    assert first['keys'] == second['keys']
    assert first['db_keys'] == second['db_keys']
    assert len(set(first['keys'])) == len(first['keys'])
    # ... and equal to the keys this process computes.
    assert first == dict(memo_helpers.report_keys(str(tmp_path / 'other')), runs=1)
    # The value memoized by the first interpreter was a hit in the second.
    assert first['square'] == second['square'] == 49
    assert first['runs'] == 1 and second['runs'] == 1


# --- custom key and should_cache ------------------------------------------------------------------


def test_custom_key_function(cache):
    body = counted(lambda user, request_id: f'profile of {user}')

    @cache.memoize(key=lambda user, request_id: user)
    def profile(user, request_id):
        return body(user, request_id)

    @cache.memoize(key=lambda user, request_id: user)
    def settings(user, request_id):
        return f'settings of {user}'

    assert profile('ann', 1) == profile('ann', 2) == 'profile of ann'
    assert body.calls == 1
    assert profile('bob', 1) == 'profile of bob' and body.calls == 2
    assert settings('ann', 1) == 'settings of ann'  # namespaced by function name
    assert profile.__cache_key__('ann', 99) == profile.__cache_key__('ann', 1)
    with pytest.raises(ValueError):
        cache.memoize(key=lambda x: x, typed=True)
    with pytest.raises(TypeError):
        cache.memoize(key='not callable')


def test_should_cache_decides_what_is_stored(cache):
    results = {1: None, 2: 'found'}
    body = counted(lambda x: results[x])
    function = cache.memoize(should_cache=lambda result: result is not None)(body)
    assert function(1) is None and function(1) is None
    assert body.calls == 2
    assert function(2) == 'found' and function(2) == 'found'
    assert body.calls == 3
    assert function.__cache_key__(1) not in cache
    assert function.__cache_key__(2) in cache


# --- methods --------------------------------------------------------------------------------------


class Account:
    """A picklable class whose instances are part of memoize keys."""

    calls = 0

    def __init__(self, owner):
        self.owner = owner

    def __eq__(self, other):
        return isinstance(other, Account) and other.owner == self.owner

    def __hash__(self):
        return hash(self.owner)

    def balance(self, currency):
        Account.calls += 1
        return f'{self.owner}:{currency}'


def test_instance_methods_key_includes_self(cache, monkeypatch):
    Account.calls = 0
    # Instances are pickled into the key, so the class must be importable: attach the memoized
    # methods to the module-level class for this test.
    monkeypatch.setattr(Account, 'memo_balance', cache.memoize(name='balance')(Account.balance), raising=False)
    monkeypatch.setattr(
        Account, 'shared_balance', cache.memoize(name='shared', ignore={0})(Account.balance), raising=False
    )
    ann, bob = Account('ann'), Account('bob')
    assert ann.memo_balance('eur') == 'ann:eur' and ann.memo_balance('eur') == 'ann:eur'
    assert Account.calls == 1
    assert Account('ann').memo_balance('eur') == 'ann:eur'  # an equal instance: same key
    assert Account.calls == 1
    assert bob.memo_balance('eur') == 'bob:eur'  # another self, another key
    assert Account.calls == 2
    assert Account.memo_balance.__cache_key__(ann, 'eur') in cache
    assert ann.shared_balance('usd') == 'ann:usd'
    assert bob.shared_balance('usd') == 'ann:usd'  # self ignored: one result for every instance
    assert Account.calls == 3


# --- async functions ------------------------------------------------------------------------------


def test_async_function_caches_awaited_result(cache):
    calls = []

    @cache.memoize()
    async def fetch(url, delay=0.01):
        calls.append(url)
        await asyncio.sleep(delay)
        return f'body of {url}'

    async def main():
        first = await fetch('a')
        again = await fetch('a')
        many = await asyncio.gather(*(fetch(f'u{i % 5}') for i in range(20)))
        return first, again, many

    first, again, many = asyncio.run(main())
    assert first == again == 'body of a'
    assert many == [f'body of u{i % 5}' for i in range(20)]
    assert calls.count('a') == 1
    assert set(calls) == {'a'} | {f'u{i}' for i in range(5)}
    stored = cache[fetch.__cache_key__('a')]
    assert stored == 'body of a' and not inspect.iscoroutine(stored)
    assert asyncio.run(fetch('a')) == 'body of a' and calls.count('a') == 1


def test_async_function_options_and_exceptions(cache):
    @cache.memoize(should_cache=lambda result: result is not None, typed=True)
    async def lookup(x):
        if x < 0:
            raise KeyError(x)
        return None if x == 0 else x * 10

    async def main():
        assert await lookup(1) == 10
        assert await lookup(0) is None
        with pytest.raises(KeyError):
            await lookup(-1)

    asyncio.run(main())
    assert lookup.__cache_key__(1) in cache
    assert lookup.__cache_key__(0) not in cache
    assert len(cache) == 1


# --- memoize_stampede: early recomputation -------------------------------------------------------


def test_stampede_stores_result_and_compute_time(cache):
    @memoize_stampede(cache, expire=10)
    def slow(x):
        time.sleep(0.05)
        return x + 1

    began = time.perf_counter()
    assert slow(1) == 2
    first_call = time.perf_counter() - began
    assert slow(1) == 2
    result, compute_time = cache[slow.__cache_key__(1)]
    # The time the function took: at least its sleep, at most the whole first call.
    assert result == 2 and 0.04 < compute_time <= first_call
    with pytest.raises(TypeError, match='name cannot be callable'):
        memoize_stampede(cache, 1, name=slow)


def _wait_for_stored(cache, key, value, seconds=30.0):
    """Wait (bounded) until `key` holds the memoized `value`; fail loudly if it never does."""
    deadline = time.monotonic() + seconds
    while cache.get(key, default=(None, None))[0] != value:
        assert time.monotonic() < deadline, f'{value!r} was never stored'
        time.sleep(0.01)


def test_stampede_recomputes_early_in_background(cache):
    """With the default beta, hits before expiry start one refresh, in a background thread;
    callers keep getting the current result without waiting for it.

    Synchronized with events, not timed: the refresh is held until the test lets it finish,
    so a caller that waited for it could not return before that.
    """
    random.seed(1234)
    caller = threading.current_thread()
    runs = []  # the thread of every computation
    refresh_started, release, refresh_done = threading.Event(), threading.Event(), threading.Event()

    @memoize_stampede(cache, expire=2.0)
    def slow():
        runs.append(threading.current_thread())
        if len(runs) == 1:
            time.sleep(0.5)  # a compute time that makes a refresh likely long before expiry
            return 'first'
        if threading.current_thread() is caller:
            return 'recomputed by a caller'  # not refreshed early in the background
        refresh_started.set()
        release.wait(30)
        refresh_done.set()
        return 'refreshed'

    key = slow.__cache_key__()
    assert slow() == 'first'
    (_, compute_time), first_expiry = cache.get(key, expire_time=True)
    calls_began = time.time()
    while not refresh_started.is_set():
        # Each hit may decide to refresh; until one does, the first result is returned. A
        # caller computing itself fails here: the refresh ran in the caller, or none came
        # before the first result expired.
        assert slow() == 'first', 'no early recomputation in the background'
        refresh_started.wait(0.01)
    calls_ended = time.time()
    assert runs[1] is not caller  # started by a hit, in another thread
    assert not refresh_done.is_set()  # the caller that started it returned without it
    release.set()
    assert refresh_done.wait(30)
    _wait_for_stored(cache, key, 'refreshed')
    _, expiry = cache.get(key, expire_time=True)
    assert expiry > first_expiry
    # One refresh at a time, not one per caller: the key is marked until the refresh ends.
    assert len(runs) - 1 == 1, (len(runs), calls_ended - calls_began, compute_time)


def test_stampede_async_function_refreshes_in_a_task(cache):
    """An ``async def`` function is refreshed in a task while callers get the current result,
    and concurrent callers start one refresh, not one each.

    A huge beta makes every hit ask for a refresh, so only the one-at-a-time marker stops
    each of the 20 callers from starting its own. The refresh is held on an event until the
    callers have returned: a caller that awaited it could not return (and would time out).
    It is held for longer than the first computation took, and callers keep coming: the
    marker lasts until the refresh ends, not for the last compute time.
    """
    random.seed(99)
    runs = []  # one entry per computation: the first, then each refresh
    callers = 20

    @memoize_stampede(cache, expire=60, beta=1e9)
    async def slow():
        runs.append(asyncio.current_task())
        if len(runs) == 1:
            await asyncio.sleep(0.05)  # the compute time, which the refresh will outlast
            return 'first'
        await release.wait()
        return 'refreshed'

    key = slow.__cache_key__()

    async def main():
        assert await slow() == 'first'
        (_, compute_time), first_expiry = cache.get(key, expire_time=True)
        began = time.time()
        for _ in range(2):  # a second wave after the refresh has outlasted the compute time
            try:
                results = await asyncio.wait_for(asyncio.gather(*(slow() for _ in range(callers))), 30)
            except asyncio.TimeoutError:
                pytest.fail('callers did not return while the refresh was held: they waited for it')
            assert results == ['first'] * callers  # nobody waited for the held refresh
            await asyncio.sleep(4 * compute_time)
        ended = time.time()
        release.set()
        deadline = time.monotonic() + 30
        while cache.get(key, default=(None, None))[0] != 'refreshed':
            assert time.monotonic() < deadline, 'the refresh was never stored'
            await asyncio.sleep(0.01)
        _, expiry = cache.get(key, expire_time=True)
        assert expiry > first_expiry
        return compute_time, ended - began

    release = asyncio.Event()
    compute_time, calls_lasted = asyncio.run(main())
    # One refresh for all 40 callers: the marker held while it ran, however long.
    assert len(runs) - 1 == 1, (len(runs), calls_lasted, compute_time)


# --- memoize_stampede: single flight --------------------------------------------------------------


def test_single_flight_threads_compute_once(cache):
    @memoize_stampede(cache, expire=60, single_flight=True, lock_expire=10)
    def slow(x):
        cache.incr('runs')
        time.sleep(0.3)
        return x * 2

    results = []
    threads = [threading.Thread(target=lambda: results.append(slow(21))) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert results == [42] * 6
    assert cache['runs'] == 1


def test_single_flight_async_callers_compute_once(cache):
    @memoize_stampede(cache, expire=60, single_flight=True)
    async def slow(x):
        await asyncio.to_thread(cache.incr, 'runs')
        await asyncio.sleep(0.3)
        return x * 2

    async def main():
        return await asyncio.gather(*(slow(21) for _ in range(10)))

    assert asyncio.run(main()) == [42] * 10
    assert cache['runs'] == 1


def test_single_flight_waiter_gives_up_after_wait_timeout(cache):
    entered, release, finished = threading.Event(), threading.Event(), threading.Event()

    @memoize_stampede(cache, expire=60, single_flight=True, wait_timeout=0.3, name='slow')
    def slow():
        entered.set()
        release.wait(30)  # computing until the test lets it finish
        finished.set()
        return 'done'

    computer = threading.Thread(target=slow)
    computer.start()
    assert entered.wait(10)
    began = time.monotonic()
    with pytest.raises(Timeout):
        slow()
    assert time.monotonic() - began > 0.25  # it waited (wait_timeout) ...
    assert not finished.is_set()  # ... and gave up while the computation was still running
    release.set()
    computer.join(30)
    assert slow() == 'done'


def test_single_flight_lock_is_released_when_the_function_raises(cache):
    attempts = []

    @memoize_stampede(cache, expire=60, single_flight=True, lock_expire=60, wait_timeout=2)
    def flaky():
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError('first attempt fails')
        return 'ok'

    with pytest.raises(RuntimeError):
        flaky()
    # Not blocked by a lock left behind (lock_expire=60): that would raise Timeout after 2 s.
    assert flaky() == 'ok'


def test_a_function_raising_stopiteration_raises_it_through_memoize_stampede(cache):
    # Thrown into the procedure (a generator), it came out as PEP 479's RuntimeError.
    for single_flight in (False, True):
        @memoize_stampede(cache, expire=60, single_flight=single_flight)
        def first(items):
            return next(iter(items))

        with pytest.raises(StopIteration):
            first([])
        assert first([7]) == 7


def test_single_flight_async_caller_cancelled_while_taking_the_lock_releases_it(cache):
    # The lock was taken in a worker thread after its caller had been cancelled, and nobody
    # released it: later callers waited lock_expire seconds (or raised Timeout).
    runs = []

    @memoize_stampede(cache, expire=60, single_flight=True, lock_expire=600, wait_timeout=600)
    async def value():
        runs.append(1)
        return len(runs)

    holding, release = threading.Event(), threading.Event()

    def hold_the_write_lock():
        with cache.transact(retry=True):
            holding.set()
            release.wait(60)

    holder = threading.Thread(target=hold_the_write_lock)
    holder.start()
    assert holding.wait(60)

    async def cancelled_then_again():
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(value(), 0.05)  # still waiting for the write lock
        release.set()
        return await value()  # waits for the lock only until the cancelled caller's is gone

    try:
        assert asyncio.run(cancelled_then_again()) == 1
    finally:
        release.set()
        holder.join(60)
    assert runs == [1]
    assert not [key for key in cache if str(key).endswith('#lock')]


def test_stampede_option_validation(cache):
    for options in ({'beta': -1}, {'lock_expire': 0}, {'wait_timeout': -1}):
        with pytest.raises(ValueError):
            memoize_stampede(cache, 1, **options)


@pytest.mark.parametrize('option', ['beta', 'wait_timeout', 'lock_expire'])
def test_stampede_number_too_large_for_a_float_is_refused_when_decorating(cache, option):
    # Not an OverflowError at the first hit (beta) or wait (wait_timeout, lock_expire).
    with pytest.raises(ValueError, match=f'^{option} .*too large for a float'):
        memoize_stampede(cache, 60, single_flight=True, **{option: 10**400})


def test_stampede_lock_expire_too_short_to_move_the_clock_is_refused(cache):
    # The Lock's own check, made when decorating rather than at a call's first miss.
    with pytest.raises(ValueError, match='^lock_expire must be > 0 seconds'):
        memoize_stampede(cache, 60, single_flight=True, lock_expire=1e-9)


def test_stampede_with_huge_float_beta_and_wait_timeout_still_works(cache):
    @memoize_stampede(cache, 60, beta=1e300, single_flight=True, wait_timeout=1e300,
                      lock_expire=10**6, name='big')
    def function(x):
        return x * 2

    assert function(2) == 4
    assert function(2) == 4  # a hit, with an early refresh at most


def _spawn():
    return multiprocessing.get_context('spawn')


@pytest.mark.slow
def test_single_flight_eight_processes_compute_once(tmp_path):
    directory = str(tmp_path / 'cache')
    diskcache_core.Cache(directory).close()
    context = _spawn()
    start = context.Event()
    results, ready = context.Queue(), context.Queue()
    lock_expire = 20
    workers = [
        context.Process(
            target=memo_helpers.single_flight_worker,
            args=(directory, start, results, 0.5, lock_expire, ready),
        )
        for _ in range(8)
    ]
    for worker in workers:
        worker.start()
    for _ in workers:  # every worker has imported and is about to wait for start
        ready.get(timeout=120)
    start.set()
    outcomes = [results.get(timeout=60) for _ in workers]
    for worker in workers:
        worker.join(30)
        assert worker.exitcode == 0
    errors = [error for _, _, _, error in outcomes if error]
    assert not errors
    values = {value for _, value, _, _ in outcomes}
    assert len(values) == 1 and values.pop().startswith('shared:')
    with diskcache_core.Cache(directory) as cache:
        assert cache['runs'] == 1  # computed exactly once among 8 processes
    # The waiters read the result once it was stored, not after the computer's lock expired.
    assert max(elapsed for _, _, elapsed, _ in outcomes) < lock_expire


@pytest.mark.slow
def test_single_flight_survives_a_killed_computer(tmp_path):
    directory = str(tmp_path / 'cache')
    diskcache_core.Cache(directory).close()
    context = _spawn()
    started = context.Event()
    # Longer than a loaded machine takes to start the waiter, so that a waiter that ignored the
    # dead computer's lock would be seen computing too early.
    lock_expire = 3.0
    computer = context.Process(target=memo_helpers.hanging_computer, args=(directory, started, lock_expire))
    computer.start()
    try:
        assert started.wait(60)
        os.kill(computer.pid, signal.SIGKILL)
    finally:
        computer.join(30)
    start = context.Event()
    start.set()
    results = context.Queue()
    waiter = context.Process(
        target=memo_helpers.single_flight_worker, args=(directory, start, results, 0.1, lock_expire)
    )
    waiter.start()
    _, value, elapsed, error = results.get(timeout=60)
    waiter.join(30)
    assert error is None and value.startswith('shared:')
    assert elapsed < lock_expire + 10  # it waited until the dead computer's lock expired, not forever
    with diskcache_core.Cache(directory) as cache:
        assert cache['runs'] == 1  # the waiter computed it (the killed computer never stored)
        # Both stamped time.time() as they started computing, each just after taking the lock.
        # The waiter took it only once the computer's had expired (lock_expire after it was
        # taken); the margin covers the computer's few steps between its lock and its stamp.
        waited = cache['computation_started'] - cache['hanging_since']
    assert waited > lock_expire - 0.5, waited


def test_an_argument_that_holds_itself_is_a_key_too(cache):
    calls = []

    @cache.memoize()
    def size(items):
        calls.append(1)
        return len(items)

    cyclic = [1, 2]
    cyclic.append(cyclic)
    assert size(cyclic) == 3 and size(cyclic) == 3
    assert len(calls) == 1  # (python-diskcache keys it by pickle, which keeps the cycle)
    other = {"a": 1}
    other["self"] = other
    assert size(other) == 2 and len(calls) == 2


def test_a_character_and_the_surrogates_that_spell_it_are_different_keys(cache):
    """In JSON, an astral character and the pair of lone surrogates that encode it read the
    same; as memoize keys they must not (python-diskcache keys them apart)."""
    calls = []

    @cache.memoize()
    def length(text):
        calls.append(text)
        return len(text)

    @cache.memoize()
    def inner_length(texts):
        calls.append(texts)
        return len(texts[0])

    assert length('\U0001F600') == 1
    assert length('\ud83d\ude00') == 2
    assert inner_length(('\ud83d\ude00',)) == 2 and inner_length(('\U0001F600',)) == 1
    assert len(calls) == 4


def test_a_keyword_argument_named_self_is_passed_through(cache):
    @cache.memoize()
    def echo(**kwargs):
        return kwargs

    @cache.memoize()
    def double(self, x):  # a method, as called through its class
        return 2 * x * self

    assert echo(self=3) == {'self': 3} and echo(self=3) == {'self': 3}
    assert double(self=1, x=21) == 42 and double(self=1, x=21) == 42
    assert echo.__cache_key__(self=3) == echo.__cache_key__(self=3)


def test_stampede_async_refresh_cancelled_with_its_loop_frees_the_key(cache):
    # asyncio.run returns while the early refresh task runs: the task is cancelled, and its
    # marker must go with it (or no caller in any process refreshes the key early for
    # lock_expire seconds).
    runs = []

    @memoize_stampede(cache, expire=60, beta=1e9)  # every hit asks for a refresh
    async def value():
        runs.append(1)
        await asyncio.sleep(0.2 if len(runs) > 1 else 0)
        return len(runs)

    assert asyncio.run(value()) == 1  # computed and stored
    assert asyncio.run(value()) == 1  # a hit: starts the refresh, which the loop's end cancels
    assert len(runs) == 2
    marker = value.__cache_key__() + '#refresh'
    assert marker not in cache
    assert asyncio.run(value()) == 1  # a later hit starts a refresh again
    assert len(runs) == 3
