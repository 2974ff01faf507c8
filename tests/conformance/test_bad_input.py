"""Arguments SQLite cannot store are refused up front, by name, leaving nothing behind.

Keys and tags that are not valid UTF-8 text (lone surrogates), integers beyond 64 bits as tags,
NaN keys, tags and expiries: each raises TypeError/ValueError naming the argument before any
value file is written, and the cache stays empty (no row, no ``*.val`` file, no fan-out
directory). NaN values are stored faithfully: every process reads NaN back. The shared tests run
on both Cache and FanoutCache (the ``cache`` fixture of conftest.py).
"""

from __future__ import annotations

import enum
import io
import math
import os
import os.path as op
import string
import subprocess
import sys
import textwrap
import time
import warnings
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable

import pytest

from diskcache_core import Cache, Deque, FanoutCache, Index, memoize_stampede
from diskcache_core._fanout.fanout import MAX_SHARDS

ROOT = Path(__file__).resolve().parents[2]
NAN = float("nan")
INF = float("inf")
BIG = 100_000  # well above disk_min_file_size: such values go to value files
BAD_TEXT = ["\ud800", "ok\udfffok", "é\udc00"]  # lone surrogates: not encodable as UTF-8
BAD_TAGS: list[Any] = [2**64, 2**63, -(2**63) - 1, "\udc00", "tag\ud800", NAN]


def leftovers(directory: str) -> list[str]:
    """Value files (finished or temporary) and fan-out directories under `directory`."""
    found = []
    for root, dirs, files in os.walk(directory):
        found += [op.join(root, name) for name in files if name.endswith((".val", ".tmp"))]
        found += [
            op.join(root, name) for name in dirs
            if len(name) == 2 and all(char in string.hexdigits for char in name)
        ]
    return found


def assert_empty(cache: Any) -> None:
    """Nothing was stored: no item, no value file, no fan-out directory."""
    assert len(cache) == 0
    assert leftovers(cache.directory) == []


