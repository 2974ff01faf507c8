"""Many tags per item on a cache with a remote (docs/tags.rst, docs/remote.rst "Tags"): the tags
live in Redis with the item, written and removed by the same script; ``evict_tags`` on one host
removes the items for every host. Simulated hosts: directories sharing one real redis-server (and
a real Redis Cluster for the per-slot homes)."""

from __future__ import annotations

import time
import uuid

import pytest

from diskcache_core import Cache, FanoutCache, RemoteUnsupportedError
from diskcache_core._disk.disk import ENOVAL

import remote_helpers as helpers
from remote_helpers import eventually
from redis_servers import RedisTestCluster, needs_redis

pytestmark = needs_redis


@pytest.fixture
def prefix():
    return f"tags-{uuid.uuid4().hex[:12]}:"


@pytest.fixture
def hosts(tmp_path, server, prefix):
    """hosts(n, url=...) -> n caches on n directories (simulated hosts) of one Redis."""
    opened = []

    def make(count=2, url=None, **options):
        caches = [
            Cache(str(tmp_path / f"host{len(opened) + number}"), remote=url or server.url,
                  remote_prefix=prefix, **options)
            for number in range(count)
        ]
        opened.extend(caches)
        return caches

    yield make
    for cache in opened:
        cache.close()



def bookkeeping(client, prefix):
    """The tag hashes and tag sets of `prefix` in Redis, by name (the registries apart)."""
    return sorted(
        name for name in client.scan_iter(match=b"{*}" + prefix.encode() + b"[gt]*", count=1000)
    )


def members(client, prefix, tag):
    """The members of the one-server tag set of the str `tag`."""
    return client.smembers(b"{}" + prefix.encode() + b"ts" + tag.encode())


def test_evict_tags_on_one_host_removes_what_the_other_serves(hosts):
    a, b = hosts()
    for number in range(10):
        a.set(number, number, tag="page", tags=[f"user{number % 3}", "all"])
    a.set("kept", 1, tags=["other"])
    # B holds copies (database rows and its memory tier) served without asking Redis.
    assert [b.get(number) for number in range(10)] == list(range(10))
    assert [b.get(number) for number in range(10)] == list(range(10))
    assert a.evict_tags(["user0", "user1"]) == 7  # 0, 3, 6, 9 and 1, 4, 7
    eventually(lambda: [b.get(number, ENOVAL) for number in range(10)] == [
        ENOVAL if number % 3 != 2 else number for number in range(10)
    ])
    assert b.evict_tags(["all"]) == 3  # 2, 5, 8: by any of their tags, from the other host
    eventually(lambda: all(a.get(number, ENOVAL) is ENOVAL for number in range(10)))
    assert a.get("kept") == 1 and b.get("kept", tags=True) == (1, frozenset({"other"}))


def test_get_tags_returns_every_tag_as_given_from_either_host(hosts):
    a, b = hosts()
    assert a.set("k", "v", expire=600, tag=1, tags=[2.5, "x", b"y"]) is True
    value, expires, first, tags = b.get("k", expire_time=True, tag=True, tags=True)
    assert (value, first, tags) == ("v", 1, frozenset({1, 2.5, "x", b"y"}))
    assert expires is not None and expires > time.time()
    assert b.get("missing", "d", tag=True, tags=True) == ("d", None, frozenset())
    assert a.get("k", tags=True, read=False) == ("v", frozenset({1, 2.5, "x", b"y"}))
    # Tags SQLite finds equal are one tag: evicting 1.0 removes the item tagged 1.
    assert b.evict_tags([1.0]) == 1 and a.get("k", ENOVAL) is ENOVAL


def test_a_set_or_add_replaces_the_items_tags_and_leaves_no_old_membership(hosts, server, prefix):
    (a,) = hosts(1)
    client = server.client()
    a.set("k", 1, tags=["old", "both"])
    assert members(client, prefix, "old") == {b"sk"}
    a.set("k", 2, tags=["new", "both"])
    assert a.get("k", tags=True) == (2, frozenset({"new", "both"}))
    assert members(client, prefix, "old") == set()  # removed by the same script
    assert members(client, prefix, "new") == {b"sk"} == members(client, prefix, "both")
    assert a.evict_tags(["old"]) == 0 and a.get("k") == 2
    a.set("k", 3)  # no tags: none left
    assert a.get("k", tags=True) == (3, frozenset())
    assert bookkeeping(client, prefix) == []
    assert a.add("k", 4, tags=["lost"]) is False  # present: neither the value nor the tags
    assert a.get("k", tags=True) == (3, frozenset())
    a.delete("k")
    assert a.add("k", 5, tags=["added"]) is True
    assert a.get("k", tags=True) == (5, frozenset({"added"}))


@pytest.mark.parametrize("removal", ["delete", "pop", "clear", "evict"])
def test_removals_leave_no_tag_bookkeeping_in_redis(hosts, server, prefix, removal):
    (a,) = hosts(1)
    client = server.client()
    a.set("k", 1, tag="first", tags=["x", "y"])
    a.set("other", 2, tags=["z"])
    assert len(bookkeeping(client, prefix)) == 2 + 4  # two tag hashes, sets first x y z
    if removal == "delete":
        assert a.delete("k") is True and a.delete("other") is True
    elif removal == "pop":
        assert a.pop("k") == 1 and a.pop("other") == 2
    elif removal == "clear":
        assert a.clear() == 2
    else:
        assert a.evict("y") == 1 and a.evict("z") == 1
    assert bookkeeping(client, prefix) == []
    assert a.evict_tags(["first", "x", "y", "z"]) == 0


