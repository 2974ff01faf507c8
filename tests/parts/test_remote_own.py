"""What a host's own writes leave behind: no copy that could be older than Redis's item (the
writer keeps none; the refresher renews the host's row after the write's echo, as after any
change: _remote/stamps.py explains why an echo cannot vouch for a copy); and one Redis client per
remote in a process, shared by its caches and a FanoutCache's shards (_remote/client.py)."""

from __future__ import annotations

import threading

import pytest

from diskcache_core import Cache, FanoutCache
from diskcache_core._remote import client as remote_client
from diskcache_core._remote.form import stamp_hash
from diskcache_core._remote.stamps import RemoteWords, StampSet

from remote_helpers import eventually, in_forked_child
from redis_servers import needs_redis

pytestmark = needs_redis


def sent(cache):
    return cache._remote._remote.sent.commands


def heard(cache):
    return cache._remote._words.heard_state().names


@pytest.fixture
def hosts(tmp_path, options):
    """Host A's cache, its listener holding the lease, and host B's (closed after the test)."""
    mine = Cache(str(tmp_path / "a"), **options)
    other = Cache(str(tmp_path / "b"), **options)
    try:
        eventually(lambda: mine._remote._leased())
        yield mine, other
    finally:
        mine.close()
        other.close()


def set_and_hear(cache, key, value):
    """``cache.set``, then wait until its listener has heard the write's echo."""
    before = heard(cache)
    assert cache.set(key, value)
    eventually(lambda: heard(cache) > before)


# --- the stamp words ----------------------------------------------------------------------------


def test_every_change_heard_draws_a_random_stamp_and_is_renewed(tmp_path):
    """The listener's echo of a write of this host is a change like any other: a fresh stamp,
    and the name goes to the refresher (StampSet.heard is true)."""
    members = [(str(tmp_path), "p:")]
    stamps = StampSet(members)
    words = RemoteWords(str(tmp_path), b"p:")
    try:
        index = words.index(stamp_hash(b"sk"))
        seen = {words.words[index]}
        for _ in range(3):
            words.bump(index)  # (a writer's bump after its write returned)
            written = words.words[index]
            assert stamps.heard(b"p:sk") is True
            assert words.words[index] not in seen | {written}
            seen |= {written, words.words[index]}
    finally:
        stamps.close()
        words.close()


# --- caches -------------------------------------------------------------------------------------


def test_the_refresher_renews_the_writers_row_after_its_echo(tmp_path, options):
    """The writer keeps no copy; a row this host held is renewed from Redis after the echo
    (and then the write's value is answered here, not by Redis)."""
    cache = Cache(str(tmp_path / "a"), **options)
    try:
        eventually(lambda: cache._remote._leased())
        other = Cache(str(tmp_path / "b"), **options)
        other.set("k", "first")
        other.close()
        assert cache.get("k") == "first"  # (from Redis: a row held from now on)
        cache._remote.flush_fills()
        set_and_hear(cache, "k", "mine")

        def answered_here():
            before = sent(cache)
            return cache.get("k") == "mine" and sent(cache) == before

        eventually(answered_here)
    finally:
        cache.close()


def test_another_clients_write_heard_before_the_writers_bump_leaves_no_stale_copy(hosts):
    """Host A's write returns; before A bumps its stamp, another client overwrites the item and
    A's listener hears both changes. A copy of A's write kept under A's bump would be older than
    Redis's item until the next change (it was: the writer kept one)."""
    mine, other = hosts
    store = mine._remote._remote
    plain_set = store.set

    def set_then_overwritten(*args, **kwargs):
        stored = plain_set(*args, **kwargs)
        before = heard(mine)
        other.set("k", "theirs")
        eventually(lambda: heard(mine) > before)  # (their change heard, before our bump)
        return stored

    store.set = set_then_overwritten
    assert mine.set("k", "mine")
    del store.set
    eventually(lambda: mine._remote._leased())
    assert mine.get("k") == "theirs"
    mine._remote.flush_fills()
    assert mine.get("k") == "theirs"


def test_a_deletion_with_another_clients_write_heard_before_its_bump_keeps_no_absent(hosts):
    """As above for a removal: an "absent" kept under the deleter's bump would hide the other
    client's later write."""
    mine, other = hosts
    store = mine._remote._remote
    plain_delete = store.delete

    def delete_then_overwritten(name):
        removed = plain_delete(name)
        before = heard(mine)
        other.set("k", "theirs")
        eventually(lambda: heard(mine) > before)
        return removed

    set_and_hear(mine, "k", "v")
    store.delete = delete_then_overwritten
    assert mine.delete("k")
    del store.delete
    eventually(lambda: mine._remote._leased())
    assert mine.get("k", "gone") == "theirs"


