"""Cache.check(fix, retry): consistency of the index and the value files."""

from __future__ import annotations

import os
import shutil
import warnings
from contextlib import closing

import pytest
from store_helpers import (
    category_of,
    connect,
    db_filenames,
    unnamed_files,
    value_files,
    warning_text,
)

import diskcache_core as dc

BIG = 300_000


def _fill(cache):
    for number in range(6):
        cache.set(number, os.urandom(BIG if number % 2 else 100))
    return sorted(db_filenames(cache.directory))


def test_consistent_cache_checks_clean(store):
    _fill(store)
    store.delete(1)
    assert store.check() == []
    assert store.check(fix=True) == []
    assert store.check(retry=True) == []


def test_check_returns_warning_records(store):
    names = _fill(store)
    os.remove(os.path.join(store.directory, names[0]))
    warns = store.check()
    assert isinstance(warns, list) and warns
    for warning in warns:
        assert issubclass(category_of(warning), Warning)
        assert str(getattr(warning, 'message', warning))


def test_missing_value_file_reported_and_fixed(store):
    names = _fill(store)
    missing = os.path.join(store.directory, names[0])
    os.remove(missing)
    warns = store.check()
    assert any(missing in text or names[0] in text for text in warning_text(warns)), warning_text(warns)
    assert store.check(fix=True)
    assert store.check() == []
    assert len(store) == 5
    assert names[0] not in db_filenames(store.directory)
    for key in store:
        assert store[key] is not None


def test_unknown_file_reported_and_removed(store):
    _fill(store)
    stray_dir = os.path.join(store.directory, 'zz', 'yy')
    os.makedirs(stray_dir)
    stray = os.path.join(stray_dir, 'stray.val')
    with open(stray, 'wb') as handle:
        handle.write(b'orphan')
    leftover = os.path.join(store.directory, 'zz', 'leftover.val.tmp')
    with open(leftover, 'wb') as handle:
        handle.write(b'partial')
    warns = store.check()
    categories = [category_of(w) for w in warns]
    assert categories.count(dc.UnknownFileWarning) == 2, warning_text(warns)
    store.check(fix=True)
    assert not os.path.exists(stray) and not os.path.exists(leftover)
    assert store.check() == []
    assert unnamed_files(store.directory) == set()
    assert len(store) == 6


def test_empty_directory_reported_and_removed(store):
    _fill(store)
    empty = os.path.join(store.directory, 'ee', 'ff')
    os.makedirs(empty)
    warns = store.check()
    assert dc.EmptyDirWarning in [category_of(w) for w in warns], warning_text(warns)
    store.check(fix=True)
    assert not os.path.exists(empty)
    assert store.check() == []


