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


@pytest.mark.parametrize("policy", ["least-recently-used", "least-frequently-used", "none"])
@pytest.mark.parametrize("tagged", [False, True], ids=["plain", "tagged"])
def test_an_overwrite_stores_its_own_store_time_under_every_policy(tmp_path, policy, tagged):
    """As python-diskcache's set (it replaces the row) and diskcache-community's: the row holds
    the overwrite's time at once, for every process (here, python-diskcache's reading of the
    database file), and add over an expired item too."""
    directory = str(tmp_path)
    extra = {"tag": "t", "expire": 60} if tagged else {}
    with dc.Cache(directory, eviction_policy=policy) as cache:
        cache.set("k", 1, **extra)
        cache.set("gone", 1, expire=0.001)
        _, first = cache.get("k", store_time=True)
        expired = time.time() + 0.002
        while time.time() <= expired:  # a later clock reading; 'gone' has expired
            time.sleep(0.001)
        before = time.time()
        cache.set("k", 2, **extra)
        assert cache.add("gone", 2, **extra)
        stored = {key: cache.get(key, store_time=True)[-1] for key in ("k", "gone")}
        assert all(value >= before > first for value in stored.values())
    connection = sqlite3.connect(f"{directory}/cache.db")
    try:
        rows = dict(connection.execute("SELECT key, store_time FROM Cache").fetchall())
    finally:
        connection.close()
    assert rows == stored


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
        from diskcache_core._store import schema as _schema

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


# --- Disk types derived with options; the process-wide default Disk -----------------------------

import dataclasses  # noqa: E402
import enum  # noqa: E402
import logging  # noqa: E402
import pickle  # noqa: E402
import sys  # noqa: E402
import types  # noqa: E402


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Color(enum.Enum):
    RED = 1


def test_with_options_on_error_miss_reads_an_unreadable_entry_as_missing(tmp_path, caplog):
    directory = str(tmp_path)
    with dc.Cache(directory) as cache:
        cache["point"] = Point(1, 2)  # SafeDisk refuses it
        cache["big"] = [Point(3, 4)] * 10_000  # in a value file
        cache["plain"] = [1, 2]
    with dc.Cache(directory, disk=dc.SafeDisk) as cache:
        with pytest.raises(dc.UnsafePickleError):
            cache["point"]
    miss = dc.SafeDisk.with_options(on_error="miss")
    assert issubclass(miss, dc.SafeDisk) and miss.on_error == "miss" and dc.SafeDisk.on_error == "raise"
    with dc.Cache(directory, disk=miss, read_only=True) as cache:  # read as missing, kept
        assert cache.get("point", "default") == "default"
        assert len(cache) == 3
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="diskcache_core"):
        with dc.Cache(directory, disk=miss) as cache:
            assert cache.get("point", "default") == "default"
            assert cache.get("big") is None
            with pytest.raises(KeyError):
                cache["point"]
            assert cache["plain"] == [1, 2] and len(cache) == 1  # both deleted
    levels = [record.levelno for record in caplog.records if "unreadable" in record.getMessage()]
    assert levels[0] == logging.WARNING and set(levels[1:]) == {logging.DEBUG}
    with pytest.raises(ValueError):
        dc.Disk.with_options(on_error="ignore")


def test_with_types_allows_the_types_and_modules_given(tmp_path):
    directory = str(tmp_path)
    module = types.ModuleType("community_models")
    module.Point = type("Point", (), {"__module__": "community_models"})  # (a plain class)
    module.Point.__qualname__ = "Point"
    sys.modules["community_models"] = module
    try:
        with dc.Cache(directory) as cache:
            cache["point"] = Point(1, 2)
            cache["color"] = Color.RED
            cache["module"] = module.Point()
        points = dc.SafeDisk.with_types(Point)
        both = points.with_types(Color, modules=["community_models"])
        assert points.safe_types == frozenset({Point}) and both.safe_types == {Point, Color}
        assert both.safe_modules == ("community_models",) and points.safe_modules == ()
        assert both.__mro__[1] is dc.SafeDisk  # derived types never nest
        with dc.Cache(directory, disk=points) as cache:
            assert cache["point"] == Point(1, 2)
            with pytest.raises(dc.UnsafePickleError):
                cache["color"]
            with pytest.raises(dc.UnsafePickleError):
                cache["module"]
        with dc.Cache(directory, disk=both) as cache:
            assert cache["color"] is Color.RED
            assert type(cache["module"]) is module.Point
            copy = pickle.loads(pickle.dumps(cache))  # a pickled cache keeps its Disk type
            assert type(copy.disk).safe_types == both.safe_types
            copy.close()
    finally:
        del sys.modules["community_models"]
    for bad, error in ((1, TypeError), ("a b", ValueError), ("numpy", ValueError)):
        with pytest.raises(error):
            if isinstance(bad, int):
                dc.SafeDisk.with_types(bad)
            else:
                dc.SafeDisk.with_types(modules=bad)


