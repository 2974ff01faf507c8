"""cachelib's and Flask-Caching's own backend tests, run against diskcache_core's Flask backend.

Both source distributions on PyPI ship their tests. This test downloads the sdists of the
installed cachelib and Flask-Caching versions once (see ``upstream_suites.py``) and runs, each
in a subprocess, with ``diskcache_core.contrib.flask.DiskCache`` on a fresh directory per test:

- cachelib: the shared backend mixins it runs on its local backends (``CommonTests``,
  ``ClearTests``, ``HasTests``, ``SerializerTests``), and the tests of its SimpleCache that use
  only the public API (BORROWED). ``DeleteManyWithPrefixTests`` is left out: it is for backends
  taking a ``key_prefix`` (Redis, Valkey).
- Flask-Caching: its ``GenericCacheTests`` (test_backend_cache.py), and every other test file
  with its ``app`` fixture configured for DiskCache: the decorators, memoize's version keys,
  views, templates, signals. Its Redis and Memcached tests are skipped. Its fake ``clock``
  replaces ``time.time``, the clock diskcache_core reads, so expiry tests take no real time.

Every test must pass except those in EXPECTED_FAILURES, each with its reason; a listed test
that passes fails this test too, and so does one that does not run, with the versions in
CHECKED_WITH.
"""

from __future__ import annotations

import importlib.util
import shutil
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest
from upstream_suites import check_failures, installed_version, outcome, run_pytest, sdist_tests

pytestmark = pytest.mark.slow

CHECKED_WITH = {"cachelib": "0.17.0", "Flask-Caching": "2.5.1"}
# Tests that used DiskCache and passed: 24 of 24 (cachelib 0.17.0), 159 of 160 (Flask-Caching
# 2.5.1).
MINIMUM_PASSED = {"cachelib": 16, "Flask-Caching": 100}
BORROWED = (  # cachelib's TestSimpleCache tests that use only the public API
    "test_add_on_expired_key_succeeds",
    "test_has_on_expired_key_returns_false",
    "test_delete_nonexistent_returns_false",
    "test_concurrent_add_only_one_winner",
)

EXPECTED_FAILURES = {
    "Flask-Caching/test_serializer.py::test_values_are_stored_in_the_configured_format": (
        "it reads SimpleCache's private dict (cache.cache._cache[key][1]); the bytes are stored"
        " as it expects (tests/parts/test_flask.py)"
    ),
}

# Stands in for pytest-xprocess, which the upstream conftests import for their server fixtures.
_XPROCESS = '''\
class ProcessStarter:
    """Unused: the Redis and Memcached fixtures are not run."""
'''

_CACHELIB_TESTS = f'''\
"""cachelib's shared backend tests on diskcache_core.contrib.flask.DiskCache."""

import pytest
from clear import ClearTests
from common import CommonTests
from has import HasTests
from serializer import SerializerTests
from test_simple_cache import TestSimpleCache as _SimpleCacheTests

from diskcache_core.contrib.flask import DiskCache


@pytest.fixture(autouse=True)
def cache_factory(request, tmp_path):
    made = []

    def factory(self, *args, **kwargs):
        made.append(DiskCache(str(tmp_path / "cache"), *args, **kwargs))
        return made[-1]

    request.cls.cache_factory = factory
    yield
    for cache in made:
        cache.close()


class TestDiskCache(CommonTests, ClearTests, HasTests, SerializerTests):
    pass


for _name in {BORROWED!r}:
    if hasattr(_SimpleCacheTests, _name):
        setattr(TestDiskCache, _name, getattr(_SimpleCacheTests, _name))
'''

_FLASK_CONFTEST = '''\
"""Flask-Caching's fixtures (the conftest above), with DiskCache as the app's backend."""

import importlib.util
import time

import pytest

from diskcache_core.contrib.flask import DiskCache

# The Memcached clients Flask-Caching's MemcachedCache can use; pylibmc has no wheel past
# Python 3.11 (pyproject.toml), and without one its test of that backend cannot run.
_MEMCACHE_CLIENTS = ("pylibmc", "memcache", "libmc")


def pytest_collection_modifyitems(items):
    if any(importlib.util.find_spec(name) for name in _MEMCACHE_CLIENTS):
        return
    for item in items:
        if "MemcachedCache" in item.name:
            item.add_marker(pytest.mark.skip(reason="no Memcached client installed"))


@pytest.fixture
def app(app, tmp_path):
    app.config.update(
        CACHE_TYPE="diskcache_core.contrib.flask.DiskCache",
        CACHE_DIR=str(tmp_path / "flask-cache"),
    )
    return app


@pytest.fixture
def clock(clock, monkeypatch):
    monkeypatch.setattr(time, "time", clock)  # what diskcache_core reads
    return clock


@pytest.fixture(scope="class")
def redis_server():
    pytest.skip("a Redis backend test")


@pytest.fixture(scope="class")
def memcache_server():
    pytest.skip("a Memcached backend test")


@pytest.fixture(autouse=True)
def _count_backends(request, monkeypatch):
    """Records how many DiskCaches the test made (the report counts the tests using ours)."""
    made = []
    init = DiskCache.__init__

    def counting(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(DiskCache, "__init__", counting)
    yield
    request.node.user_properties.append(("diskcache_core", len(made)))
    for cache in made:
        cache.close()
'''