def test_truncated_value_file_reported_and_fixed(store):
    names = _fill(store)
    partial = os.path.join(store.directory, names[1])
    with open(partial, 'r+b') as handle:
        handle.truncate(BIG // 2)
    warns = store.check()
    assert warns, 'check() missed a value file shorter than its row says'
    store.check(fix=True)
    assert store.check() == []


def test_check_leaves_database_files_alone(store):
    _fill(store)
    store.check(fix=True)
    assert os.path.exists(os.path.join(store.directory, 'cache.db'))
    assert len(value_files(store.directory)) == 3
    assert len(store) == 6


@pytest.mark.parametrize('fix', [False, True])
def test_check_on_empty_cache(store, fix):
    assert store.check(fix=fix) == []


def test_damaged_database_raises_the_librarys_error(tmp_path):
    directory = tmp_path / 'cache'
    with dc.Cache(directory) as cache:
        for number in range(2000):
            cache.set(number, b'v' * 200)
    path = directory / 'cache.db'
    data = bytearray(path.read_bytes())
    page = 4096
    # Keep the first pages (schema, settings) so that opening succeeds; damage the item pages.
    for offset in range(8 * page, len(data), page):
        data[offset:offset + page] = b'\xff' * page
    path.write_bytes(bytes(data))
    cache = dc.Cache(directory)
    with pytest.raises(dc.DatabaseError, match='malformed'):
        for number in range(2000):
            cache.get(number)
    with pytest.raises(dc.DatabaseError, match='malformed'):
        dc.Cache(directory).set(5000, b'x')


def test_damage_anywhere_raises_the_librarys_error_and_never_a_full_disk(tmp_path):
    """Bytes overwritten at 60 seeded places: every failure of check, clear or cull is the
    library's DatabaseError (statements inside a transaction included), and SQLite's
    'database or disk is full' on a device with room is not reported as a full disk."""
    import random
    import shutil

    base = tmp_path / 'base'
    with dc.Cache(base, eviction_policy='none') as cache:
        for number in range(300):
            cache.set(f'k{number}', (f'v{number}-' * (number % 7 * 3000 + 1)).encode())
    size = (base / 'cache.db').stat().st_size
    failures = []
    for seed in range(60):
        rnd = random.Random(seed)
        directory = tmp_path / f'c{seed}'
        shutil.copytree(base, directory)
        with open(directory / 'cache.db', 'r+b') as handle:
            handle.seek(rnd.randrange(100, size - 4096))
            handle.write(rnd.randbytes(rnd.choice([8, 64, 4096])))
        try:
            cache = dc.Cache(directory)
        except dc.DatabaseError:
            continue
        with cache:
            for call in (cache.check, lambda: cache.check(fix=True), cache.clear,
                         lambda: (cache.reset('size_limit', 1000), cache.cull())):
                try:
                    call()
                except dc.DiskCacheError as exc:
                    failures.append(exc)
        shutil.rmtree(directory)
    assert failures  # the damage was met
    assert not [exc for exc in failures if isinstance(exc, dc.DiskFullError)]
    assert all(isinstance(exc, dc.DatabaseError) for exc in failures)


def test_a_layout_file_left_by_a_killed_fanout_opener_is_reported_and_removed(tmp_path):
    """An opener killed between writing its temporary layout file and linking it into place
    (the kill is simulated: os.link never returns) leaves that file; check reports it and
    check(fix=True) removes it."""
    import subprocess
    import sys

    killed = (
        "import os, signal, sys\n"
        "os.link = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)\n"
        "import diskcache_core as dc\n"
        "dc.FanoutCache(sys.argv[1], shards=4)\n"
    )
    done = subprocess.run([sys.executable, '-c', killed, str(tmp_path)], timeout=120)
    assert done.returncode == -9
    left = [name for name in os.listdir(tmp_path) if name.endswith('.tmp')]
    assert len(left) == 1
    with dc.FanoutCache(tmp_path, shards=4) as cache:
        cache.set('k', 'v')
        assert [str(w.message) for w in cache.check()] == [f'unknown file: {tmp_path / left[0]}']
        assert len(cache.check(fix=True)) == 1
        assert cache.check() == [] and cache.get('k') == 'v'
    assert not [name for name in os.listdir(tmp_path) if name.endswith('.tmp')]


@pytest.mark.parametrize("row", ["size", "count", "hits", "misses"])
def test_a_lost_counter_row_is_reported_fixed_and_restored_on_open(make_store, row):
    from store_helpers import connect

    cache = make_store(statistics=True)
    _fill(cache)
    cache.get(0)
    cache.get("missing")
    con = connect(cache.directory)
    con.execute("DELETE FROM Settings WHERE key = ?", (row,))
    # Readers carry on (the count is counted, lost hits and misses read as none).
    assert len(cache) == 6
    cache.stats()
    assert warning_text(cache.check()) == [f"UserWarning: Settings has no {row!r} row"]
    assert cache.check(fix=True) and cache.check() == []
    assert len(cache) == 6
    # Opening the cache restores a row lost while it was closed, counted from the items.
    cache.close()
    con.execute("DELETE FROM Settings WHERE key = ?", (row,))
    con.close()
    reopened = make_store()
    assert reopened.check() == []
    assert len(reopened) == 6 and reopened.stats()[0] >= 0


@pytest.mark.parametrize("value", [None, "text", -3, 2.5])
def test_a_damaged_hits_row_is_reported_and_fixed(store, value):
    from store_helpers import connect

    store.stats(enable=True)
    with closing(connect(store.directory)) as con:  # (a connection's own with does not close)
        con.execute("UPDATE Settings SET value = ? WHERE key = 'hits'", (value,))
    assert store.stats() == (0, 0)  # read as none, not a crash
    assert warning_text(store.check()) == [f"UserWarning: Settings.hits is not a count: {value!r}"]
    store.check(fix=True)
    assert store.check() == []


def test_a_retargeted_link_to_the_cache_directory_leaves_check_consistent(tmp_path):
    # A symlink-swap deploy: current -> releases/1, then -> a copy in releases/2. check() took
    # each row's file from the directory resolved when the cache opened, and the files found
    # from the one resolved now: every item "not found", every file "unknown"; fix dropped all.
    releases = tmp_path / 'releases'
    (releases / '1').mkdir(parents=True)
    current = tmp_path / 'current'
    current.symlink_to(releases / '1')
    cache = dc.Cache(str(current / 'cache'))
    big = b'v' * 100_000  # value files
    for number in range(3):
        cache.set(number, big)
    cache.close()
    shutil.copytree(releases / '1', releases / '2', symlinks=True)
    current.unlink()
    current.symlink_to(releases / '2')
    assert cache.check() == []
    assert cache.check(fix=True) == []
    assert [cache.get(number) for number in range(3)] == [big] * 3
    cache.close()


def test_a_value_file_that_cannot_be_checked_is_reported_and_kept(store, monkeypatch):
    # Unreadable here (EACCES: a directory of mode 000 for a non-root checker) is not "not
    # found": check(fix=True) dropped the committed item.
    big = b'v' * 100_000
    store.set('k', big)
    real_lstat = os.lstat

    def lstat(path, *args, **kwargs):
        if str(path).endswith('.val'):
            raise PermissionError(13, 'Permission denied', str(path))
        return real_lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, 'lstat', lstat)
    found = [str(warning.message) for warning in store.check(fix=True)]
    monkeypatch.undo()
    assert any('cannot check value file' in message for message in found)
    assert store.get('k') == big


