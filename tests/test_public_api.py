"""The curated public API: export list, docstrings, exception hierarchy, python-diskcache
compatible signatures, and an import that pulls in no optional integration."""

from __future__ import annotations

import inspect
import json
import os
import pickle
import subprocess
import sys

import pytest

import diskcache_core as dc

STORE_NAMES = {
    'Cache',
    'Disk',
    'JSONDisk',
    'SafeDisk',
    'DiskCacheError',
    'Timeout',
    'UnsafePickleError',
    'UnknownFileWarning',
    'EmptyDirWarning',
    'ENOVAL',
    'UNKNOWN',
    'DEFAULT_SETTINGS',
    'EVICTION_POLICY',
}


def test_all_is_an_explicit_sorted_list():
    assert isinstance(dc.__all__, list)
    assert dc.__all__ == sorted(dc.__all__)
    assert len(dc.__all__) == len(set(dc.__all__))


def test_dir_lists_the_public_names_only():
    # dir() listed the module's helpers: Any, TYPE_CHECKING, importlib.
    listed = {name for name in dir(dc) if not name.startswith('__')} | {'__version__'}
    peer_modules = {'core', 'djangocache', 'fanout', 'persistent', 'recipes'}
    assert listed == set(dc.__all__) | {'DjangoCache', 'cli', 'contrib'} | peer_modules
    assert {'__version__', '__all__', '__doc__', '__path__'} <= set(dir(dc))
    assert dc.DjangoCache.__name__ == 'DjangoCache'  # still reached lazily
    assert dc.core.ENOVAL is dc.ENOVAL


def test_store_names_exported():
    assert STORE_NAMES <= set(dc.__all__)
    assert isinstance(dc.__version__, str) and dc.__version__


@pytest.mark.parametrize('name', sorted(dc.__all__))
def test_every_export_exists_and_is_documented(name):
    obj = getattr(dc, name)
    assert inspect.getdoc(obj), name
    if inspect.isclass(obj) or inspect.isfunction(obj):
        assert (obj.__doc__ or '').strip(), '%s has no docstring of its own' % name


def _public_members(cls):
    for attr, member in vars(cls).items():
        if attr.startswith('_') and attr not in ('__init__', '__getitem__', '__setitem__', '__delitem__'):
            continue
        if inspect.isfunction(member) or isinstance(member, (property, classmethod, staticmethod)):
            yield attr, member


@pytest.mark.parametrize('class_name', ['Cache', 'Disk', 'JSONDisk', 'SafeDisk'])
def test_public_methods_are_documented(class_name):
    cls = getattr(dc, class_name)
    undocumented = []
    for attr, member in _public_members(cls):
        if attr == '__init__':
            continue
        # An override may rely on the documentation of the method it overrides.
        if not inspect.getdoc(getattr(cls, attr)):
            undocumented.append(attr)
    assert undocumented == []


def test_exception_hierarchy():
    assert issubclass(dc.DiskCacheError, Exception)
    assert issubclass(dc.Timeout, dc.DiskCacheError)
    assert issubclass(dc.UnsafePickleError, dc.DiskCacheError)
    assert issubclass(dc.UnsafePickleError, pickle.UnpicklingError)
    assert issubclass(dc.UnknownFileWarning, UserWarning)
    assert issubclass(dc.EmptyDirWarning, UserWarning)
    assert issubclass(dc.SafeDisk, dc.Disk)
    assert issubclass(dc.JSONDisk, dc.Disk)


def test_constants():
    assert repr(dc.ENOVAL) == 'ENOVAL'
    assert repr(dc.UNKNOWN) == 'UNKNOWN'
    assert dc.ENOVAL is not dc.UNKNOWN
    assert dc.ENOVAL != dc.UNKNOWN