_FLASK_TESTS = '''\
"""Flask-Caching's generic backend tests on diskcache_core.contrib.flask.DiskCache."""

import pytest
from test_backend_cache import GenericCacheTests

from diskcache_core.contrib.flask import DiskCache


class TestDiskCache(GenericCacheTests):
    @pytest.fixture
    def make_cache(self, tmp_path):
        return lambda **kwargs: DiskCache(str(tmp_path / "cache"), **kwargs)
'''
OURS = "test_diskcache_core.py"


def _outcomes(report: Path, project: str) -> tuple[dict[str, str], set[str]]:
    """``project/file.py::[Class::]test`` -> passed, failed or skipped, from a JUnit XML report;
    and the tests that made a DiskCache (all of ours, in the cachelib run)."""
    outcomes, ours = {}, set()
    for case in ElementTree.parse(report).iter("testcase"):
        parts = case.get("classname", "").split(".")
        first = next((i for i, part in enumerate(parts) if part.startswith("test_")), 0)
        name = "::".join([f"{project}/{parts[first]}.py", *parts[first + 1 :], case.get("name")])
        outcomes[name] = outcome(case)
        made = {p.get("name"): p.get("value") for p in case.iter("property")}
        if parts[first] == OURS[:-3] or int(made.get("diskcache_core", 0)):
            ours.add(name)
    return outcomes, ours


def _run(project: str, run: Path, files: list[str], tmp_path: Path) -> dict[str, str]:
    """Runs `files` in `run`; checks the outcomes against EXPECTED_FAILURES, and returns them."""
    if importlib.util.find_spec("xprocess") is None:
        (run / "xprocess.py").write_text(_XPROCESS)
    report, output = run_pytest(run, files, tmp_path)
    outcomes, ours = _outcomes(report, project)
    listed = {name: why for name, why in EXPECTED_FAILURES.items() if name.startswith(project)}
    # With other versions than those checked, a listed test may be renamed or gone.
    check_failures(outcomes, listed, output, installed_version(project) == CHECKED_WITH[project])
    passed = sum(outcomes[name] == "passed" for name in ours)
    assert passed >= MINIMUM_PASSED[project], output[-5000:]
    return outcomes


def test_cachelib_backend_tests_pass_on_our_backend(tmp_path):
    version = installed_version("cachelib")
    run = tmp_path / "cachelib"
    shutil.copytree(sdist_tests("cachelib", version, "conftest.py"), run)
    (run / OURS).write_text(_CACHELIB_TESTS)
    outcomes = _run("cachelib", run, [OURS], tmp_path)
    if version == CHECKED_WITH["cachelib"]:
        borrowed = {f"cachelib/{OURS}::TestDiskCache::{name}" for name in BORROWED}
        assert borrowed <= outcomes.keys(), f"did not run: {sorted(borrowed - outcomes.keys())}"


def test_flask_caching_tests_pass_on_our_backend(tmp_path):
    run = tmp_path / "flask_caching"
    version = installed_version("Flask-Caching")
    shutil.copytree(sdist_tests("Flask-Caching", version, "conftest.py"), run)
    suite = run / "suite"  # below their conftest (and its templates), so ours overrides it
    suite.mkdir()
    for test in sorted(run.glob("test_*.py")):
        test.rename(suite / test.name)
    (suite / "conftest.py").write_text(_FLASK_CONFTEST)
    (suite / OURS).write_text(_FLASK_TESTS)
    theirs = [p.name for p in sorted(suite.glob("test_*.py")) if p.name != OURS]
    theirs.remove("test_backend_cache.py")  # its GenericCacheTests run in ours
    _run("Flask-Caching", run, [f"suite/{name}" for name in [OURS, *theirs]], tmp_path)
