"""diskcache-community's public extensions: get(store_time=True), iterkeys(tag=), read-only
caches (the read_only property, ReadOnlyError)."""

from __future__ import annotations

import sqlite3
import time

import pytest

import diskcache_core as dc


@pytest.fixture(params=["cache", "fanout"])
def cache(request, tmp_path):
    kind = dc.Cache if request.param == "cache" else dc.FanoutCache
    with kind(str(tmp_path / "cache")) as opened:
        yield opened


def test_get_store_time_adds_the_time_the_item_was_stored(cache):
    before = time.time()
    cache.set("k", "v", tag="t", expire=100)
    after = time.time()
    value, stored = cache.get("k", store_time=True)
    assert value == "v" and before <= stored <= after
    _, expires, tag, same = cache.get("k", expire_time=True, tag=True, store_time=True)
    assert (tag, same) == ("t", stored) and expires >= before + 100
    assert cache.get("k", tag=True, store_time=True) == ("v", "t", stored)
    assert cache.get("k", expire_time=True, store_time=True) == ("v", expires, stored)
    assert cache.get("missing", 7, store_time=True) == (7, None)
    assert cache.get("missing", expire_time=True, tag=True, store_time=True) == (None,) * 4


def test_get_store_time_from_the_memory_tier_and_with_read(tmp_path):
    with dc.Cache(str(tmp_path)) as cache:
        cache.set("k", b"bytes")
        for _ in range(3):  # the memory tier holds it after the first reads
            assert cache.get("k") == b"bytes"
        value, stored = cache.get("k", store_time=True)
        assert value == b"bytes" and isinstance(stored, float)
        handle, same = cache.get("k", read=True, store_time=True)
        assert handle.read() == b"bytes" and same == stored


def test_an_overwrite_refreshes_the_store_time_under_least_recently_stored(tmp_path):
    with dc.Cache(str(tmp_path), eviction_policy="least-recently-stored") as cache:
        cache.set("k", 1)
        _, first = cache.get("k", store_time=True)
        while time.time() <= first:  # a later clock reading (bounded by the clock's step)
            time.sleep(0.001)
        cache.set("k", 2)
        value, second = cache.get("k", store_time=True)  # written in a batch later
        assert value == 2 and second > first
    with dc.Cache(str(tmp_path)) as cache:
        assert cache.get("k", store_time=True) == (2, second)


def test_fanout_get_store_time_of_a_busy_shard_is_the_default(tmp_path, monkeypatch):
    with dc.FanoutCache(str(tmp_path), shards=2) as cache:

        def busy(*args):
            raise dc.Timeout

        for shard in cache._shards:
            monkeypatch.setattr(shard, "get", busy)
        assert cache.get("k", 1, tag=True, store_time=True) == (1, None, None)
        assert cache.stats(enable=False) == (0, 0)


@pytest.mark.parametrize("tag_index", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_iterkeys_of_a_tag_in_insertion_order(tmp_path, tag_index, reverse):
    with dc.Cache(str(tmp_path), tag_index=tag_index) as cache:
        tagged, untagged = [], []
        for number in range(250):  # more than one page of 100
            key = f"key-{(number * 37) % 250:03d}"  # not in key order
            tag = "even" if number % 2 == 0 else None
            cache.set(key, number, tag=tag)
            (tagged if tag else untagged).append(key)
        cache.set(b"other", 0, tag="odd")
        order = (lambda keys: keys[::-1]) if reverse else (lambda keys: keys)
        assert list(cache.iterkeys(reverse, tag="even")) == order(tagged)
        assert list(cache.iterkeys(reverse, tag=None)) == order(untagged)
        assert list(cache.iterkeys(reverse, tag="odd")) == [b"other"]
        assert list(cache.iterkeys(reverse, tag="none")) == []
        in_key_order = sorted(tagged + untagged) + [b"other"]  # (SQLite: text before blobs)
        assert list(cache.iterkeys(reverse)) == (in_key_order[::-1] if reverse else in_key_order)


def test_iterkeys_of_a_tag_uses_the_tag_index(tmp_path):
    with dc.Cache(str(tmp_path), tag_index=True) as cache:
        from diskcache_core import _schema

        plan = cache._sql("EXPLAIN QUERY PLAN " + _schema.TAGGED_KEYS[0], ("t", 0, 100))
        assert any("Cache_tag_rowid" in str(row) for row in plan)


def test_iterkeys_refuses_a_tag_no_write_takes(tmp_path):
    with dc.Cache(str(tmp_path)) as cache:
        with pytest.raises(TypeError):
            list(cache.iterkeys(tag=["list"]))


def test_a_write_to_a_read_only_cache_raises_read_only_error(tmp_path):
    directory = str(tmp_path)
    with dc.Cache(directory) as cache:
        cache["a"] = 1
        assert not cache.read_only
    with dc.Cache(directory, read_only=True) as cache:
        assert cache.read_only and cache["a"] == 1
        for write in (
            lambda: cache.set("b", 2), lambda: cache.delete("a"), cache.clear,
            lambda: cache.reset("size_limit", 5), lambda: cache._sql("DELETE FROM Cache"),
        ):  # fmt: skip
            with pytest.raises(dc.ReadOnlyError) as raised:
                write()
            assert isinstance(raised.value, sqlite3.OperationalError)
            assert isinstance(raised.value, dc.DatabaseError)
        assert cache["a"] == 1
    with dc.FanoutCache(str(tmp_path / "fanout"), shards=2) as fanout:
        fanout["a"] = 1
    with dc.FanoutCache(str(tmp_path / "fanout"), shards=2, read_only=True) as fanout:
        assert fanout.read_only and fanout["a"] == 1
        with pytest.raises(dc.ReadOnlyError):
            fanout["b"] = 2


def test_opening_a_missing_cache_read_only_raises_read_only_error(tmp_path):
    with pytest.raises(dc.ReadOnlyError):
        dc.Cache(str(tmp_path), read_only=True)
    assert list(tmp_path.iterdir()) == []


def test_a_read_only_cache_counts_no_statistics(tmp_path):
    directory = str(tmp_path)
    with dc.Cache(directory, statistics=1) as cache:
        cache["a"] = 1
        assert cache.get("a") == 1 and cache.get("missing") is None
    with dc.Cache(directory, read_only=True) as cache:
        assert cache["a"] == 1 and cache.get("missing") is None
        assert cache.stats(enable=False, reset=True) == (1, 1)  # nothing changed, nothing added
    with dc.Cache(directory) as cache:
        assert cache.stats() == (1, 1)
