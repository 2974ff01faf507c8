"""Expiry (expire=, touch, expire()), tags (tag=, evict, tag index) and clear()."""

from __future__ import annotations

import os
import time
from unittest import mock

import pytest
from store_helpers import value_files

import diskcache_core

BIG = 300_000
SHORT = 0.2  # seconds: expiry used with a sleep of PAST
PAST = 0.35


def test_expired_item_is_a_miss(cache):
    cache.set('key', 'value', expire=SHORT)
    assert cache.get('key') == 'value'
    time.sleep(PAST)
    assert cache.get('key') is None
    assert cache.get('key', 'default') == 'default'
    assert 'key' not in cache
    with pytest.raises(KeyError):
        cache['key']
    with pytest.raises(KeyError):
        cache.read('key')


def test_expiry_reads_the_clock_through_time_time(cache):
    # Tests of applications switching from python-diskcache patch time.time to move the clock
    # (mock.patch('time.time'), as python-diskcache's own tests do): every expiry check must
    # see the patched clock, the memory tier's included.
    now = time.time()
    with mock.patch('time.time', return_value=now):
        for number in range(1, 11):
            assert cache.set(number, number, expire=number)
        cache.set('queued', 'q', expire=100)
        assert cache.get(3) == 3  # kept by the memory tier as well
    with mock.patch('time.time', return_value=now + 5.5):
        assert cache.get(3) is None and 3 not in cache
        assert cache.get(6) == 6
        assert cache.touch(6, expire=1) and cache.get(6, expire_time=True)[1] == now + 6.5
        assert cache.incr(7) == 8
        assert cache.expire() == 5  # 1..5
    with mock.patch('time.time', return_value=now + 200):
        assert cache.get(10) is None and cache.get('queued') is None
        assert cache.expire() == 6  # 6..10 and 'queued'
    assert len(cache) == 0


def test_expired_item_tuples_for_a_miss(cache):
    cache.set('key', 'value', expire=SHORT, tag='t')
    time.sleep(PAST)
    assert cache.get('key', expire_time=True, tag=True) == (None, None, None)
    assert cache.pop('key', tag=True) == (None, None)


def test_expire_time_reported(cache):
    before = time.time()
    cache.set('key', 'value', expire=10)
    after = time.time()
    value, expire_time = cache.get('key', expire_time=True)
    assert value == 'value'
    assert before + 10 - 0.01 <= expire_time <= after + 10 + 0.01


def test_no_expire_gives_none_expire_time(cache):
    cache.set('key', 'value')
    assert cache.get('key', expire_time=True) == ('value', None)


@pytest.mark.parametrize('expire', [0, -1, -100.5])
def test_zero_or_negative_expire_is_already_expired(cache, expire):
    cache.set('key', 'value', expire=expire)
    assert cache.get('key') is None


def test_float_expire(cache):
    cache.set('key', 'value', expire=0.5)
    assert cache['key'] == 'value'


def test_len_counts_expired_until_removed(cache):
    for number in range(5):
        cache.set(number, number, expire=SHORT)
    cache.set('live', 1)
    time.sleep(PAST)
    assert len(cache) == 6
    assert cache.expire() == 5
    assert len(cache) == 1
    assert list(cache) == ['live']


def test_expire_returns_count_and_keeps_live(cache):
    for number in range(7):
        cache.set(number, number, expire=SHORT)
    for number in range(7, 10):
        cache.set(number, number)
    assert cache.expire() == 0
    time.sleep(PAST)
    assert cache.expire() == 7
    assert cache.expire() == 0
    assert sorted(cache) == [7, 8, 9]


def test_expire_with_future_now(cache):
    for number in range(150):  # more than one removal batch
        cache.set(number, number, expire=100)
    cache.set('long', 1, expire=10_000)
    cache.set('forever', 1)
    assert cache.expire(now=time.time() + 1000) == 150
    assert sorted(cache, key=str) == ['forever', 'long']
    assert cache.expire(now=time.time() + 100_000) == 1
    assert list(cache) == ['forever']


def test_expire_removes_value_files(store):
    for number in range(3):
        store.set(number, os.urandom(BIG), expire=100)
    store.set('keep', os.urandom(BIG))
    assert len(value_files(store.directory)) == 4
    assert store.expire(now=time.time() + 1000) == 3
    assert len(value_files(store.directory)) == 1
    assert len(store['keep']) == BIG


def test_touch_extends_expiry(cache):
    cache.set('key', 'value', expire=SHORT)
    assert cache.touch('key', expire=100) is True
    time.sleep(PAST)
    assert cache.get('key') == 'value'
    _, expire_time = cache.get('key', expire_time=True)
    assert expire_time > time.time() + 90


def test_touch_without_expire_removes_expiry(cache):
    cache.set('key', 'value', expire=SHORT)
    assert cache.touch('key') is True
    assert cache.get('key', expire_time=True) == ('value', None)
    time.sleep(PAST)
    assert cache['key'] == 'value'


def test_touch_shortens_expiry(cache):
    cache.set('key', 'value')
    assert cache.touch('key', expire=SHORT) is True
    assert cache['key'] == 'value'
    time.sleep(PAST)
    assert 'key' not in cache


def test_touch_missing_or_expired_returns_false(cache):
    assert cache.touch('missing', expire=10) is False
    cache.set('key', 'value', expire=SHORT)
    time.sleep(PAST)
    assert cache.touch('key', expire=10) is False
    assert cache.get('key') is None


