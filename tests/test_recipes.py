"""Recipes: Lock, RLock, BoundedSemaphore, Averager, throttle, barrier — in threads and processes."""

from __future__ import annotations

import functools
import itertools
import multiprocessing
import os
import signal
import statistics
import threading
import time

import pytest

import diskcache_core
from diskcache_core import Averager, BoundedSemaphore, Lock, RLock, barrier, throttle
from diskcache_core._recipes import backoff_delays

import memo_helpers


def _spawn():
    return multiprocessing.get_context('spawn')


def in_thread(function, *args):
    """Run `function(*args)` in another thread; return what it returned (or raised)."""
    outcome = []

    def run():
        try:
            outcome.append(('ok', function(*args)))
        except BaseException as exc:
            outcome.append(('error', exc))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    return outcome[0]


# --- Lock -------------------------------------------------------------------------------------------


def test_lock_acquire_release_and_locked(cache):
    lock = Lock(cache, 'lock')
    assert not lock.locked()
    assert lock.acquire() is True
    assert lock.locked()
    other = Lock(cache, 'lock')
    assert other.acquire(blocking=False) is False
    began = time.monotonic()
    assert other.acquire(timeout=0.2) is False
    assert 0.18 < time.monotonic() - began < 1.0
    lock.release()
    assert not lock.locked()
    assert other.acquire(blocking=False) is True
    other.release()
    with lock as held:
        assert held is lock and lock.locked()
    assert not lock.locked()


def test_lock_argument_checks_and_unheld_release(cache):
    lock = Lock(cache, 'lock')
    with pytest.raises(RuntimeError):
        lock.release()
    with pytest.raises(ValueError):
        lock.acquire(blocking=False, timeout=1)
    with pytest.raises(ValueError):
        lock.acquire(timeout=-1)


def test_lock_is_only_released_by_its_holder(cache):
    holder = Lock(cache, 'lock')
    stranger = Lock(cache, 'lock')
    holder.acquire()
    with pytest.raises(RuntimeError):
        stranger.release()
    assert holder.locked()
    holder.release()


def test_expired_lock_is_taken_over_and_old_holder_cannot_release_it(cache):
    first = Lock(cache, 'lock', expire=0.2)
    second = Lock(cache, 'lock', expire=10)
    assert first.acquire()
    assert not second.acquire(blocking=False)
    time.sleep(0.3)
    assert second.acquire(blocking=False)  # the first holder's lock expired
    with pytest.raises(RuntimeError, match='expired'):
        first.release()
    assert second.locked()  # the late release did not remove the new holder's lock
    second.release()


def test_waiting_backs_off_instead_of_spinning(make_store):
    make_cache = make_store
    attempts = itertools.count()

    class CountingCache(diskcache_core.Cache):
        def __contains__(self, key):
            next(attempts)
            return super().__contains__(key)

    cache = make_cache()
    Lock(cache, 'lock').acquire()
    counting = CountingCache(cache.directory)
    try:
        assert not Lock(counting, 'lock').acquire(timeout=1.0)
    finally:
        counting.close()
    # A 1 ms spin would try ~1000 times in a second; capped backoff (<= 50 ms) about 20-60.
    assert 10 <= next(attempts) <= 100
    delays = list(itertools.islice(backoff_delays(), 20))
    assert delays[0] <= 0.001 and max(delays) <= 0.05
    assert len(set(delays)) == len(delays)  # jittered
    assert delays[-1] >= 0.025  # grown to the cap


@pytest.mark.slow
def test_lock_serializes_read_modify_write_across_processes(tmp_path):
    directory = str(tmp_path / 'cache')
    diskcache_core.Cache(directory).close()
    context = _spawn()
    start = context.Event()
    workers = [
        context.Process(target=memo_helpers.locked_increment_worker, args=(directory, 200, start))
        for _ in range(8)
    ]
    for worker in workers:
        worker.start()
    time.sleep(0.5)
    start.set()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    with diskcache_core.Cache(directory) as cache:
        assert cache['total'] == 1600
        assert 'total-lock' not in cache


