"""Deque and Index: compared with collections.deque and OrderedDict on random operation
sequences, every method and edge case, and the same operations on python-diskcache's classes."""

from __future__ import annotations

import collections
import operator
import pickle
import random
import shutil
import time
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import diskcache_core as dc
from diskcache_core._store import reaper as _reaper
from diskcache_core._collections.persistent import Deque, Index

INF = float('inf')
BIG = b'x' * 100_000  # stored in a value file, not inline


@pytest.fixture
def directory(tmp_path) -> str:
    return str(tmp_path / 'collection')


@pytest.fixture
def deque(directory):
    made = Deque(directory=directory)
    yield made
    made.cache.close()


@pytest.fixture
def index(directory):
    made = Index(directory)
    yield made
    made.cache.close()


@pytest.fixture(scope='module')
def shared_cache(tmp_path_factory):
    """One cache for the property tests, cleared for each example (opening costs more)."""
    cache = dc.Cache(str(tmp_path_factory.mktemp('shared')), eviction_policy='none')
    yield cache
    cache.close()


def outcome(call, *args):
    """A call's result, or the type of the exception it raised."""
    try:
        return ('ok', call(*args))
    except Exception as exc:  # noqa: BLE001 - compared between implementations
        return ('raised', type(exc))


# ---------------------------------------------------------------------------------------------
# Deque against collections.deque
# ---------------------------------------------------------------------------------------------


class ModelDeque:
    """collections.deque with the methods Deque adds: peek, peekleft, a settable maxlen."""

    def __init__(self, maxlen):
        self.items = collections.deque(maxlen=maxlen)

    def peek(self):
        if not self.items:
            raise IndexError('peek from an empty deque')
        return self.items[-1]

    def peekleft(self):
        if not self.items:
            raise IndexError('peek from an empty deque')
        return self.items[0]

    @property
    def maxlen(self):
        return INF if self.items.maxlen is None else self.items.maxlen

    @maxlen.setter
    def maxlen(self, value):
        self.items = collections.deque(self.items, maxlen=value)

    def __getattr__(self, name):
        return getattr(self.items, name)

    def __iter__(self):
        return iter(self.items)

    def __reversed__(self):
        return reversed(self.items)

    def __len__(self):
        return len(self.items)

    def __getitem__(self, position):
        return self.items[position]

    def __setitem__(self, position, value):
        self.items[position] = value

    def __delitem__(self, position):
        del self.items[position]

    def __contains__(self, value):
        return value in self.items

    def __iadd__(self, values):
        self.items += values
        return self


def _set_maxlen(target, value):
    target.maxlen = value


def _iadd(target, values):
    operator.iadd(target, values)


values = st.integers(0, 4)
positions = st.integers(-7, 7)
deque_operations = st.one_of(
    st.tuples(st.sampled_from(['append', 'appendleft', 'remove', 'count', 'index', 'contains']), values),
    st.tuples(st.sampled_from(['extend', 'extendleft', 'iadd']), st.lists(values, max_size=6)),
    st.tuples(st.sampled_from(['pop', 'popleft', 'peek', 'peekleft', 'reverse', 'clear'])),
    st.tuples(st.just('rotate'), st.integers(-9, 9)),
    st.tuples(st.sampled_from(['getitem', 'delitem']), positions),
    st.tuples(st.just('setitem'), positions, values),
    st.tuples(st.just('maxlen'), st.none() | st.integers(0, 5)),
)

DEQUE_CALLS = {
    'contains': operator.contains,
    'getitem': operator.getitem,
    'setitem': operator.setitem,
    'delitem': operator.delitem,
    'maxlen': _set_maxlen,
    'iadd': _iadd,
}


def _deque_call(target, name):
    if name in DEQUE_CALLS:
        return lambda *args: DEQUE_CALLS[name](target, *args)
    return getattr(target, name)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(maxlen=st.none() | st.integers(0, 5), steps=st.lists(deque_operations, max_size=25))
def test_deque_behaves_like_collections_deque(shared_cache, maxlen, steps):
    shared_cache.clear()
    ours = Deque.fromcache(shared_cache, maxlen=maxlen)
    model = ModelDeque(maxlen)
    for name, *args in steps:
        expected = outcome(_deque_call(model, name), *args)
        assert outcome(_deque_call(ours, name), *args) == expected, (name, args)
        assert list(ours) == list(model), (name, args)
        assert len(ours) == len(model)
        assert ours.maxlen == model.maxlen
    assert list(reversed(ours)) == list(reversed(model))
    assert ours == model.items
    assert ours == list(model)


# ---------------------------------------------------------------------------------------------
# Index against OrderedDict
# ---------------------------------------------------------------------------------------------


class ModelIndex(collections.OrderedDict):
    """OrderedDict with Index's peekitem."""

    def peekitem(self, last=True):
        if not self:
            raise KeyError('dictionary is empty')
        return next(reversed(self.items())) if last else next(iter(self.items()))


