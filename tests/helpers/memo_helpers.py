"""Worker functions for the multiprocess tests of memoize, memoize_stampede and the recipes.

Top-level functions of an importable module, with picklable arguments, so that they run under
the ``spawn`` start method. Every worker opens its own Cache on the shared directory and counts
what it did in the cache itself (``incr`` on a side key), which is what the tests check.

Run as a script (``python memo_helpers.py keys DIRECTORY``) it prints, as JSON, the memoize keys
of `KEY_CASES` and their database keys, and calls a memoized function once: the key-stability
test runs it in fresh interpreters with different hash seeds.
"""

from __future__ import annotations

import json
import os
import sys
import time

# Arguments whose keys must be equal in every process: tuples of str/bytes/int/float/None/bool.
KEY_CASES = [
    (),
    (0,),
    (1, 2.5, 'text', b'\x00\xffbytes', None, True, False),
    ('é ü ✓', '\ud800 lone surrogate', ''),
    ((1, (2, ('deep', b'x'))), -0.0, 1e300, 2**70, -(2**63)),
    (float('inf'), float('-inf'), 0.1 + 0.2),
    ('same', 'same', ''.join(['sa', 'me'])),  # equal strings, one or two objects
]
KEYWORD_CASES = [{'b': 1, 'a': 'x'}, {'z': None, 'y': (1, 2)}]


def _cache(directory: str, **settings):
    import diskcache_core

    return diskcache_core.Cache(directory, **settings)


def memoized_square(cache):
    """``square`` memoized in `cache`; every real execution increments the 'runs' item."""

    @cache.memoize(name='memo_helpers.square')
    def square(number):
        cache.incr('runs')
        return number * number

    return square


def report_keys(directory: str) -> dict:
    """Keys of KEY_CASES / KEYWORD_CASES and their database keys, plus a call to square(7)."""
    cache = _cache(directory)

    @cache.memoize(name='memo_helpers.keys')
    def function(*args, **kwargs):
        return None

    keys = [function.__cache_key__(*args) for args in KEY_CASES]
    keys += [function.__cache_key__(1, **kwargs) for kwargs in KEYWORD_CASES]
    db_keys = []
    for key in keys:
        db_key, raw = cache.disk.put(key)
        db_keys.append([db_key if isinstance(db_key, str) else db_key.hex(), raw])
    square = memoized_square(cache)
    result = square(7)
    runs = cache.get('runs', 0)
    cache.close()
    return {'keys': keys, 'db_keys': db_keys, 'square': result, 'runs': runs}


# --- memoize_stampede ----------------------------------------------------------------------------


def slow_value(cache, seconds: float, label: str) -> str:
    """The function the stampede tests memoize: counts its runs (and stamps when the last one
    started, in 'computation_started'), then takes `seconds`."""
    cache.incr('runs', retry=True)
    cache.set('computation_started', time.time(), retry=True)
    time.sleep(seconds)
    return f'{label}:{os.getpid()}'


def single_flight_worker(
    directory: str, start, results, seconds: float, lock_expire: float, ready=None
) -> None:
    """Call a single-flight memoized ``slow_value`` once `start` is set; put the result in `results`.

    With a `ready` queue, put this process's pid there first: it has imported everything and
    is about to wait for `start`.
    """
    import diskcache_core

    cache = _cache(directory)

    @diskcache_core.memoize_stampede(
        cache, expire=60, name='stampede.slow', single_flight=True, lock_expire=lock_expire
    )
    def slow(label):
        return slow_value(cache, seconds, label)

    if ready is not None:
        ready.put(os.getpid())
    start.wait(120)
    began = time.monotonic()
    try:
        value = slow('shared')
        results.put((os.getpid(), value, time.monotonic() - began, None))
    except BaseException as exc:  # reported to the test
        results.put((os.getpid(), None, time.monotonic() - began, repr(exc)))
    cache.close()


def hanging_computer(directory: str, started, lock_expire: float) -> None:
    """Start computing a single-flight value, signal `started`, then hang until killed."""
    import diskcache_core

    cache = _cache(directory)

    @diskcache_core.memoize_stampede(
        cache, expire=60, name='stampede.slow', single_flight=True, lock_expire=lock_expire
    )
    def slow(label):
        cache.set('hanging_since', time.time())  # it holds the lock from just before this
        started.set()
        time.sleep(600)
        return 'never'

    slow('shared')


# --- recipes -------------------------------------------------------------------------------------


def locked_increment_worker(directory: str, iterations: int, start, ready=None) -> None:
    """`iterations` non-atomic read-modify-write increments of 'total', each under the Lock.

    With a `ready` queue, put this process's pid there before waiting for `start`.
    """
    import diskcache_core

    cache = _cache(directory)
    lock = diskcache_core.Lock(cache, 'total-lock', expire=30)
    if ready is not None:
        ready.put(os.getpid())
    start.wait(120)
    for _ in range(iterations):
        with lock:
            value = cache.get('total', 0)
            cache.set('total', value + 1)
    cache.close()


def lock_holder(directory: str, key: str, expire: float, acquired) -> None:
    """Take Lock `key` (with `expire`), signal `acquired`, then hang until killed."""
    import diskcache_core

    cache = _cache(directory)
    diskcache_core.Lock(cache, key, expire=expire).acquire()
    acquired.set()
    time.sleep(600)


def rlock_probe(directory: str, key: str, results) -> None:
    """From another process: try to take and to release RLock `key`; report both outcomes."""
    import diskcache_core

    cache = _cache(directory)
    rlock = diskcache_core.RLock(cache, key)
    took = rlock.acquire(blocking=False)
    try:
        rlock.release()
        released = 'released'
    except RuntimeError as exc:
        released = f'RuntimeError: {exc}'
    results.put((took, released))
    cache.close()


if __name__ == '__main__':
    if len(sys.argv) != 3 or sys.argv[1] != 'keys':
        sys.exit('usage: memo_helpers.py keys DIRECTORY')
    print(json.dumps(report_keys(sys.argv[2])))
