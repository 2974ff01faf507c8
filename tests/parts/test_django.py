"""diskcache_core.contrib.django.DjangoCache, in the real Django project of tests/helpers/django_project.

Django is configured once per test process from the project's settings (unless something
configured it before us); each test then applies the project's settings with
``override_settings`` and CACHES in a fresh directory, so no test sees another's items and the
result does not depend on who configured Django first. Processes sharing one cache are real
subprocesses started with ``DJANGO_SETTINGS_MODULE=tests.helpers.django_project.settings``.
"""

from __future__ import annotations

import asyncio
import inspect
import io
import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

django = pytest.importorskip("django")

from django.conf import settings

from tests.helpers.django_project import settings as project

if not settings.configured:
    settings.configure(**{name: getattr(project, name) for name in dir(project) if name.isupper()})
django.setup()

from django.core.cache import caches
from django.core.cache.backends.base import CacheKeyWarning
from django.core.cache.backends.locmem import LocMemCache
from django.core.exceptions import ImproperlyConfigured
from django.test import Client, override_settings

import diskcache_core
from diskcache_core.contrib import _django_options
from diskcache_core.contrib import django as django_backend
from diskcache_core.contrib.django import DjangoCache
from tests.helpers.django_project import views

ROOT = Path(__file__).resolve().parents[2]

# The project's settings the tests rely on (applied even when Django was configured by others).
PROJECT_SETTINGS = {
    name: getattr(project, name)
    for name in (
        "ALLOWED_HOSTS", "CACHE_MIDDLEWARE_KEY_PREFIX", "CACHE_MIDDLEWARE_SECONDS", "MIDDLEWARE",
        "ROOT_URLCONF", "SECRET_KEY", "SESSION_CACHE_ALIAS", "SESSION_ENGINE", "TEMPLATES",
    )
}


@pytest.fixture(autouse=True)
def _forget_shared_caches():
    """Each test opens its own directories: close them afterwards, and forget them."""
    yield
    for fanout in list(_django_options.SHARED.values()):
        fanout.close()
    _django_options.SHARED.clear()


@pytest.fixture
def location(tmp_path) -> str:
    return str(tmp_path / "django-cache")


@pytest.fixture
def project_settings(location):
    """The project's settings with its cache in `location`; yields a function applying changes
    to the cache's CACHES entry (``use(TIMEOUT=None)``)."""
    stack = []

    def use(**entry: Any) -> DjangoCache:
        override = override_settings(**PROJECT_SETTINGS, CACHES=project.caches(location, **entry))
        override.enable()
        stack.append(override)
        return caches["default"]

    use()
    views.CALLS.clear()
    yield use
    while stack:
        stack.pop().disable()


@pytest.fixture
def cache(project_settings) -> DjangoCache:
    """``django.core.cache.caches['default']``: a DjangoCache in a fresh directory."""
    backend = caches["default"]
    assert isinstance(backend, DjangoCache)
    return backend


@pytest.fixture
def make_backend(location):
    """Build DjangoCache objects directly, as Django's cache handler does."""

    def make(directory: str | None = None, **params: Any) -> DjangoCache:
        return DjangoCache(location if directory is None else directory, params)

    return make


def held_shard(shard: diskcache_core.Cache):
    """A thread holding `shard`'s write lock until the returned event is set."""
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with shard.transact(retry=True):
            taken.set()
            release.wait(10)
        shard.close()

    worker = threading.Thread(target=hold)
    worker.start()
    assert taken.wait(10)
    return worker, release


# --- configuration ---------------------------------------------------------------------------


def test_settings_build_a_django_cache(cache, location):
    assert cache.directory == os.path.abspath(location)
    assert len(cache.fanout.shards) == 4
    assert cache.fanout.timeout == 0.010
    assert cache.fanout.size_limit == 2**28
    assert cache.default_timeout == 300


def test_options_reach_the_fanout_cache(make_backend):
    backend = make_backend(
        SHARDS=2, DATABASE_TIMEOUT=0.5,
        OPTIONS={"eviction_policy": "least-frequently-used", "disk": "diskcache_core.JSONDisk"},
    )
    assert len(backend.fanout.shards) == 2
    assert backend.fanout.timeout == 0.5
    assert backend.fanout.eviction_policy == "least-frequently-used"
    assert type(backend.fanout.disk) is diskcache_core.JSONDisk


