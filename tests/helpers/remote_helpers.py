"""Process bodies for the remote-tier tests (importable, so that spawned children can run them).

A simulated host is a directory; its processes are children given that directory. Every loop is
bounded in count and in time.
"""

from __future__ import annotations

import os
import time

import diskcache_core

WAIT = 30.0  # seconds any wait for an expected event may take before the test fails


def eventually(check, deadline=WAIT):
    """Wait until `check()` is true (polled), failing the test after `deadline` seconds."""
    limit = time.monotonic() + deadline
    while time.monotonic() < limit:
        if check():
            return
        time.sleep(0.002)
    raise AssertionError("condition never held")


def open_cache(directory, options):
    """`options`: the Cache settings of the test (remote=, remote_prefix=, ...)."""
    return diskcache_core.Cache(directory, **options)


def incr_many(directory, options, key, count, results):
    cache = open_cache(directory, options)
    for _ in range(count):
        cache.incr(key)
    results.put(("done", os.getpid()))
    cache.close()


def race_add(directory, options, key, start, results):
    cache = open_cache(directory, options)
    start.wait(WAIT)
    results.put(cache.add(key, os.getpid()))
    cache.close()


def wait_for_value(cache, key, expected, deadline=WAIT):
    """Poll `key` until it reads `expected` (bounded); the number of reads it took."""
    limit = time.monotonic() + deadline
    reads = 0
    while time.monotonic() < limit:
        reads += 1
        if cache.get(key) == expected:
            return reads
        time.sleep(0.001)
    raise AssertionError(f"{key!r} never read {expected!r} within {deadline} s: {cache.get(key)!r}")


def reader_until(directory, options, key, expected, ready, results):
    """Read `key` (warming this host's copies), say ready, then wait to see `expected`."""
    cache = open_cache(directory, options)
    for _ in range(3):
        cache.get(key)
    ready.set()
    try:
        wait_for_value(cache, key, expected)
        results.put(("saw", expected))
    except AssertionError as exc:
        results.put(("never", str(exc)))
    cache.close()


def hold_listener(directory, options, key, ready):
    """Open the cache, become the host's listener (waits for the lease), read, then idle."""
    cache = open_cache(directory, options)
    limit = time.monotonic() + WAIT
    while time.monotonic() < limit and not cache._remote._words.lease_valid():
        time.sleep(0.01)
    cache.get(key)
    ready.set()
    time.sleep(WAIT * 4)  # killed by the test


def staleness_reader(directory, options, key, done, results, most=200_000):
    """Read `key` until `done` is set (at most `most` reads, and a bounded time); send the
    reads as (started-at, value), with time.time(), shared by every process of the machine."""
    cache = open_cache(directory, options)
    reads = []
    limit = time.monotonic() + WAIT * 2
    while not done.is_set() and len(reads) < most and time.monotonic() < limit:
        start = time.time()
        reads.append((start, cache.get(key, -1)))
        if len(reads) % 64 == 0:
            time.sleep(0.0005)  # let the other processes of this loaded machine run too
    results.put(("reads", reads))
    cache.close()


def staleness_writer(directory, options, key, count, done, results, pause=0.002):
    cache = open_cache(directory, options)
    returned = []
    for value in range(1, count + 1):
        cache.set(key, value)
        returned.append((value, time.time()))
        time.sleep(pause)
    time.sleep(0.2)
    done.set()
    results.put(("written", returned))
    cache.close()


def hold_lock(directory, options, key, lease, ready):
    """Hold a Lock without expire (a remote lease of `lease` seconds, renewed) until killed."""
    from diskcache_core._recipes import leases as _leases

    _leases.REMOTE_LEASE = lease
    cache = open_cache(directory, options)
    assert diskcache_core.Lock(cache, key).acquire(timeout=WAIT)
    ready.set()
    time.sleep(WAIT * 4)  # killed by the test


def fanout_leases_valid(cache):
    """Whether every shard of FanoutCache `cache` serves copies (its listener's lease holds)."""
    return all(shard._remote._words.lease_valid() for shard in cache._shards)


def hold_fanout(directory, options, shards, ready):
    """Open a FanoutCache with a remote, wait until each shard's lease holds (whichever process
    listens), say ready, then idle until killed."""
    cache = diskcache_core.FanoutCache(directory, shards=shards, **options)
    limit = time.monotonic() + WAIT
    while time.monotonic() < limit and not fanout_leases_valid(cache):
        time.sleep(0.01)
    ready.set()
    time.sleep(WAIT * 4)  # killed by the test


def in_forked_child(body):
    """Whether `body()` returned True in a forked child of this process (the child exits at
    once after it, however it ends)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            code = 0 if body() else 2
        finally:
            os.write(write, bytes([code]))
            os._exit(0)
    os.close(write)
    try:
        return os.read(read, 1) == b"\x00"
    finally:
        os.close(read)
        os.waitpid(pid, 0)
