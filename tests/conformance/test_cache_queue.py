"""push / pull / peek / peekitem: the queue API of python-diskcache 5.6.3."""

from __future__ import annotations

import io
import os
import time

import pytest

import diskcache_core
from store_helpers import files_settle_to, unnamed_files, value_files

START = 500000000000000
BIG = 300_000


@pytest.fixture
def cache_class():
    """The queue API is Cache's (python-diskcache's FanoutCache has none either)."""
    return diskcache_core.Cache


def test_push_integer_keys_from_500_trillion(cache):
    assert cache.push('first') == START
    assert cache.push('second') == START + 1
    assert cache.push('zeroth', side='front') == START - 1
    assert cache.get(START) == 'first'
    assert cache.get(START - 1) == 'zeroth'
    assert len(cache) == 3


def test_push_prefix_keys(cache):
    assert cache.push(1234, prefix='userids') == 'userids-500000000000000'
    assert cache.push(5678, prefix='userids') == 'userids-500000000000001'
    assert cache.push(9, prefix='userids', side='front') == 'userids-499999999999999'
    assert cache['userids-500000000000001'] == 5678


def test_pull_fifo_and_back(cache):
    for letter in 'abc':
        cache.push(letter)
    assert cache.pull() == (START, 'a')
    assert cache.pull(side='back') == (START + 2, 'c')
    assert cache.pull() == (START + 1, 'b')
    assert cache.pull() == (None, None)
    assert len(cache) == 0


def test_pull_empty_default(cache):
    assert cache.pull() == (None, None)
    assert cache.pull(default='empty') == 'empty'
    assert cache.pull(expire_time=True) == ((None, None), None)
    assert cache.pull(tag=True) == ((None, None), None)
    assert cache.pull(expire_time=True, tag=True) == ((None, None), None, None)
    assert cache.pull(default=0, tag=True) == (0, None)


def test_push_front_pull_back_is_a_queue(cache):
    for number in range(5):
        cache.push(number, side='front')
    assert [cache.pull(side='back')[1] for _ in range(5)] == [0, 1, 2, 3, 4]


def test_stack_push_back_pull_back(cache):
    for number in range(5):
        cache.push(number)
    assert [cache.pull(side='back')[1] for _ in range(5)] == [4, 3, 2, 1, 0]


def test_prefix_queues_are_separate(cache):
    cache.push('int-queue')
    cache.push('a1', prefix='a')
    cache.push('b1', prefix='b')
    cache.push('a2', prefix='a')
    assert cache.pull(prefix='a') == ('a-500000000000000', 'a1')
    assert cache.pull(prefix='b') == ('b-500000000000000', 'b1')
    assert cache.pull() == (START, 'int-queue')
    assert cache.pull(prefix='a') == ('a-500000000000001', 'a2')
    assert cache.pull(prefix='a') == (None, None)


def test_queue_ignores_ordinary_keys(cache):
    # Integer keys outside the queue's range (0, 10**15) and other types are not queue items.
    cache['plain'] = 1
    cache[10**16] = 'outside'
    cache[b'bytes'] = 'bytes'
    assert cache.pull() == (None, None)
    assert cache.push('q') == START
    assert cache.pull() == (START, 'q')
    assert cache[10**16] == 'outside'
    assert len(cache) == 3


def test_pull_tuples(cache):
    cache.push('a', expire=100, tag='t')
    (key, value), expire_time, tag = cache.pull(expire_time=True, tag=True)
    assert (key, value, tag) == (START, 'a', 't')
    assert expire_time > time.time() + 90
    cache.push('b', tag='u')
    assert cache.pull(tag=True) == ((START, 'b'), 'u')
    cache.push('c')
    assert cache.pull(expire_time=True) == ((START, 'c'), None)


def test_peek_does_not_remove(cache):
    for letter in 'abc':
        cache.push(letter)
    assert cache.peek() == (START, 'a')
    assert cache.peek(side='back') == (START + 2, 'c')
    assert len(cache) == 3
    assert cache.peek(prefix='none') == (None, None)
    assert cache.peek(default='x', prefix='none') == 'x'


def test_peek_tuples(cache):
    cache.push('a', expire=100, tag='t')
    (key, value), expire_time, tag = cache.peek(expire_time=True, tag=True)
    assert (key, value, tag) == (START, 'a', 't') and expire_time is not None
    assert cache.peek(tag=True) == ((START, 'a'), 't')
    assert cache.peek(prefix='p', expire_time=True, tag=True) == ((None, None), None, None)


def test_pull_skips_and_removes_expired(cache):
    cache.push('old', expire=0.1)
    cache.push('fresh')
    time.sleep(0.25)
    assert cache.pull() == (START + 1, 'fresh')
    assert len(cache) == 0


