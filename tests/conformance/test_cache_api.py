"""The core mapping API of Cache, as python-diskcache 5.6.3 defines it, plus the documented
extensions (read=True always gives a binary file object; incr follows Python arithmetic;
bad input is refused before anything is stored)."""

from __future__ import annotations

import decimal
import gc
import io
import os
import pickle
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from store_helpers import db_filenames, files_settle_to, value_files

import diskcache_core as dc

BIG = 300_000  # bytes: stored in a value file whatever the inline threshold

KEYS = [
    0,
    -5,
    2**62,
    2**70,
    -(2**80),
    3.5,
    -0.25,
    '',
    'text',
    'ünïcödé ✓',
    b'',
    b'\x00bytes\xff',
    ('tuple', 1, 2.5),
    (1, (2, (3,))),
    None,
    frozenset({1, 2}),
]

VALUES = [
    None,
    True,
    False,
    0,
    -1,
    2**63 - 1,
    -(2**63),
    2**100,
    1.5,
    float('inf'),
    '',
    'text',
    'ünïcödé ✓',
    b'',
    b'\x00\x01\xff',
    [1, 'two', 3.0],
    {'a': [1, 2], 'b': {'c': None}},
    (1, 2, 3),
    {1, 2, 3},
    decimal.Decimal('1.25'),
    'x' * BIG,
    'ü' * BIG,
    b'\xab' * BIG,
    list(range(50_000)),
]


def _ids(values):
    return ['%s-%d' % (type(v).__name__, i) for i, v in enumerate(values)]


# --------------------------------------------------------------------------------------------
# set / get / [] / in / len
# --------------------------------------------------------------------------------------------


def test_set_get_returns_true_and_value(cache):
    assert cache.set('key', 'value') is True
    assert cache.get('key') == 'value'
    assert cache['key'] == 'value'
    assert 'key' in cache
    assert len(cache) == 1


@pytest.mark.parametrize('value', VALUES, ids=_ids(VALUES))
def test_values_round_trip(cache, value):
    cache.set('key', value)
    result = cache.get('key')
    assert type(result) is type(value)
    assert result == value


@pytest.mark.parametrize('key', KEYS, ids=_ids(KEYS))
def test_keys_round_trip(cache, key):
    cache[key] = 'value'
    assert cache[key] == 'value'
    assert key in cache
    (stored,) = list(cache)
    assert type(stored) is type(key)
    assert stored == key
    del cache[key]
    assert key not in cache


def test_distinct_keys_do_not_collide(cache):
    keys = [1, '1', b'1', (1,), 2.5, '2.5', b'2.5', ('2.5',)]
    for index, key in enumerate(keys):
        cache[key] = index
    assert len(cache) == len(keys)
    for index, key in enumerate(keys):
        assert cache[key] == index


def test_get_missing_returns_default(cache):
    assert cache.get('missing') is None
    assert cache.get('missing', 'fallback') == 'fallback'
    assert cache.get('missing', default=dc.ENOVAL) is dc.ENOVAL


def test_getitem_missing_raises_keyerror(cache):
    with pytest.raises(KeyError):
        cache['missing']


def test_overwrite_replaces_value_and_keeps_count(cache):
    cache['key'] = 'one'
    cache['key'] = 'two'
    assert cache['key'] == 'two'
    assert len(cache) == 1


def test_len_counts_items(cache):
    for number in range(25):
        cache[number] = number
    assert len(cache) == 25
    for number in range(10):
        del cache[number]
    assert len(cache) == 15


def test_contains_false_for_missing(cache):
    assert 'nope' not in cache


def test_get_with_expire_time_and_tag_tuples(cache):
    cache.set('key', 'value', expire=100, tag='group')
    value, expire_time = cache.get('key', expire_time=True)
    assert value == 'value'
    assert isinstance(expire_time, float)
    value, tag = cache.get('key', tag=True)
    assert (value, tag) == ('value', 'group')
    value, expire_time2, tag = cache.get('key', expire_time=True, tag=True)
    assert (value, expire_time2, tag) == ('value', expire_time, 'group')


