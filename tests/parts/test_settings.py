"""Settings: defaults, validation before anything is stored (Invariant 6), persistence, reset(),
and opening an existing cache without writing (Invariant 5)."""

from __future__ import annotations

import gc
import os
import stat

import pytest
from store_helpers import all_files, connect, db_path, file_size, sha256_file

import diskcache_core as dc

KIB = 1024

# --------------------------------------------------------------------------------------------
# Defaults and attributes
# --------------------------------------------------------------------------------------------


def test_default_settings_match_python_diskcache():
    defaults = dc.DEFAULT_SETTINGS
    assert defaults['size_limit'] == 2**30
    assert defaults['cull_limit'] == 10
    assert defaults['eviction_policy'] == 'least-recently-stored'
    assert not defaults['statistics']
    assert not defaults['tag_index']
    assert defaults['sqlite_journal_mode'] == 'wal'
    assert 'disk_min_file_size' in defaults
    assert 'disk_pickle_protocol' in defaults


def test_eviction_policy_names():
    assert set(dc.EVICTION_POLICY) == {
        'none',
        'least-recently-stored',
        'least-recently-used',
        'least-frequently-used',
    }


def test_fresh_cache_has_default_settings_as_attributes(cache):
    for key, value in dc.DEFAULT_SETTINGS.items():
        assert getattr(cache, key) == value, key


def test_settings_given_are_attributes(make_cache):
    cache = make_cache(
        size_limit=123_456,
        cull_limit=3,
        eviction_policy='least-recently-used',
        statistics=True,
        tag_index=True,
        disk_min_file_size=1000,
    )
    assert cache.size_limit == 123_456
    assert cache.cull_limit == 3
    assert cache.eviction_policy == 'least-recently-used'
    assert cache.statistics
    assert cache.tag_index
    assert cache.disk_min_file_size == 1000


def test_settings_persist(make_cache):
    cache = make_cache(size_limit=123, cull_limit=4, eviction_policy='none', disk_min_file_size=77)
    cache.close()
    reopened = make_cache()
    assert reopened.size_limit == 123
    assert reopened.cull_limit == 4
    assert reopened.eviction_policy == 'none'
    assert reopened.disk_min_file_size == 77


def test_settings_changed_on_reopen_persist(make_cache):
    make_cache(size_limit=1000).close()
    make_cache(size_limit=2000, eviction_policy='least-frequently-used').close()
    reopened = make_cache()
    assert reopened.size_limit == 2000
    assert reopened.eviction_policy == 'least-frequently-used'


def test_reset_updates_and_persists(make_cache):
    cache = make_cache()
    assert cache.reset('cull_limit', 5) == 5
    assert cache.cull_limit == 5
    assert cache.reset('cull_limit') == 5
    cache.close()
    assert make_cache().cull_limit == 5


def test_reset_reloads_value_changed_by_another_instance(make_cache):
    first = make_cache()
    second = make_cache()
    second.reset('size_limit', 4242)
    assert first.reset('size_limit') == 4242
    assert first.size_limit == 4242


def test_counters_can_be_stored_and_fix_recounts_them(tmp_path):
    """python-diskcache's ``reset`` stores a counter too (its test_check uses it to break one)."""
    cache = dc.Cache(tmp_path)
    for n in range(5):
        cache[n] = n
    assert cache.reset('count', 0) == 0 and len(cache) == 0 and cache.count == 0
    assert cache.reset('hits', 7) == 7 and cache.hits == 7 and cache.reset('hits') == 7
    cache.check(fix=True)
    assert len(cache) == 5 and cache.reset('count') == 5
    for bad, error in ((True, TypeError), (1.5, TypeError), ('3', TypeError), (-1, ValueError)):
        with pytest.raises(error, match="counter 'size'"):
            cache.reset('size', bad)
    cache.close()


def test_sql_runs_a_statement_that_every_memory_tier_sees(tmp_path):
    """``_sql`` (python-diskcache's private escape hatch): a write through it commits, and the
    memory tier of another Cache that holds the old value drops it."""
    reader = dc.Cache(tmp_path)
    writer = dc.Cache(tmp_path)
    writer['key'] = 'old'
    assert reader['key'] == 'old' and reader['key'] == 'old'  # the second from its memory tier
    changed = writer._sql("UPDATE Cache SET value = 'new' WHERE key = 'key'")
    assert changed.rowcount == 1
    assert reader['key'] == 'new'
    assert writer._sql('SELECT COUNT(*) FROM Cache').fetchone() == (1,)
    assert list(writer._sql('SELECT key FROM Cache WHERE key = ?', ('key',))) == [('key',)]
    reader.close()
    writer.close()