def test_a_member_left_by_expiry_is_dropped_by_eviction_and_never_evicts_a_new_item(
    hosts, server, prefix
):
    (a,) = hosts(1)
    client = server.client()
    a.set("k", 1, expire=0.05, tags=["old"])
    a.set("gone", 1, expire=0.05, tags=["old"])
    limit = time.monotonic() + helpers.WAIT
    while client.exists(prefix.encode() + b"sk", prefix.encode() + b"sgone"):  # Redis's expiry
        assert time.monotonic() < limit, "Redis never expired the items"
        time.sleep(0.01)
    assert members(client, prefix, "old") == {b"sk", b"sgone"}  # left by the expiry
    a.set("k", 2, tags=["new"])  # the same name, not carrying "old"
    assert a.evict_tags(["old"]) == 0  # the members are checked against the items' tags
    assert a.get("k", tags=True) == (2, frozenset({"new"}))
    assert members(client, prefix, "old") == set()  # dropped with the set


def test_touch_update_and_incr_keep_the_tags_and_a_new_tag_replaces_them(hosts, server, prefix):
    (a,) = hosts(1)
    client = server.client()
    a.set("n", 1, tags=["t1", "t2"])
    assert a.incr("n") == 2 and a.get("n", tags=True) == (2, frozenset({"t1", "t2"}))
    assert a.touch("n", 600) is True
    ttls = {client.pttl(name) for name in bookkeeping(client, prefix) if b"sn" in name[-3:]}
    assert ttls and all(ttl > 0 for ttl in ttls)  # the tag hash expires with the item
    assert a.update("n", lambda value: value * 10) == 20
    assert a.get("n", tags=True) == (20, frozenset({"t1", "t2"}))
    assert a.update("n", lambda value: value + 1, tag="only") == 21  # a new tag: the only one
    assert a.get("n", tags=True) == (21, frozenset({"only"}))
    assert members(client, prefix, "t1") == set()
    assert a.evict_tags(["only"]) == 1


def test_iterkeys_by_tag_is_refused_on_a_remote_and_bad_tags_store_nothing(hosts):
    (a,) = hosts(1)
    with pytest.raises(RemoteUnsupportedError):
        list(a.iterkeys(tag="x"))
    with pytest.raises(TypeError):
        a.set("k", 1, tags=["ok", None])
    with pytest.raises(ValueError):
        a.set("k", 1, tags=[float("nan")])
    with pytest.raises(TypeError):
        a.evict_tags("text")
    assert a.get("k", ENOVAL) is ENOVAL


def test_fanout_cache_evict_tags_removes_from_every_shard_for_every_host(tmp_path, server, prefix):
    options = {"remote": server.url, "remote_prefix": prefix, "shards": 4}
    a = FanoutCache(str(tmp_path / "a"), **options)
    b = FanoutCache(str(tmp_path / "b"), **options)
    try:
        for number in range(40):
            a.set(number, number, tags=["even" if number % 2 == 0 else "odd"])
        assert len({a.shard_for(number).directory for number in range(40)}) == 4
        assert [b.get(number) for number in range(40)] == list(range(40))
        assert b.evict_tags(["even"]) == 20
        eventually(lambda: [a.get(number, ENOVAL) for number in range(40)] == [
            ENOVAL if number % 2 == 0 else number for number in range(40)
        ])
        assert a.get(1, tags=True) == (1, frozenset({"odd"}))
    finally:
        a.close()
        b.close()


def test_tags_on_a_redis_cluster_in_many_slots(hosts, prefix):
    import redis.cluster

    with RedisTestCluster() as cluster:
        a, b = hosts(2, url=cluster.url)
        for number in range(60):
            a.set(f"key{number}", number, tag="page", tags=[f"group{number % 2}"])
        slots = {redis.cluster.key_slot(f"{prefix}skey{number}".encode()) for number in range(60)}
        owners = {cluster.owner(slot) for slot in slots}
        assert len(owners) == 3  # the items live on every primary
        assert b.get("key1", tags=True) == (1, frozenset({"page", "group1"}))
        assert [b.get(f"key{number}") for number in range(60)] == list(range(60))
        assert b.evict_tags(["group0"]) == 30  # a script per slot, every primary
        eventually(lambda: [a.get(f"key{number}", ENOVAL) for number in range(0, 60, 2)] == [
            ENOVAL
        ] * 30)
        assert a.evict("page") == 30
        eventually(lambda: all(b.get(f"key{n}", ENOVAL) is ENOVAL for n in range(60)))
        a.set("again", 1, tags=["group0"])  # written after the eviction: stays findable
        a.set("kept", 1, tags=["x"])
        a.delete("kept")
        assert b.evict_tags(["group0", "x"]) == 1
        left = []
        for port in cluster.ports:
            node = cluster.node(port)
            left += list(node.scan_iter(match=b"{*}" + prefix.encode() + b"[gt]*", count=1000))
        assert left == []  # no tag hash, no tag set is left on any node
