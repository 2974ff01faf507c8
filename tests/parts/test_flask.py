"""diskcache_core.contrib.flask.DiskCache: the cachelib contract, and a real Flask app
(tests/helpers/flask_app.py) whose views and functions Flask-Caching caches through it."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("flask_caching")

from cachelib import SimpleCache
from cachelib.serializers import JSONSerializer, SimpleSerializer
from flask_caching import Cache as FlaskCache

import diskcache_core
from diskcache_core.contrib.flask import DiskCache
from tests.helpers.flask_app import create_app

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache_dir(tmp_path) -> str:
    return str(tmp_path / "flask-cache")


@pytest.fixture
def backend(cache_dir):
    made = DiskCache(cache_dir)
    yield made
    made.close()


@pytest.fixture
def app(cache_dir):
    app, cache, calls = create_app(cache_dir)
    yield app, cache, calls
    with app.app_context():
        cache.cache.close()


def held(store: diskcache_core.Cache):
    """A thread holding `store`'s write lock until the returned event is set."""
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with store.transact(retry=True):
            taken.set()
            release.wait(10)
        store.close()

    worker = threading.Thread(target=hold)
    worker.start()
    assert taken.wait(10)
    return worker, release


# --- configuration ---------------------------------------------------------------------------


def test_flask_caching_config_builds_the_backend(cache_dir):
    app, cache, _ = create_app(
        cache_dir,
        CACHE_DEFAULT_TIMEOUT=42,
        CACHE_THRESHOLD=7,
        CACHE_OPTIONS={"size_limit": 2**24, "eviction_policy": "least-frequently-used",
                       "database_timeout": 0.25, "disk": "diskcache_core.JSONDisk"},
    )
    with app.app_context():
        backend = cache.cache
        assert isinstance(backend, DiskCache)
        assert backend.directory == cache_dir
        assert backend.default_timeout == 42
        assert backend.threshold == 7
        assert backend.cache.size_limit == 2**24
        assert backend.cache.eviction_policy == "least-frequently-used"
        assert backend.cache.timeout == 0.25
        assert type(backend.cache.disk) is diskcache_core.JSONDisk
        assert backend.ignore_delete_many_errors is False  # CACHE_IGNORE_ERRORS' default
        backend.close()


def test_default_threshold_is_flask_cachings(app):
    flask_app, cache, _ = app
    with flask_app.app_context():
        assert cache.cache.threshold == 500


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"directory": None}, "CACHE_DIR"),
        ({"directory": ""}, "CACHE_DIR"),
        ({"threshold": -1}, "threshold"),
        ({"threshold": "10"}, "threshold"),
        ({"colour": "blue"}, "unknown setting"),
    ],
)
def test_bad_configuration_raises(cache_dir, kwargs, message):
    arguments = {"directory": cache_dir, **kwargs}
    with pytest.raises(ValueError, match=message):
        DiskCache(**arguments)


def test_missing_cache_dir_in_the_app_config_raises(cache_dir):
    with pytest.raises(ValueError, match="CACHE_DIR"):
        create_app(None)


# --- cachelib's contract, side by side with SimpleCache --------------------------------------


def contract_scenario(cache: Any) -> list[Any]:
    results: list[Any] = []
    record = results.append
    record(cache.set("a", 1))
    record(cache.get("a"))
    record(cache.get("missing"))
    record(cache.has("a"))
    record(cache.has("missing"))
    record(cache.add("a", 2))
    record(cache.add("b", 2))
    record(cache.get_many("a", "b", "c"))
    record(cache.get_dict("a", "b", "c"))
    record(cache.set_many({"m1": 1, "m2": [2], "m3": {"three": 3}}))
    record(cache.get_many("m1", "m2", "m3"))
    record(cache.delete_many("m1", "m3", "never"))
    record(cache.get_many("m1", "m2", "m3"))
    record(cache.delete("m2"))
    record(cache.delete("m2"))
    record(cache.inc("counter"))
    record(cache.inc("counter", 5))
    record(cache.dec("counter", 2))
    record(cache.dec("down"))
    record(cache.set("zero", "kept", timeout=0))  # 0: never expires
    record(cache.get("zero"))
    record(cache.set("past", "gone", timeout=-1))  # negative: expired at once
    record(cache.get("past"))
    record(cache.has("past"))
    record(cache.add("past", "added"))
    record(cache.get("past"))
    record(cache.set("delta", "timedelta", timeout=dt.timedelta(minutes=1)))
    record(cache.get("delta"))
    values = {"str": "text é", "bytes": b"\x00\xff", "int": 2**70, "float": 1.5,
              "tuple": (1, "a"), "big": b"x" * 100_000}
    cache.set_many(values)
    record(cache.get_many(*values) == list(values.values()))
    record(cache.clear())
    record(cache.get_many("a", "b", "zero", "counter"))
    return results


