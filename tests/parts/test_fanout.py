"""FanoutCache: placement, the give-up contract under real contention, size limits, layout.

The shared conformance suite (conftest ``cache_class``) already runs every Cache API test on
FanoutCache; this module covers what only a sharded cache has.
"""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import pickle
import sqlite3
import subprocess
import sys
import threading
import time
import zlib

import pytest

import diskcache_core
from diskcache_core import FanoutCache, JSONDisk
from diskcache_core._fanout.fanout import placement_hash

import fanout_helpers

HERE = os.path.dirname(os.path.abspath(fanout_helpers.__file__))  # tests/helpers
ROOT = os.path.dirname(os.path.dirname(HERE))


def _spawn():
    return multiprocessing.get_context('spawn')


@pytest.fixture
def fanout(tmp_path):
    cache = FanoutCache(str(tmp_path / 'fanout'), shards=8, timeout=0.010)
    yield cache
    cache.close()


def _key_on_shard(cache, number, prefix='k'):
    for i in range(10_000):
        key = f'{prefix}{i}'
        if cache.shard_for(key) is cache.shards[number]:
            return key
    raise AssertionError('no key found for shard')


class _BusyShard:
    """Another *process* holding a write transaction on one shard of `cache`."""

    def __init__(self, cache, number=0):
        context = _spawn()
        self.ready, self.release = context.Event(), context.Event()
        self.process = context.Process(
            target=fanout_helpers.hold_shard_lock,
            args=(cache.shards[number].directory, self.ready, self.release),
        )

    def __enter__(self):
        self.process.start()
        assert self.ready.wait(60), 'the other process did not take the lock'
        return self

    def release_after(self, delay):
        timer = threading.Timer(delay, self.release.set)
        timer.daemon = True
        timer.start()

    def __exit__(self, *exc_info):
        self.release.set()
        self.process.join(30)
        assert self.process.exitcode == 0


# --- placement -------------------------------------------------------------------------------


KEY_FAMILIES = {
    'str': [f'user:{i}' for i in range(8000)],
    'bytes': [b'blob-%d' % i for i in range(8000)],
    'int stride 8': list(range(0, 64000, 8)),
    'int stride 1024': [i * 1024 for i in range(8000)],
    'tuple': [('page', i, 'en') for i in range(8000)],
}


@pytest.mark.parametrize('family', sorted(KEY_FAMILIES))
def test_keys_spread_evenly_over_shards(fanout, family):
    counts = [0] * 8
    for key in KEY_FAMILIES[family]:
        counts[fanout.shards.index(fanout.shard_for(key))] += 1
    # 1000 expected per shard; a binomial standard deviation is ~30, so +-15% is > 4 sigma.
    assert all(850 <= count <= 1150 for count in counts), counts
    # Chi-square with 7 degrees of freedom: 24.3 is the 0.1% critical value.
    chi2 = sum((count - 1000) ** 2 / 1000 for count in counts)
    assert chi2 < 24.3, (counts, chi2)


def test_placement_is_the_same_in_every_interpreter(fanout):
    keys = ['a', 'b', b'c', 17, 2**40, 1.5, ('t', 1), 'é']
    here = [fanout.shards.index(fanout.shard_for(key)) for key in keys]
    for seed in ('0', '12345'):
        out = subprocess.run(
            [sys.executable, '-c', f'import fanout_helpers; fanout_helpers.shard_numbers({keys!r}, {fanout.directory!r})'],
            capture_output=True, text=True, check=True, cwd=HERE,
            env={**os.environ, 'PYTHONHASHSEED': seed, 'PYTHONPATH': HERE + os.pathsep + ROOT},
        )
        assert json.loads(out.stdout) == here


GOLDEN_PLACEMENT = {'key': 4, 0: 5, 8: 4, b'x': 5, 1.5: 1, ('t', 1): 5, 'é': 3}


def test_placement_is_fixed_forever(fanout):
    # Changing the hash would strand every item in existing directories: pin it.
    assert {k: fanout.shards.index(fanout.shard_for(k)) for k in GOLDEN_PLACEMENT} == GOLDEN_PLACEMENT
    assert fanout.shard_for(1) is fanout.shard_for(1.0)  # equal keys in the database
    assert fanout.shard_for(2**62) is fanout.shard_for(float(2**62))
    for key in GOLDEN_PLACEMENT:  # the fast path agrees with the general one
        assert placement_hash(fanout.disk.put(key)[0]) % 8 == GOLDEN_PLACEMENT[key]