def test_get_tuples_for_a_miss(cache):
    assert cache.get('missing', expire_time=True) == (None, None)
    assert cache.get('missing', tag=True) == (None, None)
    assert cache.get('missing', expire_time=True, tag=True) == (None, None, None)
    assert cache.get('missing', 'd', expire_time=True, tag=True) == ('d', None, None)


def test_get_tuples_without_expiry_or_tag(cache):
    cache.set('key', 1)
    assert cache.get('key', expire_time=True, tag=True) == (1, None, None)


# --------------------------------------------------------------------------------------------
# read=True and file-like values
# --------------------------------------------------------------------------------------------


def test_read_inline_bytes_gives_bytesio(cache):
    cache.set('small', b'abc')
    handle = cache.get('small', read=True)
    assert isinstance(handle, io.BytesIO)
    assert handle.read() == b'abc'
    with cache.read('small') as handle:
        assert isinstance(handle, io.BytesIO)
        assert handle.read() == b'abc'


def test_read_file_bytes_gives_open_binary_file(cache):
    data = os.urandom(BIG)
    cache.set('big', data)
    with cache.get('big', read=True) as handle:
        assert handle.readable()
        assert not isinstance(handle, io.BytesIO)
        assert handle.read() == data
    with cache.read('big') as handle:
        assert handle.read() == data


def test_read_file_is_named_by_its_path(store):
    # As python-diskcache's: callers take .name to hand the file on (send it, copy it).
    data = os.urandom(BIG)
    store.set('big', data)
    for handle in (store.get('big', read=True), store.read('big')):
        with handle:
            path = handle.name
        assert os.path.realpath(path).startswith(os.path.realpath(store.directory) + os.sep)
        with open(path, 'rb') as reader:
            assert reader.read() == data


@pytest.mark.parametrize('value', [os.urandom(BIG), 'text ' * BIG, {'a dict': b'x' * BIG}])
def test_a_value_file_cut_short_reads_as_missing(make_store, value):
    # A power loss can keep a row whose value file lost its tail (the library does not sync
    # value files), and a hand can cut one: a get must not return the part that is left.
    store = make_store(memory_size_limit=0)
    store.set('k', value)
    (path,) = value_files(store.directory)
    with open(os.path.join(store.directory, path), 'r+b') as handle:
        handle.truncate(100)
    assert store.get('k', 'missing') == 'missing'
    with pytest.raises(KeyError):
        store.read('k')
    store.set('k', value)  # a write replaces it
    assert store.get('k') == value


def test_pop_pull_and_peek_remove_an_item_whose_value_file_is_cut_short(store):
    def write_and_cut(write):
        # (a released file is removed just after its write: it may still be listed)
        before = value_files(store.directory)
        write(os.urandom(BIG))
        (path,) = value_files(store.directory) - before
        with open(os.path.join(store.directory, path), 'r+b') as handle:
            handle.truncate(100)

    write_and_cut(lambda value: store.set('k', value))
    assert store.pop('k', 'missing') == 'missing'
    assert 'k' not in store  # removed, as an item whose file is lost
    for take in (store.pull, store.peek):
        write_and_cut(store.push)
        store.push(b'small')
        assert take()[1] == b'small'
    store.clear()
    write_and_cut(lambda value: store.set('newest', value))
    with pytest.raises(KeyError):
        store.peekitem()
    assert len(store) == 0


def test_a_disk_of_its_own_gets_null_for_a_value_files_value(make_store):
    # Gets select the row's size where a value file's value column is NULL; a Disk with its
    # own fetch still gets the NULL, as with python-diskcache.
    seen = []

    class OwnFetch(dc.Disk):
        def fetch(self, mode, filename, value, read):
            seen.append((filename is not None, value))
            return super().fetch(mode, filename, value, read)

    store = make_store(disk=OwnFetch)
    data = os.urandom(BIG)
    store.set('k', data)
    assert store.get('k') == data
    assert seen == [(True, None)]