def test_disk_min_file_size_decides_inline_or_file(make_store):
    from store_helpers import value_files

    cache = make_store(disk_min_file_size=1000)
    cache.set('inline', b'x' * 500)
    assert value_files(cache.directory) == set()
    cache.set('file', b'x' * 2000)
    assert len(value_files(cache.directory)) == 1
    assert cache['inline'] == b'x' * 500 and cache['file'] == b'x' * 2000


def test_database_is_in_wal_mode(store):
    store.set('k', 'v')
    con = connect(store.directory)
    try:
        ((mode,),) = con.execute('PRAGMA journal_mode').fetchall()
    finally:
        con.close()
    assert mode.lower() == 'wal'


def test_sqlite_settings_readable(make_cache):
    cache = make_cache(sqlite_mmap_size=2**20, sqlite_cache_size=1000)
    assert cache.sqlite_mmap_size == 2**20
    assert cache.sqlite_cache_size == 1000
    cache.set('k', 'v')
    assert cache['k'] == 'v'


# --------------------------------------------------------------------------------------------
# Invariant 6: bad settings are refused before anything is stored
# --------------------------------------------------------------------------------------------


class NotADisk:
    pass


BAD_SETTINGS = [
    pytest.param({'no_such_setting': 1}, ValueError, id='unknown-name'),
    pytest.param({'size_limt': 10}, ValueError, id='misspelt-name'),
    pytest.param({'size_limit': -1}, ValueError, id='size_limit-negative'),
    pytest.param({'size_limit': '10'}, TypeError, id='size_limit-str'),
    pytest.param({'size_limit': 2.5}, TypeError, id='size_limit-float'),
    pytest.param({'size_limit': None}, TypeError, id='size_limit-none'),
    pytest.param({'cull_limit': -1}, ValueError, id='cull_limit-negative'),
    pytest.param({'cull_limit': '10'}, TypeError, id='cull_limit-str'),
    pytest.param({'eviction_policy': 'random'}, ValueError, id='eviction_policy-unknown'),
    pytest.param({'timeout': -1}, ValueError, id='timeout-negative'),
    pytest.param({'disk': NotADisk}, TypeError, id='disk-not-subclass'),
    pytest.param({'disk': dict}, TypeError, id='disk-dict'),
    pytest.param({'disk': 'Disk'}, TypeError, id='disk-str'),
]


@pytest.mark.parametrize('settings, error', BAD_SETTINGS)
def test_bad_setting_on_new_directory(cache_class, tmp_path, settings, error):
    directory = tmp_path / 'new'
    with pytest.raises(error):
        cache_class(str(directory), **settings)
    gc.collect()
    assert not directory.exists() or all_files(str(directory)) == set()


@pytest.mark.parametrize('settings, error', BAD_SETTINGS)
def test_bad_setting_on_existing_cache_changes_nothing(make_store, cache_dir, settings, error):
    good = make_store(size_limit=5 * 2**20, cull_limit=7)
    good.set('key', 'value')
    good.set('file', b'f' * 100 * KIB)
    good.close()
    files_before = all_files(cache_dir)
    db_before = sha256_file(db_path(cache_dir))
    with pytest.raises(error):
        dc.Cache(cache_dir, **settings)
    gc.collect()
    assert all_files(cache_dir) == files_before
    assert sha256_file(db_path(cache_dir)) == db_before
    reopened = make_store()
    assert reopened.size_limit == 5 * 2**20
    assert reopened.cull_limit == 7
    assert reopened['key'] == 'value'
    assert len(reopened) == 2


@pytest.mark.parametrize(
    'key, value, error',
    [
        ('size_limit', -5, ValueError),
        ('size_limit', '10', TypeError),
        ('cull_limit', -1, ValueError),
        ('eviction_policy', 'random', ValueError),
    ],
)
def test_reset_with_bad_value_changes_nothing(make_cache, key, value, error):
    cache = make_cache(size_limit=9999, cull_limit=3)
    before = getattr(cache, key)
    with pytest.raises(error):
        cache.reset(key, value)
    assert getattr(cache, key) == before
    assert cache.reset(key) == before
    cache.close()
    assert getattr(make_cache(), key) == before