# Keys whose serialized forms differ exactly when they differ as dict keys (not 1 and True).
keys = st.sampled_from(['a', 'b', 'c', 'd', 0, 1, -5, ('t', 1)])
index_values = st.integers(0, 3) | st.binary(max_size=3)
index_operations = st.one_of(
    st.tuples(st.just('setitem'), keys, index_values),
    st.tuples(st.sampled_from(['getitem', 'delitem', 'pop', 'contains', 'get']), keys),
    st.tuples(st.sampled_from(['pop', 'setdefault', 'get']), keys, index_values),
    st.tuples(st.sampled_from(['popitem', 'peekitem']), st.booleans()),
    st.tuples(st.just('update'), st.lists(st.tuples(keys, index_values), max_size=4)),
    st.tuples(st.just('update_keywords'), st.dictionaries(st.sampled_from(['a', 'e']), index_values)),
    st.tuples(st.just('clear')),
)

INDEX_CALLS = {
    'getitem': operator.getitem,
    'setitem': operator.setitem,
    'delitem': operator.delitem,
    'contains': operator.contains,
    'update_keywords': lambda target, items: target.update(**items),
}


def _index_call(target, name):
    if name in INDEX_CALLS:
        return lambda *args: INDEX_CALLS[name](target, *args)
    return getattr(target, name)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(index_operations, max_size=25))
def test_index_behaves_like_ordered_dict(shared_cache, steps):
    shared_cache.clear()
    ours = Index.fromcache(shared_cache)
    model = ModelIndex()
    for name, *args in steps:
        expected = outcome(_index_call(model, name), *args)
        assert outcome(_index_call(ours, name), *args) == expected, (name, args)
        assert list(ours.items()) == list(model.items()), (name, args)
        assert len(ours) == len(model)
    assert list(reversed(ours)) == list(reversed(model))
    assert list(reversed(ours.values())) == list(reversed(model.values()))
    assert ours == model
    assert ours == dict(reversed(model.items()))


# ---------------------------------------------------------------------------------------------
# Deque: construction, properties, persistence
# ---------------------------------------------------------------------------------------------


def test_deque_new_temporary_directory():
    made = Deque('abc')
    try:
        assert Path(made.directory).is_dir()
        assert list(made) == ['a', 'b', 'c']
        assert made.maxlen == INF
        assert repr(made) == f'Deque(directory={made.directory!r})'
    finally:
        made.cache.close()
        shutil.rmtree(made.directory)


def test_deque_reopening_sees_the_items(directory):
    first = Deque(range(3), directory)
    second = Deque(directory=Path(directory))
    assert list(second) == [0, 1, 2]
    second.append(3)
    assert list(first) == [0, 1, 2, 3]
    assert first.directory == second.directory == directory
    assert isinstance(first.cache, dc.Cache)


def test_deque_uses_no_eviction(deque):
    assert deque.cache.eviction_policy == 'none'


def test_deque_fromcache_shares_the_cache(tmp_path):
    cache = dc.Cache(str(tmp_path), eviction_policy='none')
    made = Deque.fromcache(cache, [1, 2])
    assert made.cache is cache
    assert made.directory == cache.directory
    assert len(cache) == 2
    other = Deque.fromcache(cache, [3], maxlen=2)
    assert list(made) == [2, 3] == list(other)
    assert other.maxlen == 2


def test_deque_copy_shares_items_and_maxlen(directory):
    made = Deque([1, 2, 3], directory, maxlen=3)
    copied = made.copy()
    assert copied.maxlen == 3 and copied.cache is made.cache
    copied.append(4)
    assert list(made) == [2, 3, 4]


def test_deque_pickle_round_trip(directory):
    made = Deque([1, 'two', BIG], directory, maxlen=5)
    loaded = pickle.loads(pickle.dumps(made))
    assert type(loaded) is Deque
    assert loaded.directory == directory
    assert loaded.maxlen == 5
    assert list(loaded) == [1, 'two', BIG]
    unbounded = pickle.loads(pickle.dumps(Deque(directory=directory)))
    assert unbounded.maxlen == INF


def test_deque_pickle_keeps_the_disk(tmp_path):
    cache = dc.Cache(str(tmp_path), disk=dc.SafeDisk)
    made = Deque.fromcache(cache, [{'a': 1}])
    loaded = pickle.loads(pickle.dumps(made))
    assert type(loaded.cache.disk) is dc.SafeDisk
    assert loaded[0] == {'a': 1}


def test_deque_items_never_expire(deque):
    deque.append(1)
    (_, value), expire_time = deque.cache.peek(expire_time=True)
    assert value == 1 and expire_time is None


# ---------------------------------------------------------------------------------------------
# Deque: ends
# ---------------------------------------------------------------------------------------------


def test_deque_ends(deque):
    deque.append('b')
    deque.appendleft('a')
    deque.extend(['c', 'd'])
    deque.extendleft(['z', 'y'])
    assert list(deque) == ['y', 'z', 'a', 'b', 'c', 'd']
    assert deque.peek() == 'd' and deque.peekleft() == 'y'
    assert deque.pop() == 'd' and deque.popleft() == 'y'
    assert list(deque) == ['z', 'a', 'b', 'c']