def test_disk_names_the_disk_type_as_diskcache_community_does(make_backend, tmp_path):
    backend = make_backend(str(tmp_path / "a"), DISK="diskcache_core.SafeDisk")
    assert type(backend.fanout.disk) is diskcache_core.SafeDisk
    both = make_backend(str(tmp_path / "b"), DISK=diskcache_core.JSONDisk, OPTIONS={"disk": "diskcache_core.Disk"})
    assert type(both.fanout.disk) is diskcache_core.JSONDisk  # DISK wins over OPTIONS['disk']
    assert backend.get("missing", store_time=True) == (None, None)
    backend.set("k", 1)
    assert backend.get("k", store_time=True)[0] == 1


def test_defaults_are_python_diskcaches(make_backend):
    backend = make_backend()
    assert len(backend.fanout.shards) == 8
    assert backend.fanout.timeout == 0.010
    assert backend.default_timeout == 300


@pytest.mark.parametrize(
    "location_value, params, message",
    [
        ("", {}, "LOCATION"),
        (None, {}, "LOCATION"),
        ("{dir}", {"OPTIONS": {"MAX_ENTRIES": 0}}, "MAX_ENTRIES"),
        ("{dir}", {"OPTIONS": {"MAX_ENTRIES": "many"}}, "MAX_ENTRIES"),
        ("{dir}", {"OPTIONS": {"CULL_FREQUENCY": -1}}, "CULL_FREQUENCY"),
        ("{dir}", {"OPTIONS": {"colour": "blue"}}, "unknown setting"),
        ("{dir}", {"SHARDS": "8"}, "shards must be an int"),
        ("{dir}", {"OPTIONS": {"size_limit": -1}}, "size_limit"),
        ("{dir}", {"OPTIONS": {"disk": "no_such_module.Disk"}}, "no_such_module"),
        # FanoutCache's own arguments are the entry's keys: the error names the key to use.
        ("{dir}", {"OPTIONS": {"shards": 4}}, r"OPTIONS\['shards'\].*'SHARDS': 4"),
        ("{dir}", {"OPTIONS": {"timeout": 0.05}}, r"OPTIONS\['timeout'\].*'DATABASE_TIMEOUT': 0.05"),
        ("{dir}", {"OPTIONS": {"SHARDS": 4}}, r"OPTIONS\['SHARDS'\].*next to OPTIONS"),
        ("{dir}", {"OPTIONS": {"directory": "/elsewhere"}}, r"OPTIONS\['directory'\].*LOCATION"),
        ("{dir}/file/below", {}, "not a directory"),
        ("{dir}/file", {}, "not a directory"),
    ],
)
def test_bad_configuration_is_improperly_configured(location, location_value, params, message):
    directory = location_value.format(dir=location) if location_value is not None else None
    os.makedirs(location, exist_ok=True)
    with open(os.path.join(location, "file"), "w"):  # a file where a directory is named
        pass
    backend = DjangoCache(directory, params)  # nothing checked or opened: manage.py check runs
    with pytest.raises(ImproperlyConfigured, match=message):
        backend.get("key")
    with pytest.raises(ImproperlyConfigured, match=message):  # (each use: none is kept)
        backend.set("key", 1)


def test_reopening_with_other_shards_is_refused(make_backend):
    make_backend(SHARDS=4).set("k", 1)
    with pytest.raises(ImproperlyConfigured, match="shards"):
        make_backend(SHARDS=2).get("k")


def test_construction_is_cheap_and_shares_one_fanout_cache(make_backend):
    # Cheap because nothing is opened: every backend of one configuration shares the first
    # one's FanoutCache. (Speed is for benchmarks; a timed bound here fails on a loaded machine.)
    first = make_backend(OPTIONS={"size_limit": 2**25})
    backends = [make_backend(OPTIONS={"size_limit": 2**25}) for _ in range(1000)]
    assert all(backend.fanout is first.fanout for backend in backends)
    # A different configuration of the same directory is a different FanoutCache object.
    assert make_backend(OPTIONS={"size_limit": 2**25}, DATABASE_TIMEOUT=1.0).fanout is not first.fanout