@pytest.mark.parametrize('disk', [dc.Disk('unused'), int, 'Disk'])
def test_disk_must_be_a_disk_class(cache_class, cache_dir, disk):
    # A TypeError, and the ValueError python-diskcache raises, so code written for either works.
    for expected in (TypeError, ValueError):
        with pytest.raises(expected, match='subclass of diskcache_core.Disk'):
            cache_class(cache_dir, disk=disk)
    assert not os.path.exists(cache_dir)


def test_disk_none_is_the_default_disk(cache_class, cache_dir):
    # diskcache-community's default: None means default_disk() (Disk unless configured).
    with cache_class(cache_dir, disk=None) as cache:
        assert type(cache.disk) is dc.default_disk() is dc.Disk


@pytest.mark.parametrize('value', ['text', 'x' * BIG, 12345, 2.5, [1, 2], None])
def test_read_non_bytes_returns_value_itself(cache, value):
    cache.set('key', value)
    assert cache.get('key', read=True) == value
    assert cache.read('key') == value


def test_read_missing_raises_keyerror(cache):
    with pytest.raises(KeyError):
        cache.read('missing')


def test_get_read_with_tuples(cache):
    cache.set('key', b'abc', expire=100, tag='t')
    handle, expire_time, tag = cache.get('key', read=True, expire_time=True, tag=True)
    assert handle.read() == b'abc'
    assert expire_time is not None and tag == 't'


@pytest.mark.parametrize('size', [0, 10, BIG, 5 * 2**20 + 3])
def test_set_read_true_streams_file_object(cache, size):
    data = os.urandom(size)
    assert cache.set('stream', io.BytesIO(data), read=True) is True
    assert cache.get('stream') == data
    with cache.read('stream') as handle:
        assert handle.read() == data


def test_set_read_true_from_real_file(cache, tmp_path):
    source = tmp_path / 'source.bin'
    data = os.urandom(BIG)
    source.write_bytes(data)
    with open(source, 'rb') as handle:
        cache.set('file', handle, read=True)
    assert cache['file'] == data


def test_add_read_true(cache):
    data = os.urandom(BIG)
    assert cache.add('stream', io.BytesIO(data), read=True) is True
    assert cache['stream'] == data


# --------------------------------------------------------------------------------------------
# add / touch / delete / pop
# --------------------------------------------------------------------------------------------


def test_add_only_when_absent(cache):
    assert cache.add('key', 'first') is True
    assert cache.add('key', 'second') is False
    assert cache['key'] == 'first'
    assert len(cache) == 1


def test_add_with_expire_and_tag(cache):
    assert cache.add('key', 'value', expire=100, tag='t') is True
    value, expire_time, tag = cache.get('key', expire_time=True, tag=True)
    assert value == 'value' and expire_time is not None and tag == 't'


def test_add_refused_leaves_no_file(store):
    store.add('key', b'a' * BIG)
    before = value_files(store.directory)
    assert store.add('key', b'b' * BIG) is False
    assert files_settle_to(store.directory, before) == before
    assert store['key'] == b'a' * BIG


def test_delete(cache):
    cache['key'] = 'value'
    assert cache.delete('key') is True
    assert cache.delete('key') is False
    assert 'key' not in cache
    assert len(cache) == 0


def test_delitem(cache):
    cache['key'] = 'value'
    del cache['key']
    with pytest.raises(KeyError):
        del cache['key']


def test_pop(cache):
    cache.set('key', 'value', expire=100, tag='t')
    assert cache.pop('key') == 'value'
    assert 'key' not in cache
    assert cache.pop('key') is None
    assert cache.pop('key', 'default') == 'default'