@pytest.mark.parametrize('method', ['pop', 'popleft', 'peek', 'peekleft'])
def test_deque_empty_ends_raise_index_error(deque, method):
    with pytest.raises(IndexError, match='empty deque'):
        getattr(deque, method)()


def test_deque_none_is_a_value(deque):
    deque.append(None)
    assert deque.peek() is None and deque.peekleft() is None
    assert deque.pop() is None
    with pytest.raises(IndexError):
        deque.pop()


def test_deque_iadd_returns_the_same_object(deque):
    alias = deque
    alias += [1, 2]
    assert alias is deque
    assert list(deque) == [1, 2]


def test_deque_extend_itself_doubles(deque):
    deque.extend([1, 2])
    deque.extend(deque)
    assert list(deque) == [1, 2, 1, 2]
    deque.extendleft(deque)
    assert list(deque) == [2, 1, 2, 1, 1, 2, 1, 2]
    deque += deque
    assert len(deque) == 16


def test_deque_extend_by_another_spelling_of_its_directory_doubles(deque, tmp_path):
    # The guard compared the strings: a trailing slash (or a link) read the deque while it grew.
    deque.extend([1, 2, 3])
    link = tmp_path / 'link'
    link.symlink_to(deque.directory)
    for alias in (deque.directory + '/', str(link)):
        deque.extend(Deque(directory=alias))
    assert list(deque) == [1, 2, 3] * 4


def test_deque_refuses_a_cache_whose_disk_encodes_int_keys(tmp_path):
    # JSONDisk packs every key it is given, the integers push stores included: the items were
    # counted but never found (list() empty, d[0] looping for ever under the write lock).
    cache = dc.Cache(str(tmp_path), disk=dc.JSONDisk, eviction_policy='none')
    with pytest.raises(TypeError, match='JSONDisk'):
        Deque.fromcache(cache, ['a', 'b'])
    assert len(cache) == 0
    cache.close()


def test_deque_extend_crosses_batches(deque):
    deque.extend(range(250))
    deque.extendleft(range(-1, -251, -1))
    assert list(deque) == list(range(-250, 250))


def test_deque_extend_keeps_items_before_a_failing_iterable(deque):
    def items():
        yield from range(150)
        raise RuntimeError('source failed')

    with pytest.raises(RuntimeError, match='source failed'):
        deque.extend(items())
    assert list(deque) == list(range(150))


def test_deque_extend_keeps_items_before_an_unserializable_one(deque):
    with pytest.raises((TypeError, AttributeError, pickle.PicklingError)):
        deque.extend([1, 2, lambda: None, 4])
    assert list(deque) == [1, 2]


def test_deque_large_values(deque):
    deque.extend([BIG, b'small', BIG + b'!'])
    deque.rotate()
    deque.reverse()
    assert list(deque) == [b'small', BIG, BIG + b'!']
    deque[0] = BIG
    assert deque.popleft() == BIG


# ---------------------------------------------------------------------------------------------
# Deque: maxlen
# ---------------------------------------------------------------------------------------------


def test_deque_maxlen_trims_on_append_and_extend(directory):
    made = Deque(range(5), directory, maxlen=3)
    assert list(made) == [2, 3, 4]
    made.append(5)
    assert list(made) == [3, 4, 5]
    made.appendleft(2)
    assert list(made) == [2, 3, 4]
    made.extend(range(10, 15))
    assert list(made) == [12, 13, 14]
    made.extendleft('ab')
    assert list(made) == ['b', 'a', 12]
    made += 'xy'
    assert list(made) == [12, 'x', 'y']


def test_deque_maxlen_setter_trims_from_the_front(deque):
    deque.extend('abcde')
    deque.maxlen = 2
    assert list(deque) == ['d', 'e'] and deque.maxlen == 2
    deque.maxlen = None
    assert deque.maxlen == INF
    deque.extend('fg')
    assert list(deque) == ['d', 'e', 'f', 'g']


def test_deque_opening_with_maxlen_trims_existing_items(directory):
    Deque(range(5), directory)
    assert list(Deque(directory=directory, maxlen=2)) == [3, 4]


def test_deque_maxlen_zero_keeps_nothing(deque):
    deque.maxlen = 0
    deque.append(1)
    deque.appendleft(2)
    deque.extend(range(300))
    assert len(deque) == 0


@pytest.mark.parametrize('maxlen, error', [(-1, ValueError), (1.5, TypeError), ('3', TypeError)])
def test_deque_bad_maxlen(directory, deque, maxlen, error):
    with pytest.raises(error):
        Deque(directory=directory, maxlen=maxlen)
    with pytest.raises(error):
        deque.maxlen = maxlen
    assert deque.maxlen == INF


def test_deque_maxlen_may_be_a_whole_float(directory):
    # python-diskcache takes one (collections.deque does not).
    deque = Deque(range(6), directory=directory, maxlen=3.0)
    assert list(deque) == [3, 4, 5] and deque.maxlen == 3


def test_deque_maxlen_infinity_means_unbounded(directory):
    # python-diskcache reports an unbounded maxlen as inf; passing it back must work.
    assert Deque(directory=directory, maxlen=INF).maxlen == INF