# A row damaged by hand (or by another program), as one UPDATE of the row of key 'a', and
# whether reading it fails at its decode (then with DatabaseError naming the row).
DAMAGED_ROWS = {
    'mode text': ("mode = 'abc'", True),
    'unknown mode': ('mode = 9', True),
    'pickle mode, no file, no value': ('mode = 4, filename = NULL, value = NULL', True),
    'binary mode, no file, no value': ('mode = 2, filename = NULL, value = NULL', True),
    'text mode, no file, no value': ('mode = 3, filename = NULL, value = NULL', True),
    'filename a blob': ("filename = x'6162'", True),
    'store_time text': ("store_time = 'abc'", False),
    'store_time NULL': ('store_time = NULL', False),
    'size text': ("size = 'abc'", False),
    'size negative': ('size = -5', False),
    'expire_time text': ("expire_time = 'abc'", False),
    'raw text': ("raw = 'abc'", False),
    'key NULL': ('key = NULL', False),
}


@pytest.mark.parametrize('damage', sorted(DAMAGED_ROWS))
@pytest.mark.parametrize('in_file', [False, True], ids=['inline', 'value file'])
def test_a_damaged_row_is_reported_named_and_dropped_with_its_file(make_store, damage, in_file):
    assignment, decode_fails = DAMAGED_ROWS[damage]
    store = make_store()
    store.set('good', b'y' * BIG)
    good_file = db_filenames(store.directory)
    store.set('a', (b'x' * BIG,) if in_file else ('pickled', 1))
    (rowid,) = [row for (row,) in store._store.read("SELECT rowid FROM Cache WHERE key = 'a'")]
    before = value_files(store.directory)
    with closing(connect(store.directory)) as con:
        con.execute(f"UPDATE Cache SET {assignment} WHERE key = 'a'")
    store = make_store()
    if decode_fails:
        with pytest.raises(dc.DatabaseError, match=r"the row of key 'a' in .*cache\.db is damaged"):
            store.get('a')
    found = warning_text(store.check())
    # One finding for the row (its value file, if it still names one, is not also "unknown").
    expected = [text for text in found if f'row {rowid} ' in text and 'is damaged' in text]
    assert len(expected) == 1, found
    assert "(key 'a')" in expected[0] or damage == 'key NULL', found
    named_file = in_file and 'filename' not in assignment
    assert len(found) == (1 if named_file or not in_file else 2), found
    fixed = store.check(fix=True)
    assert [category_of(w) for w in fixed][:1] == [UserWarning]
    assert store.check() == []
    assert len(store) == 1
    assert store['good'] == b'y' * BIG
    assert db_filenames(store.directory) == good_file
    # The damaged item's file went with it (after the drop committed), and only that one.
    assert len(before) == (2 if in_file else 1)
    assert value_files(store.directory) == good_file