def test_timeout_zero_is_allowed(make_cache):
    cache = make_cache(timeout=0)
    cache.set('k', 'v')
    assert cache['k'] == 'v'


def test_disk_subclass_accepted(make_cache):
    class MyDisk(dc.Disk):
        pass

    cache = make_cache(disk=MyDisk)
    assert isinstance(cache.disk, MyDisk)
    cache.set('k', [1, 2])
    assert cache['k'] == [1, 2]


# --------------------------------------------------------------------------------------------
# Invariant 5: opening an existing cache with unchanged settings writes nothing
# --------------------------------------------------------------------------------------------


def _db_state(directory):
    path = db_path(directory)
    return sha256_file(path), os.stat(path).st_mtime_ns


OPEN_SETTINGS = [
    pytest.param({}, id='defaults'),
    pytest.param({'size_limit': 123 * KIB * 1024, 'cull_limit': 2}, id='explicit'),
    pytest.param({'eviction_policy': 'least-recently-used'}, id='lru'),
    pytest.param({'eviction_policy': 'least-frequently-used', 'statistics': True}, id='lfu-statistics'),
    pytest.param({'tag_index': True}, id='tag-index'),
]


@pytest.mark.parametrize('settings', OPEN_SETTINGS)
def test_reopen_with_same_settings_writes_nothing(cache_dir, settings):
    first = dc.Cache(cache_dir, **settings)
    first.set('key', 'value', tag='t')
    first.set('file', b'f' * 100 * KIB)
    first.close()
    db_before = _db_state(cache_dir)
    wal_before = file_size(db_path(cache_dir) + '-wal')

    for reopen_settings in ({}, settings):
        second = dc.Cache(cache_dir, **reopen_settings)
        assert len(second) == 2
        assert 'key' in second
        assert second.volume() > 0
        second.close()
        assert _db_state(cache_dir) == db_before
        assert file_size(db_path(cache_dir) + '-wal') <= wal_before


def test_reads_with_plain_policy_write_nothing(cache_dir):
    first = dc.Cache(cache_dir)
    first.set('key', 'value')
    first.close()
    db_before = _db_state(cache_dir)
    second = dc.Cache(cache_dir)
    for _ in range(20):
        assert second.get('key') == 'value'
        assert second.get('missing') is None
    list(second)
    second.close()
    assert _db_state(cache_dir) == db_before
    assert file_size(db_path(cache_dir) + '-wal') == 0


@pytest.mark.skipif(hasattr(os, 'geteuid') and os.geteuid() == 0, reason='root ignores file permissions')
def test_open_read_only_directory(cache_dir):
    first = dc.Cache(cache_dir)
    first.set('key', 'value')
    first.set('file', b'f' * 100 * KIB)
    first.close()
    modes = {}
    for dirpath, _dirs, files in os.walk(cache_dir):
        modes[dirpath] = os.stat(dirpath).st_mode
        for name in files:
            modes[os.path.join(dirpath, name)] = os.stat(os.path.join(dirpath, name)).st_mode
    try:
        for path, mode in modes.items():
            os.chmod(path, stat.S_IMODE(mode) & ~0o222)
        reader = dc.Cache(cache_dir)
        assert reader['key'] == 'value'
        assert reader['file'] == b'f' * 100 * KIB
        reader.close()
    finally:
        for path, mode in modes.items():
            os.chmod(path, stat.S_IMODE(mode))


def test_python_diskcache_tutorial_settings_and_stale_counters(tmp_path):
    # python-diskcache's tutorial, "Settings" section, verbatim in substance.
    cache = dc.Cache(str(tmp_path / 'c'), size_limit=int(4e9))
    assert cache.size_limit == 4000000000
    assert cache.disk_min_file_size == 32768
    assert cache.reset('cull_limit', 0) == 0  # Disable automatic evictions.
    assert cache.set(b'key', 1.234) is True
    assert cache.count == 0  # Stale attribute.
    assert cache.reset('count') == 1  # Prefer: len(cache)
    assert cache.count == 1
    cache.set('big', b'x' * 100_000)
    assert cache.size == 0 and cache.reset('size') == 100_000 and cache.size == 100_000
    assert (cache.hits, cache.misses) == (0, 0)
    cache.close()
    with dc.Cache(str(tmp_path / 'c')) as again:  # an existing cache: counted when asked
        assert again.count == 2 and again.size == 100_000