def test_placement_with_a_custom_disk(tmp_path):
    cache = FanoutCache(str(tmp_path / 'j'), disk=JSONDisk)
    for i in range(100):
        cache[('k', i)] = i
    assert all(cache[('k', i)] == i for i in range(100))
    assert len({id(cache.shard_for(('k', i))) for i in range(100)}) == 8
    cache.close()


def test_items_live_in_their_shard(fanout):
    for i in range(200):
        fanout[i] = i
    for i in range(200):
        assert i in fanout.shard_for(i)
        assert sum(i in shard for shard in fanout.shards) == 1
    assert len(fanout) == 200 == sum(len(shard) for shard in fanout.shards)
    assert sorted(fanout) == list(range(200))
    assert list(reversed(fanout)) == list(fanout)[::-1]


def test_every_keyed_operation_uses_the_one_placement(fanout):
    for key in ['s', b'b', 7, 1.5, ('t', 1)]:
        home = fanout.shard_for(key)
        others = [shard for shard in fanout.shards if shard is not home]

        def only_at_home():
            assert key in home and not any(key in shard for shard in others)

        assert fanout.set(key, 1) is True
        only_at_home()
        assert fanout.get(key) == 1 == fanout[key] and key in fanout
        assert fanout.delete(key) is True and key not in home
        assert fanout.add(key, 2) is True
        only_at_home()
        assert fanout.touch(key, 60) is True and home.get(key, expire_time=True)[1] is not None
        del fanout[key]
        assert key not in home
        fanout[key] = b'v'
        only_at_home()
        assert fanout.read(key).read() == b'v'
        assert fanout.pop(key) == b'v' and key not in home
        assert fanout.incr(key) == 1 and fanout.decr(key, 3) == -2 and home[key] == -2
        only_at_home()


def test_gets_inlined_placement_agrees_with_the_placement_function(fanout):
    keys = [f'user:{i}' for i in range(300)] + [f'clé-{i}-ü' for i in range(100)]
    keys += [b'blob-%d' % i for i in range(300)]
    for key in keys:
        fanout.shard_for(key).set(key, key)  # placed by the placement function alone
    assert all(fanout.get(key) == key for key in keys)  # found by get's inlined arithmetic
    with pytest.raises(ValueError, match='not valid UTF-8'):
        fanout.get('lone \udc80 surrogate')


# --- the give-up contract under real contention ----------------------------------------------


def test_busy_shard_writes_give_up_and_say_so(fanout):
    key = _key_on_shard(fanout, 0)
    other = _key_on_shard(fanout, 1)
    fanout.set(key, 'before', tag='t')
    fanout.set('n', 0)
    counter = _key_on_shard(fanout, 0, prefix='n')
    fanout.set(counter, 5)
    before = fanout.stats().timeouts
    with _BusyShard(fanout, 0):
        started = time.monotonic()
        assert fanout.set(key, 'new') is False
        assert fanout.add(_key_on_shard(fanout, 0, 'a'), 1) is False
        assert fanout.touch(key, 60) is False
        assert fanout.delete(key) is False
        assert fanout.incr(counter) is None
        assert fanout.decr(counter) is None
        assert fanout.pop(key) is None
        assert fanout.pop(key, 'fallback') == 'fallback'
        # the same shape as a success: a tuple, never a bare default
        assert fanout.pop(key, 'd', expire_time=True) == ('d', None)
        assert fanout.pop(key, 'd', tag=True) == ('d', None)
        assert fanout.pop(key, 'd', expire_time=True, tag=True) == ('d', None, None)
        elapsed = time.monotonic() - started
        # Reads do not wait for writers (WAL): the committed value is still there.
        assert fanout.get(key) == 'before'
        assert fanout.get(key, expire_time=True, tag=True) == ('before', None, 't')
        assert key in fanout
        # Other shards are not affected.
        assert fanout.set(other, 'fine') is True and fanout[other] == 'fine'
    # Eleven give-ups of ~10 ms each, not eleven 60-second waits (not even one): a bound
    # generous enough for a loaded machine, still short of a single wait.
    assert elapsed < 30
    assert fanout.stats().timeouts - before == 11
    assert fanout.get(key) == 'before' and fanout.get(counter) == 5


