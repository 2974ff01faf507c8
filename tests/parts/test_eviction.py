"""Size accounting and culling: size_limit, cull_limit, eviction policies, cull()."""

from __future__ import annotations

import os
import threading
import time

import pytest
import diskcache_core as dc
from store_helpers import unnamed_files, wait_until, warning_text

KIB = 1024
MIB = 1024 * KIB
LIMIT = 1 * MIB


def _bound(limit: int) -> float:
    """The most a cache may exceed its size limit by: 25% plus 64 KiB."""
    return limit * 1.25 + 64 * KIB


def test_size_limit_bounds_file_values(make_cache):
    cache = make_cache(size_limit=LIMIT)
    peak = 0
    for number in range(100):
        cache.set(number, os.urandom(50 * KIB))
        peak = max(peak, cache.volume())
    assert cache.volume() <= _bound(LIMIT)
    assert peak <= _bound(LIMIT)
    assert len(cache) < 100
    assert 99 in cache  # least-recently-stored keeps the newest
    assert 0 not in cache
    assert cache.check() == []


def test_size_limit_bounds_inline_values(make_cache):
    cache = make_cache(size_limit=LIMIT)
    for number in range(3000):
        cache.set(number, os.urandom(1000))
    assert cache.volume() <= _bound(LIMIT)
    assert len(cache) < 3000
    assert 2999 in cache
    assert 0 not in cache


def test_size_limit_bounds_mixed_values_and_files_removed(make_store):
    cache = make_store(size_limit=LIMIT)
    for number in range(300):
        size = 200 * KIB if number % 10 == 0 else 3 * KIB
        cache.set(number, os.urandom(size))
    assert cache.volume() <= _bound(LIMIT)
    # Evicted items leave no value file behind.
    assert wait_until(lambda: unnamed_files(cache.directory) == set()), unnamed_files(cache.directory)


def test_volume_grows_with_content(make_cache):
    cache = make_cache(size_limit=100 * MIB)
    start = cache.volume()
    for number in range(10):
        cache.set(number, os.urandom(100 * KIB))
    assert cache.volume() >= start + 10 * 100 * KIB
    assert len(cache) == 10


def test_expired_items_removed_before_live_ones(make_store):
    make_cache = make_store  # exact eviction order is one store's
    cache = make_cache(size_limit=LIMIT)
    for number in range(8):
        cache.set(('live', number), os.urandom(50 * KIB))
    for number in range(10):
        cache.set(('expiring', number), os.urandom(50 * KIB), expire=0.3)
    time.sleep(0.5)
    for number in range(8, 16):
        cache.set(('live', number), os.urandom(50 * KIB))
    assert all(('live', number) in cache for number in range(16))
    assert cache.volume() <= _bound(LIMIT)


def test_policy_none_never_evicts(make_store):
    make_cache = make_store  # exact eviction order is one store's
    cache = make_cache(size_limit=200 * KIB, eviction_policy='none')
    for number in range(30):
        cache.set(number, os.urandom(50 * KIB))
    assert len(cache) == 30
    assert all(number in cache for number in range(30))
    assert cache.volume() > 30 * 50 * KIB
    assert cache.cull() == 0
    assert len(cache) == 30


def test_cull_limit_zero_writes_never_cull_but_cull_does(make_store):
    make_cache = make_store  # exact eviction order is one store's
    cache = make_cache(size_limit=200 * KIB, cull_limit=0)
    for number in range(20):
        cache.set(number, os.urandom(50 * KIB), expire=0.3 if number < 2 else None)
    time.sleep(0.5)
    cache.set('after-expiry', b'x')
    assert len(cache) == 21  # neither over-limit nor expired items were removed by writes
    assert cache.volume() > 20 * 50 * KIB - 2 * 50 * KIB
    removed = cache.cull()
    assert removed >= 14
    assert len(cache) == 21 - removed
    assert cache.volume() <= _bound(200 * KIB)
    assert 0 not in cache and 1 not in cache


def test_cull_removes_expired_even_under_limit(make_cache):
    cache = make_cache(size_limit=100 * MIB)
    for number in range(5):
        cache.set(number, number, expire=0.2)
    cache.set('keep', 1)
    time.sleep(0.35)
    assert cache.cull() == 5
    assert list(cache) == ['keep']


def test_cull_after_lowering_size_limit(make_store):
    make_cache = make_store  # exact eviction order is one store's
    cache = make_cache(size_limit=100 * MIB)
    for number in range(40):
        cache.set(number, os.urandom(50 * KIB))
    assert len(cache) == 40
    cache.reset('size_limit', 700 * KIB)
    assert cache.size_limit == 700 * KIB
    removed = cache.cull()
    assert removed > 0
    assert len(cache) == 40 - removed
    assert cache.volume() <= _bound(700 * KIB)
    assert 39 in cache
    assert cache.check() == []


