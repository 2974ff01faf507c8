"""The command-line tool, driven as users run it: ``python -m diskcache_core ...`` in a subprocess."""

from __future__ import annotations

import ipaddress
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import diskcache_core as dc
from diskcache_core import cli

ROOT = Path(__file__).resolve().parents[2]
BIG = b'x' * 100_000  # stored in a value file


def run(*args: str, stdin: str | None = '', **kwargs) -> subprocess.CompletedProcess:
    """Run the tool; stdin is an empty pipe (not a terminal) unless given."""
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join(filter(None, [str(ROOT), env.get('PYTHONPATH')]))
    options = {'input': stdin} if stdin is not None else {}
    return subprocess.run(
        [sys.executable, '-m', 'diskcache_core', *map(str, args)],
        check=False, capture_output=True, text=True, env=env, timeout=60, **options, **kwargs,
    )


def run_json(*args: str):
    result = run(*args, '--json')
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def snapshot(path: Path) -> dict:
    """Every file and directory under `path` with its size and modification time."""
    if not path.exists():
        return {}
    found = {'.': path.stat().st_mtime_ns}
    for dirpath, dirs, files in os.walk(path):
        for name in dirs + files:
            full = Path(dirpath) / name
            found[str(full.relative_to(path))] = (full.stat().st_size, full.stat().st_mtime_ns)
    return found


@pytest.fixture
def cache_path(tmp_path: Path) -> Path:
    """A closed cache with a few kinds of keys, values, tags and one expired item."""
    directory = tmp_path / 'cache'
    with dc.Cache(directory, statistics=True) as cache:
        cache.set('text', 'hello', tag='greeting')
        cache.set(7, b'\x00seven')
        cache.set(b'raw', [1, 2])
        cache.set(1.5, 'float key')
        cache.set('big', BIG, tag='greeting')
        cache.set('address', ipaddress.IPv4Address('192.0.2.1'), tag=42)  # not on the allow-list
        cache.set('gone', 'old', expire=-1)
        assert cache.get('text') == 'hello'
        assert cache.get('missing') is None
    return directory


def test_help_and_usage_errors():
    assert run('--help').returncode == 0
    missing_command = run()
    assert missing_command.returncode == 2
    assert 'usage' in missing_command.stderr
    assert run('stats').returncode == 2


def test_stats(cache_path):
    result = run('stats', cache_path)
    assert result.returncode == 0, result.stderr
    assert '7 items, 1 of them expired' in result.stdout
    assert 'least-recently-stored' in result.stdout
    assert 'size_limit' in result.stdout
    document = run_json('stats', cache_path)
    assert document['count'] == 7
    assert document['expired'] == 1
    assert document['size'] == len(BIG)
    assert document['volume'] >= len(BIG)
    assert (document['hits'], document['misses']) == (1, 1)
    assert document['eviction_policy'] == 'least-recently-stored'
    assert document['statistics'] is True
    assert document['settings']['size_limit'] == 2**30
    assert set(dc.DEFAULT_SETTINGS) <= set(document['settings'])


def test_json_option_before_the_command(cache_path):
    result = run('--json', 'stats', cache_path)
    assert json.loads(result.stdout)['count'] == 7


def _contents(path: Path) -> dict:
    # SQLite creates and removes the -wal/-shm files of any connection; the rest must not change.
    return {name: state for name, state in snapshot(path).items()
            if name != '.' and not name.endswith(('-wal', '-shm'))}


def test_reading_commands_write_nothing(cache_path):
    before = _contents(cache_path)
    for command in (['stats'], ['keys'], ['settings'], ['check'], ['doctor']):
        assert run(command[0], cache_path, *command[1:]).returncode == 0
    assert _contents(cache_path) == before