def test_add_replaces_expired_item(cache):
    cache.set('key', 'old', expire=SHORT)
    assert cache.add('key', 'new') is False
    time.sleep(PAST)
    assert cache.add('key', 'new') is True
    assert cache.get('key', expire_time=True) == ('new', None)


def test_incr_on_expired_item_starts_from_default(cache):
    cache.set('n', 100, expire=SHORT)
    assert cache.incr('n') == 101
    time.sleep(PAST)
    assert cache.incr('n', 5) == 5
    assert cache.get('n', expire_time=True) == (5, None)
    cache.set('m', 100, expire=SHORT)
    time.sleep(PAST)
    with pytest.raises(KeyError):
        cache.incr('m', default=None)


def test_delete_and_pop_of_expired_item(cache):
    cache.set('a', 1, expire=SHORT)
    cache.set('b', 2, expire=SHORT)
    time.sleep(PAST)
    assert cache.delete('a') is False
    assert cache.pop('b', 'gone') == 'gone'
    with pytest.raises(KeyError):
        del cache['a']


def test_set_without_expire_clears_previous_expiry(cache):
    cache.set('key', 'one', expire=SHORT)
    cache.set('key', 'two')
    time.sleep(PAST)
    assert cache['key'] == 'two'


def test_set_with_expire_after_plain_set(cache):
    cache.set('key', 'one')
    cache.set('key', 'two', expire=SHORT)
    time.sleep(PAST)
    assert 'key' not in cache


def test_expired_file_value_is_a_miss(store):
    store.set('big', os.urandom(BIG), expire=SHORT)
    time.sleep(PAST)
    assert store.get('big') is None
    assert store.get('big', read=True) is None


# --------------------------------------------------------------------------------------------
# Tags
# --------------------------------------------------------------------------------------------


def test_evict_by_tag_returns_count(cache):
    for number in range(150):
        cache.set(number, number, tag='odd' if number % 2 else 'even')
    cache.set('untagged', 1)
    assert cache.evict('odd') == 75
    assert cache.evict('odd') == 0
    assert len(cache) == 76
    assert all(key == 'untagged' or key % 2 == 0 for key in cache)
    assert cache.evict('missing') == 0


@pytest.mark.parametrize('tag', [b'bytes-tag', 42, 2.5])
def test_evict_non_str_tags(cache, tag):
    cache.set('a', 1, tag=tag)
    cache.set('b', 2, tag='other')
    assert cache.evict(tag) == 1
    assert list(cache) == ['b']


def test_evict_removes_value_files(store):
    store.set('a', os.urandom(BIG), tag='files')
    store.set('b', os.urandom(BIG), tag='files')
    store.set('c', os.urandom(BIG), tag='keep')
    assert store.evict('files') == 2
    assert len(value_files(store.directory)) == 1
    assert 'c' in store


def test_tag_index_setting(make_cache, cache_dir):
    cache = make_cache(tag_index=True)
    assert cache.tag_index
    cache.set('a', 1, tag='t')
    assert cache.evict('t') == 1
    cache.drop_tag_index()
    assert not cache.tag_index
    cache.set('b', 1, tag='t')
    assert cache.evict('t') == 1
    cache.create_tag_index()
    assert cache.tag_index
    cache.close()
    reopened = make_cache()
    assert reopened.tag_index


def test_tag_index_default_off(cache):
    assert not cache.tag_index


def test_tag_replaced_on_overwrite(cache):
    cache.set('key', 1, tag='first')
    cache.set('key', 2, tag='second')
    assert cache.get('key', tag=True) == (2, 'second')
    assert cache.evict('first') == 0
    assert cache.evict('second') == 1


# --------------------------------------------------------------------------------------------
# clear
# --------------------------------------------------------------------------------------------


def test_clear_returns_count(cache):
    for number in range(250):
        cache.set(number, number)
    assert cache.clear() == 250
    assert len(cache) == 0
    assert list(cache) == []
    assert cache.clear() == 0


def test_clear_removes_value_files(store):
    for number in range(5):
        store.set(number, os.urandom(BIG))
    store.set('small', b'x')
    assert len(value_files(store.directory)) == 5
    assert store.clear() == 6
    assert value_files(store.directory) == set()
    assert store.check() == []


def test_clear_includes_expired_items(cache):
    cache.set('a', 1, expire=SHORT)
    cache.set('b', 2)
    time.sleep(PAST)
    assert cache.clear() == 2
    assert len(cache) == 0


@pytest.mark.parametrize('stored', ["'2100-01-01'", "x'00'"])
def test_an_expiry_that_is_not_a_number_never_expires_and_raises_nothing(tmp_path, stored):
    """A row whose expiry was written by hand as text or a blob: SQLite sorts it after every
    number, so SQL reads it as never expiring; the reads that compare it in Python (a memory-tier
    fill, pop, pull, peek) must agree, not raise TypeError."""
    cache = diskcache_core.Cache(tmp_path)
    cache.set('k', 'v')
    cache.set('p', 'w')
    cache.push('q1', prefix='q')
    cache.push('q2', prefix='q')
    cache._sql(f'UPDATE Cache SET expire_time = {stored}')
    assert [cache.get('k') for _ in range(3)] == ['v', 'v', 'v']  # the second from the tier
    assert 'k' in cache and cache.pop('p') == 'w'
    assert cache.peek(prefix='q') == cache.pull(prefix='q')
    assert cache.pull(prefix='q')[1] == 'q2'
    assert cache.expire() == 0 and len(cache) == 1
    cache.close()