def test_every_thread_has_its_backend_and_they_share_the_store(cache):
    found = []

    def work(number: int) -> None:
        backend = caches["default"]
        backend.set(f"thread-{number}", number)
        found.append(backend)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(backend) for backend in found}) == 4  # Django's handler: one per thread
    assert {backend.fanout for backend in found} == {cache.fanout}
    assert cache.get_many([f"thread-{n}" for n in range(4)]) == {f"thread-{n}": n for n in range(4)}


def test_close_keeps_connections_open(cache, monkeypatch):
    opened = []
    real_connect = sqlite3.connect

    def counting_connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        if threading.current_thread() is threading.main_thread():  # not the checkpoint thread
            opened.append(args[0])
        return real_connect(*args, **kwargs)

    client = Client()
    client.get("/counter/")  # every shard this thread uses is open now...
    for shard in cache.fanout.shards:
        shard.get("warm up")
    monkeypatch.setattr(sqlite3, "connect", counting_connect)
    for number in range(20):  # ...and Django's request_finished -> close() reopens none
        client.get("/visits/")
        cache.set(f"key-{number}", number)
        cache.close()
    assert opened == []
    assert cache.get("key-19") == 19


# --- Django's contract, side by side with LocMemCache ---------------------------------------


def contract_scenario(backend: Any) -> list[Any]:
    """Django cache API calls whose results must agree with LocMemCache's."""
    results: list[Any] = []
    record = results.append
    backend.set("a", 1)
    record(backend.get("a"))
    record(backend.get("missing"))
    record(backend.get("missing", "default"))
    record(backend.add("a", 2))
    record(backend.add("b", 2))
    record(backend.get_many(["a", "b", "c"]))
    record("a" in backend)
    record(backend.has_key("c"))
    # Timeout 0: the item expires at once (and hides an older value).
    backend.set("zero", "old")
    backend.set("zero", "new", 0)
    record(backend.get("zero", "gone"))
    record(backend.has_key("zero"))
    record(backend.add("zero", "added", 0))
    record(backend.get("zero", "gone"))
    backend.set("negative", 1, -5)
    record(backend.get("negative", "gone"))
    # touch
    backend.set("t", "touched", None)
    record(backend.touch("t", 60))
    record(backend.touch("t", 0))
    record(backend.get("t", "gone"))
    record(backend.touch("missing"))
    # incr / decr
    record(backend.incr("a"))
    record(backend.incr("a", 10))
    record(backend.decr("a", 4))
    for method in (backend.incr, backend.decr):
        with pytest.raises(ValueError):
            method("missing")
    # get_or_set
    record(backend.get_or_set("g", lambda: "computed"))
    record(backend.get_or_set("g", "other"))
    record(backend.get_or_set("none", None))
    # versions
    backend.set("v", "two", version=2)
    record(backend.get("v"))
    record(backend.get("v", version=2))
    record(backend.incr_version("v", version=2))
    record((backend.get("v", version=2), backend.get("v", version=3)))
    record(backend.decr_version("v", version=3))
    record((backend.get("v", version=2), backend.get("v", version=3)))
    with pytest.raises(ValueError):
        backend.incr_version("missing")
    # bulk
    record(backend.set_many({"m1": 1, "m2": [2], "m3": {"three": 3}}))
    record(backend.get_many(["m1", "m2", "m3"]))
    backend.delete_many(["m1", "m3", "never"])
    record(backend.get_many(["m1", "m2", "m3"]))
    record(backend.delete("m2"))
    record(backend.delete("m2"))
    # values of many types come back equal
    values = {"str": "text é", "bytes": b"\x00\xff", "int": 2**70, "float": 1.5, "none": None,
              "decimal": Decimal("1.10"), "tuple": (1, "a"), "big": b"x" * 100_000}
    backend.set_many(values)
    record(backend.get_many(list(values)) == values)
    backend.clear()
    record(backend.get_many(["a", "b", "g", "str"]))
    return results


def test_contract_matches_locmem(cache):
    expected = contract_scenario(LocMemCache("contract", {"TIMEOUT": 300}))
    assert contract_scenario(cache) == expected