@pytest.fixture
def no_default(monkeypatch):
    from diskcache_core._disk import default as _defaultdisk

    for name in ("DISKCACHE_DISK", "DISKCACHE_SAFE_TYPES", "DISKCACHE_SAFE_MODULES"):
        monkeypatch.delenv(name, raising=False)
    previous = dc.configure(None)
    _defaultdisk._from_environment.cache_clear()
    yield
    dc.configure(previous)
    _defaultdisk._from_environment.cache_clear()


def test_configure_sets_the_disk_of_caches_made_without_one(tmp_path, no_default):
    assert dc.default_disk() is dc.Disk
    assert dc.configure(dc.SafeDisk) is None
    with dc.Cache(str(tmp_path / "c")) as cache, dc.FanoutCache(str(tmp_path / "f"), shards=2) as fan:
        assert type(cache.disk) is dc.SafeDisk
        assert {type(shard.disk) for shard in fan._shards} == {dc.SafeDisk}
        deque = dc.Deque(directory=str(tmp_path / "d"))
        assert type(deque.cache.disk) is dc.SafeDisk
        deque.cache.close()
    with dc.Cache(str(tmp_path / "j"), disk=dc.JSONDisk) as cache:  # given: it wins
        assert type(cache.disk) is dc.JSONDisk
    assert dc.configure(None) is dc.SafeDisk and dc.default_disk() is dc.Disk
    with pytest.raises(ValueError):
        dc.configure(dc.SafeDisk(str(tmp_path)))


def test_the_environment_selects_the_default_disk(tmp_path, no_default, monkeypatch):
    from diskcache_core._disk import default as _defaultdisk

    def selected(**environment):
        for name, value in environment.items():
            monkeypatch.setenv(name, value)
        return dc.default_disk()

    assert selected(DISKCACHE_DISK="safe") is dc.SafeDisk
    disk = selected(DISKCACHE_SAFE_TYPES=f"{__name__}:Point", DISKCACHE_SAFE_MODULES="json")
    assert disk.safe_types == {Point} and disk.safe_modules == ("json",)
    with pytest.raises(ValueError):  # the SAFE_ variables are set: only with safe
        selected(DISKCACHE_DISK="diskcache_core.JSONDisk")
    monkeypatch.delenv("DISKCACHE_SAFE_TYPES")
    monkeypatch.delenv("DISKCACHE_SAFE_MODULES")
    assert selected(DISKCACHE_DISK="diskcache_core:JSONDisk") is dc.JSONDisk
    assert selected(DISKCACHE_DISK="default") is dc.Disk
    for wrong in ("no_such_module:Disk", "diskcache_core:Cache"):
        with pytest.raises(ValueError):
            selected(DISKCACHE_DISK=wrong)
    with pytest.raises(ValueError):
        selected(DISKCACHE_DISK="", DISKCACHE_SAFE_MODULES="json")  # only with safe
    dc.configure(dc.JSONDisk)  # configure() wins over the environment
    assert selected(DISKCACHE_DISK="safe", DISKCACHE_SAFE_MODULES="") is dc.JSONDisk
    _defaultdisk._from_environment.cache_clear()


def test_deque_errors_as_diskcache_communitys(tmp_path):
    deque = dc.Deque([1, 2, 3], directory=str(tmp_path))
    with pytest.raises(IndexError):
        deque[3]
    with pytest.raises(IndexError):
        deque[-4]
    with pytest.raises(ValueError):
        deque.remove(9)
    forward, backward = iter(deque), reversed(deque)
    assert next(forward) == 1 and next(backward) == 3
    del deque[1]  # an item vanishes while iterating: skipped, no KeyError
    assert list(forward) == [3] and list(backward) == [1]
    deque.cache.close()


def test_a_read_only_cache_peeks_past_expired_items(tmp_path):
    directory = str(tmp_path)
    with dc.Cache(directory, cull_limit=0) as cache:
        cache.set("first", 0, expire=-1)
        cache.push("q0", expire=-1)
        cache.push("q1")
        cache.push("q2", expire=-1)
        cache.set("last", 9, expire=-1)
    with dc.Cache(directory, read_only=True) as cache:
        assert cache.peek()[1] == "q1" and cache.peek(side="back")[1] == "q1"
        assert cache.peekitem(last=False)[1] == "q1" and cache.peekitem()[1] == "q1"
        assert len(cache) == 5  # nothing removed