def test_contract_matches_simple_cache(backend):
    expected = contract_scenario(SimpleCache(threshold=1000))
    assert contract_scenario(backend) == expected


def test_timeouts(backend):
    before = time.time()
    backend.set("default", 1)
    backend.set("ten", 1, timeout=10)
    backend.set("never", 1, timeout=0)
    backend.add("added", 1, timeout=dt.timedelta(seconds=20))
    store = backend.cache
    assert before + 299 < store.get("default", expire_time=True)[1] < time.time() + 301
    assert before + 9 < store.get("ten", expire_time=True)[1] < time.time() + 11
    assert store.get("never", expire_time=True) == (1, None)
    assert before + 19 < store.get("added", expire_time=True)[1] < time.time() + 21
    backend.set("short", 1, timeout=1)
    time.sleep(1.05)
    assert backend.get("short") is None and not backend.has("short")


def test_a_timeout_too_large_for_a_float_is_refused_naming_it(backend):
    for write in (
        lambda: backend.set("key", 1, timeout=10**400),
        lambda: backend.add("key", 1, timeout=10**400),
        lambda: backend.set_many({"key": 1}, timeout=10**400),
    ):
        with pytest.raises(ValueError, match=r"^timeout \(an int of \d+ bits\) is too large"):
            write()
    assert not backend.has("key")
    backend.set("key", 1, timeout=10**300)  # large, but a float holds it: never expires in practice
    assert backend.get("key") == 1


def test_default_timeout_zero_never_expires(cache_dir):
    backend = DiskCache(cache_dir, default_timeout=0)
    backend.set("k", 1)
    assert backend.cache.get("k", expire_time=True) == (1, None)
    backend.close()