# --------------------------------------------------------------------------------------------
# Numbers of a whole value, and what another library stored
# --------------------------------------------------------------------------------------------


def test_whole_numbers_of_other_types_are_ints(make_cache):
    numpy = pytest.importorskip('numpy')
    cache = make_cache(
        size_limit=1e9,
        cull_limit=numpy.int64(4),
        disk_min_file_size=32768.0,
        disk_pickle_protocol=-1,
        timeout=numpy.float64(2),
    )
    assert cache.size_limit == 10**9 and type(cache.size_limit) is int
    assert cache.cull_limit == 4 and type(cache.cull_limit) is int
    assert cache.disk_min_file_size == 32768 and cache.timeout == 2
    assert cache.disk_pickle_protocol == -1  # as pickle takes it: the highest protocol
    cache.set('value', {'a': [1, 2]})
    assert cache.get('value') == {'a': [1, 2]}


def test_a_python_diskcache_directory_opens_whatever_it_stored(tmp_path):
    diskcache = pytest.importorskip('diskcache')
    stored = {
        'disk_pickle_protocol': -1,
        'size_limit': 1.5e9 + 0.5,
        'statistics': 2,
        'cull_limit': -1,
        'my_app_version': 3,
    }
    with diskcache.Cache(str(tmp_path), **stored) as peer:
        peer.set('key', 'value')
    with pytest.warns(dc.StoredSettingWarning, match="'cull_limit' = -1") as caught:
        cache = dc.Cache(str(tmp_path))
    assert [warning.filename for warning in caught] == [__file__]  # the caller's line
    try:
        assert cache.get('key') == 'value'
        assert cache.size_limit == 1_500_000_000 and cache.statistics == 1
        assert cache.cull_limit == dc.DEFAULT_SETTINGS['cull_limit']
        assert cache.reset('my_app_version') == 3
        with pytest.warns(dc.StoredSettingWarning):
            assert cache.reset('cull_limit') == -1  # the row, as stored
        cache.set('other', 1)
    finally:
        cache.close()
    with diskcache.Cache(str(tmp_path)) as peer:  # its rows are as it wrote them
        assert (peer.cull_limit, peer.statistics, peer.size_limit) == (-1, 2, 1.5e9 + 0.5)
        assert peer.my_app_version == 3
        assert peer.get('other') == 1


def test_sql_changing_a_size_or_a_key_is_seen_by_other_memory_tiers(tmp_path):
    """What a read answers depends on the row's size (a value file must have it) and key: a
    change of either through ``_sql`` must reach the other Cache's memory tier."""
    reader = dc.Cache(tmp_path)
    writer = dc.Cache(tmp_path, memory_size_limit=0)
    reader['a'] = 1
    reader['f'] = b'F' * 40_000  # a value file
    for _ in range(3):
        assert (reader.get('a'), reader.get('b'), reader.get('f')) == (1, None, b'F' * 40_000)
    writer._sql("UPDATE Cache SET size = size + 1 WHERE key = 'f'")
    writer._sql("UPDATE Cache SET key = 'b' WHERE key = 'a'")
    assert (reader.get('a'), reader.get('b'), reader.get('f')) == (
        writer.get('a'), writer.get('b'), writer.get('f')
    ) == (None, 1, None)
    reader.close()
    writer.close()


@pytest.mark.parametrize("mode", ["truncate", "persist"])
def test_a_rollback_journal_mode_is_in_force_on_every_connection(tmp_path, mode):
    # Only WAL is stored in the database file; any other mode applies per connection.
    import threading

    cache = dc.Cache(str(tmp_path / "cache"), sqlite_journal_mode=mode)
    modes = []
    thread = threading.Thread(
        target=lambda: modes.append(cache._sql("PRAGMA journal_mode").fetchall()[0][0])
    )
    thread.start()
    thread.join()
    cache.set("key", "value")
    assert modes == [mode]
    assert cache._sql("PRAGMA journal_mode").fetchall()[0][0] == mode
    cache.close()
    reader = dc.Cache(str(tmp_path / "cache"), read_only=True)
    assert reader.get("key") == "value"
    reader.close()