def test_memoize_ignores_a_named_parameter_passed_by_position(tmp_path):
    with dc.Cache(str(tmp_path)) as cache:
        calls = []

        @cache.memoize(ignore={"session"})
        def load(entity, session):
            calls.append(entity)
            return entity

        assert load("a", object()) == "a" and load("a", session=object()) == "a"
        assert load("a", object()) == "a" and calls == ["a"]
        assert load.__cache_key__("a", 1) == load.__cache_key__("a", session=2)

        @cache.memoize(ignore={"args", "key"})  # not positional parameters: no position
        def other(first, *args, key=None):
            return first

        assert other.__cache_key__(1, 2, key=3) != other.__cache_key__(1, key=3)


def test_on_error_miss_covers_pop_pull_peek_and_peekitem(tmp_path, caplog):
    """As diskcache-community's: an entry that cannot be read back goes, as a miss: ``pop``
    returns the default, ``pull``, ``peek`` and ``peekitem`` pass on to the next readable item
    (and so a Deque's popleft, peek and d[i])."""
    directory = str(tmp_path)
    with dc.Cache(directory) as cache:  # written by a plain Disk, refused by SafeDisk
        cache["point"] = Point(1, 2)
        cache.push(Point(3, 4))
        cache.push("second")
        cache.push(Point(5, 6), side="front")
        cache["last"] = Point(7, 8)
    miss = dc.SafeDisk.with_options(on_error="miss")
    with dc.Cache(directory, disk=dc.SafeDisk) as cache:  # 'raise': nothing goes
        for read in (lambda: cache.pop("point"), cache.pull, cache.peek, cache.peekitem):
            with pytest.raises(dc.UnsafePickleError):
                read()
        assert len(cache) == 5
    with caplog.at_level(logging.DEBUG, logger="diskcache_core"):
        with dc.Cache(directory, disk=miss) as cache:
            assert cache.pop("point", "default") == "default" and "point" not in cache
            assert cache.peek() == (500000000000001, "second")  # both before it went
            assert cache.peekitem() == (500000000000001, "second")  # 'last' went
            assert len(cache) == 1
            with dc.Cache(directory) as plain:
                plain.push(Point(9, 9), side="front")
            assert cache.pull() == (500000000000001, "second") and len(cache) == 0
    assert any("unreadable" in record.getMessage() for record in caplog.records)
    plain_deque = dc.Deque([Point(1, 1), "b", Point(2, 2), "d"], str(tmp_path / "deque"))
    plain_deque.cache.close()
    deque = dc.Deque(directory=str(tmp_path / "deque"), disk=miss)
    assert deque.popleft() == "b" and deque[0] == "d" and deque.peek() == "d"
    assert list(deque) == ["d"]


def test_deque_and_index_take_a_disk(tmp_path):
    """``Deque(..., disk=)``, ``Index(..., disk=)`` and FanoutCache's ``deque(name, disk=)`` and
    ``index(name, disk=)``, as diskcache-community's; positional arguments are python-diskcache's,
    and an Index keyword ``disk`` that is not a Disk type stays an item."""
    deque = dc.Deque([1], str(tmp_path / "d1"), 5, dc.SafeDisk)
    assert type(deque.cache.disk) is dc.SafeDisk and deque.maxlen == 5 and list(deque) == [1]
    miss = dc.Disk.with_options(on_error="miss")
    assert type(dc.Deque(directory=str(tmp_path / "d2"), disk=miss).cache.disk) is miss
    with pytest.raises(TypeError, match="SafeDisk cannot store value"):
        dc.Deque(directory=str(tmp_path / "d3"), disk=dc.SafeDisk).append(Point(1, 2))
    index = dc.Index(str(tmp_path / "i1"), {"a": 1}, disk=dc.SafeDisk, b=2)
    assert type(index.cache.disk) is dc.SafeDisk and dict(index) == {"a": 1, "b": 2}
    index = dc.Index(disk=dc.SafeDisk, c=3)
    assert type(index.cache.disk) is dc.SafeDisk and dict(index) == {"c": 3}
    assert dict(dc.Index(str(tmp_path / "i2"), disk="an item")) == {"disk": "an item"}
    assert type(dc.Index(str(tmp_path / "i3")).cache.disk) is dc.default_disk()
    with dc.FanoutCache(str(tmp_path / "fan"), disk=dc.SafeDisk) as fanout:
        assert type(fanout.deque("safe").cache.disk) is dc.SafeDisk
        assert type(fanout.index("safe").cache.disk) is dc.SafeDisk
        plain_deque, plain_index = fanout.deque("plain", disk=dc.Disk), fanout.index("plain", disk=dc.Disk)
        assert type(plain_deque.cache.disk) is dc.Disk and type(plain_index.cache.disk) is dc.Disk
        plain_deque.append(Point(1, 2))
        plain_index["p"] = Point(3, 4)
        assert plain_deque[0] == Point(1, 2) and plain_index["p"] == Point(3, 4)