# ---------------------------------------------------------------------------------------------
# Deque: indexing
# ---------------------------------------------------------------------------------------------


def test_deque_indexing_across_pages(deque):
    deque.extend(range(250))
    for position in (0, 1, 99, 100, 124, 125, 126, 200, 249, -1, -100, -101, -250):
        assert deque[position] == list(range(250))[position]


def test_deque_setitem_and_delitem(deque):
    deque.extend('abcde')
    deque[1] = 'B'
    deque[-1] = 'E'
    del deque[2]
    del deque[-2]
    assert list(deque) == ['a', 'B', 'E']
    deque.append('f')  # appends after a deleted middle item still go to the back
    deque.appendleft('0')
    assert list(deque) == ['0', 'a', 'B', 'E', 'f']


@pytest.mark.parametrize('position', [3, -4, 100])
def test_deque_index_out_of_range(deque, position):
    deque.extend('abc')
    with pytest.raises(IndexError, match='out of range'):
        deque[position]
    with pytest.raises(IndexError):
        deque[position] = 'x'
    with pytest.raises(IndexError):
        del deque[position]
    assert list(deque) == ['a', 'b', 'c']


def test_deque_empty_index(deque):
    with pytest.raises(IndexError):
        deque[0]
    with pytest.raises(IndexError):
        deque[-1]


@pytest.mark.parametrize('position', [slice(0, 1), '0', 1.0])
def test_deque_index_must_be_an_integer(deque, position):
    deque.extend('abc')
    with pytest.raises(TypeError, match='integers'):
        deque[position]
    with pytest.raises(TypeError):
        deque[position] = 'x'
    with pytest.raises(TypeError):
        del deque[position]


# ---------------------------------------------------------------------------------------------
# Deque: searching and rearranging
# ---------------------------------------------------------------------------------------------


def test_deque_count_index_contains(deque):
    deque.extend([1, 2, 1, 3, 1])
    assert deque.count(1) == 3 and deque.count(9) == 0
    assert 3 in deque and 9 not in deque
    assert deque.index(1) == 0
    assert deque.index(1, 1) == 2
    assert deque.index(1, -2) == 4
    assert deque.index(3, 0, -1) == 3
    with pytest.raises(ValueError):
        deque.index(3, 0, 3)
    with pytest.raises(ValueError):
        deque.index(9)
    reference = [1, 2, 1, 3, 1]
    for start, stop in [(-100, None), (3, 1), (0, -100), (10, 20), (-3, -1), (0, 2**63),
                        (2**64, 2**65), (-(2**64), 2**64)]:
        try:
            expected = reference.index(1, start, len(reference) if stop is None else stop)
        except ValueError:
            with pytest.raises(ValueError, match='not in deque'):
                deque.index(1, start, stop)
        else:
            assert deque.index(1, start, stop) == expected


def test_deque_remove(deque):
    deque.extend('abcb')
    deque.remove('b')
    assert list(deque) == ['a', 'c', 'b']
    with pytest.raises(ValueError, match='not in deque'):
        deque.remove('z')
    assert list(deque) == ['a', 'c', 'b']


@pytest.mark.parametrize('steps', [0, 1, 2, 3, 4, 5, 6, 13, -1, -2, -4, -5, -11])
def test_deque_rotate(deque, steps):
    deque.extend(range(5))
    deque.rotate(steps)
    reference = collections.deque(range(5))
    reference.rotate(steps)
    assert list(deque) == list(reference)


def test_deque_rotate_default_and_small(deque):
    deque.rotate()
    assert list(deque) == []
    deque.append(1)
    deque.rotate(7)
    assert list(deque) == [1]
    deque.append(2)
    deque.rotate()
    assert list(deque) == [2, 1]
    with pytest.raises(TypeError, match='integer'):
        deque.rotate(1.5)


@pytest.mark.parametrize('size', [0, 1, 2, 5, 6])
def test_deque_reverse(deque, size):
    deque.extend(range(size))
    deque.reverse()
    assert list(deque) == list(range(size))[::-1]


def test_deque_clear(deque):
    deque.extend([1, BIG])
    deque.clear()
    assert len(deque) == 0 and list(deque) == []
    deque.append(3)
    assert list(deque) == [3]


def test_deque_transact(deque):
    deque.extend(range(5))
    with deque.transact():
        deque.appendleft(deque.pop())
    assert list(deque) == [4, 0, 1, 2, 3]
    with pytest.raises(RuntimeError), deque.transact():
        deque.clear()
        deque.append('lost')
        raise RuntimeError
    assert list(deque) == [4, 0, 1, 2, 3]


# ---------------------------------------------------------------------------------------------
# Deque: comparison and hashing
# ---------------------------------------------------------------------------------------------


