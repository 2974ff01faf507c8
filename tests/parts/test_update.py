"""`Cache.update` and `FanoutCache.update`: the public atomic read-modify-write of one item, on
the local path (one write transaction). The remote path (a compare-and-set in Redis) is tested
in parts/test_remote.py."""

from __future__ import annotations

import threading
import time

import pytest

from diskcache_core import Cache, FanoutCache


@pytest.fixture(params=["cache", "fanout"])
def cache(request, tmp_path):
    if request.param == "cache":
        made = Cache(str(tmp_path))
    else:
        made = FanoutCache(str(tmp_path), shards=3)
    yield made
    made.close()


def test_update_stores_and_returns_the_new_value(cache):
    assert cache.update("n", lambda value: value + 1, default=0) == 1
    assert cache.update("n", lambda value: value * 10) == 10
    assert cache.get("n") == 10
    assert cache.update("list", lambda value: value + [1], default=[]) == [1]
    assert cache.get("list") == [1]


def test_update_passes_default_for_a_missing_or_expired_key(cache):
    seen = []
    cache.set("gone", "old", expire=0.001)
    time.sleep(0.01)
    assert cache.update("gone", lambda value: seen.append(value) or "fresh", default="d") == "fresh"
    assert cache.update("absent", lambda value: seen.append(value) or 1) == 1
    assert seen == ["d", None]


def test_update_keeps_the_items_expiry_and_tag_unless_given(cache):
    cache.set("k", 1, expire=100, tag="t")
    _, first_expiry, _ = cache.get("k", expire_time=True, tag=True)
    cache.update("k", lambda value: value + 1)
    value, expiry, tag = cache.get("k", expire_time=True, tag=True)
    assert (value, tag) == (2, "t")
    assert expiry == pytest.approx(first_expiry, abs=1.0)
    cache.update("k", lambda value: value + 1, expire=None, tag="u")
    assert cache.get("k", expire_time=True, tag=True) == (3, None, "u")
    before = time.time()
    cache.update("k", lambda value: value, expire=50)
    _, expiry, _ = cache.get("k", expire_time=True, tag=True)
    assert before + 49 < expiry < time.time() + 51


def test_keep_leaves_the_item_and_delete_removes_it(cache):
    cache.set("k", "v", expire=100, tag="t")
    before = cache.get("k", expire_time=True, tag=True)
    assert cache.update("k", lambda value: cache.KEEP, expire=1, tag="x") == "v"
    assert cache.get("k", expire_time=True, tag=True) == before  # not written at all
    assert cache.update("missing", lambda value: cache.KEEP, default="d") == "d"
    assert "missing" not in cache
    assert cache.update("k", lambda value: cache.DELETE, default="gone") == "gone"
    assert "k" not in cache
    assert Cache.KEEP is FanoutCache.KEEP and Cache.DELETE is FanoutCache.DELETE


def test_an_exception_in_the_function_changes_nothing(cache):
    cache.set("k", 1)

    def fail(value):
        raise ValueError(value)

    with pytest.raises(ValueError):
        cache.update("k", fail)
    assert cache.get("k") == 1
    assert cache.update("k", lambda value: value + 1) == 2  # (no transaction left open)


def test_updates_from_many_threads_lose_nothing(cache):
    def work():
        for _ in range(50):
            cache.update("total", lambda value: value + 1, default=0, retry=True)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert cache.get("total") == 200
