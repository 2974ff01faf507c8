"""Crash safety (Invariants 1 and 2): processes killed with SIGKILL at random moments never
leave a row naming a missing or partial value file, and check(fix=True) removes what they
orphaned."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time

import pytest
from store_helpers import (
    all_files,
    category_of,
    crash_writer,
    transaction_holder,
    unnamed_files,
    value_problem,
    warning_text,
)

import diskcache_core as dc

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not hasattr(signal, 'SIGKILL'), reason='needs SIGKILL')]

SPAWN = multiprocessing.get_context('spawn')
ORPHAN_WARNINGS = (dc.UnknownFileWarning, dc.EmptyDirWarning)


def _kill_after(target, args, delay: float) -> None:
    ready = SPAWN.Event()
    process = SPAWN.Process(target=target, args=args + (ready,))
    process.start()
    try:
        assert ready.wait(60), 'the child never became ready'
        time.sleep(delay)
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.join(30)
    assert process.exitcode == -signal.SIGKILL, process.exitcode


def _verify_complete(directory: str) -> None:
    """Every present item reads back complete; pairs written in one transaction agree."""
    with dc.Cache(directory) as cache:
        keys = list(cache)
        for key in keys:
            value = cache.get(key)
            if value is None:
                continue  # deleted since listed
            if isinstance(value, dict):
                value = value['value']
            problem = value_problem(value)
            assert problem is None, '%r: %s' % (key, problem)
            if isinstance(key, str) and key.startswith('crash-'):
                with cache.read(key) as handle:
                    assert value_problem(handle.read()) is None, key
        assert cache.get('pair-a') == cache.get('pair-b'), 'a transaction was half applied'
        warns = cache.check()
        unexpected = [w for w in warns if not issubclass(category_of(w), ORPHAN_WARNINGS)]
        assert unexpected == [], warning_text(unexpected)


def test_sigkill_during_large_writes(cache_dir):
    seed = random.randrange(1_000_000)
    rng = random.Random(seed)
    dc.Cache(cache_dir).close()
    for iteration in range(7):
        _kill_after(crash_writer, (cache_dir, seed + iteration), rng.uniform(0.1, 1.2))
        _verify_complete(cache_dir)
        if iteration == 3:
            with dc.Cache(cache_dir) as cache:
                cache.check(fix=True)
            _verify_complete(cache_dir)
    with dc.Cache(cache_dir) as cache:
        assert len(cache) > 0, 'the writer never committed anything (seed %d)' % seed
        cache.check(fix=True)
        assert warning_text(cache.check()) == []
    leftovers = unnamed_files(cache_dir)
    assert leftovers == set(), leftovers
    assert not [path for path in all_files(cache_dir) if path.endswith('.tmp')]
    _verify_complete(cache_dir)


def test_sigkill_inside_transaction_rolls_back_and_frees_the_lock(cache_dir):
    with dc.Cache(cache_dir) as cache:
        cache.set('committed', 'yes')
    _kill_after(transaction_holder, (cache_dir,), 0.2)
    with dc.Cache(cache_dir, timeout=10) as cache:
        assert 'uncommitted' not in cache and 'uncommitted-small' not in cache
        assert cache['committed'] == 'yes'
        cache.set('after-crash', 1)  # the dead process's lock is gone (else: Timeout after 10 s)
        cache.check(fix=True)
        assert warning_text(cache.check()) == []
        assert len(cache) == 2
    assert unnamed_files(cache_dir) == set()
