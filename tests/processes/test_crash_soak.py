"""Invariants 1 and 2 under random SIGKILLs of processes doing every kind of write.

Workers set, add, delete, pop, incr and run transactions (some rolled back) on self-verifying
values of every size, inline and file-stored, while the test kills them at random moments.
Afterwards no value reads back corrupt, no row names a missing or wrong-sized file, and what a
crash can leave (unnamed files, empty directories) is exactly what check(fix=True) removes.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import random
import signal
import time

import pytest

import diskcache_core as dc

SIZES = (50, 2_000, 40_000, 300_000, 1_500_000)  # inline and file-stored (32 KiB threshold)
KILLS = 30
WORKERS = 3


def _value() -> bytes:
    body = os.urandom(16) * (random.choice(SIZES) // 16)
    return hashlib.sha256(body).digest() + body


def _intact(value: object) -> bool:
    if isinstance(value, int):
        return True
    assert isinstance(value, bytes)
    return hashlib.sha256(value[32:]).digest() == value[:32]


def _worker(directory: str, seed: int) -> None:
    random.seed(seed)
    cache = dc.Cache(directory, size_limit=32 * 2**20)
    while True:  # runs until the test kills it
        key = random.randrange(100)
        choice = random.random()
        try:
            if choice < 0.35:
                cache.set(key, _value(), expire=random.choice([None, None, 0.5]))
            elif choice < 0.55:
                value = cache.get(key)
                if value is not None and not _intact(value):
                    os._exit(3)
            elif choice < 0.65:
                cache.delete(key)
            elif choice < 0.72:
                value = cache.pop(key)
                if value is not None and not _intact(value):
                    os._exit(3)
            elif choice < 0.80:
                cache.add(key, _value())
            elif choice < 0.88:
                cache.incr(f"counter-{key % 5}")
            else:
                with cache.transact():
                    cache.set(key, _value())
                    cache.set(key + 1000, _value())
                    if random.random() < 0.3:
                        raise RuntimeError("roll back")
        except (RuntimeError, dc.Timeout):
            pass


@pytest.mark.slow
def test_random_kills_never_corrupt_or_dangle(tmp_path):
    directory = str(tmp_path / "cache")
    context = multiprocessing.get_context("fork")
    rng = random.Random(7)
    workers: dict[int, multiprocessing.process.BaseProcess] = {}
    seed = 0
    for _ in range(KILLS):
        while len(workers) < WORKERS:
            seed += 1
            process = context.Process(target=_worker, args=(directory, seed))
            process.start()
            workers[process.pid] = process
        time.sleep(rng.uniform(0.05, 0.5))
        for pid, process in list(workers.items()):
            assert process.exitcode is None, f"worker exited by itself with {process.exitcode}"
        victim = rng.choice(sorted(workers))
        os.kill(victim, signal.SIGKILL)
        workers.pop(victim).join(timeout=30)
    for process in workers.values():
        os.kill(process.pid, signal.SIGKILL)
        process.join(timeout=30)

    cache = dc.Cache(directory)
    keys = list(cache)
    assert keys, "the workers stored nothing: the test proves nothing"
    for key in keys:
        value = cache.get(key)
        assert value is None or _intact(value), f"corrupt value under {key!r}"
    found = [str(warning.message) for warning in cache.check()]
    dangling = [w for w in found if "unknown file" not in w and "empty directory" not in w]
    assert dangling == [], dangling  # rows naming missing or partial files, wrong totals
    cache.check(fix=True)
    assert cache.check() == []