def test_pop_tuples(cache):
    cache.set('a', 1, expire=100, tag='t')
    value, expire_time = cache.pop('a', expire_time=True)
    assert value == 1 and expire_time is not None
    cache.set('b', 2, tag='t')
    assert cache.pop('b', tag=True) == (2, 't')
    cache.set('c', 3, expire=100, tag='u')
    value, expire_time, tag = cache.pop('c', expire_time=True, tag=True)
    assert (value, tag) == (3, 'u') and expire_time is not None
    assert cache.pop('c', expire_time=True) == (None, None)
    assert cache.pop('c', 'd', tag=True) == ('d', None)
    assert cache.pop('c', expire_time=True, tag=True) == (None, None, None)


def test_pop_file_value_removes_file(store):
    data = os.urandom(BIG)
    store.set('big', data)
    assert len(value_files(store.directory)) == 1
    assert store.pop('big') == data
    assert files_settle_to(store.directory, set()) == set()


def test_delete_and_overwrite_remove_value_files(store):
    store.set('a', os.urandom(BIG))
    store.set('b', os.urandom(BIG))
    assert len(value_files(store.directory)) == 2
    store.set('a', b'small')
    remaining = db_filenames(store.directory)
    assert len(remaining) == 1
    assert files_settle_to(store.directory, remaining) == remaining
    store.delete('b')
    assert files_settle_to(store.directory, set()) == set()


def test_value_file_named_by_row(store):
    store.set('big', os.urandom(BIG))
    assert value_files(store.directory) == db_filenames(store.directory)
    assert len(db_filenames(store.directory)) == 1


# --------------------------------------------------------------------------------------------
# incr / decr
# --------------------------------------------------------------------------------------------


def test_incr_decr_basic(cache):
    assert cache.incr('n') == 1
    assert cache.incr('n', 10) == 11
    assert cache.decr('n') == 10
    assert cache.decr('n', 20) == -10
    assert cache['n'] == -10


def test_incr_default(cache):
    assert cache.incr('n', 5, default=100) == 105
    assert cache.decr('m', 5, default=100) == 95


def test_incr_missing_with_default_none_raises(cache):
    with pytest.raises(KeyError):
        cache.incr('missing', default=None)
    with pytest.raises(KeyError):
        cache.decr('missing', default=None)
    assert 'missing' not in cache


def test_incr_of_an_item_whose_value_file_is_lost_counts_from_the_default(make_cache):
    # A get finds such an item missing; incr raised FileNotFoundError naming only the file.
    cache = make_cache(disk_min_file_size=0)  # numbers kept in value files
    for default, expected in ((None, KeyError), (0, 1)):  # (the last replaces the lost row)
        cache.set('n', 10**40)
        for root, _, names in os.walk(cache.directory):
            for name in names:
                if name.endswith('.val'):
                    os.remove(os.path.join(root, name))
        if expected is KeyError:
            with pytest.raises(KeyError):
                cache.incr('n', default=default)
        else:
            assert cache.incr('n', default=default) == expected
            assert cache.get('n') == expected
    assert cache.check() == []


def test_incr_past_64_bits(cache):
    cache.set('big', 2**63 - 1)
    assert cache.incr('big') == 2**63
    value = cache.get('big')
    assert value == 2**63 and type(value) is int
    assert cache.incr('big', 2**64) == 2**63 + 2**64
    assert cache['big'] == 2**63 + 2**64


def test_decr_past_64_bits(cache):
    cache.set('small', -(2**63))
    assert cache.decr('small') == -(2**63) - 1
    assert cache['small'] == -(2**63) - 1


def test_incr_huge_value_and_delta(cache):
    cache.set('huge', 2**200)
    assert cache.incr('huge', 2**200) == 2**201
    assert cache['huge'] == 2**201
    assert cache.incr('fresh', 2**100) == 2**100
    assert cache['fresh'] == 2**100


def test_incr_back_into_64_bits(cache):
    cache.set('n', 2**64)
    assert cache.decr('n', 2**64) == 0
    assert cache['n'] == 0 and type(cache['n']) is int
    assert cache.incr('n') == 1


