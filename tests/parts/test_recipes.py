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
from diskcache_core._recipes.locks import backoff_delays

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
    waited = time.monotonic() - began
    assert 0.18 < waited < 10, waited  # it waited its timeout, then gave up (a loose bound above)
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


def test_a_shared_lock_object_keeps_each_threads_hold_apart(cache):
    """One Lock object used by several threads (as ``barrier`` uses one): a thread whose hold
    ended (expired; removed here as expiry would) cannot release the next holder's lock."""
    lock = Lock(cache, 'lock')
    taken, taken_over = threading.Event(), threading.Event()
    late_release = []

    def old_holder():
        assert lock.acquire(blocking=False)
        taken.set()
        taken_over.wait(30)
        try:
            lock.release()  # its hold ended: this must not release the new holder's lock
            late_release.append('released')
        except RuntimeError:
            late_release.append('refused')

    thread = threading.Thread(target=old_holder)
    thread.start()
    assert taken.wait(30)
    cache.delete('lock')  # its hold expires
    assert lock.acquire(blocking=False)  # this thread takes the lock through the same object
    taken_over.set()
    thread.join(30)
    assert late_release == ['refused']
    assert lock.locked()  # the late release did not remove this thread's lock
    lock.release()
    assert not lock.locked()


def test_a_lock_may_be_released_by_a_thread_that_did_not_acquire_it(cache):
    lock = Lock(cache, 'lock')
    assert lock.acquire()
    assert in_thread(lock.release) == ('ok', None)  # as threading.Lock allows
    assert not lock.locked()
    with pytest.raises(RuntimeError):
        lock.release()  # nothing is held through the object any more


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
    # A 1 ms spin would try ~1000 times in a second; capped backoff (<= 50 ms) about 20-60 on
    # an idle machine. A loaded one only makes fewer attempts; a few must still be made.
    assert 5 <= next(attempts) <= 100
    delays = list(itertools.islice(backoff_delays(), 20))
    assert delays[0] <= 0.001 and max(delays) <= 0.05
    assert len(set(delays)) == len(delays)  # jittered
    assert delays[-1] >= 0.025  # grown to the cap


@pytest.mark.slow
def test_lock_serializes_read_modify_write_across_processes(tmp_path):
    directory = str(tmp_path / 'cache')
    diskcache_core.Cache(directory).close()
    context = _spawn()
    start, ready = context.Event(), context.Queue()
    workers = [
        context.Process(target=memo_helpers.locked_increment_worker, args=(directory, 200, start, ready))
        for _ in range(8)
    ]
    for worker in workers:
        worker.start()
    for _ in workers:  # all have imported and opened the cache: they start together
        ready.get(timeout=120)
    start.set()
    for worker in workers:
        worker.join(300)  # ~10 s on a loaded machine; the bound only keeps a deadlock finite
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
        assert lock.acquire(timeout=expire + 30)
        # Taken once the dead holder's lock expired (`expire` after it took it, before
        # acquired_at): a bound loose enough for a loaded machine, far below "never".
        assert time.monotonic() - acquired_at < expire + 10
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
    held, tried = threading.Event(), threading.Event()
    order = []

    def owner():
        rlock = RLock(cache, 'rlock')
        with rlock:
            held.set()
            tried.wait(10)
            time.sleep(0.1)  # the waiter is (most likely) polling by now; correct either way
            order.append('owner releases')

    thread = threading.Thread(target=owner)
    thread.start()
    assert held.wait(10)
    waiter = RLock(cache, 'rlock')
    assert waiter.acquire(blocking=False) is False  # held by another thread
    tried.set()
    assert waiter.acquire(timeout=30)  # waits for the owner ...
    order.append('waiter acquired')
    assert order == ['owner releases', 'waiter acquired']  # ... until it released
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
    for bad in (-1, 1.5, True, '2'):
        with pytest.raises(ValueError):
            BoundedSemaphore(cache, 'bad', value=bad)
    never = BoundedSemaphore(cache, 'none', value=0)  # as threading's: no slot at all
    assert not never.acquire(blocking=False)
    whole = BoundedSemaphore(cache, 'whole', value=2.0)  # as python-diskcache takes it
    assert whole.acquire(blocking=False) and whole.acquire(blocking=False)
    assert not whole.acquire(blocking=False)


def test_bounded_semaphore_limits_concurrency_across_threads(cache):
    semaphore = BoundedSemaphore(cache, 'sem', value=2)
    inside = []
    peak = []
    guard = threading.Lock()
    two_inside = threading.Event()

    def work():
        with semaphore:
            with guard:
                inside.append(1)
                peak.append(len(inside))
                if len(inside) == 2:
                    two_inside.set()
            # The first holder waits for a second: the semaphore must let two in at once,
            # however the threads are scheduled (one alone would wait here in vain).
            two_inside.wait(10)
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