def test_busy_shard_item_access_retries_instead_of_raising(fanout):
    key = _key_on_shard(fanout, 0)
    gone = _key_on_shard(fanout, 0, 'g')
    fanout.set(gone, 1)
    with _BusyShard(fanout, 0) as busy:
        busy.release_after(0.3)
        started = time.monotonic()
        fanout[key] = 'stored'  # waits for the lock instead of raising Timeout
        assert time.monotonic() - started >= 0.2
    assert fanout[key] == 'stored'
    with _BusyShard(fanout, 0) as busy:
        busy.release_after(0.3)
        del fanout[gone]
    assert gone not in fanout
    with pytest.raises(KeyError):
        del fanout[gone]
    with _BusyShard(fanout, 0) as busy:
        busy.release_after(0.2)
        assert fanout.set(key, 'retried', retry=True) is True
    assert fanout[key] == 'retried'


def test_bulk_removals_loop_until_every_shard_is_done(fanout):
    for i in range(400):
        fanout.set(i, i, tag='even' if i % 2 == 0 else 'odd')
    with _BusyShard(fanout, 3) as busy:
        busy.release_after(0.3)
        assert fanout.evict('even') == 200
    for i in range(400, 420):
        fanout.set(i, i, expire=0.01)
    time.sleep(0.05)
    with _BusyShard(fanout, 5) as busy:
        busy.release_after(0.3)
        assert fanout.expire() == 20
    with _BusyShard(fanout, 0) as busy:
        busy.release_after(0.3)
        # 200 odd items plus the item each of the three holders committed
        assert fanout.clear() == 203
    assert len(fanout) == 0
    assert fanout.cull() == 0


def test_transact_holds_every_shard(tmp_path):
    directory = str(tmp_path / 'fanout')
    cache = FanoutCache(directory, shards=4, timeout=0.010)
    context = _spawn()
    ready, release = context.Event(), context.Event()
    holder = context.Process(target=fanout_helpers.hold_all_locks, args=(directory, 4, ready, release))
    holder.start()
    try:
        assert ready.wait(60)
        for number in range(4):
            assert cache.set(_key_on_shard(cache, number), 1) is False
    finally:
        release.set()
        holder.join(30)
    assert holder.exitcode == 0
    assert all(cache.set(_key_on_shard(cache, n), 1) for n in range(4))
    with cache.transact():
        cache.set('a', 1)
        cache.incr('b')
    assert cache['a'] == 1 and cache['b'] == 1
    with pytest.raises(ZeroDivisionError), cache.transact():
        cache.set('a', 2)
        1 / 0
    assert cache['a'] == 1  # rolled back on every shard
    cache.close()


def test_add_race_across_processes_has_exactly_one_winner_per_key(tmp_path):
    directory = str(tmp_path / 'fanout')
    FanoutCache(directory).close()
    keys = [f'key-{i}' for i in range(1000)]
    context = _spawn()
    start = context.Event()
    paths = [str(tmp_path / f'won-{n}.json') for n in range(8)]
    workers = [
        context.Process(target=fanout_helpers.add_race, args=(directory, n, keys, start, paths[n]))
        for n in range(8)
    ]
    for worker in workers:
        worker.start()
    start.set()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0
    won = [key for path in paths for key in json.load(open(path))]
    assert len(won) == 1000 and sorted(won) == sorted(keys)
    cache = FanoutCache(directory)
    owners = {key: cache[key] for key in keys}
    for n, path in enumerate(paths):
        assert all(owners[key] == n for key in json.load(open(path)))
    cache.close()


# --- size limit ------------------------------------------------------------------------------


def test_size_limit_is_split_exactly(tmp_path):
    cache = FanoutCache(str(tmp_path / 'c'), shards=8, size_limit=1003)
    assert [shard.size_limit for shard in cache.shards] == [126, 126, 126, 125, 125, 125, 125, 125]
    assert cache.size_limit == 1003 == cache.reset('size_limit')
    cache.reset('size_limit', 8 * 2**20)
    assert {shard.size_limit for shard in cache.shards} == {2**20}
    cache.close()
    reopened = FanoutCache(str(tmp_path / 'c'), shards=8)  # keeps the stored shares
    assert reopened.size_limit == 8 * 2**20
    reopened.close()
    fresh = FanoutCache(str(tmp_path / 'd'), shards=8)  # the default total, split
    assert fresh.size_limit == diskcache_core.DEFAULT_SETTINGS['size_limit']
    fresh.close()