def test_incr_float(cache):
    cache.set('f', 1.5)
    assert cache.incr('f', 0.5) == 2.0
    assert cache['f'] == 2.0 and type(cache['f']) is float
    assert cache.incr('g', 0.5) == 0.5


def test_incr_bool_and_decimal_follow_python_add(cache):
    cache.set('b', True)
    assert cache.incr('b') == 2
    assert cache['b'] == 2
    cache.set('d', decimal.Decimal('1.5'))
    assert cache.incr('d') == decimal.Decimal('2.5')
    assert cache['d'] == decimal.Decimal('2.5')


def test_incr_keeps_expire_and_tag(cache):
    cache.set('n', 1, expire=100, tag='t')
    _, expire_before, _ = cache.get('n', expire_time=True, tag=True)
    cache.incr('n')
    value, expire_after, tag = cache.get('n', expire_time=True, tag=True)
    assert value == 2 and tag == 't'
    assert expire_after == pytest.approx(expire_before)


@pytest.mark.parametrize('value', ['text', b'bytes', [1], None, {'a': 1}])
def test_incr_non_number_value_raises_typeerror_and_keeps_value(cache, value):
    cache.set('key', value)
    with pytest.raises(TypeError):
        cache.incr('key')
    with pytest.raises(TypeError):
        cache.decr('key')
    assert cache.get('key') == value


@pytest.mark.parametrize('delta', ['1', b'1', None, [1]])
def test_incr_non_number_delta_raises_typeerror(cache, delta):
    cache.set('n', 5)
    with pytest.raises(TypeError):
        cache.incr('n', delta)
    assert cache['n'] == 5
    with pytest.raises(TypeError):
        cache.incr('missing', delta)
    assert 'missing' not in cache


def test_incr_counts_from_threads(cache):
    def work():
        for _ in range(100):
            cache.incr('n', retry=True)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert cache['n'] == 400


# --------------------------------------------------------------------------------------------
# Bad input is refused before anything is stored
# --------------------------------------------------------------------------------------------


class _Unpicklable:
    def __reduce__(self):
        raise TypeError('refuse to pickle')


def _local_instance():
    class Local:
        pass

    return Local()


UNPICKLABLE = {
    'lambda': lambda: (lambda: 0),
    'local-class-instance': _local_instance,
    'lock': threading.Lock,
    'big-list-with-lambda': lambda: [b'x' * 2_000_000, lambda: 0],
    'generator': lambda: (i for i in range(3)),
}


def _snapshot(store):
    return len(store), value_files(store.directory)


@pytest.mark.parametrize('name', sorted(UNPICKLABLE))
@pytest.mark.parametrize('method', ['set', 'add', 'push', 'setitem'])
def test_unpicklable_value_raises_typeerror_before_storing(store, name, method):
    store.set('existing', b'e' * BIG)
    before = _snapshot(store)
    value = UNPICKLABLE[name]()
    with pytest.raises(TypeError):
        if method == 'set':
            store.set('key', value)
        elif method == 'add':
            store.add('key', value)
        elif method == 'push':
            store.push(value)
        else:
            store['key'] = value
    gc.collect()
    assert _snapshot(store) == before
    assert 'key' not in store
    assert store['existing'] == b'e' * BIG


class _FailingReader(io.RawIOBase):
    """A binary file that yields some data and then fails, like a dropped network stream."""

    def __init__(self, good_bytes):
        self.remaining = good_bytes

    def readable(self):
        return True

    def readinto(self, buffer):
        if self.remaining <= 0:
            raise OSError('stream broke')
        count = min(len(buffer), self.remaining, 65536)
        buffer[:count] = b'r' * count
        self.remaining -= count
        return count