async def async_contract_scenario(backend: Any) -> list[Any]:
    results: list[Any] = []
    record = results.append
    await backend.aset("a", 1)
    record(await backend.aget("a"))
    record(await backend.aget("missing", "default"))
    record(await backend.aadd("a", 2))
    record(await backend.aadd("b", 2))
    record(await backend.ahas_key("b"))
    record(await backend.atouch("b", 0))
    record(await backend.ahas_key("b"))
    record(await backend.aincr("a", 5))
    record(await backend.adecr("a"))
    with pytest.raises(ValueError):
        await backend.aincr("missing")
    record(await backend.aget_or_set("g", lambda: "computed"))
    record(await backend.aset_many({"m1": 1, "m2": 2}))
    record(await backend.aget_many(["m1", "m2", "m3"]))
    await backend.adelete_many(["m1"])
    record(await backend.aget_many(["m1", "m2"]))
    record(await backend.adelete("m2"))
    record(await backend.aincr_version("a"))
    record(await backend.aget("a", version=2))
    record(await backend.adecr_version("a", version=2))
    record(await backend.aget("a"))
    await backend.aclear()
    record(await backend.aget("a"))
    await backend.aclose()
    return results


def test_async_contract_matches_locmem(cache):
    expected = asyncio.run(async_contract_scenario(LocMemCache("async-contract", {})))
    assert asyncio.run(async_contract_scenario(cache)) == expected


def test_async_twins_have_their_sync_methods_signatures():
    """Each a* method takes what its sync method takes (what type checkers read), and every a*
    method of Django's BaseCache is either ours or aclose, which we leave to Django."""
    from django.core.cache.backends.base import BaseCache

    django_twins = {name for name in vars(BaseCache) if name.startswith("a") and name[1:] in vars(BaseCache)}
    ours = {name for name in vars(DjangoCache) if name.startswith("a") and name[1:] in dir(DjangoCache)}
    assert django_twins - ours == {"aclose"}
    assert "apop" in ours
    for name in ours:
        twin, sync = getattr(DjangoCache, name), getattr(DjangoCache, name[1:])
        assert inspect.iscoroutinefunction(twin) and twin.__qualname__ == f"DjangoCache.{name}"
        expected, actual = inspect.signature(sync), inspect.signature(twin)
        assert actual.parameters == expected.parameters, name
        assert actual.return_annotation == expected.return_annotation, name


def test_async_methods_run_off_the_event_loop(cache, monkeypatch):
    threads = []
    for name in ("get", "set", "get_many", "set_many", "incr", "delete_many", "has_key", "pop"):
        method = getattr(cache, name)

        def recorder(*args: Any, _method: Any = method, **kwargs: Any) -> Any:
            threads.append(threading.get_ident())
            return _method(*args, **kwargs)

        monkeypatch.setattr(cache, name, recorder)

    async def main() -> int:
        await cache.aset("n", 1)
        await asyncio.gather(*(cache.aget("n") for _ in range(5)))
        await cache.aset_many({"x": 1})
        await cache.aget_many(["x"])
        await cache.aincr("n")
        await cache.adelete_many(["x"])
        await cache.ahas_key("n")
        assert await cache.apop("n") == 2
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    assert len(threads) == 12
    assert loop_thread not in threads


def test_default_timeout_and_none(make_backend):
    backend = make_backend(TIMEOUT=300)
    before = time.time()
    backend.set("default", 1)
    backend.set("ten", 1, 10)
    backend.set("never", 1, None)
    assert before + 299 < backend.get("default", expire_time=True)[1] < time.time() + 301
    assert before + 9 < backend.get("ten", expire_time=True)[1] < time.time() + 11
    assert backend.get("never", expire_time=True) == (1, None)
    assert make_backend(TIMEOUT=None).set("forever", 1)
    assert make_backend(TIMEOUT=None).get("forever", expire_time=True) == (1, None)
    # A configured TIMEOUT of 0 expires everything at once, as with Django's backends.
    zero = make_backend(TIMEOUT=0)
    zero.set("gone", 1)
    assert zero.get("gone") is None


def test_items_expire(cache):
    cache.set("short", "value", 0.2)
    cache.add("short-add", "value", 0.2)
    cache.set("long", "value", 60)
    cache.touch("long", 0.2)
    assert cache.get_many(["short", "short-add", "long"]) == dict.fromkeys(
        ["short", "short-add", "long"], "value"
    )
    time.sleep(0.3)
    assert cache.get_many(["short", "short-add", "long"]) == {}
    assert cache.add("short", "again")


