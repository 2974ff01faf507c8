"""Serialization: Disk (inline or value file), JSONDisk, SafeDisk's allow-list, compression."""

from __future__ import annotations

import collections
import datetime
import decimal
import io
import json
import os
import sqlite3
import subprocess
import sys
import uuid
import zlib

import pytest
from store_helpers import item_rows, stored_value_bytes, value_files

import diskcache_core as dc

KIB = 1024
MIB = 1024 * KIB
BIG = 300 * KIB

# --------------------------------------------------------------------------------------------
# Disk
# --------------------------------------------------------------------------------------------


def test_disk_constructor(tmp_path):
    disk = dc.Disk(str(tmp_path), min_file_size=123, pickle_protocol=2)
    assert disk.min_file_size == 123
    assert disk.pickle_protocol == 2


@pytest.mark.parametrize(
    'options, error, named',
    [
        ({'min_file_size': -5}, ValueError, 'min_file_size'),
        ({'min_file_size': 'big'}, TypeError, 'min_file_size'),
        ({'pickle_protocol': 99}, ValueError, 'pickle_protocol'),
        ({'pickle_protocol': -2}, ValueError, 'pickle_protocol'),
        ({'compress_threshold': 'x'}, TypeError, 'compress_threshold'),
        ({'compress_level': 100}, ValueError, 'compress_level'),
        ({'compress': 'zlib', 'compress_level': 10}, ValueError, 'compress_level'),
        ({'compress_level': 'fast'}, TypeError, 'compress_level'),
        ({'compress': 'brotli'}, ValueError, 'brotli'),
    ],
)
def test_disk_made_directly_refuses_bad_options_naming_them(tmp_path, options, error, named):
    # Unchecked, these failed later: at some write (a zlib error), or at a read, or never
    # (a negative min_file_size put every value in a file).
    with pytest.raises(error, match=named):
        dc.Disk(str(tmp_path), **options)


def test_disk_made_directly_takes_whole_floats_and_the_compressors_levels(tmp_path):
    disk = dc.Disk(str(tmp_path), min_file_size=2.0**15, compress='zlib', compress_level=9.0)
    assert (disk.min_file_size, disk.compress_level) == (2**15, 9)
    assert type(disk.min_file_size) is int and type(disk.compress_level) is int
    assert dc.Disk(str(tmp_path), pickle_protocol=-1).pickle_protocol == -1


def test_cache_disk_gets_disk_settings(make_cache):
    cache = make_cache(disk_min_file_size=4321, disk_pickle_protocol=2)
    assert cache.disk.min_file_size == 4321
    assert cache.disk.pickle_protocol == 2
    cache.set('k', {'nested': [1, 2]})
    assert cache['k'] == {'nested': [1, 2]}
    cache.reset('disk_min_file_size', 100)
    assert cache.disk.min_file_size == 100


@pytest.mark.parametrize(
    'value',
    [b'b' * BIG, 'ü' * BIG, {'list': list(range(40_000))}, bytearray(b'x' * BIG)],
    ids=['bytes', 'str', 'pickle', 'bytearray'],
)
def test_large_values_go_to_value_files(store, value):
    store.set('key', value)
    files = value_files(store.directory)
    assert len(files) == 1
    (name,) = files
    assert os.sep in name, 'value files live in subdirectories, not beside cache.db'
    assert store['key'] == value


@pytest.mark.parametrize('value', [b'b' * 100, 's' * 100, 12345, 1.5, {'a': 1}, None])
def test_small_values_stay_inline(store, value):
    store.set('key', value)
    assert value_files(store.directory) == set()
    assert store['key'] == value


def test_str_value_files_round_trip_unicode(store):
    text = ''.join(chr(code) for code in range(0x20, 0x3000)) * 20
    store.set('text', text)
    assert store['text'] == text


