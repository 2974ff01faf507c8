"""One listener (and one refresher) per cache directory, whatever the shard count: a
FanoutCache's shards are served by one listener elected in the FanoutCache's directory, against a
real redis-server (docs/remote.rst, "One listener per directory")."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import pytest

from diskcache_core import Cache, FanoutCache

import remote_helpers as helpers
from remote_helpers import eventually
from redis_servers import needs_redis

pytestmark = [
    needs_redis,
    pytest.mark.skipif(
        not os.path.exists("/proc/self/maps"), reason="counts helper processes through /proc"
    ),
]

SPAWN = multiprocessing.get_context("spawn")
SHARDS = 8
RSS_LIMIT_KB = 150 * 1024  # the helpers of one directory, all together



def helpers_of(directory: str) -> dict[int, int]:
    """The listener and refresher processes serving caches under `directory` (they map its
    stamp files), with their resident memory in kB."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as file:
                if b"diskcache_core._remote.listenerprocess" not in file.read():
                    continue
            with open(f"/proc/{entry}/maps", encoding="utf-8", errors="replace") as file:
                if directory + os.sep not in file.read():
                    continue
            with open(f"/proc/{entry}/status", encoding="ascii", errors="replace") as file:
                rss = [line for line in file if line.startswith("VmRSS:")]
        except OSError:
            continue  # gone meanwhile, or not ours to read
        found[int(entry)] = int(rss[0].split()[1]) if rss else 0
    return found


def settled_helpers(directory: str) -> dict[int, int]:
    """`helpers_of(directory)` once the listener has forked its refresher and every helper
    that would start has had the time to (the leases are granted before this is called)."""
    eventually(lambda: len(helpers_of(directory)) >= 2)
    time.sleep(1.0)  # (helpers that other shards would elect have had their lease by now)
    return helpers_of(directory)


def test_a_fanout_cache_runs_one_listener_and_one_refresher(tmp_path, options):
    directory = str(tmp_path / "fanout")
    other = str(tmp_path / "plain")
    cache = FanoutCache(directory, shards=SHARDS, **options)
    plain = Cache(other, **options)  # another directory: its own listener, independent
    try:
        for number in range(64):
            cache.set(number, number)  # (every shard has items, every shard elects)
        plain.set("k", "v")
        eventually(lambda: helpers.fanout_leases_valid(cache))
        eventually(plain._remote._words.lease_valid)
        running = settled_helpers(directory)
        assert len(running) == 2, running  # one listener, one refresher: not 2 per shard
        assert sum(running.values()) < RSS_LIMIT_KB, running
        assert 1 <= len(helpers_of(other)) <= 2
        assert not set(helpers_of(other)) & set(running)
    finally:
        cache.close()
        plain.close()


def test_two_processes_on_one_fanout_directory_share_its_helpers(tmp_path, options):
    directory = str(tmp_path / "fanout")
    ready = SPAWN.Event()
    other = SPAWN.Process(target=helpers.hold_fanout, args=(directory, options, SHARDS, ready))
    other.start()
    try:
        cache = FanoutCache(directory, shards=SHARDS, **options)
        second = FanoutCache(directory, shards=SHARDS, **options)  # another object, same process
        try:
            assert ready.wait(helpers.WAIT)
            eventually(lambda: helpers.fanout_leases_valid(cache))
            running = settled_helpers(directory)
            assert len(running) == 2, running
            assert sum(running.values()) < RSS_LIMIT_KB, running
        finally:
            second.close()
            cache.close()
    finally:
        other.kill()
        other.join(helpers.WAIT)