def test_keys(cache_path):
    result = run('keys', cache_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["'text'", '7', "b'raw'", '1.5', "'big'", "'address'"]
    assert run('keys', cache_path, '--limit', '2').stdout.splitlines() == ["'text'", '7']
    assert run('keys', cache_path, '--limit', '0').stdout == ''
    assert run('keys', cache_path, '--tag', 'greeting').stdout.splitlines() == ["'text'", "'big'"]
    assert run('keys', cache_path, '--tag', '42', '--tag-type', 'int').stdout.splitlines() == [
        "'address'"
    ]
    assert "'gone'" in run('keys', cache_path, '--expired').stdout.splitlines()


def test_keys_refuses_a_tag_no_item_can_have_and_a_limit_beyond_any_list(cache_path):
    for options, message in (
        (['--tag', '1' * 400, '--tag-type', 'int'], 'tag'),  # beyond SQLite's 64-bit ints
        (['--limit', str(sys.maxsize + 1)], '--limit'),
    ):
        result = run('keys', cache_path, *options)
        assert result.returncode == 2, result.stderr
        assert message in result.stderr and 'Traceback' not in result.stderr


def test_keys_json(cache_path):
    listed = run_json('keys', cache_path)
    assert [item['key'] for item in listed] == [
        {'type': 'str', 'value': 'text'},
        {'type': 'int', 'value': 7},
        {'type': 'bytes', 'hex': b'raw'.hex()},
        {'type': 'float', 'value': 1.5},
        {'type': 'str', 'value': 'big'},
        {'type': 'str', 'value': 'address'},
    ]
    assert listed[0]['tag'] == {'type': 'str', 'value': 'greeting'}
    assert listed[1]['tag'] == {'type': 'none', 'value': None}
    assert listed[0]['expire_time'] is None


@pytest.mark.parametrize(
    ('args', 'printed'),
    [
        (['text'], 'hello'),
        (['7', '--int'], repr(b'\x00seven')),
        (['7', '--key-type', 'int'], repr(b'\x00seven')),
        (['raw', '--bytes'], '[1, 2]'),
        ([b'raw'.hex(), '--key-type', 'hex'], '[1, 2]'),
        (['1.5', '--key-type', 'float'], 'float key'),
    ],
)
def test_get(cache_path, args, printed):
    result = run('get', cache_path, *args)
    assert result.returncode == 0, result.stderr
    assert result.stdout == printed + '\n'


def test_get_json(cache_path):
    document = run_json('get', cache_path, 'text')
    assert document == {
        'key': {'type': 'str', 'value': 'text'},
        'found': True,
        'value': {'type': 'str', 'value': 'hello'},
        'expire_time': None,
        'tag': {'type': 'str', 'value': 'greeting'},
    }
    assert run_json('get', cache_path, '7', '--int')['value'] == {
        'type': 'bytes', 'hex': b'\x00seven'.hex()
    }
    assert run_json('get', cache_path, 'raw', '--bytes')['value'] == {
        'type': 'object', 'class': 'builtins.list', 'repr': '[1, 2]'
    }


def test_get_raw_streams_the_bytes(cache_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [sys.executable, '-m', 'diskcache_core', 'get', str(cache_path), 'big', '--raw'],
        check=False, capture_output=True, env=env, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == BIG


def test_get_missing_key(cache_path):
    result = run('get', cache_path, 'nope')
    assert result.returncode == 1
    assert result.stdout == ''
    assert 'not found' in result.stderr
    # '7' as a str is not the int key 7
    assert run('get', cache_path, '7').returncode == 1
    assert run('get', cache_path, 'gone').returncode == 1
    missing = run('get', cache_path, 'nope', '--json')
    assert missing.returncode == 1
    assert json.loads(missing.stdout)['found'] is False


def test_get_bad_key_text_is_a_usage_error(cache_path):
    result = run('get', cache_path, 'seven', '--int')
    assert result.returncode == 2
    assert 'not a valid int' in result.stderr


def test_get_refuses_unsafe_pickles_unless_told(cache_path):
    refused = run('get', cache_path, 'address')
    assert refused.returncode == 3
    assert 'refusing to unpickle ipaddress.IPv4Address' in refused.stderr
    assert '--disk pickle' in refused.stderr
    allowed = run('get', cache_path, 'address', '--disk', 'pickle')
    assert allowed.returncode == 0, allowed.stderr
    assert allowed.stdout == repr(ipaddress.IPv4Address('192.0.2.1')) + '\n'


def test_delete(cache_path):
    result = run('delete', cache_path, '7', '--int')
    assert result.returncode == 0, result.stderr
    assert run('delete', cache_path, '7', '--int').returncode == 1
    assert run_json('delete', cache_path, 'text') == {
        'key': {'type': 'str', 'value': 'text'}, 'deleted': True
    }
    with dc.Cache(cache_path) as cache:
        assert 7 not in cache and 'text' not in cache
        assert 'big' in cache


def test_expire(cache_path):
    result = run('expire', cache_path)
    assert result.returncode == 0, result.stderr
    assert 'removed 1 expired' in result.stdout
    assert run_json('expire', cache_path) == {'removed': 0}
    with dc.Cache(cache_path) as cache:
        assert len(cache) == 6


def test_evict(cache_path):
    assert run_json('evict', cache_path, 'greeting') == {
        'tag': {'type': 'str', 'value': 'greeting'}, 'removed': 2
    }
    result = run('evict', cache_path, '42', '--tag-type', 'int')
    assert result.returncode == 0, result.stderr
    assert 'removed 1 item' in result.stdout
    with dc.Cache(cache_path) as cache:
        assert sorted(map(str, cache)) == ['1.5', '7', "b'raw'", 'gone']


def test_clear_with_yes(cache_path):
    assert run_json('clear', cache_path, '--yes') == {'removed': 7}
    with dc.Cache(cache_path) as cache:
        assert len(cache) == 0


def test_clear_refuses_without_a_terminal(cache_path):
    for stdin in ('', 'y\n'):
        result = run('clear', cache_path, stdin=stdin)
        assert result.returncode == 2
        assert '--yes' in result.stderr
    with dc.Cache(cache_path) as cache:
        assert len(cache) == 7


@pytest.mark.skipif(sys.platform == 'win32', reason='needs a pseudo-terminal')
@pytest.mark.parametrize(('answer', 'cleared'), [('y\n', True), ('yes\n', True), ('n\n', False), ('\n', False)])
def test_clear_asks_on_a_terminal(cache_path, answer, cleared):
    import pty

    controller, terminal = pty.openpty()
    try:
        os.write(controller, answer.encode())
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        result = subprocess.run(
            [sys.executable, '-m', 'diskcache_core', 'clear', str(cache_path)],
            stdin=terminal, check=False, capture_output=True, text=True, env=env, timeout=60,
        )
    finally:
        os.close(terminal)
        os.close(controller)
    assert 'Remove all 7 item(s)' in result.stderr
    assert result.returncode == (0 if cleared else 1)
    with dc.Cache(cache_path) as cache:
        assert len(cache) == (0 if cleared else 7)


def test_settings_show(cache_path):
    result = run('settings', cache_path)
    assert result.returncode == 0, result.stderr
    assert 'size_limit = 1073741824' in result.stdout
    assert "eviction_policy = 'least-recently-stored'" in result.stdout
    shown = run_json('settings', cache_path)
    assert shown['size_limit'] == 2**30
    assert 'count' not in shown and 'hits' not in shown
    assert run_json('settings', cache_path, 'cull_limit') == {'name': 'cull_limit', 'value': 10}
    assert run('settings', cache_path, 'no_such_setting').returncode == 1


@pytest.mark.parametrize(
    ('name', 'text', 'value'),
    [
        ('size_limit', '1000000', 1_000_000),
        ('size_limit', '2_000_000', 2_000_000),
        ('cull_limit', '0', 0),
        ('statistics', 'false', 0),
        ('eviction_policy', 'none', 'none'),
        ('eviction_policy', 'least-recently-used', 'least-recently-used'),
        ('disk_compress', 'zlib', 'zlib'),
        ('disk_compress_level', 'none', None),
        ('sqlite_cache_size', '4096', 4096),
    ],
)
def test_settings_change_persists(cache_path, name, text, value):
    result = run('settings', cache_path, name, text, '--json')
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)['value'] == value
    with dc.Cache(cache_path) as cache:
        assert getattr(cache, name) == value
        assert cache.get('text') == 'hello'
    assert run_json('settings', cache_path)[name] == value


@pytest.mark.parametrize(
    ('name', 'text'),
    [
        ('size_limit', '-1'),
        ('size_limit', 'big'),
        ('size_limit', '1.5'),
        ('eviction_policy', 'random'),
        ('count', '3'),
        ('no_such_setting', '1'),
        ('disk_compress', 'brotli'),
    ],
)
def test_settings_bad_value_changes_nothing(cache_path, name, text):
    before = run_json('settings', cache_path)
    result = run('settings', cache_path, name, text)
    assert result.returncode == 2
    assert 'cannot set' in result.stderr
    assert run_json('settings', cache_path) == before


def test_check(cache_path):
    clean = run('check', cache_path)
    assert clean.returncode == 0, clean.stderr
    assert 'no problems' in clean.stdout
    assert run_json('check', cache_path) == {'problems': [], 'fixed': False}

    stray = cache_path / 'ab' / 'stray.val'
    stray.parent.mkdir()
    stray.write_bytes(b'orphan')
    found = run('check', cache_path, '--json')
    assert found.returncode == 1
    problems = json.loads(found.stdout)['problems']
    assert {'category': 'UnknownFileWarning', 'message': f'unknown file: {stray}'} in problems
    assert stray.exists()

    fixed = run('check', cache_path, '--fix')
    assert fixed.returncode == 0, fixed.stderr
    assert 'fixed' in fixed.stdout
    assert not stray.exists()
    assert run('check', cache_path).returncode == 0


ALL_COMMANDS = [
    ['stats'], ['check'], ['check', '--fix'], ['keys'], ['get', 'k'], ['delete', 'k'],
    ['expire'], ['evict', 't'], ['clear', '--yes'], ['settings'], ['settings', 'size_limit', '5'],
    ['doctor'],
]


@pytest.mark.parametrize('command', ALL_COMMANDS, ids=' '.join)
def test_missing_directory_is_not_created(tmp_path, command):
    target = tmp_path / 'nothing' / 'here'
    result = run(command[0], target, *command[1:])
    assert result.returncode == 2
    assert 'no such directory' in result.stderr
    assert result.stdout == ''
    assert not (tmp_path / 'nothing').exists()


@pytest.mark.parametrize('command', ALL_COMMANDS, ids=' '.join)
def test_directory_without_cache_is_untouched(tmp_path, command):
    target = tmp_path / 'plain'
    target.mkdir()
    (target / 'notes.txt').write_text('not a cache')
    before = snapshot(target)
    result = run(command[0], target, *command[1:], '--json')
    assert result.returncode == 2
    assert 'not a cache directory' in result.stderr
    assert snapshot(target) == before


@pytest.mark.parametrize('content', ['empty', 'other-database', 'garbage'])
def test_foreign_cache_db_is_untouched(tmp_path, content):
    target = tmp_path / 'foreign'
    target.mkdir()
    database = target / 'cache.db'
    if content == 'empty':
        database.write_bytes(b'')
    elif content == 'garbage':
        database.write_bytes(b'this is not sqlite' * 100)
    else:
        con = sqlite3.connect(database)
        con.execute('CREATE TABLE Other (x)')
        con.commit()
        con.close()
    before = snapshot(target)
    for command in (['stats'], ['settings', 'size_limit', '5'], ['clear', '--yes']):
        result = run(command[0], target, *command[1:])
        assert result.returncode == 2
        assert 'not a cache database' in result.stderr
    assert snapshot(target) == before


def test_file_instead_of_directory(tmp_path):
    target = tmp_path / 'file'
    target.write_text('x')
    result = run('stats', target)
    assert result.returncode == 2
    assert 'not a directory' in result.stderr


def test_opens_python_diskcache_directory(tmp_path):
    diskcache = pytest.importorskip('diskcache')
    directory = tmp_path / 'theirs'
    with diskcache.Cache(str(directory)) as theirs:
        theirs.set('key', 'value')
    assert run('get', directory, 'key').stdout == 'value\n'


def test_setting_value_parsing():
    parse = cli.parse_setting_value
    assert parse('size_limit', '10') == 10
    assert parse('sqlite_mmap_size', '1.5') == 1.5
    assert parse('statistics', 'true') is True
    assert parse('disk_compress', 'None') is None
    assert parse('sqlite_journal_mode', 'wal') == 'wal'
    assert parse('eviction_policy', 'none') == 'none'


def test_find_shard_directories(tmp_path, cache_path):
    assert cli.find_shard_directories(str(cache_path)) == [str(cache_path)]
    with pytest.raises(cli.NotACacheError):
        cli.find_shard_directories(str(tmp_path / 'missing'))
    assert not (tmp_path / 'missing').exists()


def test_main_in_process(cache_path, capsys):
    assert cli.main(['keys', str(cache_path), '--limit', '1']) == 0
    assert capsys.readouterr().out == "'text'\n"
    assert cli.main(['get', str(cache_path), 'nope']) == 1
    assert cli.main(['--bogus']) == 2


def test_fanout_directories_are_recognised_and_every_command_spans_the_shards(tmp_path, capsys):
    directory = tmp_path / 'fanout'
    with dc.FanoutCache(directory, shards=4) as cache:
        for i in range(40):
            cache.set(f'key-{i}', i, tag='even' if i % 2 == 0 else 'odd')
    shards = cli.find_shard_directories(str(directory))
    assert shards == [str(directory / f'{n:03d}') for n in range(4)]
    assert cli.main(['keys', str(directory)]) == 0
    assert sorted(capsys.readouterr().out.split()) == sorted(repr(f'key-{i}') for i in range(40))
    assert cli.main(['get', str(directory), 'key-7']) == 0
    assert capsys.readouterr().out.strip() == '7'
    assert cli.main(['stats', str(directory), '--json']) == 0
    assert json.loads(capsys.readouterr().out)['shards'] == 4
    assert cli.main(['evict', str(directory), 'even']) == 0
    capsys.readouterr()
    with dc.FanoutCache(directory, shards=4) as cache:
        assert len(cache) == 20 and 'key-1' in cache and 'key-2' not in cache
    # A gap in the numbering is not a FanoutCache: refuse rather than act on part of it.
    (directory / '001' / 'cache.db').rename(directory / '001' / 'moved.db')
    with pytest.raises(cli.NotACacheError, match='numbered'):
        cli.find_shard_directories(str(directory))


# --- the fixes for a new user's report: --version, fan-out order, key types, --allow-type ------


def test_version_prints_the_package_version():
    result = run('--version')
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ['diskcache-core', dc.__version__]


def _fanout_in_insertion_order(directory: Path, count: int) -> list[str]:
    """A 4-shard FanoutCache holding `count` keys; the keys in the order they were stored."""
    keys = [f'item-{n:03d}' for n in range(count)]
    with dc.FanoutCache(directory, shards=4) as cache:
        for number, key in enumerate(keys):
            cache.set(key, number, tag='odd' if number % 2 else 'even')
        assert len({cache.shard_for(key).directory for key in keys[:8]}) > 1  # really spread
    return keys


def test_keys_on_a_fanout_cache_are_in_insertion_order_across_shards(tmp_path, capsys):
    directory = tmp_path / 'fanout'
    keys = _fanout_in_insertion_order(directory, 40)
    assert cli.main(['keys', str(directory)]) == 0
    assert capsys.readouterr().out.splitlines() == [repr(key) for key in keys]
    # --limit cuts the merged list, not the first shard's.
    assert cli.main(['keys', str(directory), '--limit', '3']) == 0
    assert capsys.readouterr().out.splitlines() == [repr(key) for key in keys[:3]]
    assert cli.main(['keys', str(directory), '--tag', 'odd', '--limit', '4', '--json']) == 0
    listed = [item['key']['value'] for item in json.loads(capsys.readouterr().out)]
    assert listed == keys[1:8:2]


def test_keys_text_output_tells_key_types_apart(tmp_path):
    directory = tmp_path / 'types'
    stored = [42, '42', b'42', 42.0 + 0.5, 'two\nlines', ('tuple', 1)]
    with dc.Cache(directory) as cache:
        for key in stored:
            cache.set(key, 'value')
    lines = run('keys', directory).stdout.splitlines()
    assert lines == ['42', "'42'", "b'42'", '42.5', "'two\\nlines'", "('tuple', 1)"]
    assert len(set(lines)) == len(stored)
    # JSON output stays faithful to the types.
    assert [item['key'] for item in run_json('keys', directory)][:2] == [
        {'type': 'int', 'value': 42}, {'type': 'str', 'value': '42'}
    ]


def test_allow_type_extends_safedisks_allow_list(cache_path):
    refused = run('get', cache_path, 'address')
    assert refused.returncode == 3
    assert '--allow-type ipaddress.IPv4Address' in refused.stderr
    for args in (['get', cache_path, 'address', '--allow-type', 'ipaddress.IPv4Address'],
                 ['--allow-type', 'ipaddress.IPv4Address', 'get', cache_path, 'address'],
                 ['get', cache_path, 'address', '--allow-type', 'ipaddress:IPv4Address']):
        allowed = run(*args)
        assert allowed.returncode == 0, allowed.stderr
        assert allowed.stdout == repr(ipaddress.IPv4Address('192.0.2.1')) + '\n'
    # Given on both sides of the command, both lists count.
    both = run('--allow-type', 'decimal.Decimal', 'get', cache_path, 'address',
               '--allow-type', 'ipaddress.IPv4Address', '--json')
    assert both.returncode == 0, both.stderr
    assert json.loads(both.stdout)['value']['class'] == 'ipaddress.IPv4Address'


@pytest.mark.parametrize(
    ('option', 'message'),
    [
        ('ipaddress.Nope', 'ipaddress has no Nope'),
        ('no_such_module.Thing', 'no such module'),
        ('os.path.join', 'not a class'),
        ('IPv4Address', 'no such module'),
    ],
)
def test_allow_type_bad_names_are_usage_errors(cache_path, option, message):
    result = run('get', cache_path, 'address', '--allow-type', option)
    assert result.returncode == 2
    assert message in result.stderr


def test_allow_type_needs_safedisk(cache_path):
    result = run('get', cache_path, 'text', '--disk', 'pickle', '--allow-type', 'ipaddress.IPv4Address')
    assert result.returncode == 2
    assert '--allow-type applies to --disk safe only' in result.stderr


def test_allow_type_reads_a_django_cache_page_entry(tmp_path):
    pytest.importorskip('django')
    location = tmp_path / 'django'
    env = dict(os.environ, DJANGO_SETTINGS_MODULE='tests.helpers.django_project.settings',
               DISKCACHE_CORE_DJANGO_LOCATION=str(location))
    env['PYTHONPATH'] = os.pathsep.join(filter(None, [str(ROOT), env.get('PYTHONPATH')]))
    script = (
        'import django; django.setup()\n'
        'from django.test import Client\n'
        'assert Client().get("/cached/").content == b"cached 1"\n'
    )
    filled = subprocess.run([sys.executable, '-c', script], check=False, capture_output=True,
                            text=True, env=env, cwd=ROOT, timeout=120)
    assert filled.returncode == 0, filled.stderr
    pages = [item['key']['value'] for item in run_json('keys', location)
             if 'cache_page' in item['key']['value']]
    assert len(pages) == 1
    refused = run('get', location, pages[0])
    assert refused.returncode == 3
    assert '--allow-type django.http.response.HttpResponse' in refused.stderr
    types = ['django.http.response.HttpResponse', 'django.http.response.ResponseHeaders',
             'http.cookies.SimpleCookie']  # as docs/cli.rst says
    allowed = run('get', location, pages[0], *[arg for name in types for arg in ('--allow-type', name)])
    assert allowed.returncode == 0, allowed.stderr
    assert allowed.stdout.startswith('<HttpResponse status_code=200')


def _every_file(path: Path) -> dict:
    """Every file below `path` (the -wal and -shm included) and a hash of its bytes."""
    import hashlib

    return {
        str(item.relative_to(path)): hashlib.sha256(item.read_bytes()).hexdigest()
        for item in sorted(path.rglob('*')) if item.is_file()
    }


@pytest.mark.parametrize('maker', ['python-diskcache', 'fanout', 'schema-1'])
def test_reading_commands_change_no_byte_and_make_no_file(tmp_path, maker):
    directory = tmp_path / 'cache'
    if maker == 'python-diskcache':
        diskcache = pytest.importorskip('diskcache')
        with diskcache.Cache(str(directory)) as peer:
            peer.set('key', 'value')
            peer.set('big', b'x' * 100_000)
    elif maker == 'fanout':
        with dc.FanoutCache(str(directory), shards=3) as fanout:
            for number in range(10):
                fanout.set(number, str(number))
    else:  # an older schema: a writing open would migrate it
        with dc.Cache(str(directory)) as cache:
            cache.set('key', 'value')
        con = sqlite3.connect(directory / 'cache.db')
        with con:
            con.execute("UPDATE Settings SET value = 1 WHERE key = 'schema_version'")
        con.close()
    before = _every_file(directory)
    key = '1' if maker == 'fanout' else 'key'
    flags = ['--int'] if maker == 'fanout' else []
    for command in (['stats'], ['keys'], ['settings'], ['settings', 'size_limit'], ['check'],
                    ['get', key, *flags], ['doctor']):
        result = run(command[0], directory, *command[1:])
        assert result.returncode == 0, (command, result.stderr)
    assert _every_file(directory) == before  # no migration, no -wal/-shm, no version file


@pytest.mark.parametrize('name', ['what?', 'hash#tag', 'per%20cent'])
def test_a_cache_whose_directory_name_means_something_in_a_uri_is_recognised(tmp_path, capsys, name):
    directory = tmp_path / name
    with dc.Cache(directory) as cache:
        cache.set('key', 'value')
    assert cli.main(['keys', str(directory)]) == 0
    assert capsys.readouterr().out.split() == [repr('key')]


def test_a_fanout_caches_size_limit_is_the_total_shown_and_set(tmp_path):
    directory = tmp_path / 'fanout'
    dc.FanoutCache(directory, shards=4, size_limit=4_000_000).close()
    assert run_json('settings', directory, 'size_limit')['value'] == 4_000_000
    assert run_json('stats', directory)['settings']['size_limit'] == 4_000_000
    assert run('settings', directory, 'size_limit', '8000000').returncode == 0
    with dc.FanoutCache(directory, shards=4) as fanout:
        assert fanout.size_limit == 8_000_000  # split over the shards, not 8 MB each


@pytest.mark.parametrize('args', [
    ('get', '{dir}', 'nan', '--key-type', 'float'),
    ('evict', '{dir}', 'nan', '--tag-type', 'float'),
    ('get', '{dir}', '\udcff'),  # what Python makes of argument bytes that are not UTF-8
    ('keys', '{dir}', '--tag', '\udcff'),
])
def test_an_argument_the_cache_refuses_is_a_usage_error_not_a_traceback(cache_path, args):
    result = run(*(arg.format(dir=cache_path) for arg in args))
    assert result.returncode == cli.EXIT_USAGE, result.stderr
    assert 'Traceback' not in result.stderr and result.stderr.startswith('diskcache-core: ')


def test_output_the_terminal_cannot_encode_is_a_message_not_a_traceback(cache_path):
    with dc.Cache(cache_path) as cache:
        cache.set('snow', 'snow \u2603')
    env = {**os.environ, 'PYTHONIOENCODING': 'ascii', 'PYTHONPATH': str(ROOT)}
    result = subprocess.run([sys.executable, '-m', 'diskcache_core', 'get', str(cache_path), 'snow'],
                            capture_output=True, text=True, env=env, timeout=60, check=False)
    assert result.returncode == cli.EXIT_USAGE and 'PYTHONIOENCODING' in result.stderr
    assert 'Traceback' not in result.stderr


def test_changing_commands_give_up_after_the_timeout_while_the_cache_is_locked(cache_path):
    # They retried without end, silently, whatever --timeout said.
    holder = sqlite3.connect(str(cache_path / 'cache.db'), isolation_level=None)
    holder.execute('BEGIN IMMEDIATE')  # another process is writing
    try:
        for command in (['delete', cache_path, 'text'], ['expire', cache_path],
                        ['evict', cache_path, 'greeting'], ['clear', cache_path, '--yes'],
                        ['check', cache_path, '--fix']):
            result = run('--timeout', '0.2', *command)
            assert result.returncode == 3, (command, result.stderr)
            assert 'Timeout: the database stayed locked past --timeout 0.2 s' in result.stderr
    finally:
        holder.execute('ROLLBACK')
        holder.close()
    assert run('get', cache_path, 'text').stdout == 'hello\n'  # nothing was changed


def test_get_of_a_value_this_shell_cannot_decode_names_it_in_one_line(tmp_path):
    directory = tmp_path / 'c'
    with dc.Cache(directory) as cache:
        cache.set('damaged', [1, 2])
    with sqlite3.connect(str(directory / 'cache.db')) as con:
        con.execute("UPDATE Cache SET value = X'800563' WHERE key = 'damaged'")
    con.close()
    for disk in ('safe', 'pickle'):
        result = run('get', directory, 'damaged', '--disk', disk)
        assert result.returncode == 3 and 'Traceback' not in result.stderr, result.stderr
        assert "cannot read the value of 'damaged': UnpicklingError" in result.stderr


def test_get_raw_of_a_jsondisk_cache_writes_the_value_not_its_stored_form(tmp_path):
    # It wrote JSONDisk's zlib-compressed storage bytes, with status 0.
    directory = tmp_path / 'c'
    with dc.Cache(directory, disk=dc.JSONDisk) as cache:
        cache.set('text', 'hello')
        cache.set('big', 'y' * 100_000)
        cache.set('object', {'a': 1})
    assert run('get', directory, 'text', '--disk', 'json', '--raw').stdout == 'hello'
    assert run('get', directory, 'big', '--disk', 'json', '--raw').stdout == 'y' * 100_000
    result = run('get', directory, 'object', '--disk', 'json', '--raw')
    assert result.returncode == 2 and '--raw needs a bytes or str value, not dict' in result.stderr


@pytest.mark.parametrize('timeout', ['-1', 'nan', 'inf', '1e308', 'abc'])
def test_a_timeout_the_cache_would_refuse_is_a_usage_error(cache_path, timeout):
    result = run('--timeout', timeout, 'stats', cache_path)
    assert result.returncode == 2 and '--timeout' in result.stderr


def test_a_rollback_journal_cache_locked_by_a_writer_is_not_called_no_cache(tmp_path):
    # It said "cache.db is not a cache database" (status 2): someone might delete it.
    directory = tmp_path / 'c'
    with dc.Cache(directory, sqlite_journal_mode='delete') as cache:
        cache.set('a', 1)
    holder = sqlite3.connect(str(directory / 'cache.db'), isolation_level=None)
    holder.execute('BEGIN EXCLUSIVE')
    try:
        result = run('stats', directory)
    finally:
        holder.execute('ROLLBACK')
        holder.close()
    assert result.returncode == 3 and 'stayed locked by a writer' in result.stderr
    assert run('get', directory, 'a').stdout == '1\n'


@pytest.mark.parametrize('damage', [
    "mode = 'abc'",
    'mode = 4, filename = NULL, value = NULL',
    'mode = 2, filename = NULL, value = NULL',
])
def test_a_damaged_row_is_a_cache_error_naming_it_and_check_finds_and_drops_it(tmp_path, damage):
    # It was status 2 (a usage error) with a bare TypeError, and check found "no problems".
    directory = tmp_path / 'c'
    with dc.Cache(directory) as cache:
        cache.set('a', ('pickled', 1))
        cache.set('good', 'ok')
    with sqlite3.connect(str(directory / 'cache.db')) as con:
        con.execute(f"UPDATE Cache SET {damage} WHERE key = 'a'")
    con.close()
    for arguments in ([], ['--raw'], ['--json']):
        result = run('get', directory, 'a', *arguments)
        assert result.returncode == 3, (arguments, result.stderr)
        assert 'Traceback' not in result.stderr and len(result.stderr.splitlines()) == 1
        assert "DatabaseError: the row of key 'a' in" in result.stderr
        assert 'is damaged' in result.stderr
    found = run('check', directory)
    assert found.returncode == 1
    assert "row 1 (key 'a') in" in found.stdout and 'is damaged' in found.stdout
    assert 'no problems found' not in found.stdout
    assert run('check', directory, '--fix').returncode == 0
    assert run('check', directory).stdout == 'no problems found\n'
    assert run('get', directory, 'a').returncode == 1
    assert run('get', directory, 'good').stdout == 'ok\n'


def test_keys_of_a_fanout_cache_with_a_damaged_store_time_lists_every_key(tmp_path):
    # The merge by store time compared text with a number: status 2 and a bare TypeError.
    directory = tmp_path / 'f'
    with dc.FanoutCache(directory, shards=2) as cache:
        for number in range(6):
            cache.set(f'k{number}', number)
    for shard, value in zip(sorted(directory.glob('*/cache.db')), ("'abc'", 'NULL')):
        with sqlite3.connect(str(shard)) as con:
            con.execute(f'UPDATE Cache SET store_time = {value} WHERE rowid = 1')
        con.close()
    result = run('keys', directory)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.split()) == [f"'k{number}'" for number in range(6)]