def test_inc_is_atomic_across_threads(backend):
    def work() -> None:
        for _ in range(200):
            backend.inc("counter")

    threads = [threading.Thread(target=work) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert backend.get("counter") == 1200


def test_busy_database_gives_failure_values(cache_dir):
    backend = DiskCache(cache_dir, database_timeout=0.01)
    backend.set("k", "before")
    worker, release = held(backend.cache)
    try:
        assert backend.set("k", "new") is False
        assert backend.add("new", 1) is False
        assert backend.inc("k2") is None
        assert backend.dec("k2") is None
        assert backend.delete("k") is False
        assert backend.set_many({"x": 1, "y": 2}) == []
        assert backend.clear() is False
        assert backend.get("k") == "before"  # reads never wait for the writer
        assert backend.has("k")
        with pytest.raises(RuntimeError, match="Failed to delete"):
            backend.delete_many("k")
        backend.ignore_delete_many_errors = True
        assert backend.delete_many("k", "absent") == ["absent"]
    finally:
        release.set()
        worker.join()
    assert backend.get("k") == "before"
    backend.close()


# --- CACHE_THRESHOLD -------------------------------------------------------------------------


def test_threshold_keeps_the_newest_items(cache_dir):
    backend = DiskCache(cache_dir, threshold=10)
    for number in range(25):
        backend.set(f"k{number}", number)
        assert len(backend.cache) <= 10
    assert backend.get_many(*[f"k{n}" for n in range(25)]) == [None] * 15 + list(range(15, 25))
    backend.set_many({f"bulk{n}": n for n in range(30)})
    assert len(backend.cache) == 10
    backend.close()


def test_threshold_removes_expired_items_first(cache_dir):
    backend = DiskCache(cache_dir, threshold=5)
    backend.set("old", "kept")
    for number in range(4):
        backend.set(f"short{number}", number, timeout=1)
    time.sleep(1.05)
    backend.set("new", "kept")  # 6 items, 4 expired: expiring them is enough
    assert backend.get_many("old", "new") == ["kept", "kept"]
    assert len(backend.cache) == 2
    backend.close()


def test_threshold_zero_is_unlimited(cache_dir):
    backend = DiskCache(cache_dir, threshold=0)
    backend.set_many({f"k{n}": n for n in range(600)})
    assert len(backend.cache) == 600
    backend.close()


def test_large_thresholds_are_checked_every_few_writes(cache_dir):
    backend = DiskCache(cache_dir, threshold=1024)  # checked every 4th write
    for number in range(1030):
        backend.set(f"k{number}", number)
    assert 1024 <= len(backend.cache) <= 1024 + 3
    backend.close()


# --- a Flask app -----------------------------------------------------------------------------


def test_cached_view_is_served_from_the_cache(app):
    flask_app, cache, calls = app
    client = flask_app.test_client()
    assert [client.get("/page").data for _ in range(3)] == [b"page 1"] * 3
    assert calls["page"] == 1
    with flask_app.app_context():
        cache.clear()
    assert client.get("/page").data == b"page 2"


def test_memoized_function_delete_memoized_and_clear(app):
    flask_app, cache, calls = app
    add = flask_app.extensions["test_functions"]["add"]
    client = flask_app.test_client()
    assert client.get("/add/1/2").data == b"1 + 2 = 3"
    assert client.get("/add/1/2").data == b"1 + 2 = 3"
    assert client.get("/add/2/2").data == b"2 + 2 = 4"
    assert calls["add"] == 2
    with flask_app.app_context():
        assert add(1, 2) == 3
        assert calls["add"] == 2
        cache.delete_memoized(add, 1, 2)  # only this call's result
        assert add(1, 2) == 3 and add(2, 2) == 4
        assert calls["add"] == 3
        cache.delete_memoized(add)  # every result of the function
        add(1, 2), add(2, 2)
        assert calls["add"] == 5
        cache.clear()
        add(1, 2)
        assert calls["add"] == 6


def test_cache_api_through_flask_caching(app):
    flask_app, cache, _ = app
    with flask_app.app_context():
        assert cache.set("k", {"a": 1})
        assert cache.get("k") == {"a": 1}
        assert cache.has("k")
        assert cache.add("k", 2) is False
        assert cache.set_many({"x": 1, "y": 2}) == ["x", "y"]
        assert cache.get_many("x", "y", "z") == [1, 2, None]
        assert cache.get_dict("x", "z") == {"x": 1, "z": None}
        assert cache.delete_many("x", "y") == ["x", "y"]
        assert cache.delete("k")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert cache.clear()


def test_two_processes_share_entries(app, cache_dir):
    flask_app, cache, calls = app
    with flask_app.app_context():
        cache.set("from-parent", "hello")
    script = textwrap.dedent(f"""
        from tests.helpers.flask_app import create_app
        app, cache, calls = create_app({cache_dir!r})
        client = app.test_client()
        with app.app_context():
            assert cache.get("from-parent") == "hello"
            cache.set("from-child", [1, 2, 3])
        assert client.get("/page").data == b"page 1"
        assert client.get("/add/20/22").data == b"20 + 22 = 42"
        print(calls["page"], calls["add"])
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", script], check=False, cwd=str(ROOT), env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "1"]
    client = flask_app.test_client()
    with flask_app.app_context():
        assert cache.get("from-child") == [1, 2, 3]
    assert client.get("/page").data == b"page 1"  # the child's response, from the cache
    assert client.get("/add/20/22").data == b"20 + 22 = 42"
    assert calls["page"] == calls["add"] == 0


def test_inc_and_dec_of_a_stored_none_start_at_zero_as_cachelibs(backend):
    backend.set("none", None)
    assert backend.inc("none", 5) == 5 and backend.get("none") == 5
    backend.set("none", None)
    assert backend.dec("none", 2) == -2
    for empty in ("", b"", [], {}, ()):  # cachelib: ``(get(key) or 0) + delta``
        backend.set("empty", empty)
        assert backend.inc("empty", 3) == 3
    backend.set("text", "abc")
    with pytest.raises(TypeError):
        backend.inc("text")
    assert backend.get("text") == "abc"


def test_a_counter_inc_makes_gets_the_default_timeout_and_a_number_keeps_its_own(cache_dir):
    # cachelib's backends store what inc makes with ``set``: the default timeout. A counter
    # made here never expired, and one made over a None dropped the None's timeout.
    backend = DiskCache(cache_dir, default_timeout=60)
    backend.inc("made")
    backend.set("none", None, timeout=30)
    backend.inc("none")
    backend.set("number", 1, timeout=500)
    backend.inc("number")
    store = backend.cache
    now = time.time()
    made, none, number = (store.get(key, expire_time=True)[1] - now for key in ("made", "none", "number"))
    assert 50 < made <= 60 and 50 < none <= 60  # the default, not never and not the None's 30
    assert 490 < number <= 500  # an existing number's expiry stays
    backend.close()


@pytest.mark.parametrize(
    "cache_args, expected",
    [([9], (9, 300, False)), ([9, 60], (9, 60, False)), ([9, 60, True, 0.5], (9, 60, True))],
)
def test_cache_args_give_the_parameters_after_the_directory(cache_dir, cache_args, expected):
    # Flask-Caching passes default_timeout and ignore_delete_many_errors by name as well:
    # two or more CACHE_ARGS raised "got multiple values for argument 'default_timeout'".
    app, cache, _ = create_app(cache_dir, CACHE_ARGS=cache_args)
    with app.app_context():
        backend = cache.cache
        assert (backend.threshold, backend.default_timeout, backend.ignore_delete_many_errors) == expected
        if len(cache_args) > 3:
            assert backend.cache.timeout == 0.5
        backend.close()
    with pytest.raises(TypeError, match="CACHE_ARGS"):
        create_app(cache_dir, CACHE_ARGS=[1, 2, 3, 4, "disk", "extra"])


# --- CACHE_SERIALIZER (Flask-Caching 2.5) ----------------------------------------------------


def test_without_a_serializer_values_are_stored_by_the_disk(backend):
    assert isinstance(backend.serializer, SimpleSerializer)  # pickle: what the Disk does
    backend.set("item", {"a": [1, 2]})
    backend.set("count", 3)
    assert backend.cache.get("item") == {"a": [1, 2]}  # readable by any Cache on the directory
    assert backend.cache.get("count") == 3


def test_cache_serializer_from_the_app_config_stores_its_bytes(cache_dir):
    if not hasattr(FlaskCache, "_get_serializer"):
        pytest.skip("this Flask-Caching has no CACHE_SERIALIZER")
    app, cache, _ = create_app(cache_dir, CACHE_SERIALIZER=JSONSerializer)
    with app.app_context():
        backend = cache.cache
        assert isinstance(backend.serializer, JSONSerializer)
        assert cache.set("item", {"a": [1, 2]})
        assert backend.cache.get("item") == b'{"a": [1, 2]}'
        assert cache.get("item") == {"a": [1, 2]}
        assert cache.get_many("item", "missing") == [{"a": [1, 2]}, None]
        backend.close()


class Counting(SimpleSerializer):
    """Counts its dumps and loads."""

    def __init__(self) -> None:
        self.dumped = self.loaded = 0

    def dumps(self, value: Any, protocol: int = 5) -> bytes | None:
        self.dumped += 1
        return super().dumps(value, protocol)

    def loads(self, bvalue: bytes) -> Any:
        self.loaded += 1
        return super().loads(bvalue)


def test_a_set_serializer_runs_once_per_value_written_and_read(backend):
    backend.serializer = counting = Counting()
    assert backend.set("a", "x") and backend.add("b", "y") and not backend.add("b", "z")
    assert backend.set_many({"c": 1, "d": 2}) == ["c", "d"]
    assert (counting.dumped, counting.loaded) == (5, 0)
    assert [backend.get(key) for key in "abcd"] == ["x", "y", 1, 2]
    assert backend.get("missing") is None
    assert counting.loaded == 4  # a missing key is not decoded


def test_a_value_the_serializer_refuses_is_not_stored(backend):
    backend.serializer = JSONSerializer()
    backend.set("kept", [1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert backend.set("kept", {1, 2}) is False  # JSON has no sets: dumps gives None
        assert backend.add("other", {1, 2}) is False
        assert backend.set_many({"good": 1, "bad": {3}}) == ["good"]
    assert backend.get("kept") == [1] and "other" not in backend.cache
    assert backend.get("good") == 1 and "bad" not in backend.cache


def test_inc_answers_none_and_stores_nothing_when_the_serializer_refuses_the_number(backend):
    class SmallNumbersOnly(JSONSerializer):
        def dumps(self, value):
            return None if isinstance(value, int) and value > 100 else super().dumps(value)

    backend.serializer = SmallNumbersOnly()
    assert backend.inc("n", 99) == 99
    assert backend.inc("n", 2) is None  # 101: refused, as a busy database would be answered
    assert backend.get("n") == 99  # the old number stays
    assert backend.dec("n", 9) == 90


def test_inc_with_a_serializer_adds_to_the_decoded_number_and_keeps_its_expiry(cache_dir):
    backend = DiskCache(cache_dir, default_timeout=60)
    backend.serializer = JSONSerializer()
    assert backend.inc("made") == 1 and backend.inc("made", 4) == 5
    assert backend.cache.get("made") == b"5"
    backend.set("number", 10, timeout=500)
    assert backend.dec("number", 3) == 7
    backend.set("none", None)
    assert backend.inc("none", 2) == 2
    backend.set("text", "abc")
    with pytest.raises(TypeError, match="text"):
        backend.inc("text")
    assert backend.get("text") == "abc"
    now = time.time()
    made, number = (backend.cache.get(key, expire_time=True)[1] - now for key in ("made", "number"))
    assert 50 < made <= 60 and 490 < number <= 500
    backend.close()


def test_a_serializer_must_be_a_cachelib_one(backend):
    with pytest.raises(TypeError, match="BaseSerializer"):
        backend.serializer = json  # type: ignore[assignment]