def test_hash_is_portable_across_processes(tmp_path):
    keys = ['text', b'bytes', 12345, 2.5, ('tuple', 1)]
    disk = dc.Disk(str(tmp_path))
    here = [disk.hash(key) for key in keys]
    assert all(isinstance(value, int) and value >= 0 for value in here)
    assert len(set(here)) == len(here)
    script = (
        'import diskcache_core as dc, json, sys\n'
        'd = dc.Disk(sys.argv[1])\n'
        "print(json.dumps([d.hash(k) for k in ['text', b'bytes', 12345, 2.5, ('tuple', 1)]]))\n"
    )
    env = dict(os.environ, PYTHONHASHSEED='12345', PYTHONPATH=_import_root())
    output = subprocess.run(
        [sys.executable, '-c', script, str(tmp_path)], env=env, capture_output=True, text=True, timeout=60
    )
    assert output.returncode == 0, output.stderr
    assert json.loads(output.stdout) == here


def _import_root() -> str:
    root = os.path.dirname(os.path.dirname(os.path.abspath(dc.__file__)))
    return os.pathsep.join([root] + [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p])


class UpperDisk(dc.Disk):
    """A user Disk written against python-diskcache's documented hooks (put/get/store/fetch)."""

    def store(self, value, read, key=dc.UNKNOWN):
        if not read and isinstance(value, str):
            value = zlib.compress(value.upper().encode('utf-8'))
        return super().store(value, read, key=key)

    def fetch(self, mode, filename, value, read):
        data = super().fetch(mode, filename, value, read)
        if not read and isinstance(data, bytes):
            data = zlib.decompress(data).decode('utf-8')
        return data


def test_user_disk_subclass_hooks_are_used(make_cache):
    cache = make_cache(disk=UpperDisk)
    cache.set('small', 'hello')
    cache.set('large', 'x' * BIG)
    assert cache['small'] == 'HELLO'
    assert cache['large'] == 'X' * BIG


class KeyNamedDisk(dc.Disk):
    """Names a value file after its key (python-diskcache passes the key for this)."""

    def filename(self, key=dc.core.UNKNOWN, value=dc.core.UNKNOWN):
        if key is dc.core.UNKNOWN:
            return super().filename(key, value)
        digest = uuid.uuid5(uuid.NAMESPACE_OID, repr(key)).hex
        name = os.path.join(digest[:2], digest[2:4], digest[4:] + '.val')
        return name, os.path.join(self._directory, name)


def test_a_disk_naming_files_after_keys_keeps_a_value_set_again_after_a_delete(make_cache):
    # Released files were removed off the caller's path: after the new file of the same name
    # was written, so an acknowledged set was lost (get None, check: file not found).
    cache = make_cache(disk=KeyNamedDisk)
    for round_ in range(20):
        cache.set('report', b'%d' % round_ * BIG)
        cache.delete('report')
        cache.set('report', b'v2' * BIG)
        assert cache.get('report') == b'v2' * BIG, round_
        cache.set('report', b'small')  # releases the file; the next set names it again
        cache.set('report', b'v3' * BIG)
        assert cache.get('report') == b'v3' * BIG, round_
    assert cache.check() == []


class RefusingRemoveDisk(dc.Disk):
    refusals = 0

    def remove(self, file_path):
        if RefusingRemoveDisk.refusals < 3:
            RefusingRemoveDisk.refusals += 1
            raise RuntimeError('audit log unavailable')
        return super().remove(file_path)


@pytest.mark.filterwarnings('ignore:value file .* was not removed:RuntimeWarning')
def test_a_disk_whose_remove_raises_stops_no_later_removal(tmp_path):
    # An exception other than OSError ended the process's file-remover thread: every later
    # drain (close, clear, expire, check) waited for ever, and released files stayed.
    from diskcache_core._store import reaper as _reaper

    RefusingRemoveDisk.refusals = 0
    refusing = dc.Cache(str(tmp_path / 'refusing'), disk=RefusingRemoveDisk)
    other = dc.Cache(str(tmp_path / 'other'))
    try:
        for n in range(3):
            refusing.set(n, b'x' * BIG)
            refusing.delete(n)
        assert _reaper.drain(timeout=120)
        assert RefusingRemoveDisk.refusals == 3
        for n in range(3):
            other.set('k', bytes([n]) * BIG)
        assert _reaper.drain(timeout=120)
        assert len(value_files(other.directory)) == 1
        other.clear()
        assert value_files(other.directory) == set()
    finally:
        refusing.close()
        other.close()