def big_values() -> list[Any]:
    return [b"x" * BIG, "y" * BIG, list(range(BIG // 4)), "small", 7]


# --- keys ----------------------------------------------------------------------------------


@pytest.mark.parametrize("key", BAD_TEXT)
@pytest.mark.parametrize("method", ["set", "add"])
def test_a_key_that_is_not_utf8_is_refused_before_any_file(cache, method, key):
    for value in big_values():
        with pytest.raises(ValueError, match="^key .*not valid UTF-8"):
            getattr(cache, method)(key, value)
    with pytest.raises(ValueError, match="^key "):
        getattr(cache, method)(key, io.BytesIO(b"z" * BIG), read=True)
    with pytest.raises(ValueError, match="^key "):
        cache[key] = b"x" * BIG
    with pytest.raises(UnicodeEncodeError):  # what python-diskcache raises (from SQLite)
        getattr(cache, method)(key, 1)
    assert_empty(cache)


def test_a_bad_key_inside_a_transaction_leaves_no_file(cache):
    cache.set("kept", b"k" * BIG)
    with pytest.raises(ValueError, match="^key "):
        with cache.transact():
            cache.set("\ud800", b"x" * BIG)
    assert list(cache) == ["kept"]
    assert len([name for name in leftovers(cache.directory) if name.endswith(".val")]) == 1


@pytest.mark.parametrize("memory", [True, False], ids=["memory-on", "memory-off"])
@pytest.mark.parametrize("key", ["\ud800", NAN])
def test_reads_and_removals_of_an_impossible_key_raise_valueerror(make_cache, memory, key):
    cache = make_cache(**({} if memory else {"memory_size_limit": 0}))
    cache.set("other", 1)
    match = "NaN" if key != key else "not valid UTF-8"
    operations: list[Callable[[], Any]] = [
        lambda: cache.get(key),
        lambda: cache.get(key),  # again: a key the memory tier has seen lately
        lambda: cache.get(key, expire_time=True, tag=True),
        lambda: cache.get(key, read=True),
        lambda: cache[key],
        lambda: key in cache,
        lambda: cache.delete(key),
        lambda: cache.__delitem__(key),
        lambda: cache.pop(key),
        lambda: cache.touch(key, 10),
        lambda: cache.incr(key),
        lambda: cache.decr(key),
        lambda: cache.read(key),
    ]
    for operation in operations:
        with pytest.raises(ValueError, match=match):
            operation()
    assert list(cache) == ["other"]
    assert leftovers(cache.directory) == []


@pytest.mark.parametrize("method", ["set", "add"])
def test_a_nan_key_is_refused(cache, method):
    for value in big_values():
        with pytest.raises(ValueError, match="^key must not be NaN"):
            getattr(cache, method)(NAN, value)
    assert_empty(cache)


def test_keys_sqlite_can_store_still_work(cache):
    keys = ["é ü ✓", "", "nul\x00inside", 2**70, -(2**63), INF, -INF, 0.5, b"\xff\xfe", ("t", NAN)]
    for number, key in enumerate(keys):
        assert cache.set(key, number)
    for number, key in enumerate(keys):
        assert cache.get(key) == number
        assert key in cache


# --- tags ----------------------------------------------------------------------------------


@pytest.mark.parametrize("tag", BAD_TAGS, ids=repr)
@pytest.mark.parametrize("method", ["set", "add"])
def test_a_tag_sqlite_cannot_store_is_refused_before_any_file(cache, method, tag):
    for value in big_values():
        with pytest.raises(ValueError, match="^tag "):
            getattr(cache, method)("key", value, tag=tag)
    assert_empty(cache)


@pytest.mark.parametrize("tag", BAD_TAGS, ids=repr)
def test_evict_refuses_a_tag_no_item_can_have(cache, tag):
    cache.set("key", 1, tag="fine")
    with pytest.raises(ValueError, match="^tag "):
        cache.evict(tag)
    assert cache.get("key", tag=True) == (1, "fine")


def test_tags_sqlite_can_store_still_work(cache):
    for number, tag in enumerate([2**63 - 1, -(2**63), "é ✓", b"\xff", 1.5, INF]):
        cache.set(number, b"v" * BIG, tag=tag)
        assert cache.get(number, tag=True)[1] == tag
        assert cache.evict(tag) == 1
    assert_empty(cache)


class Kind(str, enum.Enum):
    PROFILE = "profile"


class Level(enum.IntEnum):
    HIGH = 7


@pytest.mark.parametrize(
    "tag, stored",
    [
        (Kind.PROFILE, "profile"),
        (Level.HIGH, 7),
        (True, 1),
        (bytearray(b"t"), b"t"),
        (memoryview(b"m"), b"m"),
        (type("Half", (float,), {})(0.5), 0.5),
    ],
    ids=repr,
)
def test_a_tag_of_a_subclass_or_bytes_like_is_stored_as_its_base_type(cache, tag, stored):
    assert cache.set("key", b"v" * BIG, tag=tag)
    assert cache.add("other", 1, tag=tag)
    found = cache.get("key", tag=True)[1]
    assert found == stored and type(found) is type(stored)
    assert cache.evict(tag) == 2
    assert_empty(cache)


@pytest.mark.parametrize("tag", [[1], {"a": 1}, object(), 1j], ids=repr)
def test_a_tag_of_another_type_is_refused(cache, tag):
    with pytest.raises(TypeError, match="^tag must be"):
        cache.set("key", 1, tag=tag)
    assert_empty(cache)


@pytest.mark.parametrize("now", ["2024-01-01", [1], True, NAN, 10**400], ids=repr)
def test_expire_refuses_a_time_that_is_not_one(cache, now):
    cache.set("later", 1, expire=3600)
    with pytest.raises((TypeError, ValueError), match="^now "):
        cache.expire(now=now)
    assert cache.get("later") == 1


def test_fanout_expire_takes_retry_first_as_python_diskcache_does(tmp_path):
    fanout = FanoutCache(str(tmp_path), shards=4)
    try:
        for number in range(8):
            fanout.set(number, number, expire=1e-9)
        fanout.set("later", 1, expire=3600)
        assert fanout.expire(True) == 8  # retry=True, not a time of 1 second past the epoch
        assert fanout.expire(False, now=time.time() + 7200) == 1
    finally:
        fanout.close()


def test_a_directory_that_cannot_be_one_is_named(tmp_path):
    with pytest.raises(ValueError, match="empty path"):
        Cache("")
    afile = tmp_path / "file"
    afile.write_text("x")
    with pytest.raises(NotADirectoryError, match=repr(str(afile))):
        Cache(str(afile / "below"))
    cache = Cache(os.fsencode(tmp_path / "bytes"))  # a bytes path, as os takes it
    try:
        assert cache.directory == str(tmp_path / "bytes")
        cache.set("key", 1)
    finally:
        cache.close()


@pytest.mark.parametrize("option", ["beta", "lock_expire", "wait_timeout"])
def test_memoize_stampede_refuses_an_option_that_is_not_a_number(cache, option):
    with pytest.raises(TypeError, match=f"^{option} must be a number"):
        memoize_stampede(cache, 60, **{option: "x"})


# --- values and expiry ---------------------------------------------------------------------


@pytest.mark.parametrize("size", [5, BIG])
@pytest.mark.parametrize("method", ["set", "add"])
def test_a_str_value_that_is_not_utf8_is_refused(cache, method, size):
    value = "v" * size + "\ud800"
    with pytest.raises(ValueError, match="^value .*not valid UTF-8"):
        getattr(cache, method)("key", value)
    assert_empty(cache)


@pytest.mark.parametrize("expire", [NAN, 10**400])
def test_an_expiry_that_cannot_be_stored_is_refused(cache, expire):
    for value in big_values():
        with pytest.raises(ValueError, match="^expire "):
            cache.set("key", value, expire=expire)
        with pytest.raises(ValueError, match="^expire "):
            cache.add("key", value, expire=expire)
    assert_empty(cache)
    cache.set("key", 1)
    with pytest.raises(ValueError, match="^expire "):
        cache.touch("key", NAN)
    assert cache.get("key", expire_time=True) == (1, None)


# --- NaN values read back the same everywhere ----------------------------------------------


def _read_in_subprocess(cache: Any, key: str) -> str:
    kind = "FanoutCache" if isinstance(cache, FanoutCache) else "Cache"
    code = textwrap.dedent(f"""
        import diskcache_core
        cache = diskcache_core.{kind}({cache.directory!r})
        print(repr(cache.get({key!r}, "missing")))
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                            timeout=120, check=True)
    return result.stdout.strip()


def test_a_nan_value_reads_back_as_nan_in_every_process(make_cache):
    writer = make_cache()
    assert writer.set("n", NAN)
    assert math.isnan(writer.get("n"))  # this object's memory tier
    reader = make_cache(memory_size_limit=0)  # another object, reading SQLite
    assert math.isnan(reader.get("n"))
    assert math.isnan(reader.get("n", expire_time=True, tag=True)[0])
    assert math.isnan(reader.pop("n"))
    writer.set("n", NAN)
    assert _read_in_subprocess(writer, "n") == "nan"


def test_incr_refuses_nan_and_keeps_an_infinite_sum_faithful(make_cache):
    cache = make_cache()
    for call in (
        lambda: cache.incr("count", NAN),
        lambda: cache.decr("count", NAN),
        lambda: cache.incr("count", 1, default=NAN),
    ):
        with pytest.raises(ValueError, match="(delta|default) must not be NaN"):
            call()
    assert_empty(cache)
    # inf + -inf is NaN: stored as NaN (not NULL), so every reader agrees.
    assert math.isnan(cache.incr("sum", -INF, default=INF))
    cache.set("total", INF)
    assert math.isnan(cache.incr("total", -INF))
    reader = make_cache(memory_size_limit=0)
    assert math.isnan(reader.get("sum")) and math.isnan(reader.get("total"))


def test_incr_of_a_float_by_an_int_beyond_any_float_names_the_problem(cache):
    for stored in (1.5, INF):
        cache.set("f", stored)
        with pytest.raises(ValueError, match="^cannot increment the value of 'f'.*too large"):
            cache.incr("f", 10**400)
        assert cache.get("f") == stored


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_incr_of_a_fixed_width_integer_never_wraps_round(cache):
    np = pytest.importorskip("numpy")
    cache.set("n", np.int64(2**62))
    for delta in (np.int64(2**62), 2**70):
        with pytest.raises(ValueError, match="^cannot increment the value of 'n'.*does not fit in int64"):
            cache.incr("n", delta)
    assert cache.get("n") == 2**62
    assert cache.incr("n", 5) == 2**62 + 5 and type(cache.get("n")) is np.int64
    cache.set("byte", np.uint8(255))
    with pytest.raises(ValueError, match="255 \\+ 1 does not fit in uint8"):
        cache.incr("byte", 1)
    with pytest.raises(ValueError, match="does not fit in int32"):
        cache.incr("new", np.int32(1), default=np.int32(2**31 - 1))
    assert "new" not in cache and cache.get("byte") == 255


@pytest.mark.parametrize("timeout, error", [
    (NAN, ValueError), (-1, ValueError), (10**400, ValueError), ("5", TypeError), (1j, TypeError),
], ids=repr)
def test_flush_access_log_refuses_a_timeout_that_is_not_one(make_cache, timeout, error):
    cache = make_cache(statistics=True)
    cache.get("missing")
    with pytest.raises(error, match="timeout"):
        cache.flush_access_log(timeout)
    cache.flush_access_log(0.5)
    assert cache.stats() == (0, 1)


# --- queues, Deque and Index ---------------------------------------------------------------


def test_push_refuses_bad_prefixes_tags_and_values(store):
    with pytest.raises(ValueError, match="^queue prefix "):
        store.push(b"x" * BIG, prefix="\ud800")
    for tag in BAD_TAGS:
        with pytest.raises(ValueError, match="^tag "):
            store.push(b"x" * BIG, tag=tag)
    for value in ("\ud800", "v" * BIG + "\ud800"):
        with pytest.raises(ValueError, match="^value "):
            store.push(value)
    with pytest.raises(ValueError, match="^expire "):
        store.push(b"x" * BIG, expire=NAN)
    with pytest.raises(ValueError, match="^queue prefix "):
        store.pull(prefix="\ud800")
    with pytest.raises(ValueError, match="^queue prefix "):
        store.peek(prefix="\ud800")
    assert_empty(store)


def test_deque_and_index_refuse_what_sqlite_cannot_store(tmp_path):
    deque = Deque(directory=str(tmp_path / "deque"))
    for value in ("\ud800", "v" * BIG + "\ud800"):
        with pytest.raises(ValueError, match="^value "):
            deque.append(value)
        with pytest.raises(ValueError, match="^value "):
            deque.appendleft(value)
    deque.extend([1, 2])
    with pytest.raises(ValueError, match="^value "):
        deque.extend([3, "\ud800", 4])
    assert list(deque) == [1, 2, 3]  # like list.extend: the items before the bad one stay
    deque.append(NAN)
    assert math.isnan(Deque(directory=deque.directory).pop())

    index = Index(str(tmp_path / "index"))
    with pytest.raises(ValueError, match="^key "):
        index["\ud800"] = b"x" * BIG
    with pytest.raises(ValueError, match="^key "):
        index.update([("a", 1), ("\ud800", b"x" * BIG)])
    with pytest.raises(ValueError, match="NaN"):
        index[NAN] = 1
    with pytest.raises(ValueError, match="^key "):
        index.setdefault("\ud800", 1)
    assert list(index.items()) == [("a", 1)]
    for collection in (deque, index):
        assert leftovers(collection.directory) == []


# --- settings: timeout and shards ----------------------------------------------------------


@pytest.mark.parametrize("timeout", [NAN, INF, 1e12, 2**31])
def test_a_timeout_sqlite_would_wrap_around_is_refused(cache_class, cache_dir, timeout):
    # sqlite3 passes the timeout as a C int of milliseconds: beyond it, writes never wait.
    with pytest.raises(ValueError, match="^timeout must be from 0 to "):
        cache_class(cache_dir, timeout=timeout)
    assert not op.exists(cache_dir)


@pytest.mark.parametrize("shards", [MAX_SHARDS + 1, 10**6])
def test_fanout_refuses_too_many_shards_before_creating_anything(cache_dir, shards):
    with pytest.raises(ValueError, match=f"shards must be from 1 to {MAX_SHARDS}"):
        FanoutCache(cache_dir, shards=shards)
    assert not op.exists(cache_dir)


@pytest.mark.parametrize("shards, error", [
    (0, ValueError), (-1, ValueError), (True, TypeError), (2.0, TypeError), ("8", TypeError),
    (None, TypeError),
])
def test_fanout_refuses_bad_shard_counts(cache_dir, shards, error):
    with pytest.raises(error, match="^shards "):
        FanoutCache(cache_dir, shards=shards)
    assert not op.exists(cache_dir)


# --- memoize -------------------------------------------------------------------------------


@pytest.mark.parametrize("options, error, match", [
    ({"expire": "x"}, TypeError, "^expire "),
    ({"expire": NAN}, ValueError, "^expire "),
    ({"expire": [1]}, TypeError, "^expire "),
    ({"tag": object()}, TypeError, "^tag "),
    ({"tag": 2**64}, ValueError, "^tag "),
    ({"tag": "\ud800"}, ValueError, "^tag "),
    ({"tag": NAN}, ValueError, "^tag "),
    ({"name": 3}, TypeError, "^name "),
])
def test_memoize_refuses_bad_options_when_decorating(cache, options, error, match):
    with pytest.raises(error, match=match):
        cache.memoize(**options)
    with pytest.raises(error, match=match):
        memoize_stampede(cache, **{"expire": 10, **options})
    assert_empty(cache)


@pytest.mark.parametrize("option", ["beta", "lock_expire", "wait_timeout"])
def test_memoize_stampede_refuses_nan_numbers(cache, option):
    with pytest.raises(ValueError, match=f"^{option} "):
        memoize_stampede(cache, 10, **{option: NAN})


# --- Django --------------------------------------------------------------------------------


@pytest.fixture
def django_cache(tmp_path):
    """A DjangoCache in a fresh directory (Django configured from the test project)."""
    django = pytest.importorskip("django")
    from django.conf import settings

    from tests.helpers.django_project import settings as project

    if not settings.configured:
        settings.configure(**{name: getattr(project, name) for name in dir(project) if name.isupper()})
        django.setup()
    from diskcache_core.contrib import _django_options
    from diskcache_core.contrib import django as backend

    cache = backend.DjangoCache(str(tmp_path / "django"), {})
    yield cache
    for fanout in list(_django_options.SHARED.values()):
        fanout.close()
    _django_options.SHARED.clear()


def test_django_refuses_keys_it_cannot_store(django_cache):
    from django.core.cache.backends.base import InvalidCacheKey

    key = "bad\ud800key"
    calls: list[Callable[[], Any]] = [
        lambda: django_cache.set(key, b"x" * BIG),
        lambda: django_cache.add(key, b"x" * BIG),
        lambda: django_cache.set_many({"fine": 1, key: b"x" * BIG}),
        lambda: django_cache.get(key),
        lambda: django_cache.get_many(["fine", key]),
        lambda: django_cache.has_key(key),
        lambda: django_cache.delete(key),
        lambda: django_cache.delete_many([key]),
        lambda: django_cache.touch(key),
        lambda: django_cache.incr(key),
        lambda: django_cache.pop(key),
        lambda: django_cache.get_or_set(key, b"x" * BIG),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Django's own memcached warnings do not matter here
        for call in calls:
            with pytest.raises(InvalidCacheKey, match="cannot be stored"):
                call()
    assert issubclass(InvalidCacheKey, ValueError)
    assert_empty(django_cache.fanout)


def test_django_refuses_bad_tags_and_nan_timeouts(django_cache):
    with pytest.raises(ValueError, match="^tag "):
        django_cache.set("key", b"x" * BIG, tag=2**64)
    with pytest.raises(ValueError, match="^tag "):
        django_cache.evict("\udc00")
    with pytest.raises(ValueError, match="^timeout must not be NaN"):
        django_cache.set("key", 1, timeout=NAN)
    with pytest.raises(ValueError, match="^timeout must not be NaN"):
        django_cache.memoize(timeout=NAN)
    assert_empty(django_cache.fanout)


def test_django_refuses_a_timeout_too_large_for_a_float_naming_it(django_cache):
    writes: list[Callable[[], Any]] = [
        lambda: django_cache.set("key", 1, timeout=10**400),
        lambda: django_cache.add("key", 1, timeout=10**400),
        lambda: django_cache.touch("key", timeout=10**400),
        lambda: django_cache.set_many({"key": 1}, timeout=10**400),
        lambda: django_cache.get_or_set("key", 1, timeout=10**400),
        lambda: django_cache.memoize(timeout=10**400),
    ]
    for write in writes:
        with pytest.raises(ValueError, match=r"^timeout \(an int of \d+ bits\) is too large"):
            write()
    assert_empty(django_cache.fanout)


@pytest.mark.parametrize("timeout", ["5", b"5", Decimal("NaN"), Decimal("5"), 1j, [5]], ids=repr)
def test_django_refuses_a_timeout_that_is_not_a_number_naming_it(django_cache, timeout):
    for write in (
        lambda: django_cache.set("key", 1, timeout=timeout),
        lambda: django_cache.add("key", 1, timeout=timeout),
        lambda: django_cache.touch("key", timeout=timeout),
        lambda: django_cache.set_many({"key": 1}, timeout=timeout),
    ):
        with pytest.raises(TypeError, match="^timeout must be a number"):
            write()
    assert_empty(django_cache.fanout)