@pytest.mark.parametrize(
    'value, read',
    [
        (b'x' * 200_000, False),  # a value file
        ('y' * 5_000, False),  # inline text
        (list(range(2_000)), False),  # a pickle
        (io.BytesIO(b'z' * 200_000), True),  # streamed into a value file
    ],
    ids=['bytes-file', 'str-inline', 'pickle', 'stream'],
)
def test_item_larger_than_its_shard_share_is_refused(tmp_path, value, read):
    cache = FanoutCache(str(tmp_path / 'c'), shards=4, size_limit=4 * 4096)
    shard = cache.shard_for('big')
    files_before = {
        os.path.join(root, name) for root, _, names in os.walk(shard.directory) for name in names
    }
    with pytest.raises(ValueError, match='exceeds its shard.s size limit'):
        cache.set('big', value, read=read)
    with pytest.raises(ValueError):
        cache.add('big', b'x' * 5000)
    with pytest.raises(ValueError):
        cache['big'] = b'x' * 5000
    assert 'big' not in cache
    files_after = {
        os.path.join(root, name) for root, _, names in os.walk(shard.directory) for name in names
    }
    assert {f for f in files_after - files_before if not f.startswith(os.path.join(shard.directory, 'cache.db'))} == set()
    assert cache.set('small', b'x' * 1000) is True
    cache.close()


def test_check_fits_states_the_rule_before_anything_is_stored(tmp_path):
    cache = FanoutCache(str(tmp_path / 'c'), shards=4, size_limit=4 * 4096)
    share = cache.shard_for('big').size_limit
    cache.check_fits('big', b'x' * share)  # fits exactly
    cache.check_fits('big', 'y' * share)
    for value in (b'x' * (share + 1), 'y' * (share + 1)):
        with pytest.raises(ValueError, match='exceeds its shard.s size limit'):
            cache.check_fits('big', value)
    cache.check_fits('big', list(range(5000)))  # measured when serialized: set refuses it
    with pytest.raises(ValueError, match='exceeds its shard.s size limit'):
        cache.set('big', list(range(5000)))
    assert len(cache) == 0
    cache.close()


# --- layout of the directory ------------------------------------------------------------------


def test_reopening_with_another_shard_count_is_refused(tmp_path):
    directory = str(tmp_path / 'c')
    FanoutCache(directory, shards=4).close()
    with pytest.raises(ValueError, match='shards=4'):
        FanoutCache(directory, shards=8)
    assert sorted(os.listdir(directory)) == ['000', '001', '002', '003', 'fanout.json']


def test_python_diskcache_directory_keeps_its_placement(tmp_path):
    diskcache = pytest.importorskip('diskcache')
    directory = str(tmp_path / 'peer')
    peer = diskcache.FanoutCache(directory, shards=4)
    keys = ['a', 'key', b'bytes', 7, 2**40, 1.25, ('tuple', 1)]
    for key in keys:
        peer[key] = repr(key)
    peer.close()
    ours = FanoutCache(directory, shards=4)
    assert not os.path.exists(os.path.join(directory, 'fanout.json'))
    for key in keys:
        assert ours.get(key) == repr(key), key
    ours['new'] = 1
    ours.close()
    with pytest.raises(ValueError, match='shards=4'):
        FanoutCache(directory, shards=8)


def test_a_removed_layout_file_is_written_again_from_shard_0(tmp_path):
    # Without the file the directory would read as python-diskcache's: keys placed elsewhere,
    # and the old value of a key found again by a process still using the first placement.
    directory = str(tmp_path / 'c')
    first = FanoutCache(directory, shards=4)
    keys = [f'key{number}' for number in range(40)] + [7, b'b', 1.5]
    for key in keys:
        first[key] = 'old'
    os.remove(os.path.join(directory, 'fanout.json'))
    second = FanoutCache(directory, shards=4)
    assert json.load(open(os.path.join(directory, 'fanout.json')))['shards'] == 4
    for key in keys:
        assert second.get(key) == 'old', key
        second[key] = 'new'
        assert first.get(key) == 'new', key
    os.remove(os.path.join(directory, 'fanout.json'))
    with pytest.raises(ValueError, match='shards=4'):
        FanoutCache(directory, shards=8)
    first.close()
    second.close()