def test_deque_comparisons(deque, tmp_path):
    deque.extend([1, 2, 3])
    assert deque == [1, 2, 3] and deque == (1, 2, 3) and deque == collections.deque([1, 2, 3])
    assert not deque != [1, 2, 3]  # noqa: SIM202 - __ne__ itself
    assert deque != [1, 2] and deque != [1, 2, 4] and not deque == [1, 2]  # noqa: SIM201
    assert deque < [1, 2, 4] and deque < [1, 2, 3, 0] and deque < [2]
    assert deque <= [1, 2, 3] and deque >= [1, 2, 3]
    assert deque > [1, 2] and deque > [1, 1, 9] and not deque > [1, 2, 3]
    assert deque >= [0] and not deque <= [1, 2]
    assert [1, 2, 3] == deque and [1, 2] < deque  # reflected
    assert deque == Deque([1, 2, 3], tmp_path / 'other')


def test_deque_against_non_sequences(deque):
    deque.append(1)
    assert deque != 1 and not deque == {1}  # noqa: SIM201
    with pytest.raises(TypeError):
        deque < 1  # noqa: B015
    with pytest.raises(TypeError):
        hash(deque)


# ---------------------------------------------------------------------------------------------
# Index: construction, properties, persistence
# ---------------------------------------------------------------------------------------------


def test_index_construction_forms(tmp_path):
    temporary = Index({'a': 1}, b=2)
    assert Path(temporary.directory).is_dir() and dict(temporary) == {'a': 1, 'b': 2}
    also_temporary = Index(None, [('x', 1)])
    assert dict(also_temporary) == {'x': 1}
    for made in (temporary, also_temporary):
        made.cache.close()
        shutil.rmtree(made.directory)
    path = tmp_path / 'named'
    assert list(Index(str(path), [('a', 1), ('b', 2)], c=3).items()) == [('a', 1), ('b', 2), ('c', 3)]
    assert dict(Index(path)) == {'a': 1, 'b': 2, 'c': 3}  # os.PathLike
    assert dict(Index(bytes(path))) == {'a': 1, 'b': 2, 'c': 3}
    assert Index(path).directory == str(path)
    assert Index(path).cache.eviction_policy == 'none'


def test_index_reopening_sees_the_items(directory):
    first = Index(directory, {'a': 1})
    second = Index(directory)
    assert second['a'] == 1
    second['b'] = 2
    assert list(first.items()) == [('a', 1), ('b', 2)]


def test_index_fromcache_shares_the_cache(tmp_path):
    cache = dc.Cache(str(tmp_path))
    made = Index.fromcache(cache, {'a': 1}, b=2)
    assert made.cache is cache and made.directory == cache.directory
    assert cache['b'] == 2
    cache['c'] = 3
    assert list(made) == ['a', 'b', 'c']


def test_index_pickle_round_trip(index):
    index.update(a=1, b=BIG)
    loaded = pickle.loads(pickle.dumps(index))
    assert type(loaded) is Index and loaded.directory == index.directory
    assert list(loaded.items()) == [('a', 1), ('b', BIG)]
    assert repr(loaded) == f'Index({index.directory!r})'


def test_index_items_never_expire(index):
    index['a'] = 1
    assert index.cache.get('a', expire_time=True) == (1, None)


# ---------------------------------------------------------------------------------------------
# Index: items
# ---------------------------------------------------------------------------------------------


def test_index_overwrite_keeps_position(index):
    index.update([('a', 1), ('b', 2), ('c', 3)])
    index['a'] = 10
    index['b'] = BIG  # inline value replaced by a value file
    index['b'] = 'small again'
    assert list(index.items()) == [('a', 10), ('b', 'small again'), ('c', 3)]
    del index['a']
    index['a'] = 1  # re-inserted: now last
    assert list(index) == ['b', 'c', 'a']
    assert index.peekitem() == ('a', 1) and index.peekitem(last=False) == ('b', 'small again')


def test_index_missing_keys(index):
    with pytest.raises(KeyError):
        index['missing']
    with pytest.raises(KeyError):
        del index['missing']
    with pytest.raises(KeyError):
        index.pop('missing')
    assert index.pop('missing', None) is None
    assert index.pop('missing', 7) == 7
    assert index.get('missing') is None and index.get('missing', 3) == 3
    assert 'missing' not in index


def test_index_none_and_enoval_like_values(index):
    index['none'] = None
    assert index['none'] is None and 'none' in index
    assert index.get('none', 5) is None
    assert index.pop('none', 5) is None


def test_index_setdefault(index):
    assert index.setdefault('a', 1) == 1
    assert index.setdefault('a', 2) == 1
    assert index.setdefault('b') is None
    assert dict(index) == {'a': 1, 'b': None}


def test_deque_index_passes_over_an_item_whose_value_file_is_lost(deque):
    # Iteration already passed over it; d[i] raised KeyError with the item's internal key.
    deque.extend([b'x' * 300_000, b'small', b'y' * 300_000])
    for path in Path(deque.directory).rglob('*.val'):
        path.unlink()
    assert list(deque) == [b'small']
    assert deque[0] == b'small'
    assert deque[-1] == b'small'
    assert len(deque) == 1  # the lost items met by d[i] were removed


