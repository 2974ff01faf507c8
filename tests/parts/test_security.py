"""Security: private file modes, value-file names that escape the cache directory, and SafeDisk
refusing malicious pickles planted in the database."""

from __future__ import annotations

import builtins
import collections
import datetime
import decimal
import fractions
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


# --------------------------------------------------------------------------------------------
# SafeDisk: allowed types may be instantiated, never returned nor patched as classes
# --------------------------------------------------------------------------------------------


class Account:
    """An allowed type a planted pickle tries to patch through BUILD on the class itself."""

    is_admin = False

    def __init__(self, name='alice'):
        self.name = name

    def __eq__(self, other):
        return type(other) is Account and vars(other) == vars(self)


class Slotted:
    """An allowed type with __slots__: its default state is ``(None, {slot: value})``."""

    __slots__ = ('x', 'y')

    def __init__(self, x=1, y=2):
        self.x, self.y = x, y

    def __eq__(self, other):
        return type(other) is type(self) and (other.x, other.y) == (self.x, self.y)


class SlottedWithState(Slotted):
    """Slots with an explicit slot-state tuple, so protocols 0 and 1 can pickle it too."""

    __slots__ = ()

    def __getstate__(self):
        return None, {'x': self.x, 'y': self.y}


class _RawPickle:
    """A value the planting Disk stores as the pickle bytes it holds."""

    def __init__(self, data: bytes):
        self.data = data


class _PlantingDisk(dc.Disk):
    """Stores `_RawPickle` values verbatim: an attacker writing crafted pickles."""

    def _dumps(self, obj):
        if isinstance(obj, _RawPickle):
            return obj.data
        return super()._dumps(obj)


def _plant_raw(directory: str, items: dict, cache_class=dc.Cache, **settings) -> None:
    planter = cache_class(directory, disk=_PlantingDisk, **settings)
    try:
        for key, data in items.items():
            planter.set(key, _RawPickle(data))
    finally:
        planter.close()


def _unicode(text: str) -> bytes:
    data = text.encode()
    return b'\x8c' + bytes([len(data)]) + data  # SHORT_BINUNICODE


def _global(cls) -> bytes:
    return b'c%s\n%s\n' % (cls.__module__.encode(), cls.__qualname__.encode())  # GLOBAL


# BUILD's state (None, {'is_admin': True}): slot state, which BUILD sets with setattr.
_PATCH = b'N}X\x08\x00\x00\x00is_adminI01\ns\x86'
BUILD_ATTACKS = {
    'GLOBAL': lambda cls: _global(cls) + _PATCH + b'b.',
    'dict-state': lambda cls: _global(cls) + b'}X\x08\x00\x00\x00is_adminI01\nsb.',
    'PUT-GET': lambda cls: _global(cls) + b'p0\n0g0\n' + _PATCH + b'b.',
    'BINPUT-BINGET': lambda cls: b'\x80\x02' + _global(cls) + b'q\x070h\x07' + _PATCH + b'b.',
    'MEMOIZE-DUP': lambda cls: b'\x80\x04' + _global(cls) + b'\x94' + b'2' + _PATCH + b'b0.',
    'STACK_GLOBAL': lambda cls: (
        b'\x80\x04' + _unicode(cls.__module__) + _unicode(cls.__qualname__) + b'\x93\x94' + _PATCH + b'b.'
    ),
    'inside-list': lambda cls: b']' + _global(cls) + _PATCH + b'ba.',
    'returned-after-list': lambda cls: _global(cls) + b']' + _PATCH + b'b0' + _PATCH + b'b.',
}


@pytest.fixture
def unpatched():
    """Undo what a planted BUILD may have done, so one failure does not spread."""
    yield
    Account.is_admin = False
    for target in (uuid.SafeUUID, *uuid.SafeUUID):
        if 'is_admin' in vars(target):
            delattr(target, 'is_admin')


@pytest.mark.parametrize('attack', sorted(BUILD_ATTACKS))
@pytest.mark.parametrize('target', [Account, uuid.SafeUUID], ids=['allowed-class', 'SafeUUID'])
def test_safedisk_refuses_build_on_an_allowed_class(cache_dir, unpatched, target, attack):
    _plant_raw(cache_dir, {'evil': BUILD_ATTACKS[attack](target)})
    cache = dc.Cache(cache_dir, disk=dc.SafeDisk, disk_allowed_types=[Account])
    try:
        with pytest.raises(dc.UnsafePickleError):
            cache.get('evil')
        assert Account.is_admin is False
        assert 'is_admin' not in vars(uuid.SafeUUID)
    finally:
        cache.close()