def test_incr_keeps_the_expiry_and_handles_big_and_odd_numbers(cache):
    cache.set("n", 1, 60)
    expire_time = cache.get("n", expire_time=True)[1]
    assert cache.incr("n", 2) == 3
    assert cache.get("n", expire_time=True) == (3, expire_time)
    cache.set("big", 2**63 - 1)
    assert cache.incr("big") == 2**63
    cache.set("decimal", Decimal("1.5"))
    assert cache.incr("decimal", Decimal("0.25")) == Decimal("1.75")
    cache.set("float", 0.5)
    assert cache.decr("float", 1) == -0.5
    cache.set("text", "abc")
    with pytest.raises(TypeError):
        cache.incr("text")
    # python-diskcache's extra: a default starts a missing key
    assert cache.incr("fresh", 5, default=10) == 15
    assert cache.decr("fresh2", 5, default=0) == -5


def test_incr_is_atomic_across_threads(cache):
    cache.set("counter", 0)

    def work() -> None:
        backend = caches["default"]
        for _ in range(200):
            backend.incr("counter")

    threads = [threading.Thread(target=work) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert cache.get("counter") == 1200


def test_incr_version_keeps_the_remaining_lifetime_and_tag(cache):
    cache.set("k", "value", 100, tag="group")
    expire_time = cache.get("k", expire_time=True)[1]
    assert cache.incr_version("k", 3) == 4
    assert cache.get("k") is None
    moved, moved_expire, moved_tag = cache.get("k", version=4, expire_time=True, tag=True)
    assert (moved, moved_tag) == ("value", "group")
    assert abs(moved_expire - expire_time) < 1


def test_key_prefix_version_and_key_function(make_backend, location):
    site1 = make_backend(KEY_PREFIX="site1", VERSION=3)
    site2 = make_backend(KEY_PREFIX="site2")
    site1.set("k", "one")
    site2.set("k", "two")
    assert (site1.get("k"), site2.get("k")) == ("one", "two")
    assert site1.fanout is site2.fanout
    assert site1.fanout.get("site1:3:k") == "one"
    assert site2.fanout.get("site2:1:k") == "two"

    def reverse_key(key: str, key_prefix: str, version: int) -> str:
        return f"{key}|{version}|{key_prefix}"

    custom = make_backend(KEY_FUNCTION=reverse_key, KEY_PREFIX="p")
    custom.set("k", "custom")
    assert custom.fanout.get("k|1|p") == "custom"
    dotted = make_backend(KEY_FUNCTION="django.core.cache.backends.base.default_key_func")
    assert dotted.get("k", version=1) is None


def test_keys_are_validated_like_djangos(cache):
    with pytest.warns(CacheKeyWarning, match="characters"):
        cache.set("has space", 1)
    with pytest.warns(CacheKeyWarning, match="longer than"):
        cache.get("x" * 300)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cache.set("fine:key", 1)


@pytest.mark.parametrize("key", [
    "k" * 250, "k" * 251, "tab\there", "new\nline", "del\x7f", "nul\x00", "é", "é space",
    "\x85next-line", "ü" * 251, "plain:key:1", "",
])
def test_key_warnings_are_exactly_djangos(make_backend, key):
    backend = make_backend()
    reference = LocMemCache("validate", {})
    with warnings.catch_warnings(record=True) as ours:
        warnings.simplefilter("always")
        backend.validate_key(key)
    with warnings.catch_warnings(record=True) as djangos:
        warnings.simplefilter("always")
        reference.validate_key(key)
    assert [str(w.message) for w in ours] == [str(w.message) for w in djangos]
    assert all(w.category is CacheKeyWarning for w in ours)


def test_bulk_writes_use_one_transaction_per_shard(cache, monkeypatch):
    begun = []
    for shard in cache.fanout.shards:
        real = shard.transact

        def counting(retry: bool = False, _real: Any = real, _shard: Any = shard) -> Any:
            begun.append(_shard)
            return _real(retry)

        monkeypatch.setattr(shard, "transact", counting)
    data = {f"key-{n}": n for n in range(40)}
    assert cache.set_many(data) == []
    used = {cache.fanout.shard_for(cache.make_key(key)) for key in data}
    assert len(begun) == len(used) == len(set(begun))
    cache.delete_many(list(data)[:30])
    assert len(begun) == 2 * len(used)
    assert cache.get_many(list(data)) == {key: data[key] for key in list(data)[30:]}


def test_busy_shard_fails_writes_that_do_not_retry(cache):
    keys = [f"key-{n}" for n in range(24)]
    busy = cache.fanout.shard_for(cache.make_key("key-0"))
    on_busy = [key for key in keys if cache.fanout.shard_for(cache.make_key(key)) is busy]
    cache.set("key-0", "before")
    worker, release = held_shard(busy)
    try:
        assert cache.set("key-0", "new", retry=False) is False
        assert cache.get("key-0") == "before"  # reads never wait for the writer
        failed = cache.set_many({key: "bulk" for key in keys}, retry=False)
        assert sorted(failed) == sorted(on_busy)
        cache.delete_many(keys, retry=False)  # fails silently on the busy shard
    finally:
        release.set()
        worker.join()
    assert cache.get("key-0") == "before"
    assert cache.get_many(keys) == {"key-0": "before"}


# --- python-diskcache's extras ---------------------------------------------------------------


def test_read_and_file_values(cache):
    payload = os.urandom(100_000)
    assert cache.set("file", io.BytesIO(payload), read=True)
    with cache.read("file") as handle:
        assert handle.read() == payload
    with cache.get("file", read=True) as handle:
        assert handle.read() == payload
    with pytest.raises(KeyError):
        cache.read("missing")


def test_pop_get_with_metadata_and_tags(cache):
    cache.set("k", "v", 60, tag="t")
    value, expire_time, tag = cache.get("k", expire_time=True, tag=True)
    assert (value, tag) == ("v", "t") and expire_time > time.time() + 59
    assert cache.get("k", tag=True) == ("v", "t")
    assert cache.pop("k", expire_time=True, tag=True) == ("v", expire_time, "t")
    assert cache.pop("k", "default") == "default"
    assert cache.pop("k", expire_time=True) == (None, None)


def test_expire_evict_cull_and_tag_index(cache):
    cache.set_many({f"e{n}": n for n in range(5)}, 0.05)
    for number in range(6):
        cache.add(f"tagged{number}", number, tag="group")
    time.sleep(0.1)
    assert cache.expire() == 5
    cache.create_tag_index()
    assert cache.fanout.tag_index == 1
    assert cache.evict("group") == 6
    cache.drop_tag_index()
    assert cache.fanout.tag_index == 0
    assert cache.cull() == 0
    assert cache.clear() == 0


def test_stats(cache):
    cache.stats(enable=True, reset=True)
    cache.set("k", 1)
    cache.get("k")
    cache.get("k")
    cache.get("missing")
    assert tuple(cache.stats()) == (2, 1)
    assert tuple(cache.stats(enable=False, reset=True)) == (2, 1)
    assert tuple(cache.stats(enable=False)) == (0, 0)


def test_named_sub_caches_deques_and_indexes(cache, location):
    sub = cache.cache("reports")
    sub["a"] = 1
    assert cache.cache("reports") is sub and sub["a"] == 1
    assert sub.directory.startswith(os.path.abspath(location))
    queue = cache.deque("jobs", maxlen=2)
    queue.extend([1, 2, 3])
    assert list(queue) == [2, 3]
    index = cache.index("users")
    index["ada"] = {"id": 1}
    assert cache.index("users")["ada"] == {"id": 1}
    assert cache.get("a") is None  # the default store is separate


def test_memoize(cache):
    calls = []

    @cache.memoize(timeout=60, tag="memo")
    def square(number: int) -> int:
        calls.append(number)
        return number * number

    assert [square(3), square(3), square(4)] == [9, 9, 16]
    assert calls == [3, 4]
    key = square.__cache_key__(3)
    stored, expire_time, tag = cache.get(key, expire_time=True, tag=True)
    assert (stored, tag) == (9, "memo") and expire_time > time.time() + 59
    assert cache.fanout.get(cache.make_key(key)) == 9  # under KEY_PREFIX and VERSION

    @cache.memoize(name="versioned", version=2)
    def double(number: int) -> int:
        calls.append(("double", number))
        return 2 * number

    assert double(5) == double(5) == 10
    assert cache.get(double.__cache_key__(5), version=2) == 10
    assert cache.get(double.__cache_key__(5)) is None

    @cache.memoize(timeout=0)
    def never_stored(number: int) -> int:
        calls.append(("never", number))
        return number

    never_stored(1)
    never_stored(1)
    assert calls.count(("never", 1)) == 2

    @cache.memoize  # bare: the default options (it raised 'name cannot be callable')
    def cube(number: int) -> int:
        calls.append(("cube", number))
        return number**3

    assert cube(2) == cube(2) == 8
    assert calls.count(("cube", 2)) == 1
    assert cache.get(cube.__cache_key__(2)) == 8  # under KEY_PREFIX and VERSION


def test_memoize_async(cache):
    calls = []

    @cache.memoize()
    async def fetch(number: int) -> int:
        calls.append(number)
        return number + 1

    async def main() -> list[int]:
        return [await fetch(1), await fetch(1)]

    assert asyncio.run(main()) == [2, 2]
    assert calls == [1]


# --- the project: middleware, views, templates, sessions -------------------------------------


def test_site_wide_cache_middleware(project_settings, cache):
    with override_settings(MIDDLEWARE=project.SITE_CACHE_MIDDLEWARE):
        client = Client()
        first = client.get("/counter/")
        second = client.get("/counter/")
        other = client.get("/counter/", {"page": 2})
    assert first.status_code == second.status_code == 200
    assert first.content == second.content == b"counter 1"
    assert other.content == b"counter 2"  # another URL is another cache entry
    assert views.CALLS["counter"] == 2
    assert "max-age=60" in second["Cache-Control"]
    stored = [key for key in cache.fanout if "views.decorators.cache.cache_page.site" in key]
    assert len(stored) == 2


def test_cache_page_view(cache):
    client = Client()
    responses = [client.get("/cached/").content for _ in range(3)]
    assert responses == [b"cached 1"] * 3
    assert views.CALLS["cached"] == 1
    cache.clear()
    assert client.get("/cached/").content == b"cached 2"


def test_metrics_view_scrapes_the_backend(cache):
    """The /metrics view of docs/observing.rst: the backend's metrics in Prometheus's format."""
    pytest.importorskip("prometheus_client")
    from prometheus_client.parser import text_string_to_metric_families

    client = Client()
    assert client.get("/cached/").content == b"cached 1"
    assert client.get("/cached/").content == b"cached 1"  # answered from the cache
    assert cache.metrics().gets.hits >= 1
    response = client.get("/metrics")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/plain")
    values = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }
    hits = sum(
        value for (name, labels), value in values.items()
        if name == "diskcache_core_gets_total" and ("cache", "default") in labels
        and ("result", "hit") in labels
    )
    assert hits == cache.metrics().gets.hits
    assert values[("diskcache_core_items", (("cache", "default"),))] == len(cache.fanout)


