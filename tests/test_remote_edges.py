"""Two edges of a cache with a remote, against a real redis-server: tags compare as SQLite
compares them in every tier (docs/expiry-and-tags.rst), and a call in flight when the
application closes the cache is no outage (docs/remote.rst)."""

from __future__ import annotations

import os
import threading
import time
import uuid

import pytest

from diskcache_core import Cache

from redis_servers import RedisTestServer, redis_missing

pytestmark = pytest.mark.skipif(
    redis_missing() is not None and os.environ.get("CI") != "true", reason=str(redis_missing())
)

WAIT = 60.0  # seconds any condition below is waited for, at most


@pytest.fixture(scope="module")
def server():
    with RedisTestServer() as running:
        yield running


@pytest.fixture(params=["local", "remote"])
def cache(request, tmp_path):
    options = {}
    if request.param == "remote":
        server = request.getfixturevalue("server")
        options = {"remote": server.url, "remote_prefix": f"edge-{uuid.uuid4().hex}:"}
    opened = Cache(str(tmp_path / "c"), **options)
    yield opened
    opened.close()


# Tags, each with the keys stored under it: SQLite's comparison makes 1, 1.0 and True one tag
# (an INTEGER and a REAL compare by value, True is stored as 1), 0, 0.0 and -0.0 another; text,
# bytes and numbers of other values stay apart.
TAGGED = [
    ("int", 1), ("float", 1.0), ("bool", True), ("text", "1"), ("bytes", b"1"), ("two", 2),
    ("half", 1.5), ("zero", 0), ("zero-float", 0.0), ("minus-zero", -0.0),
    ("2**53+1", 2**53 + 1), ("2.0**53", 2.0**53), ("int64-max", 2**63 - 1), ("2.0**63", 2.0**63),
]


def _store_all(cache):
    for key, tag in TAGGED:
        assert cache.set(key, key, tag=tag) is True


@pytest.mark.parametrize(
    "tag, evicted",
    [
        (1, {"int", "float", "bool"}),
        (1.0, {"int", "float", "bool"}),
        (True, {"int", "float", "bool"}),
        ("1", {"text"}),
        (b"1", {"bytes"}),
        (0, {"zero", "zero-float", "minus-zero"}),
        (-0.0, {"zero", "zero-float", "minus-zero"}),
        (2**53, {"2.0**53"}),
        (2**53 + 1, {"2**53+1"}),
        (2.0**63, {"2.0**63"}),
        (2**63 - 1, {"int64-max"}),
        (1.5, {"half"}),
    ],
)
def test_evict_finds_the_tags_sqlite_finds_equal(cache, tag, evicted):
    _store_all(cache)
    assert cache.evict(tag) == len(evicted)
    left = {key for key, _ in TAGGED if cache.get(key) is not None}
    assert left == {key for key, _ in TAGGED} - evicted


def test_a_tag_reads_back_as_stored(cache):
    _store_all(cache)
    for key, tag in TAGGED:
        value, stored = cache.get(key, tag=True)
        expected = 1 if tag is True else tag  # True is stored as the integer 1
        assert value == key
        assert type(stored) is type(expected) and stored == expected, (key, stored)
        if type(tag) is float:
            assert repr(stored) == repr(tag)  # -0.0 stays -0.0, 1.0 stays 1.0