@pytest.mark.slow
def test_lock_of_a_killed_holder_is_released_by_expiry(tmp_path):
    directory = str(tmp_path / 'cache')
    diskcache_core.Cache(directory).close()
    context = _spawn()
    acquired = context.Event()
    expire = 1.0
    holder = context.Process(target=memo_helpers.lock_holder, args=(directory, 'lock', expire, acquired))
    holder.start()
    try:
        assert acquired.wait(30)
        acquired_at = time.monotonic()
        os.kill(holder.pid, signal.SIGKILL)
    finally:
        holder.join(30)
    with diskcache_core.Cache(directory) as cache:
        lock = Lock(cache, 'lock')
        assert lock.locked()
        assert lock.acquire(timeout=expire + 2)
        assert time.monotonic() - acquired_at < expire + 1
        lock.release()


# --- RLock ------------------------------------------------------------------------------------------


def test_rlock_is_reentrant_for_its_owner(cache):
    rlock = RLock(cache, 'rlock')
    assert not rlock.locked()
    assert rlock.acquire() and rlock.acquire()
    with rlock:
        assert rlock.locked()
    rlock.release()
    assert rlock.locked()  # still held once
    assert in_thread(RLock(cache, 'rlock').acquire, False) == ('ok', False)
    rlock.release()
    assert not rlock.locked()
    with pytest.raises(RuntimeError, match='un-acquired'):
        rlock.release()
    assert in_thread(RLock(cache, 'rlock').acquire, False) == ('ok', True)


def test_rlock_wrong_owner_cannot_release(cache):
    rlock = RLock(cache, 'rlock')
    rlock.acquire()
    kind, error = in_thread(rlock.release)  # same object, another thread: not the owner
    assert kind == 'error' and isinstance(error, RuntimeError)
    assert rlock.locked()
    rlock.release()


def test_rlock_waits_for_another_thread(cache):
    held = threading.Event()

    def owner():
        rlock = RLock(cache, 'rlock')
        with rlock:
            held.set()
            time.sleep(0.3)

    thread = threading.Thread(target=owner)
    thread.start()
    assert held.wait(10)
    began = time.monotonic()
    waiter = RLock(cache, 'rlock')
    assert waiter.acquire(timeout=5)
    assert time.monotonic() - began > 0.2
    waiter.release()
    thread.join(10)


@pytest.mark.slow
def test_rlock_owner_is_per_process(tmp_path):
    directory = str(tmp_path / 'cache')
    with diskcache_core.Cache(directory) as cache:
        rlock = RLock(cache, 'rlock')
        rlock.acquire()
        context = _spawn()
        results = context.Queue()
        probe = context.Process(target=memo_helpers.rlock_probe, args=(directory, 'rlock', results))
        probe.start()
        took, released = results.get(timeout=30)
        probe.join(30)
        assert took is False
        assert released.startswith('RuntimeError')
        assert rlock.locked()
        rlock.release()


# --- BoundedSemaphore -------------------------------------------------------------------------------


def test_bounded_semaphore_counts(cache):
    semaphore = BoundedSemaphore(cache, 'sem', value=3)
    assert [semaphore.acquire() for _ in range(3)] == [True, True, True]
    assert semaphore.locked()
    assert not BoundedSemaphore(cache, 'sem', value=3).acquire(blocking=False)
    semaphore.release()
    assert not semaphore.locked()
    other = BoundedSemaphore(cache, 'sem', value=3)
    with other:
        assert semaphore.locked()
    semaphore.release()
    semaphore.release()
    with pytest.raises(ValueError):
        semaphore.release()
    with pytest.raises(ValueError):
        BoundedSemaphore(cache, 'bad', value=0)