# Parameter names and defaults of python-diskcache 5.6.3's Cache, in order. Extra parameters
# may follow them; these must stay where callers pass them positionally.
SIGNATURES = {
    # disk=None: default_disk() (Disk unless configure() or DISKCACHE_DISK chose another), as in
    # diskcache-community; python-diskcache's default was Disk itself.
    '__init__': [('directory', None), ('timeout', 60), ('disk', None)],
    'set': [('key',), ('value',), ('expire', None), ('read', False), ('tag', None), ('retry', False)],
    'add': [('key',), ('value',), ('expire', None), ('read', False), ('tag', None), ('retry', False)],
    'get': [('key',), ('default', None), ('read', False), ('expire_time', False), ('tag', False), ('retry', False)],
    'read': [('key',), ('retry', False)],
    'touch': [('key',), ('expire', None), ('retry', False)],
    'incr': [('key',), ('delta', 1), ('default', 0), ('retry', False)],
    'decr': [('key',), ('delta', 1), ('default', 0), ('retry', False)],
    'pop': [('key',), ('default', None), ('expire_time', False), ('tag', False), ('retry', False)],
    'delete': [('key',), ('retry', False)],
    '__delitem__': [('key',), ('retry', True)],
    'push': [
        ('value',),
        ('prefix', None),
        ('side', 'back'),
        ('expire', None),
        ('read', False),
        ('tag', None),
        ('retry', False),
    ],
    'pull': [
        ('prefix', None),
        ('default', (None, None)),
        ('side', 'front'),
        ('expire_time', False),
        ('tag', False),
        ('retry', False),
    ],
    'peek': [
        ('prefix', None),
        ('default', (None, None)),
        ('side', 'front'),
        ('expire_time', False),
        ('tag', False),
        ('retry', False),
    ],
    'peekitem': [('last', True), ('expire_time', False), ('tag', False), ('retry', False)],
    'transact': [('retry', False)],
    'check': [('fix', False), ('retry', False)],
    'create_tag_index': [],
    'drop_tag_index': [],
    'evict': [('tag',), ('retry', False)],
    'expire': [('now', None), ('retry', False)],
    'cull': [('retry', False)],
    'clear': [('retry', False)],
    'stats': [('enable', True), ('reset', False)],
    'volume': [],
    'reset': [('key',), ('value', dc.ENOVAL), ('update', True)],
    'iterkeys': [('reverse', False)],
    'close': [],
}


# python-diskcache's FanoutCache differs from its Cache here; it has no queue methods or iterkeys
# (ours has iterkeys: keys by tag over the shards).
FANOUT_SIGNATURES = {
    **SIGNATURES,
    '__init__': [('directory', None), ('shards', 8), ('timeout', 0.010), ('disk', None)],
    '__delitem__': [('key',)],
    'transact': [('retry', True)],
    'reset': [('key',), ('value', dc.ENOVAL)],
    'expire': [('retry', False)],
    # python-diskcache's FanoutCache.read(key) always waits for a busy shard; ours may be told not to.
    'read': [('key',), ('retry', True)],
}
for _name in ('push', 'pull', 'peek', 'peekitem'):  # (iterkeys: ours has it, for tag=, issue 37)
    del FANOUT_SIGNATURES[_name]


