"""A cache directory removed while caches have it open (a deploy script, a tmp cleaner, an
operator's ``rm -rf``): the caches go on in the directory made anew, as Django's FileBasedCache
does, instead of writing to deleted files no other process sees, or failing for ever.

A thread's connection looks at most every RECHECK_INTERVAL seconds (one stat, before a write)
whether its database file is still the one at the cache's path; a new connection, and a value
file, find the directory missing at once. The tests sleep past the interval: a longer sleep
on a loaded machine changes nothing.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time

import pytest

import diskcache_core as dc
from diskcache_core._store.connections import RECHECK_INTERVAL


def past_the_interval() -> None:
    time.sleep(RECHECK_INTERVAL * 1.5)


def test_the_next_write_makes_the_directory_anew_with_the_caches_settings(tmp_path):
    directory = str(tmp_path / 'c')
    cache = dc.Cache(directory, size_limit=12_345_678, eviction_policy='least-recently-used')
    cache.set('old', 1)
    assert cache.get('old') == 1 and cache.get('old') == 1  # held by the memory tier too
    shutil.rmtree(directory)
    past_the_interval()
    assert cache.set('new', 2)
    assert cache.get('new') == 2
    assert cache.get('old') is None  # neither the deleted database nor the tier answers
    assert len(cache) == 1
    with dc.Cache(directory) as other:  # what any other opener finds there
        assert other.get('new') == 2 and other.get('old') is None
        assert other.size_limit == 12_345_678
        assert other.eviction_policy == 'least-recently-used'
    assert cache.check() == []
    cache.close()


def test_a_directory_another_process_made_anew_is_followed(tmp_path):
    directory = str(tmp_path / 'c')
    cache = dc.Cache(directory)
    cache.set('old', 1)
    assert cache.get('old') == 1
    shutil.rmtree(directory)
    script = (
        'import sys, diskcache_core as dc\n'
        'with dc.Cache(sys.argv[1]) as cache:\n'
        '    cache.set("theirs", 3)\n'
    )
    subprocess.run([sys.executable, '-c', script, directory], check=True, timeout=120)
    past_the_interval()
    cache.set('ours', 4)
    assert cache.get('theirs') == 3 and cache.get('old') is None
    check = 'import sys, diskcache_core as dc\nprint(dc.Cache(sys.argv[1]).get("ours"))\n'
    seen = subprocess.run(
        [sys.executable, '-c', check, directory], check=True, timeout=120, capture_output=True, text=True
    )
    assert seen.stdout.strip() == '4'
    cache.close()


def test_a_new_connection_and_a_value_file_make_it_anew_at_once(tmp_path):
    directory = str(tmp_path / 'c')
    cache = dc.Cache(directory)
    cache.set('old', 1)
    shutil.rmtree(directory)
    results = []

    def in_a_new_thread():  # its first connection: "unable to open database file" before
        results.append(cache.set('from-thread', 1))

    worker = threading.Thread(target=in_a_new_thread)
    worker.start()
    worker.join(60)
    assert results == [True]
    shutil.rmtree(directory)
    big = b'v' * 200_000  # a value file, written before the statement: FileNotFoundError before
    assert cache.set('big', big)
    assert cache.get('big') == big
    assert cache.check() == []
    cache.close()


def test_a_fanout_cache_remakes_every_shard(tmp_path):
    directory = str(tmp_path / 'f')
    cache = dc.FanoutCache(directory, shards=4)
    for number in range(40):
        cache.set(number, number)
    shutil.rmtree(directory)
    past_the_interval()
    assert all(cache.set(number, -number) for number in range(40, 80))
    assert len(cache) == 40
    with dc.FanoutCache(directory, shards=4) as other:
        assert [other.get(number) for number in (0, 40, 79)] == [None, -40, -79]
    cache.close()


def test_a_read_only_cache_does_not_remake_it(tmp_path):
    directory = str(tmp_path / 'c')
    with dc.Cache(directory) as writer:
        writer.set('k', 1)
    reader = dc.Cache(directory, read_only=True)
    assert reader.get('k') == 1
    reader.close()
    shutil.rmtree(directory)
    with pytest.raises(dc.DatabaseError):
        reader.get('k')
    assert not (tmp_path / 'c' / 'cache.db').exists()


def test_a_database_swapped_for_a_link_while_open_is_refused_not_followed(tmp_path):
    # The connection replaced after a removal went through a planted link, into a database
    # outside the directory; a fresh open refuses it, so must the replacement.
    directory = tmp_path / 'c'
    cache = dc.Cache(str(directory))
    cache.set('k', 1)
    outside = tmp_path / 'outside.db'
    with dc.Cache(str(tmp_path / 'elsewhere')) as other:
        other.set('theirs', 1)
    shutil.copy(tmp_path / 'elsewhere' / 'cache.db', outside)
    before = outside.read_bytes()
    (directory / 'cache.db').unlink()
    (directory / 'cache.db').symlink_to(outside)
    past_the_interval()
    for _ in range(2):  # refused again, never acknowledged into the deleted file meanwhile
        with pytest.raises(dc.DatabaseError, match='is a link: refused'):
            cache.set('k', 2)
    assert outside.read_bytes() == before
    cache.close()


def test_a_shard_directory_swapped_for_a_link_while_open_is_refused(tmp_path):
    directory = tmp_path / 'f'
    victim = tmp_path / 'victim'
    victim.mkdir()
    (victim / 'precious.txt').write_text('mine')
    cache = dc.FanoutCache(str(directory), shards=2)
    cache.set('k', 1)
    shutil.rmtree(directory / '001')
    (directory / '001').symlink_to(victim)
    past_the_interval()
    refused = 0
    for number in range(20):  # some keys are shard 001's: refused, never written through it
        try:
            cache.set(('big', number), b'x' * 40_000)
        except dc.UnsafeValueFileError:
            refused += 1
    assert refused
    with pytest.raises(dc.UnsafeValueFileError):
        cache.check(fix=True)
    assert sorted(path.name for path in victim.iterdir()) == ['precious.txt']
    cache.close()


def test_a_directory_replaced_by_a_file_keeps_refusing_writes(tmp_path):
    directory = tmp_path / 'c'
    cache = dc.Cache(str(directory))
    cache.set('k', 1)
    shutil.rmtree(directory)
    directory.write_text('not a directory')
    past_the_interval()
    for _ in range(3):  # the first refusal must not let the next write into the deleted file
        with pytest.raises(OSError):
            cache.set('k', 2)
    cache.close()


def test_a_connection_to_the_removed_database_fills_no_memory_tier(tmp_path):
    # After a new thread's connection followed the directory made anew (and the tier forgot
    # all), the main thread's reads on its old connection kept the removed database's value in
    # the tier, where every thread of the process was then answered with it.
    directory = str(tmp_path / 'c')
    cache = dc.Cache(directory)
    cache.set('j', 'old')
    assert cache.get('j') == 'old'
    shutil.rmtree(directory)
    script = 'import sys, diskcache_core as dc\nwith dc.Cache(sys.argv[1]) as c:\n    c.set("j", "new")\n'
    subprocess.run([sys.executable, '-c', script, directory], check=True, timeout=120)

    def in_a_new_thread(call):
        results = []
        thread = threading.Thread(target=lambda: results.append(call()))
        thread.start()
        thread.join()
        return results[0]

    assert in_a_new_thread(lambda: cache.get('j', tag=True)[0]) == 'new'  # its own connection
    for _ in range(3):
        cache.get('j')  # the main thread, on the old connection (until it writes: documented)
    assert [in_a_new_thread(lambda: cache.get('j')) for _ in range(5)] == ['new'] * 5
    cache.close()
