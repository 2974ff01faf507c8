"""Threads sharing one Cache, and processes sharing one directory (Invariant 3: an operation
that returned in one process is seen by every later operation in every process)."""

from __future__ import annotations

import json
import multiprocessing
import random
import threading

import pytest
from store_helpers import (
    add_race_worker,
    incr_worker,
    make_value,
    mixed_worker,
    unnamed_files,
    value_problem,
    visibility_writer,
    wait_until,
    warning_text,
)

import diskcache_core as dc

SPAWN = multiprocessing.get_context('spawn')


def _run_threads(target, count):
    errors = []

    def wrapper(index):
        try:
            target(index)
        except BaseException as exc:  # reported below
            errors.append((index, repr(exc)))

    threads = [threading.Thread(target=wrapper, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads), 'a thread hung'
    assert errors == []


# --------------------------------------------------------------------------------------------
# Threads
# --------------------------------------------------------------------------------------------


def test_eight_threads_mixed_operations(cache):
    iterations = 150
    final = {}

    def work(index):
        rng = random.Random(index)
        mine = {}
        for number in range(iterations):
            key = (index, rng.randrange(10))
            action = rng.random()
            if action < 0.35:
                value = make_value(index * 10_000 + number, rng.choice([50, 2000, 60_000]))
                assert cache.set(key, value, retry=True)
                mine[key] = value
            elif action < 0.6:
                got = cache.get(key, retry=True)
                assert got == mine.get(key)
            elif action < 0.7:
                assert cache.delete(key, retry=True) is (key in mine)
                mine.pop(key, None)
            elif action < 0.8:
                added = cache.add(key, b'added', retry=True)
                assert added is (key not in mine)
                mine.setdefault(key, b'added')
            else:
                cache.incr('shared-counter', retry=True)
                cache.incr(('counter', index), retry=True)
        final[index] = mine

    _run_threads(work, 8)
    increments = sum(cache.get(('counter', index), 0) for index in range(8))
    assert cache['shared-counter'] == increments
    for mine in final.values():
        for key, value in mine.items():
            assert cache[key] == value
            assert value == b'added' or value_problem(value) is None
    keys = [key for key in cache if isinstance(key, tuple) and isinstance(key[0], int)]
    assert len(keys) == sum(len(mine) for mine in final.values())
    assert warning_text(cache.check()) == []


def test_threads_transact_atomic_pairs(cache):
    def work(index):
        for _ in range(50):
            with cache.transact(retry=True):
                cache.incr('a', retry=True)
                cache.incr('b', retry=True)

    observed = []

    def watch(index):
        for _ in range(100):
            with cache.transact(retry=True):
                observed.append((cache.get('a', 0), cache.get('b', 0)))

    _run_threads(lambda index: work(index) if index < 4 else watch(index), 6)
    assert cache['a'] == cache['b'] == 200
    assert all(a == b for a, b in observed)


def test_threads_read_while_others_write(cache):
    cache.set('stable', b's' * 100_000)

    def work(index):
        for number in range(100):
            if index % 2:
                cache.set(('w', index), make_value(number, 40_000), retry=True)
            else:
                assert cache.get('stable') == b's' * 100_000
                value = cache.get(('w', index + 1))
                assert value is None or value_problem(value) is None

    _run_threads(work, 6)


# --------------------------------------------------------------------------------------------
# Processes (spawn: helpers are importable top-level functions)
# --------------------------------------------------------------------------------------------


def _join_all(processes, timeout=90):
    for process in processes:
        process.join(timeout)
    hung = [process for process in processes if process.is_alive()]
    for process in hung:
        process.kill()
        process.join(10)
    assert not hung, 'child processes hung'
    return [process.exitcode for process in processes]


def test_write_in_another_process_is_seen_at_once(cache_dir):
    reader = dc.Cache(cache_dir)
    try:
        reader.set('key', 'old')
        for _ in range(5):
            assert reader.get('key') == 'old'
        for number in range(3):
            process = SPAWN.Process(target=visibility_writer, args=(cache_dir, 'key', 'new-%d' % number))
            process.start()
            assert _join_all([process]) == [0]
            assert reader.get('key') == 'new-%d' % number
            assert reader['key'] == 'new-%d' % number
        process = SPAWN.Process(target=visibility_writer, args=(cache_dir, 'fresh', b'f' * 100_000))
        process.start()
        assert _join_all([process]) == [0]
        assert 'fresh' in reader
        assert reader.get('fresh') == b'f' * 100_000
    finally:
        reader.close()


@pytest.mark.slow
def test_eight_processes_incr_sum_exactly(cache_dir):
    dc.Cache(cache_dir).close()
    start = SPAWN.Event()
    keys = ['counter-a', 'counter-b']
    processes = [SPAWN.Process(target=incr_worker, args=(cache_dir, keys, 250, start)) for _ in range(8)]
    for process in processes:
        process.start()
    start.set()
    assert _join_all(processes, timeout=120) == [0] * 8
    with dc.Cache(cache_dir) as cache:
        assert cache['counter-a'] == 8 * 250
        assert cache['counter-b'] == 8 * 250
        # 8 processes x 500 increments in all
        assert cache['counter-a'] + cache['counter-b'] == 8 * 500


@pytest.mark.slow
def test_add_race_exactly_one_winner_per_key(cache_dir, tmp_path):
    dc.Cache(cache_dir).close()
    keys = ['key-%d' % number for number in range(100)]
    start = SPAWN.Event()
    results = [str(tmp_path / ('won-%d.json' % index)) for index in range(8)]
    processes = [
        SPAWN.Process(target=add_race_worker, args=(cache_dir, index, keys, start, results[index]))
        for index in range(8)
    ]
    for process in processes:
        process.start()
    start.set()
    assert _join_all(processes) == [0] * 8
    winners = {}
    for index, path in enumerate(results):
        with open(path) as handle:
            for key in json.load(handle):
                assert key not in winners, '%s added by %d and %d' % (key, winners[key], index)
                winners[key] = index
    assert sorted(winners) == sorted(keys)
    with dc.Cache(cache_dir) as cache:
        for key, index in winners.items():
            assert cache[key] == index


@pytest.mark.slow
def test_eight_processes_mixed_operations_leave_cache_consistent(cache_dir):
    dc.Cache(cache_dir).close()
    processes = [SPAWN.Process(target=mixed_worker, args=(cache_dir, seed, 300, 40)) for seed in range(8)]
    for process in processes:
        process.start()
    assert _join_all(processes, timeout=120) == [0] * 8
    with dc.Cache(cache_dir) as cache:
        assert warning_text(cache.check()) == []
        for key in cache:
            assert value_problem(cache[key]) is None, key
        assert wait_until(lambda: unnamed_files(cache_dir) == set()), unnamed_files(cache_dir)


@pytest.mark.slow
def test_processes_and_threads_share_a_cache(cache_dir):
    """Writers in child processes while threads of this process read and write."""
    cache = dc.Cache(cache_dir)
    try:
        processes = [SPAWN.Process(target=mixed_worker, args=(cache_dir, 100 + seed, 100, 20)) for seed in range(3)]
        for process in processes:
            process.start()

        def work(index):
            for number in range(150):
                key = 'key-%d' % ((index + number) % 20)
                if number % 3 == 0:
                    cache.set(key, make_value(index * 1000 + number, 50_000), retry=True)
                else:
                    value = cache.get(key, retry=True)
                    assert value is None or value_problem(value) is None

        _run_threads(work, 3)
        assert _join_all(processes) == [0] * 3
        assert warning_text(cache.check()) == []
    finally:
        cache.close()



def write_batches_and_close(directory: str, batches: int) -> None:
    """Another process's job: write a batch, close (its last connection checkpoints), again."""
    cache = dc.FanoutCache(directory, shards=1)
    for _ in range(batches):
        with cache.transact():
            for number in range(100):
                cache.set(number, 'x' * 3000)
        cache.close()


def test_a_read_on_a_new_connection_waits_out_a_closing_processs_checkpoint(tmp_path):
    # A thread's first read opens its connection, whose pragmas met the lock another
    # process's last close holds while it checkpoints: with a 10 ms timeout the get gave up
    # and a FanoutCache returned the default for a key that was there (a Cache raised Timeout).
    directory = str(tmp_path / 'c')
    cache = dc.FanoutCache(directory, shards=1, timeout=0.010, memory_size_limit=0)
    cache.set('k', 'v')
    writer = SPAWN.Process(target=write_batches_and_close, args=(directory, 300))
    writer.start()
    reads, wrong = 0, []
    try:
        while writer.is_alive() or reads < 200:  # for as long as the writer runs (a count)
            got = cache.get('k', 'MISS')
            if got != 'v':
                wrong.append(got)
            cache.close()  # the next read opens a new connection
            reads += 1
        writer.join(120)
        assert writer.exitcode == 0
    finally:
        if writer.is_alive():
            writer.kill()
        cache.close()
    assert wrong == []