@pytest.mark.parametrize('method', ['set', 'add', 'push'])
def test_failing_stream_stores_nothing(store, method):
    store.set('key', b'old' * BIG)
    before = _snapshot(store)
    with pytest.raises(OSError):
        if method == 'push':
            store.push(_FailingReader(3 * BIG), read=True)
        else:
            getattr(store, method)('key' if method == 'set' else 'other', _FailingReader(3 * BIG), read=True)
    gc.collect()
    assert files_settle_to(store.directory, before[1]) == before[1]
    assert _snapshot(store) == before
    assert store['key'] == b'old' * BIG


def test_unpicklable_value_does_not_replace_existing(store):
    store.set('key', 'old')
    with pytest.raises(TypeError):
        store.set('key', threading.Lock())
    assert store['key'] == 'old'


@pytest.mark.parametrize('expire', ['10', b'1', [1], object()])
def test_expire_not_a_number_raises_typeerror(store, expire):
    before = _snapshot(store)
    with pytest.raises(TypeError):
        store.set('key', 'value', expire=expire)
    with pytest.raises(TypeError):
        store.add('key', 'value', expire=expire)
    with pytest.raises(TypeError):
        store.set('key', b'x' * BIG, expire=expire)
    with pytest.raises(TypeError):
        store.push('value', expire=expire)
    assert _snapshot(store) == before
    store.set('existing', 'value')
    before = _snapshot(store)
    with pytest.raises(TypeError):
        store.touch('existing', expire=expire)
    assert store.get('existing', expire_time=True) == ('value', None)
    assert _snapshot(store) == before
    assert 'key' not in store


@pytest.mark.parametrize('tag', [['list'], {'a': 1}, object(), ('tuple',), {1}])
def test_tag_of_wrong_type_raises_typeerror(store, tag):
    before = _snapshot(store)
    with pytest.raises(TypeError):
        store.set('key', 'value', tag=tag)
    with pytest.raises(TypeError):
        store.add('key', b'x' * BIG, tag=tag)
    with pytest.raises(TypeError):
        store.push('value', tag=tag)
    assert _snapshot(store) == before
    assert 'key' not in store


@pytest.mark.parametrize('tag', ['text', b'bytes', 7, 2.5, None])
def test_tag_of_allowed_types_round_trips(cache, tag):
    cache.set('key', 'value', tag=tag)
    assert cache.get('key', tag=True) == ('value', tag)


def test_unpicklable_key_raises_before_storing(store):
    before = _snapshot(store)
    with pytest.raises(Exception):
        store.set(lambda: 0, 'value')
    assert _snapshot(store) == before


def test_push_bad_side_raises_valueerror(store):
    store.push('a')
    before = _snapshot(store)
    with pytest.raises(ValueError):
        store.push('b', side='middle')
    with pytest.raises(ValueError):
        store.push(b'x' * BIG, side='middle')
    assert _snapshot(store) == before


# --------------------------------------------------------------------------------------------
# Iteration
# --------------------------------------------------------------------------------------------


def test_iter_in_insertion_order_and_reversed(store):
    cache = store
    for key in ['b', 'a', 'c', 2, 1]:
        cache[key] = key
    assert list(cache) == ['b', 'a', 'c', 2, 1]
    assert list(reversed(cache)) == [1, 2, 'c', 'a', 'b']


def test_iter_order_kept_when_value_updated(store):
    cache = store
    for key in 'bac':
        cache[key] = 0
    cache['b'] = 1
    assert list(cache) == ['b', 'a', 'c']


def test_iter_empty(store):
    cache = store
    assert list(cache) == []
    assert list(reversed(cache)) == []
    assert list(cache.iterkeys()) == []


def test_iterkeys_in_database_sort_order(store):
    cache = store
    for key in [4, 1, 3, 0, 2]:
        cache[key] = key
    assert list(cache.iterkeys()) == [0, 1, 2, 3, 4]
    assert list(cache.iterkeys(reverse=True)) == [4, 3, 2, 1, 0]


