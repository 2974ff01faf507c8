"""Security: private file modes, value-file names that escape the cache directory, and SafeDisk
refusing malicious pickles planted in the database."""

from __future__ import annotations

import builtins
import io
import os
import pickle
import stat
import subprocess
import time
import uuid

import pytest
from store_helpers import connect, item_table, value_files

import diskcache_core as dc

BIG = 300_000

# --------------------------------------------------------------------------------------------
# File modes: directories 0o700, value files 0o600
# --------------------------------------------------------------------------------------------


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture(params=[0o022, 0o000], ids=['umask022', 'umask000'])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def test_cache_directory_and_value_files_are_private(tmp_path, umask):
    directory = tmp_path / 'private'
    cache = dc.Cache(str(directory))
    try:
        for number in range(5):
            cache.set(number, os.urandom(BIG))
        cache.set('stream', io.BytesIO(os.urandom(BIG)), read=True)
        cache.set('text', 'x' * BIG)
        assert _mode(directory) == 0o700
        files = value_files(str(directory))
        assert len(files) == 7
        for name in files:
            assert _mode(directory / name) == 0o600, name
            parent = (directory / name).parent
            while parent != directory:
                assert _mode(parent) == 0o700, parent
                parent = parent.parent
    finally:
        cache.close()


def test_nested_cache_directories_created_private(tmp_path, umask):
    directory = tmp_path / 'a' / 'b' / 'c'
    cache = dc.Cache(str(directory))
    try:
        cache.set('k', 'v')
        for path in (tmp_path / 'a', tmp_path / 'a' / 'b', directory):
            assert _mode(path) == 0o700, path
    finally:
        cache.close()


def test_temporary_cache_directory_is_private():
    cache = dc.Cache()
    try:
        cache.set('k', os.urandom(BIG))
        assert _mode(cache.directory) == 0o700
    finally:
        cache.close()


def test_value_files_private_in_existing_directory(tmp_path):
    directory = tmp_path / 'shared'
    directory.mkdir(mode=0o755)
    os.chmod(directory, 0o755)
    cache = dc.Cache(str(directory))
    try:
        cache.set('k', os.urandom(BIG))
        (name,) = value_files(str(directory))
        assert _mode(directory / name) == 0o600
    finally:
        cache.close()


# --------------------------------------------------------------------------------------------
# Value-file names that point outside the cache directory are never read or removed
# --------------------------------------------------------------------------------------------


def _tamper(directory: str, new_filename: str) -> None:
    """Point every row that names a value file at `new_filename`."""
    con = connect(directory)
    try:
        table = item_table(con)
        changed = con.execute(
            'UPDATE "%s" SET filename = ? WHERE filename IS NOT NULL' % table, (new_filename,)
        ).rowcount
    finally:
        con.close()
    assert changed >= 1


def _targets(sentinel: str, cache_dir: str) -> dict:
    relative = os.path.relpath(sentinel, cache_dir)  # '../outside/sentinel.val'
    return {
        'relative': relative,
        'deep-relative': os.path.join('ab', 'cd', '..', '..', relative),
        'absolute': sentinel,
        'etc-passwd-style': os.path.join('..', '..', '..', '..', '..', '..', '..', '..', '..', '..')
        + os.path.abspath(sentinel),
    }


TARGETS = ['relative', 'deep-relative', 'absolute', 'etc-passwd-style']


def _assert_survives(sentinel: str) -> None:
    assert os.path.exists(sentinel), 'the file outside the cache directory was removed'
    with open(sentinel, 'rb') as handle:
        assert handle.read() == b'must survive'


@pytest.fixture
def tampered(store, sentinel, request):
    """A cache whose file-stored item 'key' (tag 't', expiring in 1000 s) names `target`."""
    store.set('key', os.urandom(BIG), tag='t', expire=1000)
    store.set('plain', 'inline value')
    _tamper(store.directory, _targets(sentinel, store.directory)[request.param])
    return store


@pytest.mark.parametrize('tampered', TARGETS, indirect=True)
@pytest.mark.parametrize(
    'read',
    [
        pytest.param(lambda c: c.get('key'), id='get'),
        pytest.param(lambda c: c.get('key', read=True), id='get-read'),
        pytest.param(lambda c: c.read('key'), id='read'),
        pytest.param(lambda c: c['key'], id='getitem'),
        pytest.param(lambda c: c.get('key', expire_time=True, tag=True), id='get-tuple'),
        pytest.param(lambda c: c.peekitem(last=False), id='peekitem'),
    ],
)
def test_reading_escaping_value_file_raises(tampered, sentinel, read):
    with pytest.raises(dc.DiskCacheError) as info:
        read(tampered)
    assert str(info.value)
    _assert_survives(sentinel)
    assert tampered['plain'] == 'inline value'