def test_cache_page_responses_are_shared_by_processes(cache, location):
    assert Client().get("/cached/").content == b"cached 1"
    script = textwrap.dedent("""
        import django
        django.setup()
        from django.test import Client
        from tests.helpers.django_project import views
        response = Client().get("/cached/")
        print(response.content.decode(), views.CALLS["cached"])
    """)
    output = run_project_script(script, location)
    assert output.strip() == "cached 1 0"  # served from the cache the parent filled


def test_template_fragment_cache(cache):
    client = Client()
    first = client.get("/fragment/").content.decode()
    second = client.get("/fragment/").content.decode()
    assert "page 1" in first and "fragment 1" in first
    assert "page 2" in second and "fragment 1" in second  # page rendered, fragment cached
    assert views.CALLS["fragment"] == 1
    assert any(key.startswith(":1:template.cache.sidebar") for key in cache.fanout)


def test_cached_sessions(cache):
    client = Client()
    assert [client.get("/visits/").content for _ in range(3)] == [b"visits 1", b"visits 2", b"visits 3"]
    session_key = client.cookies[settings.SESSION_COOKIE_NAME].value
    assert cache.get("django.contrib.sessions.cache" + session_key) == {"visits": 3}
    assert Client().get("/visits/").content == b"visits 1"  # another browser, another session
    cache.clear()
    assert client.get("/visits/").content == b"visits 1"


