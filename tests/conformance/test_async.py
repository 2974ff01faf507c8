"""The awaitable twins (aget, aset, ...): same results as the sync methods, never blocking the loop."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import io
import multiprocessing
import time
from typing import NamedTuple

import pytest

import diskcache_core
from diskcache_core import Timeout
from diskcache_core._cache.awaitable import AsyncCacheMixin, AsyncDataMixin, run_sync

from store_helpers import WriteLockHolder

DATA_TWINS = {
    'aadd': 'add', 'acheck': 'check', 'aclear': 'clear', 'acontains': '__contains__',
    'acull': 'cull', 'adecr': 'decr', 'adelete': 'delete', 'aevict': 'evict', 'aexpire': 'expire',
    'aget': 'get', 'aincr': 'incr', 'apop': 'pop', 'aread': 'read', 'aset': 'set',
    'astats': 'stats', 'atouch': 'touch', 'avolume': 'volume',
}
QUEUE_TWINS = {'apeek': 'peek', 'apeekitem': 'peekitem', 'apull': 'pull', 'apush': 'push'}


def test_every_twin_exists_and_names_its_sync_method(cache_class):
    assert {name for name in vars(AsyncDataMixin) if not name.startswith('_')} == set(DATA_TWINS)
    assert {name for name in vars(AsyncCacheMixin) if not name.startswith('_')} == set(QUEUE_TWINS)
    twins = dict(DATA_TWINS)
    if issubclass(cache_class, AsyncCacheMixin):
        twins.update(QUEUE_TWINS)
    else:  # FanoutCache: no queue methods, as in python-diskcache
        assert not hasattr(cache_class, 'push') and not hasattr(cache_class, 'apush')
    for twin, method in twins.items():
        function = getattr(cache_class, twin)
        assert inspect.iscoroutinefunction(function), twin
        assert callable(getattr(cache_class, method)), method
        assert function.__name__ == twin and method in function.__doc__


def test_every_twin_has_its_sync_methods_signature(cache_class):
    """Same parameters (names, kinds, defaults, annotations) and result type: what type checkers
    read (tests/test_async_typing.py checks what they report)."""
    twins = dict(DATA_TWINS)
    if issubclass(cache_class, AsyncCacheMixin):
        twins.update(QUEUE_TWINS)
    for twin, method in twins.items():
        expected = inspect.signature(getattr(cache_class, method))
        actual = inspect.signature(getattr(cache_class, twin))
        assert list(actual.parameters.values())[1:] == list(expected.parameters.values())[1:], twin
        assert actual.return_annotation == expected.return_annotation, twin


def test_twins_return_what_the_sync_methods_return(cache):
    async def main():
        assert await cache.aset('a', 1, expire=60, tag='t') is True
        assert await cache.aget('a') == 1
        assert await cache.aget('a', expire_time=True, tag=True) == cache.get('a', expire_time=True, tag=True)
        assert await cache.aadd('a', 2) is False and await cache.aadd('b', 2) is True
        assert await cache.acontains('a') and not await cache.acontains('zzz')
        assert await cache.aincr('n', 5) == 5 and await cache.adecr('n', 2) == 3
        assert await cache.atouch('a', 120) is True
        assert await cache.apop('b') == 2 and await cache.apop('b', 'gone') == 'gone'
        assert await cache.adelete('n') is True
        if hasattr(cache, 'push'):
            key = await cache.apush('first', prefix='q')
            await cache.apush('second', prefix='q')
            assert await cache.apeek(prefix='q') == (key, 'first')
            assert await cache.apull(prefix='q') == (key, 'first')
            assert (await cache.apeekitem())[0] == cache.peekitem()[0]
        await cache.aset('blob', b'bytes', read=False)
        handle = await cache.aread('blob')
        assert handle.read() == b'bytes'
        await cache.aset('stream', io.BytesIO(b'streamed'), read=True)
        assert cache['stream'] == b'streamed'
        assert await cache.acheck() == []
        assert await cache.astats() == cache.stats()
        assert await cache.avolume() > 0
        await cache.aset('short', 1, expire=0.01)
        await asyncio.sleep(0.05)
        assert await cache.aexpire() == 1
        assert await cache.aevict('t') == 1
        assert await cache.acull() >= 0
        remaining = len(cache)
        assert remaining > 0 and await cache.aclear() == remaining
        assert len(cache) == 0
        with pytest.raises(KeyError):
            await cache.aread('missing')

    asyncio.run(main())


def test_hundred_concurrent_tasks_of_mixed_operations(cache):
    queues = hasattr(cache, 'push')

    async def task(i):
        await cache.aset(f'key-{i}', i * 2)
        await cache.aincr('counter')
        won = await cache.aadd('once', i)
        if queues:
            await cache.apush(i, prefix='jobs')
        assert await cache.aget(f'key-{i}') == i * 2
        if i % 2:
            assert await cache.adelete(f'key-{i}')
        return won

    async def main():
        return await asyncio.gather(*(task(i) for i in range(100)))

    won = asyncio.run(main())
    assert won.count(True) == 1
    assert cache['counter'] == 100
    assert cache['once'] == won.index(True)
    assert sorted(k for k in cache if isinstance(k, str) and k.startswith('key-')) == sorted(
        f'key-{i}' for i in range(0, 100, 2)
    )
    if not queues:
        return
    jobs = []
    while True:
        key, value = cache.pull(prefix='jobs')
        if key is None:
            break
        jobs.append(value)
    assert sorted(jobs) == list(range(100))


def test_twin_exceptions_propagate(cache):
    async def main():
        cache.set('text', 'not a number')
        with pytest.raises(TypeError):
            await cache.aincr('text')
        with pytest.raises(KeyError):
            await cache.aincr('missing', default=None)

    asyncio.run(main())


def test_run_sync_sees_the_callers_context_variables():
    variable = contextvars.ContextVar('variable', default='unset')

    async def main():
        variable.set('set in the task')
        return await run_sync(variable.get)

    assert asyncio.run(main()) == 'set in the task'


# --- the event loop stays responsive ----------------------------------------------------------------


class Heartbeat(NamedTuple):
    """What a 5 ms heartbeat task saw while a call was awaited."""

    beats: int  # heartbeats completed during the call
    lateness: float  # the largest delay of a heartbeat (over the whole run)
    duration: float  # how long the call took
    outcome: Timeout | None


async def _heartbeat_during(blocking_call) -> Heartbeat:
    """Run a 5 ms heartbeat task while `blocking_call()` is awaited.

    A call that blocks the event loop lets no heartbeat complete until it returns (``beats``
    is 0, whatever the load). One that waits off the loop lets them go on, each late by no
    more than the machine's scheduling delay (not by the call's wait).
    """
    lateness = []
    stop = asyncio.Event()

    async def heartbeat():
        while not stop.is_set():
            before = time.monotonic()
            await asyncio.sleep(0.005)
            lateness.append(time.monotonic() - before - 0.005)

    beating = asyncio.create_task(heartbeat())
    await asyncio.sleep(0.05)
    outcome = None
    beats_before = len(lateness)
    began = time.monotonic()
    try:
        await blocking_call()
    except Timeout as exc:
        outcome = exc
    duration = time.monotonic() - began
    beats = len(lateness) - beats_before
    stop.set()
    await beating
    return Heartbeat(beats, max(lateness), duration, outcome)


def test_twins_do_not_block_the_loop_while_another_process_holds_the_write_lock(make_store):
    cache = make_store(timeout=1.0)
    cache.set('counter', 0)

    async def waiting_twin():
        await cache.aset('key', 'value')

    with WriteLockHolder(cache.directory):
        seen = asyncio.run(_heartbeat_during(waiting_twin))
    assert isinstance(seen.outcome, Timeout)  # it waited the full timeout for the lock ...
    # ... and the loop went on meanwhile: it kept beating, never stalled for most of the wait.
    assert seen.beats > 0 and seen.lateness < seen.duration / 2, seen

    # Control: the sync method called in the coroutine stalls the loop for that whole second.
    async def blocking_sync():
        cache.set('key', 'value')

    with WriteLockHolder(cache.directory):
        seen = asyncio.run(_heartbeat_during(blocking_sync))
    assert isinstance(seen.outcome, Timeout)
    assert seen.beats == 0 and seen.lateness > 0.5, seen


def test_twin_succeeds_once_the_lock_is_released(make_store):
    # A timeout far longer than the lock is held: only a twin that never retried would give up.
    cache = make_store(timeout=30.0)

    async def main():
        began = time.monotonic()
        assert await cache.aincr('counter') == 1
        return time.monotonic() - began

    with WriteLockHolder(cache.directory) as holder:
        holder.release_after(0.3)
        waited = asyncio.run(main())
    assert waited > 0.25  # it waited for the release (and then succeeded, without Timeout)


def test_memoized_coroutine_does_not_block_the_loop(make_store):
    cache = make_store(timeout=1.0)

    @cache.memoize()
    async def compute(x):
        return x * 2

    async def memoized_call():
        began = time.monotonic()
        assert await compute(21) == 42  # memoize stores with retry: it waits for the lock
        assert time.monotonic() - began > 0.4

    with WriteLockHolder(cache.directory) as holder:
        holder.release_after(0.5)
        seen = asyncio.run(_heartbeat_during(memoized_call))
    assert seen.outcome is None
    assert seen.beats > 0 and seen.lateness < seen.duration / 2, seen
    assert cache[compute.__cache_key__(21)] == 42


def _child_uses_twins(directory, results):
    cache = diskcache_core.Cache(directory)

    async def main():
        await cache.aset('child', 'ok')
        return await cache.aget('child')

    results.put(asyncio.run(main()))


@pytest.mark.slow
def test_thread_pool_works_in_a_forked_child(cache):
    async def warm_up():
        await cache.aset('parent', 1)  # starts the pool's threads in this process

    asyncio.run(warm_up())
    context = multiprocessing.get_context('fork')
    results = context.Queue()
    child = context.Process(target=_child_uses_twins, args=(cache.directory, results))
    child.start()
    try:
        assert results.get(timeout=20) == 'ok'
    finally:
        child.join(20)
        if child.is_alive():
            child.kill()
    assert child.exitcode == 0