@pytest.mark.parametrize('kept', [0, 1])
def test_deque_rotate_and_reverse_drop_items_whose_value_files_are_lost(directory, kept):
    # rotate pushed a None that was never appended (pull's default), and reverse raised
    # KeyError naming an internal key, leaving the deque half reversed.
    made = Deque([b'x' * 300_000, b'y' * 300_000] + [b'small'] * kept, directory)
    for path in list(Path(directory).rglob('*.val')):
        path.unlink()
    made.rotate(1)
    assert list(made) == [b'small'] * kept
    if not kept:
        assert len(made) == 0  # the pulls that found nothing readable removed them
    items = [b'a' * 300_000, 1, b'b' * 300_000, 2, 3, b'c' * 300_000, 4]
    made.extend(items)
    _reaper.drain()  # (files released above are being removed)
    for path in sorted(Path(directory).rglob('*.val'))[:2]:
        path.unlink()
    readable = list(made)
    made.reverse()
    assert list(made) == readable[::-1]
    assert len(made) == len(readable)  # the lost ones went, as iteration passes over them


@pytest.mark.parametrize('size', range(9))
def test_deque_reverse_every_small_size(directory, size):
    made = Deque(range(size), directory)
    made.reverse()
    assert list(made) == list(range(size))[::-1]


@pytest.mark.parametrize('interrupt', [KeyboardInterrupt, SystemExit])
@pytest.mark.parametrize('kind', ['Deque', 'Index'])
def test_extend_and_update_keep_what_they_took_when_interrupted(directory, interrupt, kind):
    # An interrupt while a batch was being gathered dropped the batch: items taken from the
    # iterable (popped from another deque, say) were lost.
    def items():
        for number in range(150):
            if number == 130:
                raise interrupt()
            yield (number, number) if kind == 'Index' else number

    made = Deque(directory=directory) if kind == 'Deque' else Index(directory)
    with pytest.raises(interrupt):
        made.extend(items()) if kind == 'Deque' else made.update(items())
    assert list(made) == list(range(130))


def test_deque_iteration_ends_at_the_far_end_it_started_with(deque):
    # It paged on with no end: d.extend(x for x in d) grew until the disk was full.
    deque.extend(range(250))
    deque.extend(item for item in deque)
    assert list(deque) == list(range(250)) * 2
    deque.extendleft(item for item in reversed(deque))
    assert len(deque) == 1000


@pytest.mark.timeout(120)
def test_deque_index_passes_over_an_expired_item_of_a_shared_cache(tmp_path):
    # A Deque over a cache other code also uses may meet an item pushed with an expiry.
    cache = dc.Cache(str(tmp_path / 'shared'))
    deque = Deque.fromcache(cache)
    cache.push('soon gone', expire=60)
    deque.append('kept')
    with mock.patch('time.time', return_value=time.time() + 120):
        assert deque[0] == 'kept'
        assert len(deque) == 1
    cache.close()


@pytest.mark.timeout(120)
def test_index_setdefault_replaces_an_item_whose_value_file_is_lost(index):
    # The lost item reads as missing but is not expired, so add refused to replace it and
    # setdefault's get-then-add loop never ended.
    index['big'] = b'x' * 300_000
    for path in Path(index.directory).rglob('*.val'):
        path.unlink()
    assert index.setdefault('big', 'again') == 'again'
    assert index['big'] == 'again'
    assert index.setdefault('big', 'other') == 'again'


def test_index_popitem(index):
    with pytest.raises(KeyError, match='dictionary is empty'):
        index.popitem()
    with pytest.raises(KeyError):
        index.peekitem()
    index.update([('a', 1), ('b', 2), ('c', 3)])
    assert index.popitem() == ('c', 3)
    assert index.popitem(last=False) == ('a', 1)
    assert index.popitem() == ('b', 2)
    with pytest.raises(KeyError):
        index.popitem(last=False)


def test_index_push_pull(index):
    assert index.push('apples') == 500000000000000
    assert index.push('beans') == 500000000000001
    assert index.push('cherries', side='front') == 499999999999999
    assert index.push('dates', prefix='fruit') == 'fruit-500000000000000'
    assert index[500000000000001] == 'beans'
    assert index.pull() == (499999999999999, 'cherries')
    assert index.pull(side='back') == (500000000000001, 'beans')
    assert index.pull(prefix='fruit') == ('fruit-500000000000000', 'dates')
    assert index.pull(prefix='fruit') == (None, None)
    assert index.pull(prefix='veg', default=('none', 0)) == ('none', 0)
    with pytest.raises(ValueError):
        index.push(1, side='middle')


def test_index_update_forms(index):
    index.update({'a': 1})
    index.update([('b', 2)], c=3)
    index.update(collections.OrderedDict(d=4))

    class KeysOnly:
        def keys(self):
            return ['e']

        def __getitem__(self, key):
            return 5

    index.update(KeysOnly())
    index.update(index)  # rewriting its own items changes nothing
    index.update(('f', 6) for _ in range(1))
    assert list(index.items()) == [('a', 1), ('b', 2), ('c', 3), ('d', 4), ('e', 5), ('f', 6)]


def test_index_update_keeps_pairs_before_a_bad_one(index):
    with pytest.raises(ValueError):
        index.update([('a', 1), ('b', 2, 'extra'), ('c', 3)])
    assert dict(index) == {'a': 1}