def test_a_directory_made_before_shard_0_kept_the_layout_is_given_it(tmp_path):
    directory = str(tmp_path / 'c')
    cache = FanoutCache(directory, shards=2)
    cache['k'] = 1
    cache.shards[0]._sql("DELETE FROM Settings WHERE key = 'core_fanout_layout'")
    cache.close()
    FanoutCache(directory, shards=2).close()  # reopened with the file: shard 0 keeps it now
    os.remove(os.path.join(directory, 'fanout.json'))
    cache = FanoutCache(directory, shards=2)
    assert cache['k'] == 1
    assert os.path.exists(os.path.join(directory, 'fanout.json'))
    cache.close()


def test_bad_arguments_raise_before_anything_is_created(tmp_path):
    directory = str(tmp_path / 'never')
    for kwargs, error in [
        ({'shards': 0}, ValueError),
        ({'shards': 2.0}, TypeError),
        ({'timeout': -1}, ValueError),
        ({'disk': dict}, TypeError),
        ({'size_limit': -5}, ValueError),
        ({'no_such_setting': 1}, ValueError),
    ]:
        with pytest.raises(error):
            FanoutCache(directory, **kwargs)
    assert not os.path.exists(directory)


def test_concurrent_first_opens_agree(tmp_path):
    directory = str(tmp_path / 'c')
    errors = []

    def open_it():
        try:
            FanoutCache(directory, shards=4).close()
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert json.load(open(os.path.join(directory, 'fanout.json')))['shards'] == 4


# --- sub-collections, aggregation, lifecycle --------------------------------------------------


def test_sub_caches_live_in_subdirectories_and_honour_disk(fanout):
    sub = fanout.cache('reports/daily', disk=JSONDisk)
    assert sub is fanout.cache('reports/daily')
    assert sub.directory == os.path.join(fanout.directory, 'cache', 'reports', 'daily')
    assert isinstance(sub.disk, JSONDisk)
    sub['k'] = {'a': [1, 2]}
    assert fanout.cache('reports/daily')['k'] == {'a': [1, 2]}
    assert 'k' not in fanout
    default_disk = fanout.cache('plain')
    assert type(default_disk.disk) is type(fanout.disk)
    for bad in ('', '../escape', 'a//b', 'a/./b', '/abs'):
        with pytest.raises(ValueError):
            fanout.cache(bad)
    with pytest.raises(TypeError):
        fanout.cache(7)


def test_json_disk_is_used_by_every_shard(tmp_path):
    cache = FanoutCache(str(tmp_path / 'c'), disk=JSONDisk)
    assert all(type(shard.disk) is JSONDisk for shard in cache.shards)
    cache['k'] = {'x': 1}
    assert cache['k'] == {'x': 1}
    cache.close()


def test_stats_len_volume_aggregate_over_shards(fanout):
    fanout.stats(enable=True, reset=True)
    for i in range(50):
        fanout[i] = b'v' * 10
    for i in range(100):
        fanout.get(i)
    stats = fanout.stats()
    assert stats == (50, 50) and (stats.hits, stats.misses, stats.timeouts) == (50, 50, 0)
    hits, misses = stats  # unpacks as python-diskcache's (hits, misses)
    assert len(fanout) == 50
    assert fanout.volume() >= sum(shard.volume() for shard in fanout.shards[:1])
    assert fanout.volume() == sum(shard.volume() for shard in fanout.shards)
    assert fanout.stats(reset=True) == (50, 50) and fanout.stats() == (0, 0)
    assert fanout.statistics == 1 and fanout.eviction_policy == 'least-recently-stored'
    with pytest.raises(AttributeError):
        fanout.no_such_attribute


def test_pickle_reopens_the_same_cache(fanout):
    fanout['k'] = 'v'
    clone = pickle.loads(pickle.dumps(fanout))
    assert clone.directory == fanout.directory and clone['k'] == 'v'
    assert len(clone.shards) == 8 and clone.timeout == fanout.timeout
    clone.close()