@pytest.mark.parametrize('method', sorted(SIGNATURES))
def test_cache_signature_compatible(method, cache_class):
    signatures = FANOUT_SIGNATURES if cache_class is dc.FanoutCache else SIGNATURES
    if method not in signatures:
        assert not hasattr(cache_class, method)
        return
    parameters = [
        p
        for p in inspect.signature(getattr(cache_class, method)).parameters.values()
        if p.name != 'self' and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    expected = signatures[method]
    assert [p.name for p in parameters[: len(expected)]] == [e[0] for e in expected]
    for parameter, spec in zip(parameters, expected):
        if len(spec) == 1:
            assert parameter.default is inspect.Parameter.empty, parameter
        else:
            assert parameter.default == spec[1], parameter
    required_extra = [p for p in parameters[len(expected) :] if p.default is inspect.Parameter.empty]
    assert required_extra == []


def test_cache_protocols(cache_class):
    for name in (
        '__getitem__',
        '__setitem__',
        '__delitem__',
        '__contains__',
        '__len__',
        '__iter__',
        '__reversed__',
        '__enter__',
        '__exit__',
        '__getstate__',
        '__setstate__',
    ):
        assert callable(getattr(cache_class, name, None)), name
    for name in ('directory', 'timeout', 'disk'):
        assert isinstance(inspect.getattr_static(cache_class, name), property), name


def test_disk_constructor_signatures():
    disk = inspect.signature(dc.Disk.__init__).parameters
    assert list(disk)[:4] == ['self', 'directory', 'min_file_size', 'pickle_protocol']
    json_disk = inspect.signature(dc.JSONDisk.__init__).parameters
    assert list(json_disk)[:3] == ['self', 'directory', 'compress_level']
    assert json_disk['compress_level'].default == 1


def _run_python(code: str, *args: str) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter that imports this checkout's diskcache_core."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(dc.__file__)))
    path = os.pathsep.join([root] + [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p])
    env = dict(os.environ, PYTHONPATH=path)
    return subprocess.run(
        [sys.executable, '-c', code, *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_import_does_not_import_integrations():
    result = _run_python(
        'import json, sys\n'
        'import diskcache_core\n'
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'django', 'flask', 'flask_caching', 'pylibmc', 'redis', 'diskcache'})\n"
        'print(json.dumps(bad))\n'
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []


TUTORIAL = """
import sys
import diskcache_core as diskcache
from diskcache_core import Cache

cache = Cache(sys.argv[1])
assert cache.set('key', 'value') is True
assert cache['key'] == 'value'
assert cache.get('missing', default=diskcache.ENOVAL) is diskcache.ENOVAL
assert cache.add('key', 'other') is False
cache.set('expiring', 1, expire=60, tag='t')
assert cache.get('expiring', expire_time=True, tag=True)[2] == 't'
assert cache.incr('counter') == 1 and cache.decr('counter') == 0
assert cache.push('first') == 500000000000000
assert cache.pull() == (500000000000000, 'first')
with cache.transact():
    cache.incr('total', 123.4)
    cache.incr('count', 1)
with cache.transact():
    assert cache['total'] / cache['count'] == 123.4
assert cache.evict('t') == 1
assert cache.stats(enable=True) == (0, 0)
cache.get('key')
assert cache.stats() == (1, 0)
assert sorted(cache.iterkeys()) == ['count', 'counter', 'key', 'total']
assert cache.check() == []
cache.close()
with Cache(sys.argv[1]) as again:
    assert len(again) == 4
    assert again.clear() == 4
json_cache = Cache(sys.argv[2], disk=diskcache.JSONDisk, disk_compress_level=6)
json_cache['k'] = {'a': [1, 2]}
assert json_cache['k'] == {'a': [1, 2]}
try:
    raise diskcache.Timeout
except diskcache.Timeout:
    pass
print('ok')
"""


def test_code_written_for_python_diskcache_runs_unchanged(tmp_path):
    """Tutorial-style code for python-diskcache, run with `import diskcache_core as diskcache`."""
    result = _run_python(TUTORIAL, str(tmp_path / 'tutorial'), str(tmp_path / 'json'))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == 'ok'


def test_python_diskcaches_modules_are_attributes_of_the_package(tmp_path):
    result = _run_python(
        'import diskcache_core as diskcache\n'
        'assert diskcache.core.ENOVAL is diskcache.ENOVAL\n'
        'assert diskcache.persistent.Deque is diskcache.Deque\n'
        'assert diskcache.fanout.FanoutCache is diskcache.FanoutCache\n'
        'assert diskcache.recipes.Lock is diskcache.Lock\n'
        'from diskcache_core.core import args_to_key, full_name\n'
        f'cache = diskcache.Cache({str(tmp_path)!r})\n'
        '@cache.memoize()\n'
        'def f(a, b=2):\n'
        '    return a + b\n'
        'f(1, b=3)\n'
        'key = args_to_key((full_name(f.__wrapped__),), (1,), {"b": 3}, False, set())\n'
        'assert key == f.__cache_key__(1, b=3) and cache[key] == 4\n'
        'try:\n'
        '    diskcache.no_such_module\n'
        'except AttributeError:\n'
        '    print("ok")\n'
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == 'ok'


def test_a_bad_queue_side_is_a_value_error_and_python_diskcaches_key_error(tmp_path):
    with dc.Cache(tmp_path) as cache:
        for call in (lambda: cache.push(1, side='middle'), lambda: cache.pull(side='left')):
            with pytest.raises(ValueError, match="side must be 'back' or 'front'|side must be"):
                call()
            with pytest.raises(KeyError):
                call()