def _fill_then_read(make_cache, policy, reads_per_hot):
    """Store 20 items, read the first 5, reopen (flushing access bookkeeping), store 10 more."""
    cache = make_cache(size_limit=LIMIT, eviction_policy=policy)
    for number in range(20):
        cache.set(number, os.urandom(40 * KIB))
        time.sleep(0.002)
    time.sleep(0.01)
    for _ in range(reads_per_hot):
        for number in range(5):
            assert cache.get(number) is not None
            time.sleep(0.002)
    cache.close()
    cache = make_cache(size_limit=LIMIT, eviction_policy=policy)
    for number in range(100, 110):
        time.sleep(0.002)
        cache.set(number, os.urandom(40 * KIB))
    present = {number for number in list(range(20)) + list(range(100, 110)) if number in cache}
    return cache, present


def test_least_recently_used_keeps_recently_read(make_store):
    make_cache = make_store  # exact eviction order is one store's
    cache, present = _fill_then_read(make_cache, 'least-recently-used', 1)
    evicted = set(range(20)) | set(range(100, 110))
    evicted -= present
    assert evicted, 'nothing was evicted: the test wrote too little'
    assert set(range(5)) <= present, 'recently read items were evicted: %s' % sorted(evicted)
    assert evicted <= set(range(5, 20)), 'evicted %s' % sorted(evicted)
    assert set(range(100, 110)) <= present
    assert 5 not in present  # the oldest unread item goes first
    assert cache.volume() <= _bound(LIMIT)


def test_least_frequently_used_keeps_often_read(make_store):
    make_cache = make_store  # exact eviction order is one store's
    cache, present = _fill_then_read(make_cache, 'least-frequently-used', 3)
    evicted = (set(range(20)) | set(range(100, 110))) - present
    assert evicted, 'nothing was evicted: the test wrote too little'
    assert set(range(5)) <= present, 'frequently read items were evicted: %s' % sorted(evicted)
    assert cache.volume() <= _bound(LIMIT)


def test_least_recently_stored_ignores_reads(make_store):
    make_cache = make_store  # exact eviction order is one store's
    _cache, present = _fill_then_read(make_cache, 'least-recently-stored', 3)
    assert 0 not in present  # read often, but stored first
    assert set(range(100, 110)) <= present


def test_culling_keeps_check_clean(make_store):
    cache = make_store(size_limit=300 * KIB, cull_limit=3)
    for number in range(60):
        cache.set(number % 25, os.urandom(60 * KIB if number % 2 else 500), expire=None if number % 3 else 0.05)
    time.sleep(0.1)
    cache.set('last', b'x')
    assert warning_text(cache.check()) == []
    assert wait_until(lambda: unnamed_files(cache.directory) == set()), unnamed_files(cache.directory)


@pytest.mark.parametrize('policy', ['none', 'least-recently-stored', 'least-recently-used', 'least-frequently-used'])
def test_every_policy_accepted_and_persisted(make_cache, policy):
    cache = make_cache(eviction_policy=policy)
    assert cache.eviction_policy == policy
    cache.set('k', 'v')
    assert cache.get('k') == 'v'
    cache.close()
    assert make_cache().eviction_policy == policy


def test_writes_keep_culling_while_over_the_limit(make_store):
    make_cache = make_store  # exact eviction order is one store's
    # One item culled per check cannot keep up with 100 KiB writes against a 300 KiB limit unless
    # every write while over the limit checks again: the volume must still stay bounded.
    cache = make_cache(size_limit=300 * KIB, cull_limit=1)
    for number in range(80):
        cache.set(number, os.urandom(100 * KIB))
    assert cache.volume() <= 300 * KIB + 2 * 100 * KIB + 64 * KIB
    assert len(cache) < 80
    assert cache.get(79) is not None  # the newest survives under least-recently-stored


def test_settings_assigned_as_attributes_take_effect_without_being_stored(make_store):
    # Code written for python-diskcache sets these attributes directly; they must change this
    # object's behaviour at once (read tracking, check interval), and not be persisted.
    cache = make_store()
    cache.eviction_policy = 'least-recently-used'
    cache.size_limit = 10 * 1_000_000 + 100_000
    cache.cull_limit = 5
    value = b'x' * 1_000_000
    for key in range(10):
        cache[key] = value
    for key in (0, 1, 7, 8, 9):
        assert cache[key] == value
    cache[10] = value
    # Over by one value: exactly one victim, the least recently used (2, not 0 as under LRS).
    assert sorted(cache) == [0, 1, 3, 4, 5, 6, 7, 8, 9, 10]
    with pytest.raises(ValueError, match='eviction_policy'):
        cache.eviction_policy = 'most-recently-used'
    cache.close()
    reopened = type(cache)(cache.directory)
    assert reopened.eviction_policy == 'least-recently-stored'
    assert reopened.size_limit == 2**30