def test_an_echo_sent_with_another_clients_later_write_leaves_no_stale_copy(
    tmp_path, options, server, monkeypatch
):
    """Redis sends one broadcast invalidation per key for each turn of its event loop: host A's
    write and another client's later write of the key, read by Redis in one turn, are one
    message. Had A's listener taken it for A's echo (it did: an "expected stamp"), A would
    serve its own value for good while Redis holds the other one. The server is stopped while
    both requests are sent, so that it reads them in one turn, A's first."""
    import redis
    import redis.connection

    mine = Cache(str(tmp_path / "a"), **options)
    admin = redis.Redis.from_url(server.url)
    sent_by = {"writer": threading.Event(), "other": threading.Event()}
    plain_send = redis.connection.AbstractConnection.send_packed_command

    def send_and_tell(self, command, check_health=True):
        plain_send(self, command, check_health)
        event = sent_by.get(threading.current_thread().name)
        if event is not None:
            event.set()

    try:
        eventually(lambda: mine._remote._leased())
        set_and_hear(mine, "k", "theirs")
        (name,) = admin.keys(options["remote_prefix"].encode() + b"*")
        theirs = admin.get(name)  # (the stored form of "theirs")
        set_and_hear(mine, "k", "between")
        # The writer thread's connection is made before the pause: a connection Redis accepts
        # after it resumes has its command read after the other client's.
        warmed, go = threading.Event(), threading.Event()

        def write_mine() -> None:
            mine.set("warm", 1)
            warmed.set()
            if go.wait(30):
                mine.set("k", "mine")

        writer = threading.Thread(target=write_mine, name="writer")
        writer.start()
        assert warmed.wait(30)
        monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command",
                            send_and_tell)
        server.pause()
        try:
            go.set()
            assert sent_by["writer"].wait(30)
            overwrite = threading.Thread(target=admin.set, args=(name, theirs), name="other")
            overwrite.start()
            assert sent_by["other"].wait(30)
        finally:
            server.resume()
        writer.join(30)
        overwrite.join(30)
        monkeypatch.undo()
        assert admin.get(name) == theirs  # (Redis applied A's write first)
        eventually(lambda: mine._remote._leased())
        assert mine.get("k") == "theirs"
        mine._remote.flush_fills()
        assert mine.get("k") == "theirs"
    finally:
        admin.close()
        mine.close()


def test_a_large_value_written_leaves_nothing_on_the_writers_host(tmp_path, options):
    """The writer keeps no copy, so no value file either (and the refresher renews inline
    values only)."""
    cache = Cache(str(tmp_path / "a"), disk_min_file_size=1024, **options)
    try:
        eventually(lambda: cache._remote._leased())
        set_and_hear(cache, "large", b"l" * 4096)
        cache._remote.flush_fills()
        assert cache.read_sql("SELECT key, filename FROM Cache ORDER BY key") == []
        assert cache.get("large") == b"l" * 4096  # (from Redis)
    finally:
        cache.close()


def test_another_hosts_write_still_replaces_a_kept_copy(hosts):
    mine, other = hosts
    set_and_hear(mine, "k", "a")
    assert mine.get("k") == "a"
    other.set("k", "b")
    eventually(lambda: mine.get("k") == "b")
    mine._remote.flush_fills()
    assert mine.get("k") == "b"


def test_a_deletion_that_removed_nothing_keeps_no_copy(hosts):
    """A removal that changed nothing in Redis has no echo: an "absent" it kept would be
    servable until another host's write of the key is heard, and hide it (no later change)."""
    mine, other = hosts
    assert not mine.delete("k")
    before = heard(mine)
    other.set("k", "theirs")
    eventually(lambda: heard(mine) > before)
    assert mine.get("k") == "theirs"


def test_a_failed_add_keeps_no_copy(hosts):
    mine, other = hosts
    other.set("k", "first")
    assert not mine.add("k", "mine")
    assert mine.get("k") == "first"
    other.set("k", "second")
    eventually(lambda: mine.get("k") == "second")


# --- one client per remote ----------------------------------------------------------------------


def test_a_fanout_caches_shards_share_one_client_and_connection(tmp_path, options):
    cache = FanoutCache(str(tmp_path / "f"), shards=8, **options)
    try:
        clients = {id(shard._remote._remote.client) for shard in cache._shards}
        assert len(clients) == 1
        client = cache._shards[0]._remote._remote.client
        for number in range(32):  # (sequential: one connection serves them all)
            cache.get(f"k{number}")
        pool = client.connection_pool
        assert len(client.pinned.connections()) == 1
        assert len(pool._available_connections) + len(pool._in_use_connections) == 0
    finally:
        cache.close()


def test_caches_of_one_remote_share_a_client_until_the_last_closes(tmp_path, options):
    first = Cache(str(tmp_path / "a"), **options)
    second = Cache(str(tmp_path / "b"), **options)
    client = first._remote._remote.client
    try:
        assert second._remote._remote.client is client
        second.get("k")
        (connection,) = client.pinned.connections()
        first.close()  # another cache still uses the connection: it stays open
        assert connection._sock is not None
        assert second.get("k") is None
        assert client.pinned.connections() == [connection]
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

        def child_reads() -> bool:
            child = Cache(str(tmp_path / "b"), **options)
            fresh = child._remote._remote.client is not parent
            read = fresh and child.get("k") == "v" and cache.get("k") == "v"
            child.close()
            return read

        assert in_forked_child(child_reads)
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


def test_a_plain_set_of_an_untagged_item_costs_redis_one_lookup_and_the_set(
    tmp_path, options, server
):
    """A set without tags runs its own script (SET_PLAIN): the item's tag hash is looked at
    (EXISTS) and, there being none, nothing else is done but the SET (the general script
    read and deleted the tag hash, and looked for it again, on every write)."""
    import redis

    cache = Cache(str(tmp_path / "a"), **options)
    admin = redis.Redis.from_url(server.url)
    try:
        cache.set("k", "loaded")  # (the script loaded)
        admin.config_resetstat()
        for number in range(3):
            assert cache.set("k", number)
        calls = {name[len("cmdstat_"):]: entry["calls"]
                 for name, entry in admin.info("commandstats").items()}
        assert calls.get("evalsha") == 3 and calls.get("exists") == 3
        assert calls.get("set") == 3
        assert not any(calls.get(name) for name in ("hkeys", "del", "srem", "persist"))
        assert cache.get("k") == 2
    finally:
        admin.close()
        cache.close()