def test_memoize_and_async_twins(fanout):
    import asyncio

    calls = []

    @fanout.memoize()
    def square(x):
        calls.append(x)
        return x * x

    assert [square(3), square(3), square(4)] == [9, 9, 16] and calls == [3, 4]

    async def main():
        assert await fanout.aset('a', 1) is True
        assert await fanout.aget('a') == 1
        assert await fanout.aincr('n', 2) == 2
        assert await fanout.adelete('a') is True

    asyncio.run(main())


def test_sub_deques_and_indexes(fanout):
    from diskcache_core import Deque, Index

    jobs = fanout.deque('jobs', maxlen=3)
    assert isinstance(jobs, Deque) and jobs is fanout.deque('jobs')
    assert jobs.directory == os.path.join(fanout.directory, 'deque', 'jobs')
    jobs.extend('abcd')
    assert list(jobs) == ['b', 'c', 'd'] and jobs.popleft() == 'b'
    users = fanout.index('users/active')
    assert isinstance(users, Index) and users is fanout.index('users/active')
    users['ada'] = 1
    users['bob'] = 2
    assert list(users.items()) == [('ada', 1), ('bob', 2)]
    assert users.directory == os.path.join(fanout.directory, 'index', 'users', 'active')
    fanout.close()
    # Another FanoutCache on the directory sees the same collections.
    again = FanoutCache(fanout.directory)
    assert list(again.deque('jobs')) == ['c', 'd'] and again.index('users/active')['bob'] == 2
    assert len(again) == 0  # sub-collections are not items of the main cache
    again.close()


def test_memory_tier_bounds_are_totals_split_over_shards(tmp_path):
    cache = FanoutCache(str(tmp_path / 'c'), shards=4, memory_size_limit=2**20, memory_item_limit=1001)
    assert [s.memory_size_limit for s in cache.shards] == [2**18] * 4
    assert [s.memory_item_limit for s in cache.shards] == [251, 250, 250, 250]
    assert cache.memory_size_limit == 2**20 and cache.memory_item_limit == 1001
    for i in range(200):
        cache[i] = i
    for _ in range(3):
        for i in range(200):
            assert cache[i] == i
    stats = cache.memory_stats()
    assert stats.hits >= 200 and stats.items == sum(s.memory_stats().items for s in cache.shards)
    assert stats.size_limit == 2**20 and stats.item_limit == 1001
    cache.memory_size_limit = 0  # off in every shard
    assert all(s.memory_stats() == (0, 0, 0, 0, 0, 0) for s in cache.shards)
    clone = pickle.loads(pickle.dumps(cache))
    assert clone.memory_size_limit == 0 and clone.memory_item_limit == 1001
    clone.close()
    cache.close()
    default = FanoutCache(str(tmp_path / 'd'), shards=8)
    assert default.memory_size_limit == diskcache_core.Cache(str(tmp_path / 'e')).memory_size_limit


def test_a_directory_another_opener_makes_between_two_looks_is_used(tmp_path, monkeypatch):
    """make_private_dirs looks whether a level is a directory, then whether anything is there:
    a directory another opener made between the two looks is not "not a directory" (this
    failed the concurrent first opens above now and then)."""
    import os.path

    from diskcache_core._disk import directories as _directories

    made = tmp_path / 'c' / '000'
    made.mkdir(parents=True)
    real = os.path.isdir
    first = []

    def isdir_before_it_was_made(path):
        if os.fspath(path) == str(made) and not first:
            first.append(path)
            return False  # the first look: not made yet
        return real(path)

    monkeypatch.setattr(_directories.op, 'isdir', isdir_before_it_was_made)
    _directories.make_private_dirs(str(made))
    assert first and made.is_dir()


_EXCLUSIVE_HOLDER = r'''
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
con.execute("PRAGMA locking_mode=EXCLUSIVE")
con.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.readline()
con.execute("COMMIT")
con.close()
'''