def test_culling_stops_once_within_the_limit(make_store):
    # A small cache (a FanoutCache shard holds size_limit / shards) must not evict the item
    # just written together with older ones: victims go one at a time while each frees bytes.
    cache = make_store(size_limit=160 * KIB, cull_limit=10)
    for key in range(20):
        cache.set(key, os.urandom(50 * KIB))
        assert key in cache
        assert cache.volume() <= 160 * KIB
    assert len(cache) >= 2


def test_writes_inside_transactions_count_towards_the_size_limit(make_store):
    # Bulk writers (Django's set_many, Flask's set_many) write inside one transaction: the
    # bytes must still trigger culling when it commits, not only at a later single write.
    cache = make_store(size_limit=LIMIT)
    for start in range(0, 100, 10):
        with cache.transact():
            for number in range(start, start + 10):
                cache.set(number, os.urandom(50 * KIB))
        assert cache.volume() <= _bound(LIMIT) + 10 * 50 * KIB  # at most one batch over
    assert cache.volume() <= _bound(LIMIT) + 10 * 50 * KIB
    assert len(cache) < 100 and 99 in cache


@pytest.mark.parametrize('policy', ['least-recently-stored', 'least-recently-used',
                                    'least-frequently-used'])
def test_exact_size_limit_is_within_the_limit_after_every_write(tmp_path, policy):
    item = 100_000  # value files: each removal frees its bytes at once
    cache = dc.Cache(str(tmp_path / 'c'), size_limit=5 * item + 60_000, eviction_policy=policy,
                     exact_size_limit=True, memory_size_limit=0)
    for number in range(5):
        cache.set(number, b'x' * item)
    for _ in range(3):  # 1..4 read (and so used more, and more often) than 0
        for number in range(1, 5):
            cache.get(number)
    for number in range(5, 12):
        cache.set(number, b'x' * item)
        assert cache.volume() <= cache.size_limit  # at once, not after a check interval
        assert number in cache
    survivors = sorted(key for key in cache)
    assert len(survivors) == 5
    if policy == 'least-recently-stored':
        assert survivors == list(range(7, 12))
    else:
        assert 0 not in survivors  # the least used went first
    cache.close()


def test_evict_items_removes_that_many_in_policy_order(tmp_path):
    cache = dc.Cache(str(tmp_path / 'c'))
    for number in range(10):
        cache.set(number, number)
    assert cache.evict_items(3) == 3
    assert list(cache) == list(range(3, 10))  # least recently stored first
    assert cache.evict_items(100) == 7 and len(cache) == 0
    with pytest.raises(ValueError):
        cache.evict_items(-1)
    cache.close()


@pytest.fixture
def custom_policies():
    """Two policies added to EVICTION_POLICY the python-diskcache way, removed afterwards."""
    added = {
        'most-recently-stored': {
            'init': 'CREATE INDEX IF NOT EXISTS Cache_store_time ON Cache (store_time)',
            'get': None,
            'cull': 'SELECT {fields} FROM Cache ORDER BY store_time DESC LIMIT ?',
        },
        'least-recently-read': {
            'init': 'CREATE INDEX IF NOT EXISTS Cache_access_time ON Cache (access_time)',
            'get': 'access_time = {now}',
            'cull': 'SELECT {fields} FROM Cache WHERE store_time < {now} ORDER BY access_time LIMIT ?',
        },
    }
    dc.EVICTION_POLICY.update(added)
    yield added
    for name in added:
        del dc.EVICTION_POLICY[name]


def test_policies_added_to_eviction_policy_are_used(tmp_path, custom_policies):
    item = 100_000
    newest = dc.Cache(str(tmp_path / 'a'), size_limit=3 * item + 60_000,
                      eviction_policy='most-recently-stored', exact_size_limit=True)
    for number in range(3):
        newest.set(number, b'x' * item)
    assert newest.evict_items(1) == 1 and sorted(newest) == [0, 1]  # the newest went
    newest.close()

    read = dc.Cache(str(tmp_path / 'b'), eviction_policy='least-recently-read',
                    memory_size_limit=0)
    assert dc.Cache(str(tmp_path / 'b')).eviction_policy == 'least-recently-read'  # stored
    for number in range(4):
        read.set(number, number)
    time.sleep(0.01)
    for number in (0, 2, 3):  # 1 is the one never read
        read.get(number)
    read.flush_access_log()  # the "get" assignment, batched, runs now
    assert read.evict_items(1) == 1 and sorted(read) == [0, 2, 3]
    read.close()