def test_iterkeys_mixed_types(store):
    cache = store
    for key in ['b', 2, 'a', 1.5, b'z']:
        cache[key] = 1
    assert list(cache.iterkeys()) == [1.5, 2, 'a', 'b', b'z']
    assert list(cache.iterkeys(reverse=True)) == [b'z', 'b', 'a', 2, 1.5]


def test_iter_many_keys(store):
    cache = store
    for number in range(450):
        cache[number] = number
    assert list(cache) == list(range(450))
    assert list(reversed(cache)) == list(range(449, -1, -1))
    assert list(cache.iterkeys()) == list(range(450))


def test_iter_and_len_include_expired_items(cache):
    cache.set('here', 2)
    cache.set('gone', 1, expire=0.05)
    time.sleep(0.1)
    assert 'gone' not in cache
    assert set(cache) == {'gone', 'here'}
    assert len(cache) == 2


# --------------------------------------------------------------------------------------------
# Properties, close, context manager, pickling
# --------------------------------------------------------------------------------------------


def test_properties(cache_class, cache_dir):
    cache = cache_class(cache_dir, timeout=7)
    try:
        assert cache.directory == cache_dir
        assert cache.timeout == 7
        assert isinstance(cache.disk, dc.Disk)
    finally:
        cache.close()


def test_directory_accepts_pathlib(cache_class, tmp_path):
    cache = cache_class(tmp_path / 'p')
    try:
        assert cache.directory == str(tmp_path / 'p')
        cache['k'] = 1
        assert os.path.isdir(tmp_path / 'p')
    finally:
        cache.close()


def test_a_relative_directory_stays_the_one_named_at_open_after_chdir(cache_class, tmp_path, monkeypatch):
    # Before, a chdir made the cache a new, empty one under the new working directory (the
    # removed-directory check found no database at the relative path and made one).
    monkeypatch.chdir(tmp_path)
    cache = cache_class('relative')
    try:
        assert cache.directory == str(tmp_path / 'relative')
        cache['small'] = 1
        cache['big'] = b'x' * 100_000  # a value file
        (tmp_path / 'elsewhere').mkdir()
        monkeypatch.chdir(tmp_path / 'elsewhere')
        time.sleep(0.15)  # past the removed-directory check's interval
        cache['new'] = 2
        thread = threading.Thread(target=cache.set, args=('from a thread', 3))
        thread.start()
        thread.join()
        assert cache['small'] == 1 and cache['big'] == b'x' * 100_000
        assert sorted(cache) == sorted(['small', 'big', 'new', 'from a thread'])
        assert os.listdir(tmp_path / 'elsewhere') == []
        clone = pickle.loads(pickle.dumps(cache))  # (unpickled where another cwd is, too)
        assert clone['new'] == 2
        clone.close()
    finally:
        cache.close()


def test_directory_expands_user(cache_class, tmp_path, monkeypatch):
    monkeypatch.setenv('HOME', str(tmp_path))
    cache = cache_class('~/home-cache')
    try:
        assert cache.directory == str(tmp_path / 'home-cache')
    finally:
        cache.close()


def test_directory_none_makes_temporary_directory(cache_class):
    cache = cache_class()
    try:
        assert os.path.isdir(cache.directory)
        cache['k'] = 'v'
        assert cache['k'] == 'v'
    finally:
        cache.close()


def test_directory_is_a_file_raises(cache_class, tmp_path):
    path = tmp_path / 'file'
    path.write_text('not a directory')
    with pytest.raises((OSError, ValueError, dc.DiskCacheError)):
        cache = cache_class(str(path))
        cache.set('k', 'v')
    assert path.read_text() == 'not a directory'


def test_context_manager_closes_and_cache_reopens(cache_class, cache_dir):
    with cache_class(cache_dir) as cache:
        cache['key'] = 'value'
    assert cache['key'] == 'value'
    cache.close()
    cache.close()
    assert cache.get('key') == 'value'
    cache.close()