def test_build_attacks_are_live(unpatched):
    """Guard for the test above: under plain pickle the payloads return and patch the class."""
    for attack in ('GLOBAL', 'STACK_GLOBAL', 'PUT-GET'):
        assert pickle.loads(BUILD_ATTACKS[attack](uuid.SafeUUID)) is uuid.SafeUUID
        assert uuid.SafeUUID.is_admin is True
        del uuid.SafeUUID.is_admin


@pytest.mark.parametrize(
    'payload',
    [
        pytest.param(b'cuuid\nSafeUUID\n(I0\ntR' + _PATCH + b'b.', id='REDUCE'),
        pytest.param(b'\x80\x02cuuid\nSafeUUID\nK\x00\x85\x81' + _PATCH + b'b.', id='NEWOBJ'),
        pytest.param(b'(cuuid\nSafeUUID\nI0\no' + _PATCH + b'b.', id='OBJ'),
        pytest.param(b'(I0\niuuid\nSafeUUID\n' + _PATCH + b'b.', id='INST'),
        pytest.param(b'ccopyreg\n_reconstructor\n(cuuid\nSafeUUID\ncuuid\nSafeUUID\nI0\ntR.', id='reconstructor'),
    ],
)
def test_safedisk_refuses_state_on_a_shared_enum_member(cache_dir, unpatched, payload):
    """Calling an Enum class hands back its shared member: never a BUILD target."""
    _plant_raw(cache_dir, {'evil': payload})
    cache = dc.Cache(cache_dir, disk=dc.SafeDisk)
    try:
        with pytest.raises(dc.UnsafePickleError):
            cache.get('evil')
        assert 'is_admin' not in vars(uuid.SafeUUID.safe)
        assert cache.get('fine', 'absent') == 'absent'
    finally:
        cache.close()


@pytest.mark.parametrize(
    'payload',
    [
        pytest.param(lambda: _global(Account) + b'.', id='bare-class'),
        pytest.param(lambda: b'c_codecs\nencode\n.', id='bare-function'),
        pytest.param(lambda: b'\x80\x04]' + _unicode(Account.__module__) + _unicode('Account') + b'\x93a.', id='class-in-list'),
        pytest.param(lambda: pickle.dumps({'k': [Account]}, protocol=0), id='class-in-dict-protocol-0'),
        pytest.param(lambda: pickle.dumps({'k': (datetime.datetime,)}, protocol=5), id='class-in-tuple-protocol-5'),
        pytest.param(lambda: pickle.dumps(Account, protocol=2), id='class-protocol-2'),
        pytest.param(lambda: b'cbuiltins\nlist\n((cbuiltins\nset\nttR.', id='class-through-list-call'),
        pytest.param(
            lambda: b'ccopyreg\n_reconstructor\n(cbuiltins\nlist\ncbuiltins\nlist\n(cbuiltins\nset\ntttR.',
            id='class-through-reconstructor-state',
        ),
        pytest.param(lambda: b'\x80\x04]' + _global(Account) + b'\x94\x8c\x01a\x88s.', id='SETITEM-on-class'),
        pytest.param(lambda: b'ccopyreg\n_reconstructor\n' + _PATCH + b'b.', id='BUILD-on-function'),
        pytest.param(lambda: b'cbuiltins\ngetattr\n(cbuiltins\nobject\nV__setattr__\ntR.', id='getattr'),
    ],
)
def test_safedisk_refuses_globals_as_values(cache_dir, unpatched, payload):
    _plant_raw(cache_dir, {'evil': payload()})
    cache = dc.Cache(cache_dir, disk=dc.SafeDisk, disk_allowed_types=[Account])
    try:
        with pytest.raises(dc.UnsafePickleError):
            cache.get('evil')
        assert Account.is_admin is False
    finally:
        cache.close()