def run_on_terminal(*args: str) -> tuple[int, bytes]:
    """Run the tool with its stdout on a pseudo-terminal; its status and all it wrote there."""
    import pty
    import select

    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join(filter(None, [str(ROOT), env.get('PYTHONPATH')]))
    master, slave = pty.openpty()
    try:
        process = subprocess.Popen(
            [sys.executable, '-m', 'diskcache_core', *map(str, args)],
            stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE, env=env,
        )
        os.close(slave)
        slave = -1
        output = bytearray()
        for _ in range(6000):  # at most 60 s of 10 ms waits: bounded however slow the machine
            if select.select([master], [], [], 0.01)[0]:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the terminal's last writer closed it
                    break
                if not chunk:
                    break
                output += chunk
            elif process.poll() is not None and not select.select([master], [], [], 0.05)[0]:
                break
        process.stderr.close()
        return process.wait(timeout=60), bytes(output)
    finally:
        if slave != -1:
            os.close(slave)
        os.close(master)


@pytest.mark.skipif(sys.platform == 'win32', reason='pseudo-terminals are POSIX')
def test_get_on_a_terminal_shows_control_characters_escaped_and_pipes_get_them_as_they_are(
    tmp_path,
):
    # A value retitled and cleared the terminal that showed it.
    directory = tmp_path / 'c'
    value = 'before\x1b]0;owned\x07\x1b[2J\x9b31m\rafter\ttab\nline two'
    with dc.Cache(directory) as cache:
        cache.set('a', value)
        cache.set('b', value.encode())
    status, shown = run_on_terminal('get', directory, 'a')
    assert status == 0
    assert b'\x1b' not in shown and b'\x07' not in shown and '\x9b'.encode() not in shown
    # (the terminal turns the newlines it is written into CR LF)
    assert shown.replace(b'\r\n', b'\n') == (
        b'before\\x1b]0;owned\\x07\\x1b[2J\\x9b31m\\x0dafter\ttab\nline two\n'
    )
    # A bytes value is shown by its repr, escaped already.
    assert run_on_terminal('get', directory, 'b')[1].startswith(b"b'before\\x1b]0;owned")
    # A pipe gets the text unchanged, and --raw the bytes, even on a terminal.
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    piped = subprocess.run(
        [sys.executable, '-m', 'diskcache_core', 'get', str(directory), 'a'],
        check=False, capture_output=True, env=env, timeout=60,
    )
    assert piped.returncode == 0 and piped.stdout == (value + '\n').encode()
    status, raw = run_on_terminal('get', directory, 'a', '--raw')
    assert status == 0 and b'\x1b]0;owned\x07\x1b[2J' in raw