# --------------------------------------------------------------------------------------------
# JSONDisk
# --------------------------------------------------------------------------------------------


def test_jsondisk_constructor(tmp_path):
    disk = dc.JSONDisk(str(tmp_path), compress_level=1)
    assert disk.compress_level == 1
    assert isinstance(disk, dc.Disk)


@pytest.mark.parametrize('level', [10, 15, -2])
def test_jsondisk_refuses_a_level_zlib_has_not(tmp_path, level):
    # JSONDisk compresses its JSON with zlib at compress_level, whatever `compress` says: a
    # level zlib refuses used to pass the settings check (zstd has it) and fail every write.
    with pytest.raises(ValueError, match="JSONDisk's .*'compress_level'.* -1 to 9"):
        dc.JSONDisk(str(tmp_path), compress_level=level)
    directory = tmp_path / 'cache'
    with pytest.raises(ValueError, match='compress_level'):
        dc.Cache(str(directory), disk=dc.JSONDisk, disk_compress_level=level)
    assert not (directory / 'cache.db').exists()
    with dc.Cache(str(directory), disk=dc.JSONDisk, disk_compress_level=9) as cache:
        with pytest.raises(ValueError, match='compress_level'):
            cache.reset('disk_compress_level', level)
        cache.set('k', {'a': 1})
        assert cache.get('k') == {'a': 1}
        assert cache.reset('disk_compress_level') == 9


@pytest.mark.parametrize(
    'key, value, expected_value',
    [
        ('text', 'value', 'value'),
        (1, 2, 2),
        ('list', [1, 'a', None, True, 2.5], [1, 'a', None, True, 2.5]),
        ('tuple', (1, 2), [1, 2]),
        ('dict', {'a': {'b': [1]}}, {'a': {'b': [1]}}),
        ('big', {'data': 'x' * BIG}, {'data': 'x' * BIG}),
        ('none', None, None),
    ],
)
@pytest.mark.parametrize('level', [0, 1, 9])
def test_jsondisk_round_trip(make_cache, key, value, expected_value, level):
    cache = make_cache(disk=dc.JSONDisk, disk_compress_level=level)
    cache.set(key, value)
    assert cache.get(key) == expected_value
    assert list(cache) == [key]


def test_jsondisk_keys(make_cache):
    cache = make_cache(disk=dc.JSONDisk, disk_compress_level=6)
    cache[('a', 1)] = 'tuple key'
    cache[2] = 'int key'
    assert cache[('a', 1)] == 'tuple key'
    assert cache[['a', 1]] == 'tuple key'
    assert sorted(map(json.dumps, cache)) == sorted(map(json.dumps, [['a', 1], 2]))


def test_jsondisk_rejects_non_json_value_before_storing(make_store):
    cache = make_store(disk=dc.JSONDisk)
    with pytest.raises(TypeError):
        cache.set('key', {1, 2, 3})
    assert len(cache) == 0
    assert value_files(cache.directory) == set()


# --------------------------------------------------------------------------------------------
# SafeDisk: the allow-list (attacks are in test_security.py)
# --------------------------------------------------------------------------------------------


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __eq__(self, other):
        return isinstance(other, Point) and (self.x, self.y) == (other.x, other.y)

    def __hash__(self):
        return hash((self.x, self.y))


ALLOWED_VALUES = {
    'scalars': [None, True, 1, 2**100, 1.5, 2 + 3j, 'text', b'bytes', bytearray(b'ba')],
    'containers': ((1, 2), [3, [4]], {'k': {'n': 1}}, {1, 2}, frozenset({3})),
    'datetime': [
        datetime.date(2024, 1, 2),
        datetime.time(3, 4, 5),
        datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc),
        datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone(datetime.timedelta(hours=2))),
        datetime.timedelta(days=1, seconds=2),
    ],
    'decimal-uuid': [decimal.Decimal('3.14159'), uuid.UUID('12345678-1234-5678-1234-567812345678'), uuid.uuid4()],
    'big': [{'payload': b'p' * BIG, 'when': datetime.date(2020, 1, 1)}],
}