# --- several processes -----------------------------------------------------------------------


def project_env(location: str) -> dict[str, str]:
    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = "tests.helpers.django_project.settings"
    env["DISKCACHE_CORE_DJANGO_LOCATION"] = location
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def run_project_script(script: str, location: str) -> str:
    done = subprocess.run([sys.executable, "-c", script], check=False, cwd=str(ROOT), env=project_env(location),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


WORKER = textwrap.dedent("""
    import os, sys, time
    import django
    django.setup()
    from django.core.cache import cache

    number = int(sys.argv[1])
    assert cache.get("from-parent") == "hello", cache.get("from-parent")
    cache.incr("ready")
    deadline = time.monotonic() + 60
    while cache.get("ready") < int(sys.argv[2]):  # start counting together
        assert time.monotonic() < deadline, "the other workers never started"
        time.sleep(0.005)
    for _ in range(100):
        cache.incr("counter")
    cache.set("process-%d" % number, os.getpid())
    print(os.getpid())
""")


@pytest.mark.slow
def test_processes_share_one_cache_through_django(cache, location):
    workers = 8
    cache.set_many({"counter": 0, "ready": 0, "from-parent": "hello"})
    processes = [
        subprocess.Popen([sys.executable, "-c", WORKER, str(number), str(workers)], cwd=str(ROOT),
                         env=project_env(location), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
        for number in range(workers)
    ]
    pids = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        pids.append(int(out))
    assert cache.get("counter") == 100 * workers
    assert cache.get_many([f"process-{n}" for n in range(workers)]) == {
        f"process-{n}": pid for n, pid in enumerate(pids)
    }


@pytest.mark.parametrize("cull_frequency", [3, 1, 0])
def test_an_add_of_a_present_key_culls_nothing_and_keeps_its_value(make_backend, cull_frequency):
    backend = make_backend(OPTIONS={"MAX_ENTRIES": 10, "CULL_FREQUENCY": cull_frequency})
    for number in range(10):
        backend.set(f"k{number}", number, 1000)
    for number in range(10):  # as Django's own backends: a cull only when something is stored
        assert backend.add(f"k{number}", "other", 1000) is False
    assert backend.get_many([f"k{number}" for number in range(10)]) == {
        f"k{number}": number for number in range(10)
    }


def test_max_entries_and_cull_frequency_written_as_text_are_taken_as_django_takes_them(make_backend):
    backend = make_backend(OPTIONS={"MAX_ENTRIES": "10", "CULL_FREQUENCY": "2"})
    for number in range(30):
        backend.set(f"k{number}", number, 1000)
    assert len(backend.fanout) <= 10


def test_set_many_keeps_within_max_entries(make_backend):
    backend = make_backend(OPTIONS={"MAX_ENTRIES": 10})
    assert backend.set_many({f"k{number}": number for number in range(100)}, 1000) == []
    assert len(backend.fanout) <= 10
    assert backend.get("k99") == 99  # the last one written is kept


def test_a_value_too_large_for_its_shard_is_not_cached_and_nothing_raises(make_backend):
    backend = make_backend(OPTIONS={"size_limit": 800_000})  # 8 shards of 100 kB
    big = b"x" * 300_000
    assert backend.set("page", b"small", 1000) is True
    assert backend.set("page", big, 1000) is False
    assert backend.get("page") is None  # no stale value left behind
    assert backend.add("page", big, 1000) is False and backend.get("page") is None
    assert backend.set_many({"a": 1, "big": big, "pickled": [big]}, 1000) == ["big", "pickled"]
    assert backend.get_many(["a", "big", "pickled"]) == {"a": 1}
    calls = []

    @backend.memoize()
    def report():  # (its result was lost: every call raised ItemTooLargeError)
        calls.append(1)
        return big

    assert report() == big and report() == big and len(calls) == 2  # computed, never cached


@pytest.mark.parametrize("cull_frequency, left, last_cull", [(3, 29, 41), (0, 19, 31), (2, 19, 46)])
def test_max_entries_and_cull_frequency_as_djangos_own_backends(
    make_backend, cull_frequency, left, last_cull
):
    # Django's own cache tests (_perform_cull_test): 49 keys into MAX_ENTRIES=30. Each set that
    # finds 30 entries first removes a third of them (all of them for CULL_FREQUENCY 0).
    backend = make_backend(OPTIONS={"MAX_ENTRIES": 30, "CULL_FREQUENCY": cull_frequency})
    for number in range(1, 50):
        backend.set(f"cull{number}", "value", 1000)
    kept = [number for number in range(1, 50) if backend.has_key(f"cull{number}")]
    assert len(kept) == left
    assert len(backend.fanout) == left
    assert set(range(last_cull, 50)) <= set(kept)  # what came after the last cull is all there
    if cull_frequency:  # each shard gave up its oldest: the first keys are gone
        assert not set(range(1, 11)) & set(kept)
