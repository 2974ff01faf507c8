"""Fixtures for the store tests.

``cache_class`` parametrizes the shared conformance tests over every implementation of the
Cache API (``Cache`` and ``FanoutCache``). Tests that look inside
the directory (``cache.db``, value files) use ``make_store`` / ``store``, which are always a
single-shard ``Cache``.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest

# The shared helpers (servers, workers, the test projects) live in tests/helpers/ and are
# imported by module name (``import store_helpers``) from every test folder, and from the
# processes the tests spawn (multiprocessing passes sys.path on).
HELPERS = str(Path(__file__).resolve().parent / 'helpers')
if HELPERS not in sys.path:
    sys.path.insert(0, HELPERS)

import diskcache_core

# Names of the classes in diskcache_core that implement the Cache API and must pass the shared
# conformance tests.
IMPLEMENTATIONS = ('Cache', 'FanoutCache')


@pytest.fixture(params=IMPLEMENTATIONS)
def cache_class(request):
    """A class implementing the Cache API (parametrized over all implementations)."""
    return getattr(diskcache_core, request.param)


@pytest.fixture
def cache_dir(tmp_path) -> str:
    """Path of a fresh cache directory (not yet created)."""
    return str(tmp_path / 'cache')


def _factory(cls, default_directory):
    created = []

    def make(directory=None, **kwargs):
        if cls is diskcache_core.FanoutCache:
            # The shared suite checks results, not give-ups: a 10 ms shard timeout on a loaded
            # 2-core machine would make writes give up at random. test_fanout covers timeouts.
            kwargs.setdefault('timeout', 5.0)
        instance = cls(default_directory if directory is None else directory, **kwargs)
        created.append(instance)
        return instance

    return make, created


@pytest.fixture
def make_cache(cache_class, cache_dir):
    """Open caches of `cache_class` (on `cache_dir` by default); all closed at teardown."""
    make, created = _factory(cache_class, cache_dir)
    yield make
    for instance in created:
        instance.close()


@pytest.fixture
def cache(make_cache):
    """A fresh cache of each implementation, closed afterwards."""
    return make_cache()


@pytest.fixture
def make_store(cache_dir):
    """Open single-directory ``Cache`` objects (on `cache_dir` by default); closed at teardown."""
    make, created = _factory(diskcache_core.Cache, cache_dir)
    yield make
    for instance in created:
        instance.close()


@pytest.fixture
def store(make_store):
    """A fresh single-directory ``Cache``, closed afterwards."""
    return make_store()


@pytest.fixture
def sentinel(tmp_path):
    """A file outside the cache directory that no cache operation may read or remove."""
    outside = tmp_path / 'outside'
    outside.mkdir()
    path = outside / 'sentinel.val'
    path.write_bytes(b'must survive')
    yield str(path)



# --- Redis: the remote tests' server and options ----------------------------------------------


@pytest.fixture(scope="module")
def server():
    """A redis-server on 127.0.0.1 for the test module (stopped after it); mark the tests that
    use it ``needs_redis`` (tests/helpers/redis_servers.py)."""
    from redis_servers import RedisTestServer

    with RedisTestServer() as running:
        yield running


@pytest.fixture
def options(server):
    """The Cache options of a remote test: the module's server, and a key prefix of its own so
    that the tests sharing the server never see each other's keys."""
    return {"remote": server.url, "remote_prefix": f"test-{uuid.uuid4().hex[:12]}:"}