def test_data_persists_across_instances(cache_class, cache_dir):
    with cache_class(cache_dir) as first:
        first.set('key', 'value')
        first.set('big', b'b' * BIG)
    with cache_class(cache_dir) as second:
        assert second['key'] == 'value'
        assert second['big'] == b'b' * BIG


def test_pickle_cache_object(cache):
    cache['key'] = 'value'
    clone = pickle.loads(pickle.dumps(cache))
    try:
        assert type(clone) is type(cache)
        assert clone.directory == cache.directory
        assert clone.timeout == cache.timeout
        assert type(clone.disk) is type(cache.disk)
        assert clone['key'] == 'value'
        clone['other'] = 1
        assert cache['other'] == 1
    finally:
        clone.close()


def test_two_instances_see_each_others_writes(make_cache):
    first = make_cache()
    second = make_cache()
    first['key'] = 'one'
    assert second['key'] == 'one'
    second['key'] = 'two'
    assert first['key'] == 'two'
    del first['key']
    assert 'key' not in second
    assert second.get('key') is None


def test_check_consistent_cache_is_empty(cache):
    for number in range(20):
        cache.set(number, os.urandom(BIG if number % 3 == 0 else 100))
    for number in range(0, 20, 2):
        cache.delete(number)
    assert cache.check() == []
    assert cache.check(fix=True) == []


def test_volume_counts_stored_values(cache):
    empty = cache.volume()
    for number in range(5):
        cache.set(number, os.urandom(200_000))
    assert cache.volume() >= empty + 5 * 200_000


# --------------------------------------------------------------------------------------------
# Property-based: the cache behaves like a dict
# --------------------------------------------------------------------------------------------

keys_strategy = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.text(max_size=20),
    st.binary(max_size=20),
    st.tuples(st.integers(), st.text(max_size=5)),
)
values_strategy = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False),
        st.text(),
        st.binary(max_size=70_000),
    ),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=8,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=keys_strategy, value=values_strategy)
def test_any_key_and_value_round_trip(store, key, value):
    store.set(key, value)
    assert store.get(key) == value
    assert key in store


class CacheMachine(RuleBasedStateMachine):
    """Model-based test: a Cache and a dict receive the same operations."""

    def __init__(self):
        super().__init__()
        import tempfile

        self.directory = tempfile.mkdtemp(prefix='dc-state-')
        self.cache = dc.Cache(self.directory)
        self.model: dict = {}

    keys = st.sampled_from(['a', 'b', 1, 2, b'c', ('t', 1)])
    values = st.one_of(st.integers(), st.text(max_size=10), st.binary(min_size=0, max_size=60_000))

    @rule(key=keys, value=values)
    def set(self, key, value):
        assert self.cache.set(key, value) is True
        self.model[key] = value

    @rule(key=keys, value=values)
    def add(self, key, value):
        assert self.cache.add(key, value) is (key not in self.model)
        self.model.setdefault(key, value)

    @rule(key=keys)
    def delete(self, key):
        assert self.cache.delete(key) is (key in self.model)
        self.model.pop(key, None)

    @rule(key=keys)
    def pop(self, key):
        assert self.cache.pop(key, 'missing') == self.model.pop(key, 'missing')

    @rule(key=keys, delta=st.integers(min_value=-(2**65), max_value=2**65))
    def incr(self, key, delta):
        current = self.model.get(key, 0)
        if isinstance(current, int):
            assert self.cache.incr(key, delta) == current + delta
            self.model[key] = current + delta
        else:
            with pytest.raises(TypeError):
                self.cache.incr(key, delta)

    @invariant()
    def same_contents(self):
        assert len(self.cache) == len(self.model)
        for key, value in self.model.items():
            assert self.cache.get(key) == value

    def teardown(self):
        self.cache.close()
        import shutil

        shutil.rmtree(self.directory, ignore_errors=True)


TestCacheMachine = CacheMachine.TestCase
TestCacheMachine.settings = settings(max_examples=25, stateful_step_count=25, deadline=None)