def test_a_disk_option_the_disk_does_not_take_is_refused_not_stored(tmp_path):
    cache = dc.Cache(tmp_path)
    cache.set('k', 'v')
    with pytest.raises(ValueError, match='disk_min_filesize'):
        cache.reset('disk_min_filesize', 1024)  # a typo of disk_min_file_size
    assert cache.reset('disk_min_file_size', 1024) == 1024
    cache.close()
    with dc.Cache(tmp_path) as reopened:  # the directory still opens
        assert reopened.get('k') == 'v' and reopened.disk_min_file_size == 1024
    with pytest.raises(ValueError, match='no setting'):
        reopened.reset('no_such_setting')


@pytest.mark.parametrize('settings', [{'size_limit': 2**63}, {'cull_limit': 1e308}, {'sqlite_cache_size': 2**64}])
def test_settings_beyond_64_bits_are_refused_before_any_file(tmp_path, settings):
    with pytest.raises(ValueError, match='64 bits|<= 9223372036854775807'):
        dc.Cache(tmp_path / 'new', **settings)
    assert not (tmp_path / 'new').exists()
    with dc.Cache(tmp_path / 'old') as cache:
        name, value = next(iter(settings.items()))
        with pytest.raises(ValueError):
            cache.reset(name, value)


def test_extra_sqlite_and_disk_settings_are_attributes(tmp_path):
    class OwnDisk(dc.Disk):
        def __init__(self, directory, level=1, **options):
            super().__init__(directory, **options)
            self.level = level

    with dc.Cache(tmp_path, disk=OwnDisk, sqlite_foreign_keys=1, disk_level=3) as cache:
        assert cache.sqlite_foreign_keys == 1 and cache.disk_level == 3
        assert cache.disk.level == 3
        with pytest.raises(AttributeError):
            cache.sqlite_no_such_pragma
        with pytest.raises(AttributeError):
            cache.no_such_attribute


def test_extra_settings_stay_attributes_after_reset_and_reopen(tmp_path):
    with dc.Cache(tmp_path, sqlite_foreign_keys=1) as cache:
        cache.reset('sqlite_foreign_keys', 0)
        assert cache.sqlite_foreign_keys == 0
    with dc.Cache(tmp_path) as cache:  # not given again: the stored value
        assert cache.sqlite_foreign_keys == 0
        assert cache.reset('sqlite_foreign_keys') == 0


def test_fanout_cache_shows_every_setting_of_its_shards(tmp_path):
    with dc.FanoutCache(
        tmp_path, shards=2, eviction_policy='least-recently-used', cull_limit=3,
        disk_min_file_size=1000,
    ) as cache:
        for key in set(dc.DEFAULT_SETTINGS) - {'size_limit'}:  # the shards' total
            assert getattr(cache, key) == getattr(cache.shards[0], key), key
        assert cache.eviction_policy == 'least-recently-used' and cache.cull_limit == 3
        cache.reset('cull_limit', 5)
        assert cache.cull_limit == 5
        assert cache.size_limit == sum(shard.size_limit for shard in cache.shards)
        with pytest.raises(AttributeError):
            cache.no_such_attribute


@pytest.mark.parametrize('cls', [dc.Cache, dc.FanoutCache, dc.Deque, dc.Index])
def test_no_cache_class_has_a_getattr_hook(cls):
    # A class with __getattr__ loses CPython's specialized attribute loads on every `self.`
    # of get and set (measured: a memory-tier hit cost 16% more instructions with one).
    assert not [k for k in cls.__mro__ if '__getattr__' in vars(k)]


# --------------------------------------------------------------------------------------------
# Values SQLite or a compressor would take as something else, or refuse at every write
# --------------------------------------------------------------------------------------------

# SQLite takes each silently as another value (read back in brackets).
SQLITE_WOULD_CHANGE = [
    ('sqlite_synchronous', 2**63 - 1),  # OFF
    ('sqlite_synchronous', 10),  # FULL
    ('sqlite_synchronous', 1.5),  # NORMAL
    ('sqlite_cache_size', 1e300),  # 1: pasted as "1e+300"
    ('sqlite_cache_size', 2**62),  # 0: a 32-bit int
    ('sqlite_cache_size', 2**31),
    ('sqlite_journal_mode', 0),  # delete
    ('sqlite_journal_mode', 'bogus'),
    ('sqlite_auto_vacuum', 7),  # NONE
    ('sqlite_auto_vacuum', 'bogus'),
    ('sqlite_mmap_size', -1),  # 0
    ('sqlite_secure_delete', 5),  # ON
    ('sqlite_secure_delete', 2),  # ON, not FAST
    ('sqlite_wal_autocheckpoint', 2**40),  # 0: a pragma no setting names, read back
    ('sqlite_wal_autocheckpoint', 1.5),
    ('sqlite_foreign_keys', 2),  # 1
]