def test_an_unknown_policy_is_still_refused(tmp_path):
    with pytest.raises(ValueError, match='eviction_policy'):
        dc.Cache(str(tmp_path / 'c'), eviction_policy='most-recently-stored')


def test_small_items_at_the_limit_are_culled_an_interval_at_a_time(tmp_path):
    """Deleting a few small inline rows frees few whole pages: the size check sizes its batch
    from the overshoot and the average row, so one check buys a check interval instead of
    finding the cache still over on the next write (which made every write cull)."""
    limit = 4 * 2**20
    cache = dc.Cache(str(tmp_path / 'c'), size_limit=limit)
    value = b'x' * 1000
    for number in range(8000):
        cache.set(number, value)
    still_over = 0
    for number in range(8000, 8500):
        cache.set(number, value)
        if cache._store.unchecked >= cache._store.budget.every:
            still_over += 1
        assert cache.volume() <= limit + 2 * cache._store.budget.every
    assert still_over <= 5
    assert len(cache) > 2500  # evicted about what was over, not everything
    cache.close()


@pytest.mark.parametrize("exact", [True, False])
@pytest.mark.parametrize(
    "policy", ["least-recently-stored", "least-recently-used", "least-frequently-used"]
)
def test_a_write_that_crosses_the_limit_never_evicts_its_own_item(make_store, policy, exact):
    # The oldest item is overwritten and that very write takes the cache over its limit: the
    # size check the write runs must see the item as just stored.
    cache = make_store(
        eviction_policy=policy, size_limit=300_000, cull_limit=2, exact_size_limit=exact
    )
    cache.set("first", b"small")
    for number in range(6):
        cache.set(number, b"x" * 40_000)
    assert cache.set("first", b"y" * 80_000) is True
    assert cache.get("first") == b"y" * 80_000
    assert cache.volume() <= 300_000 + (0 if exact else cache._store.budget.every)
    assert 0 not in cache  # the oldest other item went instead


def test_an_add_that_stores_nothing_does_not_refresh_the_item(make_store):
    cache = make_store(size_limit=200_000, exact_size_limit=True, cull_limit=1)
    cache.set("old", b"a" * 40_000)
    for number in range(3):
        cache.set(number, b"x" * 40_000)
    assert cache.add("old", b"b" * 40_000) is False  # a live item: nothing stored
    cache.set("new", b"y" * 60_000)  # over the limit: the oldest goes, and "old" is the oldest
    assert "old" not in cache and "new" in cache


@pytest.mark.parametrize("removal", ["evict", "clear", "expire", "pull", "other-cache"])
def test_lfu_reads_of_a_removed_item_do_not_count_for_a_new_one(make_store, removal):
    cache = make_store(eviction_policy="least-frequently-used")
    if removal == "pull":
        key = cache.push("read often")
    else:
        key = "item"
        cache.set(key, "read often", tag="t", expire=3600 if removal != "expire" else 0.05)
    for _ in range(50):
        assert cache.get(key) is not None
    if removal == "evict":
        assert cache.evict("t") == 1
    elif removal == "clear":
        assert cache.clear() == 1
    elif removal == "expire":
        time.sleep(0.1)
        assert cache.expire() == 1
    elif removal == "pull":
        assert cache.pull() == (key, "read often")
    else:  # another Cache object (another process would do the same) removes it
        other = dc.Cache(cache.directory)
        assert other.delete(key) is True
        other.close()
    time.sleep(0.01)
    cache.set(key, "never read")
    cache.flush_access_log()
    rows = cache._sql("SELECT access_count FROM Cache WHERE key = ?", (key,)).fetchall()
    assert rows == [(0,)]
    # Reads of the new item count as before.
    cache.get(key)
    cache.flush_access_log()
    assert cache._sql("SELECT access_count FROM Cache WHERE key = ?", (key,)).fetchall() == [(1,)]