@pytest.mark.parametrize('name', sorted(ALLOWED_VALUES))
def test_safedisk_round_trips_allowed_types(make_cache, name):
    cache = make_cache(disk=dc.SafeDisk)
    value = ALLOWED_VALUES[name]
    cache.set(name, value)
    cache.set(('tuple', 'key', 1), value)
    assert cache[name] == value
    assert cache[('tuple', 'key', 1)] == value
    assert set(cache) == {name, ('tuple', 'key', 1)}


def test_safedisk_refuses_unlisted_class(make_cache, cache_dir):
    make_cache().set('point', Point(1, 2))  # written by a plain Disk (or planted)
    cache = make_cache(disk=dc.SafeDisk)
    with pytest.raises(dc.UnsafePickleError) as info:
        cache.get('point')
    assert '%s.%s' % (Point.__module__, Point.__qualname__) in str(info.value)


def _value_files(directory):
    return [name for _, _, names in os.walk(directory) for name in names if name.endswith('.val')]


@pytest.mark.parametrize(
    'value',
    [
        Point(1, 2),
        [Point(3, 4)] * 10_000,
        {'a': int},
        (1, [datetime.timezone.utc, Point]),
        collections.defaultdict(os.system),
        [collections.defaultdict(Point, {1: 2})],
        collections.Counter({'k': Point(5, 6)}),
        collections.deque([os.system]),
    ],
    ids=['instance', 'many', 'class-in-dict', 'class-in-list', 'defaultdict-system', 'defaultdict-class',
         'counter', 'deque'],
)
def test_safedisk_refuses_to_write_what_it_would_not_read(make_cache, cache_dir, value):
    """TypeError before anything is stored (the value file of a big value included), as
    diskcache-community's SafeDisk: values of set, add and push, keys of set and get."""
    cache = make_cache(disk=dc.SafeDisk, disk_min_file_size=1024)
    cache.set('kept', 'old')
    for write in (
        lambda: cache.set('kept', value),
        lambda: cache.add('new', value),
        lambda: cache.set(('key', value), 1),
        lambda: cache.get(value),
    ):
        with pytest.raises(TypeError, match=r'SafeDisk cannot store (key|value) of type'):
            write()
    if isinstance(cache, dc.Cache):  # a FanoutCache has no queue
        with pytest.raises(TypeError, match='SafeDisk cannot store value of type'):
            cache.push(value)
    assert list(cache) == ['kept'] and cache['kept'] == 'old'
    assert _value_files(cache_dir) == []
    with pytest.raises(TypeError, match='SafeDisk cannot store key of type'):
        cache.set(Point(1, 2), 'value')
    assert len(cache) == 1


def test_safedisk_allows_listed_class(make_cache):
    cache = make_cache(disk=dc.SafeDisk, disk_allowed_types=[Point])
    cache.set('point', Point(1, 2))
    cache.set('points', [Point(3, 4)] * 1000)
    assert cache['point'] == Point(1, 2)
    assert cache['points'] == [Point(3, 4)] * 1000
    cache.set(Point(5, 6), 'point key')
    assert cache[Point(5, 6)] == 'point key'


# --------------------------------------------------------------------------------------------
# Compression
# --------------------------------------------------------------------------------------------

COMPRESSORS = [
    pytest.param('zlib', id='zlib'),
    pytest.param('zstd', id='zstd'),
    pytest.param('lz4', id='lz4'),
]
MODULE_OF = {'zlib': 'zlib', 'zstd': 'zstandard', 'lz4': 'lz4'}


@pytest.fixture(params=COMPRESSORS)
def compressor(request):
    pytest.importorskip(MODULE_OF[request.param])
    return request.param