@pytest.mark.parametrize('name, value', SQLITE_WOULD_CHANGE)
def test_a_pragma_value_sqlite_would_change_is_refused_before_any_file(tmp_path, name, value):
    with pytest.raises(ValueError, match=name):
        dc.Cache(tmp_path / 'new', **{name: value})
    assert not (tmp_path / 'new').exists()
    with dc.Cache(tmp_path / 'old') as cache:
        before = cache.reset(name) if name in dc.DEFAULT_SETTINGS else None
        with pytest.raises(ValueError, match=name):
            cache.reset(name, value)
        if before is not None:  # (a pragma no setting names is a plain attribute)
            with pytest.raises(ValueError, match=name):
                setattr(cache, name, value)
            assert getattr(cache, name) == cache.reset(name) == before


@pytest.mark.parametrize(
    'name, value, in_force',
    [
        ('sqlite_synchronous', 0, 0),
        ('sqlite_synchronous', 3, 3),
        ('sqlite_synchronous', 'normal', 1),
        ('sqlite_synchronous', 'EXTRA', 3),
        ('sqlite_cache_size', 2**31 - 1, 2**31 - 1),
        ('sqlite_cache_size', -(2**31), -(2**31)),  # negative: KiB
        ('sqlite_cache_size', 4096.0, 4096),
        ('sqlite_journal_mode', 'WAL', 'wal'),
        ('sqlite_journal_mode', 'truncate', 'truncate'),
        ('sqlite_journal_mode', 'memory', 'memory'),
        ('sqlite_journal_mode', 'off', 'off'),
        ('sqlite_auto_vacuum', 0, 0),
        ('sqlite_auto_vacuum', 'full', 1),
        ('sqlite_secure_delete', 'fast', 2),
        ('sqlite_mmap_size', 0, 0),
        ('sqlite_wal_autocheckpoint', 2000.0, 2000),
    ],
)
def test_a_pragma_value_sqlite_keeps_is_in_force(tmp_path, name, value, in_force):
    with dc.Cache(tmp_path, **{name: value}) as cache:
        assert getattr(cache, name) == value
        cache.set('key', 'value')
        assert cache.get('key') == 'value'
        ((read_back,),) = cache._sql(f'PRAGMA {name[len("sqlite_"):]}').fetchall()
        assert read_back == in_force


@pytest.mark.parametrize(
    'settings',
    [
        {'disk_compress': 'zlib', 'disk_compress_level': 100},
        {'disk_compress': 'zlib', 'disk_compress_level': -2},
        {'disk_compress_level': 2**63 - 1},  # (OverflowError at the first compressed write)
        {'disk_pickle_protocol': -(10**30)},  # (OverflowError storing it, cache.db left)
        {'disk_pickle_protocol': -2},
        {'max_staleness': 10**400},  # (OverflowError making it a float)
        {'remote_timeout': 10**400},
    ],
)
def test_a_disk_or_remote_setting_out_of_range_is_refused_before_any_file(tmp_path, settings):
    with pytest.raises(ValueError, match=next(reversed(settings))):
        dc.Cache(tmp_path / 'new', **settings)
    assert not (tmp_path / 'new').exists()


def test_a_compression_level_is_checked_against_the_compressor_set_later(tmp_path):
    # zlib refuses level 15 at every write: a cache storing the pair would be poisoned.
    directory = str(tmp_path / 'c')
    with dc.Cache(directory, disk_compress_level=15) as cache:  # no compressor: not yet wrong
        for change in (
            lambda: cache.reset('disk_compress', 'zlib'),
            lambda: setattr(cache, 'disk_compress', 'zlib'),
        ):
            with pytest.raises(ValueError, match='disk_compress_level'):
                change()
        assert cache.disk_compress is None and cache.reset('disk_compress') is None
    before = sha256_file(db_path(directory))
    with pytest.raises(ValueError, match='disk_compress_level'):
        dc.Cache(directory, disk_compress='zlib')
    assert sha256_file(db_path(directory)) == before
    with dc.Cache(directory, disk_compress='zlib', disk_compress_level=None) as cache:
        for change in (
            lambda: cache.reset('disk_compress_level', 15),
            lambda: setattr(cache, 'disk_compress_level', 15),
        ):
            with pytest.raises(ValueError, match='disk_compress_level'):
                change()
        cache.set('k', 'x' * 4000)
    with pytest.raises(ValueError, match='disk_compress_level'):
        dc.Cache(directory, disk_compress_level=15)
    with dc.Cache(directory) as cache:
        assert (cache.disk_compress, cache.disk_compress_level) == ('zlib', None)
        assert cache.get('k') == 'x' * 4000