def test_index_update_crosses_batches(index):
    index.update((number, str(number)) for number in range(250))
    assert list(index) == list(range(250))
    assert index[249] == '249'


def test_index_clear_and_len(index):
    index.update(a=1, b=BIG)
    assert len(index) == 2
    index.clear()
    assert len(index) == 0 and dict(index) == {}


def test_index_transact(index):
    with index.transact():
        index['total'] = index.get('total', 0) + 123.4
        index['count'] = index.get('count', 0) + 1
    assert index['total'] / index['count'] == 123.4
    with pytest.raises(RuntimeError), index.transact():
        index['lost'] = 1
        raise RuntimeError
    assert 'lost' not in index


# ---------------------------------------------------------------------------------------------
# Index: views, comparison, memoize
# ---------------------------------------------------------------------------------------------


def test_index_views_are_live_and_reversible(index):
    keys, values, items = index.keys(), index.values(), index.items()
    assert isinstance(keys, collections.abc.KeysView)
    assert isinstance(values, collections.abc.ValuesView)
    assert isinstance(items, collections.abc.ItemsView)
    assert list(keys) == [] and len(items) == 0
    index.update([('a', 1), ('b', 2), ('c', 3)])
    assert list(keys) == ['a', 'b', 'c'] and list(values) == [1, 2, 3]
    assert list(reversed(keys)) == ['c', 'b', 'a']
    assert list(reversed(values)) == [3, 2, 1]
    assert list(reversed(items)) == [('c', 3), ('b', 2), ('a', 1)]
    assert 'b' in keys and 2 in values and ('b', 2) in items
    assert 'z' not in keys and 9 not in values and ('b', 3) not in items
    assert keys & {'a', 'z'} == {'a'}
    del index['b']
    assert list(items) == [('a', 1), ('c', 3)] and len(values) == 2


def test_index_equality(index, tmp_path):
    pairs = [('a', 1), ('b', 2), ('c', 3)]
    index.update(pairs)
    assert index == dict(pairs) and index == dict(reversed(pairs))
    assert index == collections.OrderedDict(pairs)
    assert index != collections.OrderedDict(reversed(pairs))
    assert collections.OrderedDict(reversed(pairs)) != index  # reflected
    assert dict(pairs) == index
    assert index != {'a': 1, 'b': 2}
    assert index != {'a': 1, 'b': 2, 'z': 3}
    assert index != {'a': 1, 'b': 2, 'c': 4}
    other = Index(tmp_path / 'other', pairs[::-1])
    assert index != other
    other.clear()
    other.update(pairs)
    assert index == other
    assert index != [('a', 1), ('b', 2), ('c', 3)] and not index == 3  # noqa: SIM201
    with pytest.raises(TypeError):
        hash(index)


def test_index_memoize_across_two_objects(directory):
    calls = []

    def square(number):
        calls.append(number)
        return number * number

    first = Index(directory).memoize(name='square')(square)
    second = Index(directory).memoize(name='square')(square)
    assert first(4) == 16 and second(4) == 16
    assert calls == [4]
    assert Index(directory)[first.__cache_key__(4)] == 16


def test_index_memoize_typed_ignore_and_bare_use(index):
    calls = []

    @index.memoize(typed=True, ignore={'verbose'})
    def double(number, verbose=False):
        calls.append(number)
        return number * 2

    assert double(3) == 6 and double(3.0) == 6.0 and double(3, verbose=True) == 6
    assert calls == [3, 3.0]

    @index.memoize  # bare: the default options (it raised 'name cannot be callable')
    def triple(number):
        calls.append(('triple', number))
        return number * 3

    assert triple(2) == triple(2) == 6
    assert calls.count(('triple', 2)) == 1 and index[triple.__cache_key__(2)] == 6


# ---------------------------------------------------------------------------------------------
# Compatibility: the same operations on python-diskcache's Deque and Index
# ---------------------------------------------------------------------------------------------


def python_diskcache():
    return pytest.importorskip('diskcache', reason='python-diskcache is not installed')


def _deque_script(seed):
    rng = random.Random(seed)
    script = []
    for _ in range(120):
        name = rng.choice([
            'append', 'appendleft', 'extend', 'extendleft', 'pop', 'popleft', 'peek', 'peekleft',
            'rotate', 'reverse', 'remove', 'count', 'getitem', 'setitem', 'delitem', 'maxlen',
            'contains', 'len',
        ])
        if name in ('append', 'appendleft', 'remove', 'count', 'contains'):
            script.append((name, rng.randrange(5)))
        elif name in ('extend', 'extendleft'):
            script.append((name, [rng.randrange(5) for _ in range(rng.randrange(4))]))
        elif name == 'rotate':
            script.append((name, rng.randrange(-7, 8)))
        elif name in ('getitem', 'delitem'):
            script.append((name, rng.randrange(-6, 6)))
        elif name == 'setitem':
            script.append((name, rng.randrange(-6, 6), 'set'))
        elif name == 'maxlen':
            script.append((name, rng.choice([None, 2, 4, 8])))
        else:
            script.append((name,))
    return script


