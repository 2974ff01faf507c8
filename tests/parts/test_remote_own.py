"""A host keeps what it wrote itself (its copy survives its own invalidation echo: the expected
stamps of _remote/stamps.py) without giving up coherence; and one Redis client per remote in a
process, shared by its caches and a FanoutCache's shards (_remote/client.py)."""

from __future__ import annotations

import os

from diskcache_core import Cache, FanoutCache
from diskcache_core._remote import client as remote_client
from diskcache_core._remote.form import stamp_hash
from diskcache_core._remote.stamps import RemoteWords

from remote_helpers import eventually
from redis_servers import needs_redis

pytestmark = needs_redis


def sent(cache):
    return cache._remote._remote.sent.commands


def heard(cache):
    return cache._remote._words.heard_state().names


def set_and_hear(cache, key, value):
    """``cache.set``, then wait until its listener has heard the write's echo."""
    before = heard(cache)
    assert cache.set(key, value)
    eventually(lambda: heard(cache) > before)


# --- the stamp words ----------------------------------------------------------------------------


def test_a_change_heard_installs_the_expected_stamp_once(tmp_path):
    words = RemoteWords(str(tmp_path), b"p:")
    try:
        index = words.index(stamp_hash(b"sk"))
        mine = words.expect(index)
        assert words.expected(index) == mine
        assert words.heard(index) is False  # installed: nothing to renew
        assert words.words[index] == mine and words.expected(index) == 0
        assert words.heard(index) is True  # the next change: a random stamp
        assert words.words[index] != mine
    finally:
        words.close()


def test_another_writers_bump_clears_an_expected_stamp(tmp_path):
    """A write that returned after another writer's expectation was left: that copy may be
    older than this write, so no change heard later installs it."""
    words = RemoteWords(str(tmp_path), b"p:")
    try:
        index = words.index(stamp_hash(b"sk"))
        first = words.expect(index)
        words.bump(index)  # another writer's write returned
        assert words.expected(index) == 0
        words.heard(index)
        assert words.words[index] != first
        second = words.expect(index)
        words.bump(index, second)  # its own writer's bump keeps it
        assert words.expected(index) == second
    finally:
        words.close()


def test_renewing_every_stamp_clears_the_expected_ones(tmp_path):
    """A listener (re)starting may have missed an echo: no expectation outlives it."""
    words = RemoteWords(str(tmp_path), b"p:")
    try:
        index = words.index(stamp_hash(b"sk"))
        mine = words.expect(index)
        words.renew_all()
        assert words.expected(index) == 0
        words.heard(index)
        assert words.words[index] != mine
    finally:
        words.close()


# --- caches -------------------------------------------------------------------------------------


def test_a_host_keeps_what_it_wrote_past_its_own_echo(tmp_path, options):
    cache = Cache(str(tmp_path / "a"), **options)
    try:
        eventually(lambda: cache._remote._leased())
        set_and_hear(cache, "k", "mine")
        before = sent(cache)
        assert cache.get("k") == "mine"
        assert sent(cache) == before  # answered here, not by Redis
    finally:
        cache.close()


def test_another_process_of_the_host_reads_the_writers_copy(tmp_path, options):
    directory = str(tmp_path / "a")
    writer = Cache(directory, **options)
    reader = Cache(directory, **options)  # (its own memory tier: as another process)
    try:
        eventually(lambda: writer._remote._leased())
        set_and_hear(writer, "k", "mine")
        writer._remote.flush_fills()
        before = sent(reader)
        assert reader.get("k") == "mine"
        assert sent(reader) == before
    finally:
        writer.close()
        reader.close()


def test_a_deletion_keeps_absent_past_its_echo(tmp_path, options):
    cache = Cache(str(tmp_path / "a"), **options)
    try:
        eventually(lambda: cache._remote._leased())
        set_and_hear(cache, "k", "v")
        before = heard(cache)
        assert cache.delete("k")
        eventually(lambda: heard(cache) > before)
        before = sent(cache)
        assert cache.get("k", "gone") == "gone"
        assert sent(cache) == before
    finally:
        cache.close()


def test_a_large_value_written_leaves_no_value_file_on_the_writers_host(tmp_path, options):
    """As the refresher, the writer keeps inline values only: a value file per write would be
    written whether or not the host reads it again."""
    cache = Cache(str(tmp_path / "a"), disk_min_file_size=1024, **options)
    try:
        eventually(lambda: cache._remote._leased())
        set_and_hear(cache, "small", b"s" * 100)
        set_and_hear(cache, "large", b"l" * 4096)
        cache._remote.flush_fills()
        assert cache.read_sql("SELECT key, filename FROM Cache ORDER BY key") == [
            ("small", None)
        ]
        assert cache.get("large") == b"l" * 4096  # (from Redis)
    finally:
        cache.close()