def test_safedisk_checks_extension_codes(cache_dir, unpatched):
    """EXT opcodes name globals through copyreg's registry: the allow-list applies to them."""
    import copyreg

    copyreg.add_extension(Account.__module__, 'Account', 0x7FFFFFF0)
    copyreg.add_extension('os', 'system', 0x7FFFFFF1)
    try:
        planted = pickle.dumps([Account('bob')], protocol=2)
        assert b'\x84' in planted  # EXT4
        _plant_raw(
            cache_dir,
            {
                'instance': planted,
                'build': b'\x80\x02\x84\xf0\xff\xff\x7f' + _PATCH + b'b.',
                'system': b'\x80\x02\x84\xf1\xff\xff\x7fX\x04\x00\x00\x00true\x85R.',
            },
        )
        cache = dc.Cache(cache_dir, disk=dc.SafeDisk, disk_allowed_types=[Account])
        try:
            assert cache['instance'] == [Account('bob')]
            with pytest.raises(dc.UnsafePickleError):
                cache.get('build')
            with pytest.raises(dc.UnsafePickleError, match='os.system'):
                cache.get('system')
            assert Account.is_admin is False
        finally:
            cache.close()
    finally:
        copyreg.remove_extension(Account.__module__, 'Account', 0x7FFFFFF0)
        copyreg.remove_extension('os', 'system', 0x7FFFFFF1)


SAFE_VALUES = {
    'datetime': datetime.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=datetime.timezone(datetime.timedelta(hours=-3))),
    'utc': datetime.datetime(2024, 1, 2, tzinfo=datetime.timezone.utc),
    'date-time-delta': (datetime.date(2020, 2, 29), datetime.time(23, 59), datetime.timedelta(days=-1, seconds=5)),
    'decimal': [decimal.Decimal('3.14159'), decimal.Decimal('-Infinity')],
    'uuid': [uuid.UUID('12345678-1234-5678-1234-567812345678'), uuid.UUID(int=7, is_safe=uuid.SafeUUID.safe)],
    'safe-uuid': [uuid.SafeUUID.safe, uuid.SafeUUID.unknown],
    'set': {1, 'two', (3,)},
    'empty-set': set(),
    'frozenset': frozenset({b'x', 2.5}),
    'builtins': [b'bytes', bytearray(b'ba'), complex(1, -2), range(1, 9, 2), slice(1, None, 3), True, None],
    'counter': collections.Counter('abracadabra'),
    'ordered-dict': collections.OrderedDict([('b', [1]), ('a', {2: 3})]),
    'defaultdict': collections.defaultdict(list, {'a': [1, collections.deque([2])]}),
    'defaultdict-none': collections.defaultdict(None, {'a': 1}),
    'deque': collections.deque([1, 'two', collections.Counter(x=2)], maxlen=5),
    'fraction': [fractions.Fraction(1, 3), fractions.Fraction(-7, 2)],
    'nested-collections': {
        'counts': [collections.Counter({'k': 2})] * 2,
        'tree': collections.defaultdict(collections.OrderedDict, {1: collections.OrderedDict(a=fractions.Fraction(1, 2))}),
    },
}


@pytest.mark.parametrize('protocol', range(pickle.HIGHEST_PROTOCOL + 1))
def test_safedisk_round_trips_safe_values_in_every_protocol(make_cache, protocol):
    cache = make_cache(disk=dc.SafeDisk, disk_pickle_protocol=protocol)
    for name, value in SAFE_VALUES.items():
        cache.set(name, value)
        assert cache.get(name) == value, name
        assert type(cache.get(name)) is type(value), name
    cache.set(('tuple', frozenset({1})), 'key')
    assert cache[('tuple', frozenset({1}))] == 'key'


@pytest.mark.parametrize('protocol', range(pickle.HIGHEST_PROTOCOL + 1))
def test_safedisk_round_trips_allowed_instances_in_every_protocol(make_cache, protocol):
    cache = make_cache(
        disk=dc.SafeDisk,
        disk_allowed_types=[Account, Slotted, SlottedWithState],
        disk_pickle_protocol=protocol,
    )
    values = {
        'dict-state': Account('carol'),
        'many': [Account(str(number)) for number in range(50)],
        'shared': [Account('same')] * 3,
        'slot-state': SlottedWithState(3, [4]),
        'mixed': {'who': Account(), 'when': datetime.date(2021, 1, 1), 'id': uuid.UUID(int=9)},
    }
    if protocol >= 2:  # below 2, a class with __slots__ needs its own __getstate__
        values['slots'] = Slotted(5, 'six')
    for name, value in values.items():
        cache.set(name, value)
        assert cache[name] == value, name
    shared = cache['shared']
    assert shared[0] is shared[1] is shared[2]
    assert Account.is_admin is False