def test_every_shard_hears_another_hosts_writes(tmp_path, options):
    writer = FanoutCache(str(tmp_path / "hostA"), shards=SHARDS, **options)
    reader = FanoutCache(str(tmp_path / "hostB"), shards=SHARDS, **options)
    keys = [f"key{number}" for number in range(8 * SHARDS)]
    try:
        assert {writer._number(key) for key in keys} == set(range(SHARDS))  # every shard
        for key in keys:
            writer.set(key, "old")
        eventually(lambda: helpers.fanout_leases_valid(reader))
        for key in keys:
            helpers.wait_for_value(reader, key, "old")
            reader.get(key)  # (kept in the memory tier from the second read on)
        before = reader.memory_stats().hits
        assert all(reader.get(key) == "old" for key in keys)
        assert reader.memory_stats().hits > before  # copies are served: the lease holds

        def held(value):  # B's copies in each key's shard's database
            return all(
                reader.shard_for(key).read_sql("SELECT value FROM Cache WHERE key = ?", (key,))
                == [(value,)] for key in keys
            )

        eventually(lambda: held("old"))  # (written by B's background writer)
        for key in keys:
            writer.set(key, "new")

        def renewed():  # B's copies, renewed by the one refresher through each key's shard
            return held("new")

        eventually(renewed)
        for key in keys:  # each shard's copies were invalidated by the one listener
            helpers.wait_for_value(reader, key, "new")
        assert helpers.fanout_leases_valid(reader)
    finally:
        writer.close()
        reader.close()


def test_a_killed_listener_is_replaced_and_serves_every_shard(tmp_path, options):
    directory = str(tmp_path / "hostB")
    writer = FanoutCache(str(tmp_path / "hostA"), shards=SHARDS, **options)
    reader = FanoutCache(directory, shards=SHARDS, **options)
    keys = [f"key{number}" for number in range(4 * SHARDS)]
    try:
        for key in keys:
            writer.set(key, "old")
        eventually(lambda: helpers.fanout_leases_valid(reader))
        for key in keys:
            helpers.wait_for_value(reader, key, "old")
        running = settled_helpers(directory)
        (listener,) = [pid for pid in running if _parent(pid) == os.getpid()]
        os.kill(listener, signal.SIGKILL)
        eventually(lambda: listener not in helpers_of(directory))
        for key in keys:
            writer.set(key, "new")  # while the listener is dead or being replaced
        for key in keys:
            helpers.wait_for_value(reader, key, "new")
        eventually(lambda: helpers.fanout_leases_valid(reader))
        replaced = settled_helpers(directory)
        assert len(replaced) == 2 and listener not in replaced, replaced
        for key in keys:
            writer.set(key, "newer")
        for key in keys:
            helpers.wait_for_value(reader, key, "newer")
    finally:
        writer.close()
        reader.close()


def test_killing_the_listening_process_hands_every_shard_over(tmp_path, options):
    directory = str(tmp_path / "hostB")
    writer = FanoutCache(str(tmp_path / "hostA"), shards=SHARDS, **options)
    keys = [f"key{number}" for number in range(4 * SHARDS)]
    for key in keys:
        writer.set(key, "old")
    ready = SPAWN.Event()
    holder = SPAWN.Process(target=helpers.hold_fanout, args=(directory, options, SHARDS, ready))
    holder.start()
    try:
        assert ready.wait(helpers.WAIT)
        local = FanoutCache(directory, shards=SHARDS, **options)  # a second process of host B
        try:
            for key in keys:
                helpers.wait_for_value(local, key, "old")
            assert helpers.fanout_leases_valid(local)  # the holder's listener serves it
            os.kill(holder.pid, signal.SIGKILL)
            holder.join(helpers.WAIT)
            for key in keys:
                writer.set(key, "new")
            for key in keys:
                helpers.wait_for_value(local, key, "new")
            eventually(lambda: helpers.fanout_leases_valid(local))  # this process took over
            running = settled_helpers(directory)
            assert len(running) == 2 and all(_parent(pid) in (os.getpid(), *running)
                                              for pid in running), running
            for key in keys:
                writer.set(key, "newer")
            for key in keys:
                helpers.wait_for_value(local, key, "newer")
        finally:
            local.close()
    finally:
        if holder.is_alive():
            holder.kill()
        writer.close()


def _parent(pid: int) -> int:
    """The parent process of `pid` (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as file:
            return int(file.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0