@pytest.mark.parametrize('tampered', TARGETS, indirect=True)
@pytest.mark.parametrize(
    'remove',
    [
        pytest.param(lambda c: c.delete('key'), id='delete'),
        pytest.param(lambda c: c.__delitem__('key'), id='delitem'),
        pytest.param(lambda c: c.pop('key'), id='pop'),
        pytest.param(lambda c: c.set('key', b'new value'), id='set-overwrite'),
        pytest.param(lambda c: c.set('key', os.urandom(BIG)), id='set-overwrite-file'),
        pytest.param(lambda c: c.clear(), id='clear'),
        pytest.param(lambda c: c.evict('t'), id='evict'),
        pytest.param(lambda c: c.expire(now=time.time() + 10_000), id='expire'),
        pytest.param(lambda c: (c.reset('size_limit', 0), c.cull()), id='cull'),
        pytest.param(lambda c: c.check(fix=True), id='check-fix'),
        pytest.param(lambda c: c.check(), id='check'),
        pytest.param(lambda c: c.touch('key', 1), id='touch'),
        pytest.param(lambda c: c.incr('key'), id='incr'),
    ],
)
def test_removing_escaping_value_file_leaves_outside_file(tampered, sentinel, remove):
    try:
        remove(tampered)
    except (dc.DiskCacheError, TypeError):
        pass  # refusing is fine (incr on a bytes value is a TypeError); removing the file is not
    _assert_survives(sentinel)
    for cleanup in (lambda: tampered.check(fix=True), tampered.clear):
        try:
            cleanup()
        except dc.DiskCacheError:
            pass
        _assert_survives(sentinel)


@pytest.mark.parametrize('target', TARGETS)
def test_queue_ops_on_escaping_value_file(store, sentinel, target):
    store.push(os.urandom(BIG))
    store.push(os.urandom(BIG), prefix='q')
    _tamper(store.directory, _targets(sentinel, store.directory)[target])
    for operation in (lambda: store.peek(), lambda: store.pull(), lambda: store.pull(prefix='q', side='back')):
        try:
            operation()
        except dc.DiskCacheError:
            pass
        _assert_survives(sentinel)


def test_check_reports_escaping_value_file(store, sentinel):
    store.set('key', os.urandom(BIG))
    _tamper(store.directory, sentinel)
    warns = store.check()
    assert warns, 'check() found nothing wrong with a row naming a file outside the cache'
    store.check(fix=True)
    _assert_survives(sentinel)


# --------------------------------------------------------------------------------------------
# SafeDisk: malicious pickles planted in the database
# --------------------------------------------------------------------------------------------