# Every class a defaultdict may be made with: the builtin and collection types, the other
# allowed classes, and an allowed class of the application.
FACTORIES = [
    None, list, dict, set, frozenset, int, float, complex, str, bytes, bytearray, tuple, bool, object,
    collections.Counter, collections.OrderedDict, collections.defaultdict, collections.deque,
    decimal.Decimal, fractions.Fraction, uuid.UUID, datetime.timedelta, Account,
]


@pytest.mark.parametrize('protocol', range(pickle.HIGHEST_PROTOCOL + 1))
def test_safedisk_round_trips_defaultdict_factories_in_every_protocol(make_cache, protocol):
    """A defaultdict's factory is the one class pickle stores as a bare value: allowed there."""
    cache = make_cache(disk=dc.SafeDisk, disk_allowed_types=[Account], disk_pickle_protocol=protocol)
    value = [collections.defaultdict(factory, {1: 2}) for factory in FACTORIES]
    cache.set('factories', [value, value])
    loaded = cache['factories']
    assert loaded == [value, value] and loaded[0] is loaded[1]
    for factory, item in zip(FACTORIES, loaded[0]):
        assert type(item) is collections.defaultdict and item.default_factory is factory
        if factory is uuid.UUID:  # calling it later makes an empty value, or raises
            with pytest.raises(TypeError):
                item['missing']
        elif factory is not None:
            assert type(item['missing']) is factory
    cache.set(collections.defaultdict(int), 'a key')
    assert cache[collections.defaultdict(int)] == 'a key'
    assert collections.defaultdict(int) in list(cache)  # keys read back through the check
    assert Account.is_admin is False


_DEFAULTDICT = b'ccollections\ndefaultdict\n'


@pytest.mark.parametrize(
    'payload',
    [
        pytest.param(lambda: pickle.dumps(collections.defaultdict(os.system), protocol=0), id='defaultdict-system-0'),
        pytest.param(lambda: pickle.dumps(collections.defaultdict(os.system), protocol=5), id='defaultdict-system-5'),
        pytest.param(lambda: pickle.dumps([collections.defaultdict(eval, {1: 2})], protocol=2), id='defaultdict-eval-nested'),
        pytest.param(lambda: _DEFAULTDICT + b'(c_codecs\nencode\ntR.', id='defaultdict-allowed-function'),
        pytest.param(lambda: _DEFAULTDICT + b'(cuuid\nSafeUUID\ntR.', id='defaultdict-enum-class'),
        pytest.param(lambda: _DEFAULTDICT + b'(cbuiltins\nlist\n}tR.', id='defaultdict-two-arguments'),
        pytest.param(lambda: _DEFAULTDICT + b'(ccollections\ndefaultdict\n(cbuiltins\nlist\nttR.', id='defaultdict-factory-tuple'),
        pytest.param(lambda: b'cbuiltins\nlist\n(cbuiltins\nset\ntR.', id='factory-tuple-to-list'),
        pytest.param(lambda: b'\x80\x02ccollections\ndeque\ncbuiltins\nset\n\x85R.', id='factory-tuple-to-deque'),
        pytest.param(lambda: b'\x80\x02ccollections\ndeque\ncbuiltins\nset\n\x85\x81.', id='factory-tuple-to-NEWOBJ'),
        pytest.param(lambda: b'\x80\x02cbuiltins\nset\n\x85.', id='factory-tuple-returned'),
        pytest.param(lambda: b'\x80\x02]cbuiltins\nset\n\x85a.', id='factory-tuple-in-list'),
        pytest.param(
            lambda: b'ccopyreg\n_reconstructor\n((cbuiltins\nlist\ntcbuiltins\nobject\nNtR.',
            id='factory-tuple-to-reconstructor',
        ),
        pytest.param(lambda: pickle.dumps(collections.Counter({'k': os.system}), protocol=2), id='counter-holding-system'),
        pytest.param(lambda: pickle.dumps(collections.OrderedDict(k=os.system), protocol=4), id='ordered-dict-holding-system'),
        pytest.param(lambda: pickle.dumps(collections.deque([os.system]), protocol=5), id='deque-holding-system'),
        pytest.param(lambda: b'cfractions\nFraction\n(cos\nsystem\ntR.', id='fraction-of-system'),
        pytest.param(lambda: b'cfractions\nFraction\n(cbuiltins\nint\ntR.', id='fraction-of-a-class'),
        pytest.param(lambda: b'ccollections\nCounter\n(ccollections\nCounter\ntR.', id='counter-of-a-class'),
    ],
)
def test_safedisk_refuses_unsafe_collections(cache_dir, payload):
    """The added collection types and Fraction only take checked arguments; a defaultdict's
    factory must be an allowed class (os.system, a function, an Enum class are refused), and the
    ``(factory,)`` tuple serves nothing else."""
    _plant_raw(cache_dir, {'evil': payload()})
    cache = dc.Cache(cache_dir, disk=dc.SafeDisk)
    try:
        with pytest.raises(dc.UnsafePickleError):
            cache.get('evil')
    finally:
        cache.close()