def _run_deque_script(made, script):
    calls = dict(DEQUE_CALLS, len=len)
    calls['maxlen'] = lambda target, value: _set_maxlen(target, INF if value is None else value)
    results = []
    for name, *args in script:
        call = (lambda *a, n=name: calls[n](made, *a)) if name in calls else getattr(made, name)
        results.append((name, outcome(call, *args), list(made)))
    return results


@pytest.mark.parametrize('seed', range(3))
def test_deque_matches_python_diskcache(tmp_path, seed):
    script = _deque_script(seed)
    theirs = _run_deque_script(python_diskcache().Deque(directory=str(tmp_path / 'theirs')), script)
    ours = _run_deque_script(Deque(directory=str(tmp_path / 'ours')), script)
    assert ours == theirs


def _index_script(made):
    results = []

    def record(call, *args):
        results.append(outcome(call, *args))
        results.append(list(made.items()))

    made.update([('a', 1), ('b', 2), ('c', 3)], d=4)
    record(operator.setitem, made, 'a', 10)
    record(operator.getitem, made, 'b')
    record(operator.getitem, made, 'zz')
    record(operator.delitem, made, 'zz')
    record(operator.delitem, made, 'b')
    record(made.setdefault, 'e', 5)
    record(made.setdefault, 'e', 6)
    record(made.peekitem)
    record(made.peekitem, False)
    record(made.pop, 'c')
    record(made.pop, 'c', 'default')
    record(made.pop, 'c')
    record(made.push, 'x')
    record(made.push, 'y', 'fruit', 'front')
    record(made.pull)
    record(made.pull, 'fruit')
    record(made.pull, 'fruit')
    record(made.popitem)
    record(made.popitem, False)
    record(lambda: list(reversed(made)))
    record(lambda: list(made.values()))
    record(lambda: (made == {'e': 5}, made != {'e': 5}, len(made), 'e' in made))
    record(made.clear)
    record(made.popitem)
    return results


def test_index_matches_python_diskcache(tmp_path):
    theirs = _index_script(python_diskcache().Index(str(tmp_path / 'theirs')))
    ours = _index_script(Index(str(tmp_path / 'ours')))
    assert ours == theirs


def test_index_memoize_matches_python_diskcache(tmp_path):
    # The stored keys differ by design (see docs/memoize.rst); results and call counts do not.
    results = []
    for made in (python_diskcache().Index(str(tmp_path / 'theirs')), Index(str(tmp_path / 'ours'))):
        calls = []

        @made.memoize()
        def fibonacci(number, calls=calls):
            calls.append(number)
            return number if number < 2 else fibonacci(number - 1) + fibonacci(number - 2)

        results.append((fibonacci(30), fibonacci(30), sorted(calls), len(made)))
    assert results[0] == results[1]


@pytest.mark.parametrize('name', ['Deque', 'Index'])
def test_signatures_match_python_diskcache(name):
    """Every public method of python-diskcache's class exists here, with its parameters (names,
    kinds and defaults, sentinels compared by name) first and in order."""
    import inspect

    theirs_class = getattr(python_diskcache(), name)
    ours_class = {'Deque': Deque, 'Index': Index}[name]

    def shape(function):
        return [
            (p.name, p.kind, repr(p.default)) for p in inspect.signature(function).parameters.values()
        ]

    for attr in dir(theirs_class):
        if attr.startswith('_') and attr != '__init__':
            continue
        theirs = getattr(theirs_class, attr)
        assert hasattr(ours_class, attr), attr
        if callable(theirs):
            expected = shape(theirs)
            assert shape(getattr(ours_class, attr))[: len(expected)] == expected, attr


def test_deque_indices_beyond_64_bits_are_out_of_range(tmp_path):
    deque = dc.Deque([1, 2, 3], directory=str(tmp_path / "d"))
    for index in (10**20, -(10**20), 2**63, -(2**63) - 1):
        with pytest.raises(IndexError):
            deque[index]
        with pytest.raises(IndexError):
            deque[index] = 0
        with pytest.raises(IndexError):
            del deque[index]
    assert list(deque) == [1, 2, 3]


def test_deque_fromcache_refuses_a_cache_it_cannot_index(tmp_path):
    import diskcache

    with pytest.raises(TypeError, match="diskcache_core.Cache"):
        dc.Deque.fromcache(diskcache.Cache(str(tmp_path / "peer")), [1])
    with pytest.raises(TypeError, match="FanoutCache"):
        dc.Deque.fromcache(dc.FanoutCache(str(tmp_path / "fan")), [1])


def test_queue_prefixes_may_be_str_subclasses(tmp_path):
    import enum

    class Queue(str, enum.Enum):
        JOBS = "jobs"

    cache = dc.Cache(str(tmp_path / "c"))
    key = cache.push("task", prefix=Queue.JOBS)
    assert key == "jobs-500000000000000" and type(key) is str
    assert cache.peek(prefix=Queue.JOBS) == (key, "task")
    assert cache.pull(prefix=Queue.JOBS) == (key, "task")
    cache.close()