@pytest.mark.parametrize("exact", [True, False])
@pytest.mark.parametrize("write", ["set", "add", "push", "incr"])
def test_lfu_at_the_limit_takes_in_new_items_read_once(make_store, exact, write):
    # A full cache of items each read once: a new item has no reads yet when the size check of
    # its own write runs, the fewest of all; that check must spare it (python-diskcache culls
    # before it writes), and once read it ties with the old ones, which go first.
    cache = make_store(
        eviction_policy="least-frequently-used", size_limit=200_000, exact_size_limit=exact
    )
    for number in range(15):
        cache.set(number, b"x" * 10_000)
        assert cache.get(number) is not None
    kept = 0
    for number in range(100, 130):
        value = b"y" * 10_000
        if write == "set":
            assert cache.set(number, value) is True
        elif write == "add":
            assert cache.add(number, value) is True
        elif write == "push":
            number = cache.push(value)
        else:
            value = cache.incr(number, 1, default=10**5000)  # a big int: pickled, ~2 KB
        kept += cache.get(number) == value
    assert kept == 30
    assert sum(1 for key in cache if key not in range(15)) >= 5  # new items stay


def test_lfu_counts_an_incr_as_a_use_of_its_counter(make_store):
    cache = make_store(eviction_policy="least-frequently-used", statistics=True)
    cache.set("counter", 0)
    for _ in range(5):
        cache.incr("counter")
    cache.decr("counter")
    cache.flush_access_log()
    rows = cache._sql("SELECT access_count FROM Cache WHERE key = 'counter'").fetchall()
    assert rows == [(6,)]  # as python-diskcache counts them
    assert cache.stats() == (0, 0)  # uses, not hits


def test_stats_never_go_back_while_a_size_check_writes_the_pending_reads(make_store):
    # The size check writes this object's pending reads (and hits) in its own transaction: a
    # stats() meanwhile must wait for its commit, not count them nowhere.
    cache = make_store(statistics=True, size_limit=100_000, exact_size_limit=True)
    for number in range(5):
        cache.set(number, b"x" * 30_000)
        cache.get(number)
    before = cache.stats()
    sizing = cache._evictor.sizing  # the size check the store runs
    evict = sizing._evict_until_within
    seen = []

    def evict_with_a_reader(*args):
        reader = threading.Thread(target=lambda: seen.append(cache.stats()))
        reader.start()
        reader.join(0.5)  # waits for this commit (with the fix); or reads at once
        try:
            return evict(*args)
        finally:
            seen.append(reader)

    sizing._evict_until_within = evict_with_a_reader
    cache.set("over", b"y" * 30_000)  # over the limit: the check writes the pending reads
    sizing._evict_until_within = evict
    seen.pop().join(30)
    assert seen and seen[0][0] >= before[0] == 5


def test_lfu_an_incr_is_spared_by_the_size_check_its_own_write_runs(make_store):
    # The write context of an incr (`Evictor.spares`, handed to Store.write) names its key: the
    # size check its write runs must not evict the counter it just stored, however few reads
    # it has (an incr is a use, counted only after the write).
    cache = make_store(
        eviction_policy="least-frequently-used", size_limit=400_000, exact_size_limit=True
    )
    assert cache.incr("counter") == 1  # no reads: the fewest of all
    for number in range(15):
        cache.set(number, b"x" * 10_000)
        for _ in range(3):
            assert cache.get(number) is not None
    cache.reset("size_limit", 100_000)  # over the limit now; the next write's check culls
    assert cache.incr("counter") == 2
    assert cache.get("counter") == 2
    assert sum(1 for number in range(15) if number in cache) < 15  # the check did cull


def test_a_store_runs_the_size_budget_it_was_made_with(make_store):
    """The Store is handed its size budget when it is made (nothing is assigned onto it): past
    `every` bytes a write calls `check` with the store, the bytes counted and the write's
    context; a True answer (still over) makes the next write check again."""
    from diskcache_core._store.store import Store
    from diskcache_core._store import schema as sql

    class Budget:
        every = 3000
        over = False

        def __init__(self):
            self.calls = []

        def check(self, store, unchecked, spared):
            self.calls.append((unchecked, spared))
            return self.over

    cache = make_store()
    budget = Budget()
    store = Store(cache._store.pool, 1.0, cache.disk, None, budget)

    def write(key, charge, spared=None):
        store.write(sql.PLAIN_VARIANT[sql.UPSERT], (key, 1, 0.0, 0, 1, "v"), False, None,
                    charge, spared)

    write("a", 2000)
    assert budget.calls == []
    write("b", 2000, ("b", 1))
    assert budget.calls == [(4000, ("b", 1))]
    budget.over = True
    write("c", 3000)
    assert budget.calls[-1] == (3000, None)
    write("d", 1)  # still over: checked again at once
    assert budget.calls[-1] == (3001, None) and len(budget.calls) == 3