def _compressible(size: int) -> bytes:
    return (b'compressible data block; ' * (size // 25 + 1))[:size]


COMPRESSED_VALUES = {
    'small-bytes': b'tiny',
    'inline-bytes': _compressible(5 * KIB),
    'file-bytes': _compressible(2 * MIB),
    'random-bytes': os.urandom(200 * KIB),
    'small-str': 'short',
    'str': 'ünïcode ' * 100_000,
    'pickle': {'rows': [('row', n, 'x' * 50) for n in range(5000)]},
    'int': 2**200,
}


@pytest.mark.parametrize('name', sorted(COMPRESSED_VALUES))
def test_compressed_values_round_trip(make_cache, compressor, name):
    cache = make_cache(disk_compress=compressor)
    value = COMPRESSED_VALUES[name]
    cache.set(name, value)
    assert cache[name] == value
    if isinstance(value, bytes):
        with cache.read(name) as handle:
            assert handle.read() == value
        assert cache.get(name, read=True).read() == value


def test_compression_shrinks_large_values(make_store, compressor):
    cache = make_store(disk_compress=compressor)
    cache.set('file', _compressible(2 * MIB))
    cache.set('inline', _compressible(20 * KIB))
    assert stored_value_bytes(cache.directory) < (2 * MIB + 20 * KIB) // 5


def test_compression_threshold(make_store, compressor):
    below = make_store(disk_compress=compressor)  # default threshold 1024 bytes
    below.set('value', _compressible(1000))
    assert stored_value_bytes(below.directory) >= 1000
    assert below['value'] == _compressible(1000)
    below.set('above', _compressible(1024))
    assert stored_value_bytes(below.directory) < 1000 + 1024 // 2


def test_compression_settings_readable_as_attributes(make_cache, tmp_path, compressor):
    default = make_cache(str(tmp_path / 'default'), disk_compress=compressor)
    assert default.disk_compress == compressor
    assert default.disk_compress_threshold == 1024
    assert default.disk_compress_level is None
    tuned = make_cache(
        str(tmp_path / 'tuned'), disk_compress=compressor, disk_compress_threshold=10, disk_compress_level=2
    )
    assert (tuned.disk_compress_threshold, tuned.disk_compress_level) == (10, 2)
    tuned.close()
    reopened = make_cache(str(tmp_path / 'tuned'))
    assert (reopened.disk_compress, reopened.disk_compress_threshold, reopened.disk_compress_level) == (
        compressor,
        10,
        2,
    )


def test_compression_threshold_setting(make_store, tmp_path, compressor):
    low = make_store(str(tmp_path / 'low'), disk_compress=compressor, disk_compress_threshold=100)
    low.set('value', _compressible(1000))
    assert stored_value_bytes(low.directory) < 500
    assert low['value'] == _compressible(1000)
    high = make_store(str(tmp_path / 'high'), disk_compress=compressor, disk_compress_threshold=10 * MIB)
    high.set('value', _compressible(MIB))
    assert stored_value_bytes(high.directory) >= MIB


def test_compression_read_true_streamed_value(make_cache, compressor):
    cache = make_cache(disk_compress=compressor)
    data = _compressible(3 * MIB)
    cache.set('stream', io.BytesIO(data), read=True)
    assert cache['stream'] == data
    with cache.read('stream') as handle:
        assert handle.read() == data


@pytest.mark.parametrize('level', [None, 1, 3])
def test_compression_level(make_cache, compressor, level):
    cache = make_cache(disk_compress=compressor, disk_compress_level=level)
    assert cache.disk_compress_level == level
    cache.set('v', _compressible(100 * KIB))
    assert cache['v'] == _compressible(100 * KIB)


def test_compressed_cache_readable_without_compress_setting(make_cache, compressor):
    writer = make_cache(disk_compress=compressor)
    values = {name: value for name, value in COMPRESSED_VALUES.items()}
    for name, value in values.items():
        writer.set(name, value)
    writer.close()
    reader = make_cache()
    assert reader.disk_compress == compressor
    for name, value in values.items():
        assert reader[name] == value


def test_uncompressed_values_readable_after_enabling_compression(make_cache, compressor):
    plain = make_cache()
    plain.set('file', _compressible(MIB))
    plain.set('inline', _compressible(3 * KIB))
    plain.close()
    compressed = make_cache(disk_compress=compressor)
    assert compressed['file'] == _compressible(MIB)
    assert compressed['inline'] == _compressible(3 * KIB)


def test_incr_with_compression(make_cache, compressor):
    cache = make_cache(disk_compress=compressor, disk_compress_threshold=1)
    assert cache.incr('n', 5) == 5
    assert cache.incr('n', 2**70) == 2**70 + 5
    assert cache['n'] == 2**70 + 5


def test_unknown_compressor_raises_valueerror(cache_class, tmp_path):
    directory = tmp_path / 'c'
    with pytest.raises(ValueError):
        cache_class(str(directory), disk_compress='brotli-9000')
    assert not directory.exists() or not any(directory.iterdir())


def test_compression_with_jsondisk_and_safedisk(make_cache, tmp_path, compressor):
    json_cache = make_cache(str(tmp_path / 'json'), disk=dc.JSONDisk, disk_compress=compressor)
    json_cache.set('k', {'a': 'x' * BIG})
    assert json_cache['k'] == {'a': 'x' * BIG}
    safe_cache = make_cache(str(tmp_path / 'safe'), disk=dc.SafeDisk, disk_compress=compressor)
    safe_cache.set('k', {'a': b'x' * BIG})
    assert safe_cache['k'] == {'a': b'x' * BIG}


def test_compressed_rows_still_counted_in_volume(make_store, compressor):
    cache = make_store(disk_compress=compressor)
    cache.set('a', os.urandom(MIB))  # incompressible: stored size stays about 1 MiB
    assert cache.volume() >= MIB
    assert item_rows(cache.directory, 'COUNT(*)') == [(1,)]


def test_json_disk_cache_iterates_queue_keys(tmp_path):
    from diskcache_core import Cache, JSONDisk

    cache = Cache(str(tmp_path / 'c'), disk=JSONDisk)
    first = cache.push({'job': 1})
    cache['named'] = [1, 2]
    assert list(cache) == [first, 'named']
    assert cache.pull() == (first, {'job': 1})
    cache.close()


class _PeerStyleJSONDisk(dc.Disk):
    """python-diskcache's documented JSONDisk pattern: its own compress_level, set before
    calling the base constructor, and python-diskcache's put/get/store/fetch signatures."""

    def __init__(self, directory, compress_level=1, **kwargs):
        self.compress_level = compress_level
        super().__init__(directory, **kwargs)

    def put(self, key):
        return super().put(zlib.compress(json.dumps(key).encode('utf-8'), self.compress_level))

    def get(self, key, raw):
        return json.loads(zlib.decompress(super().get(key, raw)).decode('utf-8'))

    def store(self, value, read, key=dc.UNKNOWN):
        if not read:
            value = zlib.compress(json.dumps(value).encode('utf-8'), self.compress_level)
        return super().store(value, read, key=key)

    def fetch(self, mode, filename, value, read):
        data = super().fetch(mode, filename, value, read)
        if not read:
            data = json.loads(zlib.decompress(data).decode('utf-8'))
        return data


@pytest.mark.parametrize('settings', [{}, {'disk_compress_level': 6}, {'memory_size_limit': 0}])
def test_python_diskcache_style_disk_subclass_works_unchanged(tmp_path, settings):
    with dc.Cache(str(tmp_path / 'c'), disk=_PeerStyleJSONDisk, **settings) as cache:
        assert cache.disk.compress_level == settings.get('disk_compress_level', 1)
        cache.set('key', {'a': [1, 2]})
        cache.set(['list', 'key'], 'x' * 50_000)  # a value file
        assert cache.get('key') == {'a': [1, 2]}
        assert cache[['list', 'key']] == 'x' * 50_000
        assert sorted(map(str, cache)) == sorted(map(str, ['key', ['list', 'key']]))
        assert cache.incr('n') == 1 and cache.incr('n') == 2
        assert cache.pop('key') == {'a': [1, 2]}


class _KeyedFileNames(dc.Disk):
    """A python-diskcache style ``filename`` override: value files named after their key."""

    def filename(self, key=dc.UNKNOWN, value=dc.UNKNOWN):
        import hashlib

        if key is dc.UNKNOWN:
            return super().filename(key, value)
        digest = hashlib.sha256(repr(key).encode()).hexdigest()
        name = os.path.join(digest[:2], f'{digest[2:]}-{os.urandom(4).hex()}.val')
        return name, os.path.join(self._directory, name)


def test_python_diskcache_style_filename_override(tmp_path):
    with dc.Cache(str(tmp_path / 'c'), disk=_KeyedFileNames) as cache:
        cache.set('key', b'x' * 100_000)
        cache.set('key', b'y' * 100_000)  # the first file is released
        assert cache['key'] == b'y' * 100_000
        digest_dir = __import__('hashlib').sha256(repr('key').encode()).hexdigest()[:2]
        assert os.listdir(tmp_path / 'c' / digest_dir)  # the override's layout is used
        assert cache.check() == []
        assert cache.pop('key') == b'y' * 100_000 and cache.check() == []


@pytest.mark.parametrize("codec", ["zlib", "zstd", "lz4"])
def test_a_damaged_compressed_value_is_the_librarys_error_not_a_wrong_value(tmp_path, codec):
    import glob

    pytest.importorskip({"zlib": "zlib", "zstd": "zstandard", "lz4": "lz4.frame"}[codec])
    cache = dc.Cache(str(tmp_path / codec), disk_compress=codec, memory_size_limit=0)
    value = b"".join(  # compressible, yet more than a value file's worth once compressed
        b"line %06d of a value, %s\n" % (number, os.urandom(4).hex().encode())
        for number in range(20_000)
    )
    cache.set("key", value)
    (path,) = glob.glob(str(tmp_path / codec / "*" / "*" / "*.val"))
    with open(path, "r+b") as file:
        data = bytearray(file.read())
        assert len(data) < len(value)  # compressed
        data[len(data) // 2] ^= 0xFF  # one byte flipped, the length unchanged
        file.seek(0)
        file.write(data)
    with pytest.raises(dc.DiskCacheError, match="damaged"):
        cache.get("key")
    cache.close()


class RawStoringDisk(dc.Disk):
    """Stores some values in the value column as they come, as python-diskcache's Disk.store
    stores bytes (``sqlite3.Binary``, a memoryview)."""

    def store(self, value, read, key=dc.core.UNKNOWN):
        if isinstance(value, (bytes, bytearray, bool, float, int)) and not read:
            stored = sqlite3.Binary(value) if type(value) is bytes else value
            return 0, dc.core.MODE_RAW, None, stored
        return super().store(value, read, key=key)


def test_the_memory_tier_answers_what_the_database_gives_back_to_a_custom_disk(tmp_path):
    # It kept the object store() returned: a memoryview where the database gives bytes, True
    # where it gives 1, a bytearray a caller could change, NaN where it gives None.
    import enum

    class Colour(enum.IntEnum):
        RED = 1

    writer = dc.Cache(str(tmp_path), disk=RawStoringDisk)
    reader = dc.Cache(str(tmp_path), disk=RawStoringDisk, memory_size_limit=0)
    try:
        for value in (b'bytes', bytearray(b'array'), True, Colour.RED, float('nan'), 2.5, 7):
            writer.set('k', value)
            from_memory = [writer.get('k') for _ in range(3)]
            from_database = reader.get('k')
            for got in from_memory:
                assert type(got) is type(from_database), value
                assert got == from_database or got is from_database is None, value
    finally:
        writer.close()
        reader.close()


def test_a_value_file_whose_removal_fails_for_want_of_a_descriptor_is_removed_later(tmp_path):
    # Out of descriptors (EMFILE), Disk.remove cannot open the value directory: the committed
    # delete's file must be tried again, not left behind for check(fix=True) to find.
    import errno

    directory = str(tmp_path / "c")
    cache = dc.Cache(directory)
    cache.set("big", b"b" * 100_000)
    remove = cache.disk.remove
    failures = []

    def out_of_descriptors(name):
        if len(failures) < 2:
            failures.append(name)
            raise OSError(errno.EMFILE, "Too many open files")
        remove(name)

    cache.disk.remove = out_of_descriptors
    assert cache.delete("big") is True
    cache.close()  # waits for the removals it can make
    assert len(failures) == 2
    with dc.Cache(directory) as reopened:
        assert reopened.check() == []