class _Reduce:
    """Pickles as a call of `func(*args)`: what an attacker writes into the database."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args

    def __hash__(self):
        return 1

    def __eq__(self, other):
        return self is other


@pytest.fixture
def marker(tmp_path):
    path = tmp_path / ('pwned-%s' % uuid.uuid4().hex)
    yield str(path)
    assert not path.exists(), 'the planted command ran'


def _payloads(marker: str) -> dict:
    command = 'touch %s' % marker
    return {
        'os.system': _Reduce(os.system, command),
        'builtins.eval': _Reduce(builtins.eval, "__import__('os').system(%r)" % command),
        'builtins.exec': _Reduce(builtins.exec, "__import__('os').system(%r)" % command),
        'builtins.getattr': _Reduce(builtins.getattr, _Reduce(builtins.__import__, 'os'), 'system'),
        'builtins.__import__': _Reduce(builtins.__import__, 'os'),
        'subprocess.Popen': _Reduce(subprocess.Popen, ['touch', marker]),
        'pickle.loads': _Reduce(pickle.loads, pickle.dumps(_Reduce(os.system, command))),
        'nested-in-list': [1, 2, {'x': _Reduce(os.system, command)}],
        'file-sized': [b'x' * BIG, _Reduce(os.system, command)],
    }


PAYLOADS = [
    'os.system',
    'builtins.eval',
    'builtins.exec',
    'builtins.getattr',
    'builtins.__import__',
    'subprocess.Popen',
    'pickle.loads',
    'nested-in-list',
    'file-sized',
]


def _plant_value(directory: str, key, payload) -> None:
    """Write `payload` with a plain-Disk Cache, as an attacker with write access could."""
    planter = dc.Cache(directory)
    try:
        planter.set(key, payload)
    finally:
        planter.close()


@pytest.mark.parametrize('name', PAYLOADS)
def test_safedisk_refuses_planted_value(cache_dir, marker, name):
    payload = _payloads(marker)[name]
    _plant_value(cache_dir, 'evil', payload)
    cache = dc.Cache(cache_dir, disk=dc.SafeDisk)
    try:
        for read in (
            lambda: cache.get('evil'),
            lambda: cache['evil'],
            lambda: cache.get('evil', expire_time=True, tag=True),
            lambda: cache.peekitem(),
        ):
            with pytest.raises(dc.UnsafePickleError) as info:
                read()
            assert not os.path.exists(marker)
        message = str(info.value)
        if name in ('os.system', 'nested-in-list', 'file-sized'):
            assert 'posix.system' in message or 'os.system' in message or 'nt.system' in message, message
        elif '.' in name and name != 'pickle.loads':
            assert name in message, message
        with pytest.raises(dc.UnsafePickleError):
            cache.pop('evil')
    finally:
        cache.close()


@pytest.mark.parametrize('name', ['os.system', 'builtins.eval', 'file-sized'])
def test_safedisk_refuses_planted_queue_item(cache_dir, marker, name):
    planter = dc.Cache(cache_dir)
    planter.push(_payloads(marker)[name])
    planter.close()
    cache = dc.Cache(cache_dir, disk=dc.SafeDisk)
    try:
        with pytest.raises(dc.UnsafePickleError):
            cache.peek()
        with pytest.raises(dc.UnsafePickleError):
            cache.pull()
    finally:
        cache.close()


@pytest.mark.parametrize('name', ['os.system', 'builtins.eval', 'subprocess.Popen'])
def test_safedisk_refuses_planted_key(cache_dir, marker, name):
    _plant_value(cache_dir, _payloads(marker)[name], 'value of an evil key')
    _plant_value(cache_dir, 'good', 'fine')
    cache = dc.Cache(cache_dir, disk=dc.SafeDisk)
    try:
        for iterate in (
            lambda: list(cache),
            lambda: list(reversed(cache)),
            lambda: list(cache.iterkeys()),
            lambda: cache.peekitem(last=False),
        ):
            with pytest.raises(dc.UnsafePickleError):
                iterate()
            assert not os.path.exists(marker)
        assert cache['good'] == 'fine'
    finally:
        cache.close()


def test_planted_pickle_is_live(marker):
    """Guard for the tests above: the payloads really would run code under plain pickle."""
    data = pickle.dumps(_payloads(marker)['os.system'])
    assert b'system' in data
    assert b'_Reduce' not in data


class Allowed:
    def __eq__(self, other):
        return isinstance(other, Allowed)


def test_allow_list_not_read_from_database(cache_dir, marker):
    wide = dc.Cache(cache_dir, disk=dc.SafeDisk, disk_allowed_types=[Allowed])
    wide.set('allowed', Allowed())
    assert wide['allowed'] == Allowed()
    wide.close()

    plain = dc.Cache(cache_dir, size_limit=2**31)  # another Cache rewrites the settings
    plain.close()
    narrow = dc.Cache(cache_dir, disk=dc.SafeDisk)
    try:
        with pytest.raises(dc.UnsafePickleError) as info:
            narrow.get('allowed')
        assert '%s.%s' % (Allowed.__module__, Allowed.__qualname__) in str(info.value)
    finally:
        narrow.close()


def test_allow_list_planted_in_settings_table_is_ignored(cache_dir, marker):
    _plant_value(cache_dir, 'evil', _payloads(marker)['os.system'])
    con = connect(cache_dir)
    try:
        tables = [name for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            columns = [row[1] for row in con.execute('PRAGMA table_info("%s")' % table)]
            if columns[:2] == ['key', 'value']:
                for name in ('disk_allowed_types', 'allowed_types'):
                    con.execute(
                        'INSERT OR REPLACE INTO "%s"(key, value) VALUES (?, ?)' % table,
                        (name, 'posix.system,os.system,builtins.eval'),
                    )
    finally:
        con.close()
    try:
        cache = dc.Cache(cache_dir, disk=dc.SafeDisk)
    except (dc.DiskCacheError, ValueError):
        return  # refusing to open a tampered database is also safe
    try:
        with pytest.raises(dc.UnsafePickleError):
            cache.get('evil')
    finally:
        cache.close()


def test_unsafe_pickle_error_hierarchy():
    assert issubclass(dc.UnsafePickleError, dc.DiskCacheError)
    assert issubclass(dc.UnsafePickleError, pickle.UnpicklingError)