def _plant_refused(cache_dir, cache_class, **settings):
    """A refused pickle under 'evil' (in a value file with ``disk_min_file_size=0``)."""
    _plant_raw(cache_dir, {'evil': BUILD_ATTACKS['GLOBAL'](uuid.SafeUUID)}, cache_class, **settings)


@pytest.mark.parametrize('in_file', [False, True], ids=['inline', 'value-file'])
def test_safedisk_pop_refuses_before_deleting(cache_class, cache_dir, unpatched, in_file):
    settings = {'disk_min_file_size': 0} if in_file else {}
    _plant_refused(cache_dir, cache_class, timeout=5.0, **settings)  # FanoutCache: no give-ups
    files = {name for name in value_files(cache_dir) if name.endswith('.val')}
    assert bool(files) is in_file
    cache = cache_class(cache_dir, disk=dc.SafeDisk, timeout=5.0)
    try:
        for _ in range(2):
            with pytest.raises(dc.UnsafePickleError):
                cache.pop('evil')
            assert 'evil' in cache
            assert len(cache) == 1
            assert {name for name in value_files(cache_dir) if name.endswith('.val')} == files
        assert 'is_admin' not in vars(uuid.SafeUUID)
        cache.set('good', [1, 2])
        assert cache.pop('good') == [1, 2]
        assert cache.pop('good', 'gone') == 'gone'
        assert cache.delete('evil')
        assert cache.pop('evil', 'gone') == 'gone'
    finally:
        cache.close()


def test_safedisk_pop_in_a_transaction_refuses_before_deleting(cache_dir, unpatched):
    _plant_refused(cache_dir, dc.Cache)
    cache = dc.Cache(cache_dir, disk=dc.SafeDisk)
    try:
        with cache.transact():
            with pytest.raises(dc.UnsafePickleError):
                cache.pop('evil')
            cache.set('other', 1)
        assert 'evil' in cache and cache['other'] == 1
    finally:
        cache.close()


def test_safedisk_pull_refuses_before_deleting(cache_dir, unpatched):
    planter = dc.Cache(cache_dir, disk=_PlantingDisk)
    planter.push(_RawPickle(BUILD_ATTACKS['GLOBAL'](uuid.SafeUUID)))
    planter.push('after')
    planter.push(_RawPickle(BUILD_ATTACKS['STACK_GLOBAL'](uuid.SafeUUID)), prefix='q')
    planter.close()
    cache = dc.Cache(cache_dir, disk=dc.SafeDisk)
    try:
        for pull in (lambda: cache.pull(), lambda: cache.pull(prefix='q', side='back')):
            with pytest.raises(dc.UnsafePickleError):
                pull()
        assert len(cache) == 3
        with pytest.raises(dc.UnsafePickleError):
            cache.peek()
        assert cache.pull(side='back')[1] == 'after'
    finally:
        cache.close()


def test_safedisk_deque_and_index_pops_refuse_before_deleting(tmp_path, unpatched):
    planter = dc.Cache(str(tmp_path / 'deque'), disk=_PlantingDisk)
    planter.push(_RawPickle(BUILD_ATTACKS['GLOBAL'](uuid.SafeUUID)))
    planter.close()
    _plant_refused(str(tmp_path / 'index'), dc.Cache)
    deque = dc.Deque.fromcache(dc.Cache(str(tmp_path / 'deque'), disk=dc.SafeDisk))
    index = dc.Index.fromcache(dc.Cache(str(tmp_path / 'index'), disk=dc.SafeDisk))
    try:
        for pop in (deque.pop, deque.popleft):
            with pytest.raises(dc.UnsafePickleError):
                pop()
            assert len(deque) == 1
        with pytest.raises(dc.UnsafePickleError):
            index.pop('evil')
        assert 'evil' in index and len(index) == 1
    finally:
        deque.cache.close()
        index.cache.close()