def test_a_custom_disks_own_modes_are_not_damage(make_store):
    class OwnModes(dc.Disk):
        """A Disk with a mode of its own (7: the value upper-cased), as python-diskcache allows."""

        def store(self, value, read, key=dc.UNKNOWN):
            if isinstance(value, str):
                return 0, 7, None, value.lower()
            return super().store(value, read, key=key)

        def fetch(self, mode, filename, value, read):
            if mode == 7:
                return value.upper()
            return super().fetch(mode, filename, value, read)

    store = make_store(disk=OwnModes)
    store.set('a', 'Shout')
    assert store.get('a') == 'SHOUT'
    assert store.check() == []
    with closing(connect(store.directory)) as con:
        con.execute("UPDATE Cache SET mode = 'abc' WHERE key = 'a'")
    store = make_store(disk=OwnModes)
    # A mode of the wrong type is not the library's to judge for a Disk of its own either.
    assert store.check() == []


def test_every_read_of_a_damaged_row_names_it(make_store):
    store = make_store()
    store.set('a', ('pickled', 1))
    store.set('n', ('pickled', 2))
    store.push(('pickled', 3), prefix='q')
    with closing(connect(store.directory)) as con:
        con.execute("UPDATE Cache SET mode = 'abc'")
    store = make_store()
    reads = {
        'get': lambda: store.get('a'),
        'get read=True': lambda: store.get('a', read=True),
        'get with metadata': lambda: store.get('a', expire_time=True, tag=True),
        'pop': lambda: store.pop('a'),
        'incr': lambda: store.incr('n'),
        'peek': lambda: store.peek(prefix='q'),
        'pull': lambda: store.pull(prefix='q'),
    }
    for name, read in reads.items():
        with pytest.raises(dc.DatabaseError, match=r"row .*key .* is damaged: its mode 'abc'"):
            read()
        assert len(store) == 3, name  # nothing was removed on the way


def test_check_returns_its_findings_and_warns_others_again(store, monkeypatch):
    """A warning that unrelated code raises while check runs (the garbage collector closing a
    forgotten connection: a ResourceWarning on Python 3.13) is not a finding of the check."""
    import diskcache_core._cache.check as check_module

    counters = check_module._check_counters

    def warning_meanwhile(*args, **kwargs):
        warnings.warn("unclosed database", ResourceWarning)
        return counters(*args, **kwargs)

    monkeypatch.setattr(check_module, "_check_counters", warning_meanwhile)
    store.set("a", 1)
    with pytest.warns(ResourceWarning, match="unclosed database"):
        assert store.check() == []
    open(os.path.join(store.directory, "stray"), "w").close()
    with pytest.warns(ResourceWarning):
        found = store.check()
    assert [str(item.message) for item in found] == [
        f"unknown file: {os.path.join(os.path.realpath(store.directory), 'stray')}"
    ]