def test_bounded_semaphore_limits_concurrency_across_threads(cache):
    semaphore = BoundedSemaphore(cache, 'sem', value=2)
    inside = []
    peak = []
    guard = threading.Lock()

    def work():
        with semaphore:
            with guard:
                inside.append(1)
                peak.append(len(inside))
            time.sleep(0.05)
            with guard:
                inside.pop()

    threads = [threading.Thread(target=work) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert max(peak) == 2
    assert not semaphore.locked()


def test_dead_holder_lease_expires_while_others_keep_the_item_busy(cache):
    dead = BoundedSemaphore(cache, 'sem', value=2, expire=0.5)
    assert dead.acquire()  # never released: its holder "died"
    busy = BoundedSemaphore(cache, 'sem', value=2, expire=0.5)
    began = time.monotonic()
    while time.monotonic() - began < 0.7:  # keep writing the item, refreshing its expiry
        with busy:
            time.sleep(0.02)
    first = BoundedSemaphore(cache, 'sem', value=2, expire=5)
    second = BoundedSemaphore(cache, 'sem', value=2, expire=5)
    assert first.acquire(blocking=False) and second.acquire(blocking=False)  # both slots free
    with pytest.raises(ValueError, match='expired'):
        dead.release()
    assert first.locked()
    first.release()
    second.release()


# --- Averager ---------------------------------------------------------------------------------------


def test_averager_matches_arithmetic_mean(cache):
    average = Averager(cache, 'latency')
    assert average.get() is None
    values = [0.08, 0.12, 0.16, 1.5, 3.25, 0.0]
    for value in values:
        average.add(value)
    assert average.get() == pytest.approx(statistics.fmean(values))
    assert average.pop() == pytest.approx(statistics.fmean(values))
    assert average.get() is None and 'latency' not in cache


def test_averager_from_many_threads(cache):
    average = Averager(cache, 'mean', expire=60, tag='stats')
    threads = [threading.Thread(target=lambda i=i: [average.add(i) for _ in range(10)]) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert average.get() == pytest.approx(3.5)
    assert cache.get('mean', tag=True)[1] == 'stats'


# --- throttle ---------------------------------------------------------------------------------------


def test_throttle_holds_its_rate(cache):
    calls = []

    @throttle(cache, 10, 0.5)  # 20 calls a second, bursts of up to 10
    def tick():
        calls.append(time.monotonic())

    def hammer(until):
        while time.monotonic() < until:
            tick()

    until = time.monotonic() + 2.0
    threads = [threading.Thread(target=hammer, args=(until,)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    calls.sort()
    steady = calls[10:]  # after the initial burst
    rate = (len(steady) - 1) / (steady[-1] - steady[0])
    assert 18 <= rate <= 22, rate
    assert 45 <= len(calls) <= 55  # 10 burst + 20/s for 2 s


def test_throttle_uses_given_clock_and_sleep(cache):
    now = [1000.0]
    sleeps = []

    def sleep(seconds):
        sleeps.append(seconds)
        now[0] += seconds

    @throttle(cache, 2, 1, name='clocked', time_func=lambda: now[0], sleep_func=sleep)
    def call():
        return now[0]

    assert [call(), call()] == [1000.0, 1000.0]  # the burst
    assert call() == pytest.approx(1000.5)  # then one every half second
    assert sleeps == [pytest.approx(0.5)]
    with pytest.raises(ValueError):
        throttle(cache, 0, 1)


# --- barrier ----------------------------------------------------------------------------------------


def _overlaps(intervals):
    intervals = sorted(intervals)
    return max(
        sum(1 for start, end in intervals if start <= moment < end) for moment, _ in intervals
    )


def test_barrier_with_lock_serializes(cache):
    intervals = []

    @barrier(cache, Lock)
    def work():
        start = time.monotonic()
        time.sleep(0.05)
        intervals.append((start, time.monotonic()))

    threads = [threading.Thread(target=work) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(intervals) == 5
    assert _overlaps(intervals) == 1


def test_barrier_with_semaphore_allows_its_value(cache):
    intervals = []

    @barrier(cache, functools.partial(BoundedSemaphore, value=2), name='pair', expire=30)
    def work():
        start = time.monotonic()
        time.sleep(0.1)
        intervals.append((start, time.monotonic()))

    threads = [threading.Thread(target=work) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert _overlaps(intervals) == 2
    assert work.__name__ == 'work'