def test_peek_skips_and_removes_expired(cache):
    cache.push('old', expire=0.1)
    cache.push('fresh')
    cache.push('old-back', expire=0.1)
    time.sleep(0.25)
    assert cache.peek() == (START + 1, 'fresh')
    assert len(cache) == 2
    assert cache.peek(side='back') == (START + 1, 'fresh')
    assert len(cache) == 1


def test_pull_only_expired_returns_default(cache):
    cache.push('old', expire=0.1)
    time.sleep(0.25)
    assert cache.pull() == (None, None)
    assert len(cache) == 0


def test_push_file_values_and_pull_removes_file(store):
    data = os.urandom(BIG)
    key = store.push(data)
    assert len(value_files(store.directory)) == 1
    assert store.peek() == (key, data)
    assert store.pull() == (key, data)
    assert files_settle_to(store.directory, set()) == set()


def test_push_read_true(store):
    data = os.urandom(BIG)
    key = store.push(io.BytesIO(data), read=True)
    assert store[key] == data
    assert store.pull() == (key, data)


def test_push_bad_side_is_valueerror(cache):
    with pytest.raises(ValueError):
        cache.push('x', side='middle')
    assert len(cache) == 0


def test_peekitem_by_insertion_order(cache):
    for number, letter in enumerate('abc'):
        cache[letter] = number
    assert cache.peekitem() == ('c', 2)
    assert cache.peekitem(last=False) == ('a', 0)
    assert len(cache) == 3


def test_peekitem_tuples(cache):
    cache.set('a', 1, expire=100, tag='t')
    (key, value), expire_time, tag = cache.peekitem(expire_time=True, tag=True)
    assert (key, value, tag) == ('a', 1, 't') and expire_time is not None
    assert cache.peekitem(tag=True) == (('a', 1), 't')
    assert cache.peekitem(expire_time=True)[0] == ('a', 1)


def test_peekitem_empty_raises_keyerror(cache):
    with pytest.raises(KeyError):
        cache.peekitem()
    with pytest.raises(KeyError):
        cache.peekitem(last=False)


def test_peekitem_skips_and_removes_expired(cache):
    cache.set('first', 1)
    cache.set('middle', 2)
    cache.set('last', 3, expire=0.1)
    time.sleep(0.25)
    assert cache.peekitem() == ('middle', 2)
    assert len(cache) == 2
    cache.set('first', 1, expire=0.1)  # update keeps insertion position
    time.sleep(0.25)
    assert cache.peekitem(last=False) == ('middle', 2)
    assert len(cache) == 1


def test_peekitem_file_value_and_pickled_key(store):
    data = os.urandom(BIG)
    store[('tuple', 'key')] = data
    assert store.peekitem() == (('tuple', 'key'), data)


@pytest.mark.timeout(120)
def test_peek_and_peekitem_pass_over_an_item_whose_value_file_is_gone(store):
    # A value file lost for good (removed by hand, a damaged disk): peek and peekitem used to
    # read the row again for ever, taking the missing file for a replacement in progress.
    store.push(os.urandom(BIG))
    store.push(b'small')
    store.set('newest', os.urandom(BIG))
    for path in value_files(store.directory):
        os.remove(os.path.join(store.directory, path))
    assert store.peek()[1] == b'small'
    assert store.peekitem()[1] == b'small'  # 'newest' is gone too
    assert len(store) == 1  # the two broken items were removed, as pull removes them
    assert store.pull()[1] == b'small'


def test_a_push_whose_next_key_is_an_items_key_raises_valueerror(cache):
    if not hasattr(cache, 'push'):
        pytest.skip('FanoutCache has no queue')
    cache.set(0, 'set directly, below the queue range')
    cache.set(1, 'set directly, in the queue range')
    with pytest.raises(ValueError, match='next key, 0, is an item'):
        cache.push(b'x' * 100_000, side='front')  # a value file, removed with the rollback
    assert cache.push('back') == 2 and cache.get(0).startswith('set directly')
    assert len(cache) == 3


def test_a_push_that_fails_inside_a_committed_transaction_leaves_no_value_file(cache):
    # The caller catches the push's error and the transaction goes on to commit: no row names
    # the value file the push wrote, so it must go with the failed statement, not with a
    # rollback that never comes.
    if not hasattr(cache, 'push'):
        pytest.skip('FanoutCache has no queue')
    cache.set(0, 'set directly, below the queue range')
    cache.set(1.0, 'set directly, in the queue range')
    with cache.transact():
        with pytest.raises(ValueError, match='is an item'):
            cache.push(b'x' * 100_000, side='front')
        cache.set('after', 'the block goes on')
    assert cache.get('after') == 'the block goes on'
    assert unnamed_files(cache.directory) == set()
    assert cache.check() == []