@pytest.mark.parametrize('value', [10**400, -(10**400), 10**5000], ids=['1e400', '-1e400', '1e5000'])
def test_averager_refuses_an_int_too_large_for_a_float_average(cache, value):
    # Not OverflowError (which names nothing), nor str()'s digit-limit ValueError for 10**5000.
    average = Averager(cache, 'mean')
    average.add(2)
    with pytest.raises(ValueError, match=r'^value \(an int of \d+ bits\) is too large for a float'):
        average.add(value)
    with pytest.raises(OverflowError):  # what python-diskcache raises: caught by either name
        average.add(value)
    assert average.get() == 2.0  # the average is untouched
    average.add(2**1000)  # a big int a float holds is still averaged
    assert average.get() == pytest.approx((2 + 2.0**1000) / 2)


# --- throttle ---------------------------------------------------------------------------------------


def test_throttle_holds_its_rate(cache):
    """Two threads calling as fast as they can: a burst of 10 calls, then 20 a second.

    Checked on the bucket's own clock (when each call took its token), which a loaded machine
    can only make later: so "never faster than the rate" holds exactly, under any load.
    """
    token_time = threading.local()
    calls = []

    def clock():
        token_time.now = time.time()
        return token_time.now

    @throttle(cache, 10, 0.5, time_func=clock)  # 20 calls a second, bursts of up to 10
    def tick():
        calls.append(token_time.now)  # this thread's last reading: the one that got the token

    def hammer():
        for _ in range(25):
            tick()

    threads = [threading.Thread(target=hammer) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    calls.sort()
    assert len(calls) == 50
    # By each call, at most the burst plus 20 a second since the first (float slack only).
    for number, moment in enumerate(calls, start=1):
        assert number <= 10 + 20 * (moment - calls[0]) + 1e-3, (number, moment - calls[0])
    # Not held back much more than the rate needs: 40 calls after the burst take 2 s.
    assert calls[-1] - calls[0] < 6.0, calls[-1] - calls[0]


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
    for count, seconds in [(0, 1), (1, 0), (float('nan'), 1), (1, float('inf')),
                           (10**400, 1), (1, 10**400), (1e-300, 1e300), (1e300, 1e-300)]:
        with pytest.raises(ValueError):  # (the last two: no rate a float can hold)
            throttle(cache, count, seconds)
    for count, seconds in [('5', 1), (True, 1), (1, '1'), (None, 1)]:
        with pytest.raises(TypeError):
            throttle(cache, count, seconds)


def _fake_clock(start):
    now = [start]

    def sleep(seconds):
        if len(sleeps) > 1000:
            raise AssertionError('the throttle never lets the call through')
        sleeps.append(seconds)
        now[0] += seconds

    sleeps = []
    return now, sleep, sleeps


def test_throttle_with_a_count_below_one_calls_at_its_rate(cache):
    now, sleep, _ = _fake_clock(1000.0)

    @throttle(cache, 0.5, 1, name='half', time_func=lambda: now[0], sleep_func=sleep)
    def call():
        return now[0]

    times = [call() for _ in range(4)]  # one call every 2 s (0.5 a second), the first at once
    assert times == pytest.approx([1000.0, 1002.0, 1004.0, 1006.0])


def test_throttle_with_a_clock_that_restarted_does_not_wait_out_the_difference(cache):
    # A bucket written at 1,000,000 s of one clock, read with another at 5 s (time_func =
    # time.monotonic across a reboot): one rate interval of waiting, not 999,995 s.
    now, sleep, sleeps = _fake_clock(1_000_000.0)

    def job():
        return now[0]

    first = throttle(cache, 3, 1, name='restart', time_func=lambda: now[0], sleep_func=sleep)(job)
    assert [first() for _ in range(3)] == [1_000_000.0] * 3  # the burst: the bucket is empty
    now[0] = 5.0
    again = throttle(cache, 3, 1, name='restart', time_func=lambda: now[0], sleep_func=sleep)(job)
    times = [again() for _ in range(3)]
    assert times == pytest.approx([5 + 1 / 3, 5 + 2 / 3, 6.0])
    assert max(sleeps) <= 1 / 3 + 1e-6


@pytest.mark.parametrize(
    'start, count, seconds, offsets',
    [(1000.0, 5, 2, [0] * 5 + [0.4, 0.8, 1.2]), (1.7e9, 3, 1, [0, 0, 0, 1 / 3, 2 / 3, 1])],
    ids=['at-1000', 'at-1.7e9'],
)
def test_throttle_waits_survive_float_rounding(cache, start, count, seconds, offsets):
    # After a burst, the refill to one token computes a rounding remainder short of it, and a
    # wait for it that a clock only sleep_func advances cannot make: 2e-14 s at 1000.4, and
    # 8e-8 s at 1.7e9 (time.time()'s scale), where a clock moves by 2.4e-7 s at least.
    now, sleep, sleeps = _fake_clock(start)

    @throttle(cache, count, seconds, name='rounding', time_func=lambda: now[0], sleep_func=sleep)
    def call():
        return now[0]

    times = [call() for _ in offsets]
    assert [moment - start for moment in times] == pytest.approx(offsets, abs=1e-6)
    assert len(sleeps) <= 2 * (len(offsets) - count)


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

    inside = []
    two_inside = threading.Event()

    @barrier(cache, functools.partial(BoundedSemaphore, value=2), name='pair', expire=30)
    def work():
        start = time.monotonic()
        inside.append(1)
        if len(inside) >= 2:
            two_inside.set()
        two_inside.wait(10)  # the first caller waits for a second one to be let in
        time.sleep(0.1)
        intervals.append((start, time.monotonic()))

    threads = [threading.Thread(target=work) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert _overlaps(intervals) == 2
    assert work.__name__ == 'work'


def test_a_semaphore_reads_the_count_python_diskcache_left(cache):
    # python-diskcache keeps the number of free slots: all 2 free, then 1 of 2 held by it.
    cache.set('sem', 2)
    semaphore = BoundedSemaphore(cache, 'sem', value=2)
    assert semaphore.acquire(blocking=False) and semaphore.acquire(blocking=False)
    assert not semaphore.acquire(blocking=False)
    semaphore.release()
    semaphore.release()
    cache.set('sem', 1)
    assert semaphore.acquire(blocking=False)
    assert not semaphore.acquire(blocking=False) and semaphore.locked()
    semaphore.release()
    cache.set('sem', 'not a semaphore')
    with pytest.raises(TypeError, match="not a semaphore's leases"):
        semaphore.acquire(blocking=False)


@pytest.mark.parametrize('kind', [Lock, RLock, BoundedSemaphore])
def test_a_hold_that_would_expire_as_it_is_taken_is_refused(cache, kind):
    for expire in (0, -1, float('nan')):
        with pytest.raises(ValueError, match='expire'):
            kind(cache, 'held', expire=expire)
    with pytest.raises(TypeError):
        kind(cache, 'held', expire='60')
    with pytest.raises(ValueError, match='expire'):
        barrier(cache, Lock, expire=0)


# 0 and below, or so little that time.time() + expire == time.time(): a hold that has expired as
# it is taken excludes nobody, a throttle bucket or an average that expires as stored is no
# limit and no average. Each used to be accepted and silently do nothing.
USELESS_EXPIRIES = [0, -1, 1e-320, 1e-9]


@pytest.mark.parametrize('expire', USELESS_EXPIRIES)
def test_every_recipe_refuses_an_expiry_that_ends_as_it_is_set(cache, expire):
    recipes = [
        lambda: Lock(cache, 'L', expire=expire),
        lambda: RLock(cache, 'R', expire=expire),
        lambda: BoundedSemaphore(cache, 'S', expire=expire),
        lambda: Averager(cache, 'A', expire=expire),
        lambda: throttle(cache, 1, 60, expire=expire),
        lambda: barrier(cache, Lock, expire=expire),
    ]
    for make in recipes:
        with pytest.raises(ValueError, match='^expire must be > 0 seconds'):
            make()
    assert len(cache) == 0


def test_a_short_expiry_that_moves_the_clock_is_still_taken(cache):
    lock = Lock(cache, 'L', expire=1e-3)  # short, but later than now
    assert lock.acquire(blocking=False)
    average = Averager(cache, 'A', expire=60)
    average.add(1.0)
    assert average.get() == 1.0
    now, sleep, sleeps = _fake_clock(1000.0)

    @throttle(cache, 1, 60, name='limited', expire=3600, time_func=lambda: now[0], sleep_func=sleep)
    def limited():
        return now[0]

    assert [limited(), limited()] == [1000.0, pytest.approx(1060.0)]  # the limit holds
    assert sleeps == [pytest.approx(60.0)]


@pytest.mark.parametrize('kind', [Lock, RLock, BoundedSemaphore])
def test_a_nan_timeout_is_refused_not_waited_on_for_ever(cache, kind):
    holder = kind(cache, 'busy') if kind is not BoundedSemaphore else kind(cache, 'busy', value=1)
    assert holder.acquire()
    waiter = kind(cache, 'busy') if kind is not BoundedSemaphore else kind(cache, 'busy', value=1)
    result: list[object] = []

    def wait() -> None:
        try:
            result.append(waiter.acquire(timeout=float('nan')))
        except ValueError as exc:
            result.append(exc)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    thread.join(60)
    assert len(result) == 1 and isinstance(result[0], ValueError), result
    holder.release()