def test_a_threads_first_call_waits_for_a_locked_shard_with_retry(tmp_path):
    # A thread that has no connection to a shard yet opens one while another process holds the
    # database exclusively (as during its WAL recovery): opening is busy. Without retry the call
    # gives up (and leaves no value file behind); with retry, and for cache[key] = value, del
    # and read(), it waits until the shard is free.
    directory = str(tmp_path / 'fanout')
    cache = FanoutCache(directory, shards=1, timeout=0.05, memory_size_limit=0)
    cache['present'] = b'stored'
    cache['gone'] = 1
    cache.close()  # this process keeps no connection to the shard
    holder = subprocess.Popen(
        [sys.executable, '-c', _EXCLUSIVE_HOLDER, os.path.join(directory, '000', 'cache.db')],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    results = {}

    def in_a_new_thread(name, call):
        thread = threading.Thread(target=lambda: results.__setitem__(name, call()))
        thread.start()
        return thread

    try:
        assert holder.stdout.readline().strip() == 'locked'
        gave_up = in_a_new_thread('set', lambda: cache.set('big', b'x' * 100_000))
        gave_up.join(60)
        assert results['set'] is False
        waiting = [
            in_a_new_thread('set retry', lambda: cache.set('key', 1, retry=True)),
            in_a_new_thread('incr retry', lambda: cache.incr('n', retry=True)),
            in_a_new_thread('setitem', lambda: cache.__setitem__('item', 2)),
            in_a_new_thread('delitem', lambda: cache.__delitem__('gone')),
            in_a_new_thread('read', lambda: cache.read('present').read()),
        ]
        time.sleep(0.5)
        assert all(thread.is_alive() for thread in waiting), results  # still waiting
        holder.stdin.write('\n')
        holder.stdin.flush()
        for thread in waiting:
            thread.join(60)
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    assert results == {
        'set': False, 'set retry': True, 'incr retry': 1, 'setitem': None, 'delitem': None,
        'read': b'stored',
    }
    assert cache.get('key') == 1 and cache.get('item') == 2 and 'gone' not in cache
    assert 'big' not in cache
    assert cache.check() == []
    leftovers = [name for _, _, names in os.walk(directory) for name in names
                 if name.endswith('.val')]
    assert leftovers == []
    cache.close()


def test_evict_items_resumes_on_a_busy_shard_and_counts_every_removal(tmp_path):
    cache = FanoutCache(str(tmp_path / 'fanout'), shards=4, timeout=0.02)
    for number in range(200):
        cache.set(f'key{number}', number)
    with _BusyShard(cache, number=2) as busy:
        busy.release_after(0.5)
        assert cache.evict_items(100) == 100  # every shard's share, the busy one's too
    assert len(cache) == 200 + 1 - 100  # (+1: the other process's item)
    assert cache.check() == []
    cache.close()


def _blob_key_disk(base):
    class BlobKeyDisk(base):  # python-diskcache's own Disk.put returns sqlite3.Binary keys
        def put(self, key):
            return sqlite3.Binary(pickle.dumps(key)), False

        def get(self, key, raw):
            return pickle.loads(bytes(key))

    return BlobKeyDisk


def test_a_disk_that_stores_keys_as_sqlite3_binary_works(tmp_path):
    cache = FanoutCache(str(tmp_path / 'fanout'), shards=4, disk=_blob_key_disk(diskcache_core.Disk))
    keys = [('tuple', number) for number in range(40)]
    for key in keys:
        assert cache.set(key, repr(key)) is True
    assert [cache.get(key) for key in keys] == [repr(key) for key in keys]
    assert len({cache.shards.index(cache.shard_for(key)) for key in keys}) == 4
    assert sorted(cache) == sorted(keys)
    cache.close()


def test_a_disk_storing_keys_as_another_type_gets_a_clear_error(tmp_path):
    class ListKeyDisk(diskcache_core.Disk):
        def put(self, key):
            return [key], False

    cache = FanoutCache(str(tmp_path / 'fanout'), shards=2, disk=ListKeyDisk)
    with pytest.raises(TypeError, match='Disk.put must return'):
        cache.set('key', 1)
    cache.close()


def test_python_diskcache_placement_follows_a_disks_own_hash(tmp_path):
    diskcache = pytest.importorskip('diskcache')

    def hashing_disk(base):
        class ReprHashDisk(base):
            def hash(self, key):
                return zlib.crc32(repr(key).encode())

        return ReprHashDisk

    directory = str(tmp_path / 'made-by-python-diskcache')
    peer = diskcache.FanoutCache(directory, shards=4, disk=hashing_disk(diskcache.Disk))
    keys = [f'key-{number * 7919}' for number in range(40)]
    for key in keys:
        peer.set(key, key.upper())
    peer.close()
    cache = FanoutCache(directory, shards=4, disk=hashing_disk(diskcache_core.Disk))
    assert [cache.get(key) for key in keys] == [key.upper() for key in keys]
    cache.set('new', 1)
    cache.close()
    peer = diskcache.FanoutCache(directory, shards=4, disk=hashing_disk(diskcache.Disk))
    assert peer.get('new') == 1  # and python-diskcache finds what we wrote
    peer.close()


def test_reset_reads_totals_as_the_sum_over_the_shards(tmp_path):
    """The item count, value-file bytes, hits and misses are per shard: reset() reads their
    total, as len() and stats() do; size_limit returns the total it stored, validated."""
    cache = FanoutCache(str(tmp_path / 'totals'), shards=4, statistics=True)
    for number in range(12):
        cache.set(number, b'x' * 40_000)  # value files: counted in 'size'
    cache.get(1)
    cache.get('missing')
    cache.flush_access_log()
    assert cache.reset('count') == len(cache) == 12
    assert cache.reset('size') == 12 * 40_000
    assert (cache.reset('hits'), cache.reset('misses')) == cache.stats() == (1, 1)
    assert cache.reset('size_limit', 2.0**30) == 2**30 and type(cache.reset('size_limit')) is int
    assert cache.reset('cull_limit') == 10  # a setting: every shard's (the first one's)
    cache.close()


def test_counters_written_through_reset_read_back_as_written(tmp_path):
    cache = diskcache_core.FanoutCache(str(tmp_path / "f"), shards=4)
    for name in ("hits", "misses"):
        assert cache.reset(name, 10) == 10
        assert cache.reset(name) == 10
    assert cache.stats() == (10, 10)
    cache.close()


def _hold_write_lock(path, seconds):
    """Hold `path`'s write lock from another connection for `seconds` (in a thread)."""
    import sqlite3

    con = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    con.execute("BEGIN IMMEDIATE")

    def release():
        time.sleep(seconds)
        con.execute("COMMIT")
        con.close()

    thread = threading.Thread(target=release)
    thread.start()
    return thread


def test_close_writes_a_busy_shards_pending_reads(tmp_path):
    # close() (and a normal exit) write the batched bookkeeping last: a shard busy for a moment
    # must not drop its hits and LRU times (a shard's timeout is 10 ms).
    directory = str(tmp_path / "f")
    cache = diskcache_core.FanoutCache(directory, shards=2, statistics=True)
    for number in range(50):
        cache.set(number, number)
    for number in range(50):
        assert cache.get(number) == number
    holder = _hold_write_lock(os.path.join(directory, "001", "cache.db"), 0.2)
    cache.close()
    holder.join()
    with diskcache_core.FanoutCache(directory, shards=2) as reopened:
        assert reopened.stats() == (50, 0)


def test_flush_access_log_writes_every_shard_it_can_then_raises(tmp_path):
    directory = str(tmp_path / "f")
    cache = diskcache_core.FanoutCache(directory, shards=2, statistics=True)
    for number in range(40):
        cache.set(number, number)
        cache.get(number)
    holder = _hold_write_lock(os.path.join(directory, "000", "cache.db"), 0.5)
    with pytest.raises(diskcache_core.Timeout):
        cache.flush_access_log(timeout=0.01)
    holder.join()
    second = diskcache_core.Cache(os.path.join(directory, "001"))
    assert second.stats()[0] == len([n for n in range(40) if cache.shard_for(n) is cache.shards[1]]) > 0
    second.close()
    cache.close()


def test_shards_leave_the_users_disk_untouched(tmp_path):
    # The share rule is each shard's own, on its write path (a `Role` it is made with): the Disk
    # objects (Cache's public ``disk``) are the user's, with no method replaced on them.
    cache = FanoutCache(str(tmp_path / 'c'), shards=2, size_limit=2 * 4096)
    try:
        assert all('store' not in vars(shard.disk) for shard in cache.shards)
        with pytest.raises(ValueError, match='exceeds its shard.s size limit'):
            cache.set('big', b'x' * 5000)
        with pytest.raises(ValueError, match='exceeds its shard.s size limit'):
            cache.incr('big', 10**20000)  # a pickled number past the share
        with pytest.raises(ValueError, match='exceeds its shard.s size limit'):
            cache.shard_for('big').push(b'x' * 5000)
        assert len(cache) == 0
    finally:
        cache.close()