def test_another_hosts_write_still_replaces_a_kept_copy(tmp_path, options):
    mine = Cache(str(tmp_path / "a"), **options)
    other = Cache(str(tmp_path / "b"), **options)
    try:
        eventually(lambda: mine._remote._leased())
        set_and_hear(mine, "k", "a")
        assert mine.get("k") == "a"
        other.set("k", "b")
        eventually(lambda: mine.get("k") == "b")
        mine._remote.flush_fills()
        assert mine.get("k") == "b"
    finally:
        mine.close()
        other.close()


def test_a_deletion_that_removed_nothing_keeps_no_copy(tmp_path, options):
    """A removal that changed nothing in Redis has no echo: its expected stamp would be
    installed by the next change heard, another host's write of the key, and an "absent"
    kept under it would hide that write."""
    mine = Cache(str(tmp_path / "a"), **options)
    other = Cache(str(tmp_path / "b"), **options)
    try:
        eventually(lambda: mine._remote._leased())
        assert not mine.delete("k")
        before = heard(mine)
        other.set("k", "theirs")
        eventually(lambda: heard(mine) > before)  # (it installed the expected stamp)
        assert mine.get("k") == "theirs"
    finally:
        mine.close()
        other.close()


def test_a_failed_add_keeps_no_copy(tmp_path, options):
    mine = Cache(str(tmp_path / "a"), **options)
    other = Cache(str(tmp_path / "b"), **options)
    try:
        eventually(lambda: mine._remote._leased())
        other.set("k", "first")
        assert not mine.add("k", "mine")
        assert mine.get("k") == "first"
        other.set("k", "second")
        eventually(lambda: mine.get("k") == "second")
    finally:
        mine.close()
        other.close()


# --- one client per remote ----------------------------------------------------------------------


def test_a_fanout_caches_shards_share_one_client_and_connection(tmp_path, options):
    cache = FanoutCache(str(tmp_path / "f"), shards=8, **options)
    try:
        clients = {id(shard._remote._remote.client) for shard in cache._shards}
        assert len(clients) == 1
        pool = cache._shards[0]._remote._remote.client.connection_pool
        for number in range(32):  # (sequential: one connection serves them all)
            cache.get(f"k{number}")
        assert len(pool._available_connections) + len(pool._in_use_connections) == 1
    finally:
        cache.close()


def test_caches_of_one_remote_share_a_client_until_the_last_closes(tmp_path, options):
    first = Cache(str(tmp_path / "a"), **options)
    second = Cache(str(tmp_path / "b"), **options)
    client = first._remote._remote.client
    pool = client.connection_pool
    try:
        assert second._remote._remote.client is client
        second.get("k")
        (connection,) = pool._available_connections
        first.close()  # another cache still uses the connection: it stays open
        assert connection._sock is not None
        assert second.get("k") is None
        assert pool._available_connections == [connection]
    finally:
        first.close()
        second.close()
    assert connection._sock is None  # the last one closed it
    third = Cache(str(tmp_path / "c"), **options)
    try:
        assert third._remote._remote.client is not client  # a new one
    finally:
        third.close()


def test_a_forked_child_gets_its_own_client(tmp_path, options):
    cache = Cache(str(tmp_path / "a"), **options)
    try:
        cache.set("k", "v")
        parent = cache._remote._remote.client
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 1
            try:
                child = Cache(str(tmp_path / "b"), **options)
                fresh = child._remote._remote.client is not parent
                code = 0 if fresh and child.get("k") == "v" and cache.get("k") == "v" else 2
                child.close()
            finally:
                os.write(write, bytes([code]))
                os._exit(0)
        os.close(write)
        assert os.read(read, 1) == b"\x00"
        os.close(read)
        os.waitpid(pid, 0)
        assert cache.get("k") == "v"  # the parent's connection is untouched
        assert remote_client._clients  # (and its client still registered)
    finally:
        cache.close()


def test_writes_load_their_script_again_when_the_server_lost_it(tmp_path, options, server):
    """EVALSHA is sent as it is (`RemoteStore._run`): a server without the script (restarted,
    flushed, a promoted replica) has it loaded, and the write sent again."""
    import redis

    cache = Cache(str(tmp_path / "a"), **options)
    admin = redis.Redis.from_url(server.url)
    try:
        assert cache.set("k", "one")
        admin.script_flush()
        assert cache.set("k", "two", tag="t")
        admin.script_flush()
        assert cache.get("k", tags=True) == ("two", frozenset({"t"}))
        admin.script_flush()
        assert cache.evict_tags(["t"]) == 1
        admin.script_flush()
        assert cache.set("k", "three") and cache.touch("k", 60)
        admin.script_flush()
        assert cache.pop("k") == "three" and not cache.delete("k")
    finally:
        admin.close()
        cache.close()