def test_a_stored_compression_level_the_compressor_refuses_gives_way_to_the_default(tmp_path):
    # As an earlier version stored it: Cache(d, disk_compress='zlib', disk_compress_level=100).
    with dc.Cache(tmp_path, disk_compress='zlib', disk_compress_level=9) as cache:
        cache.set('old', 'o' * 4000)
    con = connect(str(tmp_path))
    con.execute("UPDATE Settings SET value = 100 WHERE key LIKE '%disk_compress_level'")
    con.close()
    with pytest.warns(dc.StoredSettingWarning, match="'disk_compress_level' = 100"):
        cache = dc.Cache(tmp_path)
    with cache:
        assert cache.disk_compress_level is None
        cache.set('new', 'n' * 4000)
        assert (cache.get('old'), cache.get('new')) == ('o' * 4000, 'n' * 4000)


def test_a_pickle_protocol_pickle_cannot_take_is_refused_by_assignment(tmp_path):
    with dc.Cache(tmp_path) as cache:
        with pytest.raises(ValueError, match='disk_pickle_protocol'):
            cache.disk_pickle_protocol = -(10**30)
        cache.disk_pickle_protocol = -1  # pickle's highest
        cache.set('k', {'a': 1})
        assert cache.get('k') == {'a': 1}


@pytest.mark.timeout(120)
def test_settings_writes_wait_for_the_lock_a_bounded_time_then_raise_timeout(tmp_path, monkeypatch):
    # They waited with no bound (reset, stats switching statistics on, create_tag_index,
    # _sql): a process holding the write lock, stopped, held them for ever.
    import threading

    from diskcache_core._cache import base as _cachebase

    monkeypatch.setattr(_cachebase, "SETTINGS_WAIT", 0.3)  # (60 s: python-diskcache's wait)
    cache = dc.Cache(str(tmp_path / "c"), timeout=0.05)
    holding, release = threading.Event(), threading.Event()

    def hold():
        with dc.Cache(cache.directory).transact():
            holding.set()
            release.wait(60)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(60)
        for call in (
            cache.stats,  # its first call switches statistics on
            lambda: cache.reset("cull_limit", 5),
            lambda: cache.reset("hits", 0),
            cache.create_tag_index,
            lambda: cache._sql("UPDATE Settings SET value = value WHERE key = 'hits'"),
        ):
            with pytest.raises(dc.Timeout):
                call()
    finally:
        release.set()
        holder.join(60)
    assert cache.stats() == (0, 0) and cache.reset("cull_limit", 5) == 5
    cache.create_tag_index()
    assert cache.tag_index == 1
    cache.close()


class _PrefixDisk(dc.Disk):
    def __init__(self, directory, prefix='', **kwargs):
        super().__init__(directory, **kwargs)
        self.prefix = prefix


@pytest.mark.parametrize('value, error', [
    (('a', 'b'), TypeError), ([1], TypeError), ({'a': 1}, TypeError), (2**64, ValueError),
    ('\ud800', ValueError),
])
def test_a_custom_disk_option_sqlite_cannot_store_is_refused_before_anything_is_made(tmp_path, value, error):
    # It raised DatabaseError ("Error binding parameter") after cache.db was made.
    directory = tmp_path / 'c'
    with pytest.raises(error, match='disk_prefix'):
        dc.Cache(str(directory), disk=_PrefixDisk, disk_prefix=value)
    assert not directory.exists()
    with dc.Cache(str(directory), disk=_PrefixDisk, disk_prefix='p') as cache:
        with pytest.raises(error, match='disk_prefix'):
            cache.reset('disk_prefix', value)
        assert cache.reset('disk_prefix') == 'p' and cache.disk.prefix == 'p'
