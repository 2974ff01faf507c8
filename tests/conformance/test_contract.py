"""The Cache API contract, one suite over every variant (docs/cache.rst, docs/remote.rst).

`CacheContract` holds the tests; each ``Test...`` class below is one variant of the cache
(Cache or FanoutCache, memory tier on or off, with or without a remote on a real
redis-server) and supplies only its `make_cache` fixture, the way dogpile.cache ships one
generic backend suite that each backend subclasses. A variant that does not support an
operation says so in `UNSUPPORTED`, and the contract then asserts the documented error
(`RemoteUnsupportedError`) instead of the result.

Every test also reads through *peers*: other cache objects that must see what this one wrote
at once (another object on the same directory, so another memory tier) or within the remote's
bound (with a remote: another host, that is another directory on the same Redis and prefix).
"""

from __future__ import annotations

import io
import threading
import os
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from redis_servers import RedisTestServer, redis_missing

import diskcache_core as dc
from diskcache_core import ENOVAL, Cache, FanoutCache, RemoteUnsupportedError

BIG = 300_000  # bytes: a value file whatever the inline threshold
OTHER_HOST_WAIT = 10.0  # seconds: the bound for another host to see a write (about 1 ms idle)

MakeCache = Callable[..., Any]


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    """A real redis-server for the remote variants of this module, stopped afterwards."""
    reason = redis_missing()
    if reason and os.environ.get("CI") != "true":  # CI installs it: there a missing one fails
        pytest.skip(reason)
    with RedisTestServer() as server:
        yield server.url


def eventually(read: Callable[[], Any], expected: Any, deadline: float = OTHER_HOST_WAIT) -> Any:
    """`read()` until it returns `expected` or `deadline` seconds pass; the last result."""
    end = time.monotonic() + deadline
    result = read()
    while result != expected and time.monotonic() < end:
        time.sleep(0.005)
        result = read()
    return result


class CacheContract:
    """The tests every variant must pass. Subclasses set the class attributes below."""

    cache_class: type[Cache] | type[FanoutCache] = Cache
    memory = True
    remote = False
    # Operations the variant refuses with RemoteUnsupportedError (docs/remote.rst, "Across
    # hosts, or refused").
    UNSUPPORTED: frozenset[str] = frozenset()

    @pytest.fixture
    def make_cache(self, request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[MakeCache]:
        """make_cache(host=0, **options): a cache of this variant on host `host`'s directory.

        Without a remote every host is the same directory (there is only one machine); with
        a remote each host is a directory of its own, sharing the test's Redis prefix."""
        created: list[Any] = []
        extra: dict[str, Any] = {}
        if self.remote:
            extra = {"remote": request.getfixturevalue("redis_url"),
                     "remote_prefix": f"contract-{uuid.uuid4().hex[:12]}:"}

        def make(host: int = 0, **options: Any) -> Any:
            options = {**extra, **options}
            if not self.memory:
                options.setdefault("memory_size_limit", 0)
            if self.cache_class is FanoutCache:
                options.setdefault("shards", 4)
                options.setdefault("timeout", 5.0)  # results, not give-ups, on a loaded machine
            directory = tmp_path / (f"host{host}" if self.remote else "host0")
            instance = self.cache_class(str(directory), **options)
            created.append(instance)
            return instance

        yield make
        for instance in created:
            instance.close()

    @pytest.fixture
    def cache(self, make_cache: MakeCache) -> Any:
        return make_cache()

    def see(self, peer: Any, read: Callable[[Any], Any], expected: Any, writer: Any = None) -> None:
        """Assert `read(peer)` gives `expected` after a write by `writer` (default: the first
        cache): at once on the writer's host, within the bound on another host."""
        written_on = self.first_directory if writer is None else writer.directory
        if self.remote and peer.directory != written_on:
            assert eventually(lambda: read(peer), expected) == expected
        else:
            assert read(peer) == expected

    @pytest.fixture(autouse=True)
    def _first_directory(self, cache: Any) -> None:
        self.first_directory = cache.directory

    @pytest.fixture
    def peers(self, make_cache: MakeCache) -> list[Any]:
        """Objects that see this cache's items: same directory (another memory tier), and
        with a remote another host."""
        return [make_cache()] + ([make_cache(host=1)] if self.remote else [])

    # Divergences the suite found and that are not fixed yet: test name -> reason. Each is
    # run as xfail(strict=True), so that the fix makes it fail until its line goes.
    KNOWN_DIVERGENCES: dict[str, str] = {}

    @pytest.fixture(autouse=True)
    def _known_divergence(self, request: pytest.FixtureRequest) -> None:
        reason = self.KNOWN_DIVERGENCES.get(request.function.__name__)
        if reason is not None:
            request.node.add_marker(pytest.mark.xfail(strict=True, reason=reason))

    def refused(self, operation: str) -> bool:
        return operation in self.UNSUPPORTED

    # --- get / set -----------------------------------------------------------------------

    @pytest.mark.parametrize("key", [0, 2**70, -2.5, "", "text", "ünï ✓", b"\x00\xff", ("t", 1), None],
                             ids=["int", "int70", "float", "empty", "str", "unicode", "bytes", "tuple", "none"])
    def test_set_then_get_returns_the_value_everywhere(self, cache, peers, key):
        value = {"key": key, "list": [1, 2.5, "three"]}
        assert cache.set(key, value) is True
        assert cache.get(key) == value
        assert cache[key] == value
        assert key in cache
        for peer in peers:
            self.see(peer, lambda c: c.get(key), value)

    @pytest.mark.parametrize("value", [b"", b"small bytes", b"x" * BIG, "t" * BIG, 2**100, 1.5, None],
                             ids=["empty", "bytes", "big-bytes", "big-str", "int100", "float", "none"])
    def test_values_inline_and_in_value_files_round_trip(self, cache, peers, value):
        assert cache.set("k", value)
        assert cache.get("k") == value
        for peer in peers:
            self.see(peer, lambda c: c.get("k"), value)

    def test_overwrite_replaces_the_value_everywhere(self, cache, peers):
        cache.set("k", "old")
        for peer in peers:
            self.see(peer, lambda c: c.get("k"), "old")
        cache.set("k", "new")
        assert cache.get("k") == "new"
        for peer in peers:
            self.see(peer, lambda c: c.get("k"), "new")

    def test_get_of_a_missing_key_gives_the_default(self, cache):
        assert cache.get("missing") is None
        assert cache.get("missing", "d") == "d"
        assert cache.get("missing", default=ENOVAL) is ENOVAL
        assert "missing" not in cache
        with pytest.raises(KeyError):
            cache["missing"]

    def test_result_shapes_with_expire_time_and_tag(self, cache):
        before = time.time()
        cache.set("k", "v", expire=100, tag="t")
        value, expire_time = cache.get("k", expire_time=True)
        assert value == "v" and before + 100 <= expire_time <= time.time() + 100
        assert cache.get("k", tag=True) == ("v", "t")
        value, expire_time, tag = cache.get("k", expire_time=True, tag=True)
        assert (value, tag) == ("v", "t") and before + 100 <= expire_time <= time.time() + 100
        cache.set("plain", 1)
        assert cache.get("plain", expire_time=True, tag=True) == (1, None, None)
        assert cache.get("missing", expire_time=True) == (None, None)
        assert cache.get("missing", tag=True) == (None, None)
        assert cache.get("missing", "d", expire_time=True, tag=True) == ("d", None, None)

    def test_result_shapes_are_the_same_on_peers(self, cache, peers):
        cache.set("k", "v", expire=100, tag="t")
        _, expire_time = cache.get("k", expire_time=True)
        for peer in peers:
            self.see(peer, lambda c: c.get("k", expire_time=True, tag=True), ("v", expire_time, "t"))

    def test_read_true_gives_a_binary_file(self, cache, peers):
        for key, value in (("small", b"abc"), ("big", b"y" * BIG)):
            cache.set(key, value)
            handle = cache.get(key, read=True)
            assert isinstance(handle, io.IOBase) or hasattr(handle, "read")
            with handle:
                assert handle.read() == value
        for peer in peers:
            self.see(peer, lambda c: _read_all(c.get("big", read=True)), b"y" * BIG)

    def test_setitem_and_delitem(self, cache, peers):
        cache["k"] = 1
        assert cache["k"] == 1
        del cache["k"]
        assert "k" not in cache
        with pytest.raises(KeyError):
            del cache["k"]
        for peer in peers:
            self.see(peer, lambda c: c.get("k", ENOVAL), ENOVAL)

    def test_writes_of_a_peer_are_seen_over_what_this_object_holds(self, cache, peers):
        """What this object read (and its memory tier may hold: a value, a miss, an expiry, a
        tag) gives way to each peer's write."""
        for number, peer in enumerate(peers):
            missing, touched, tagged, deleted = (f"{name}{number}" for name in ("m", "t", "g", "d"))
            cache.set(touched, "v", expire=100)
            cache.set(tagged, "v", tag="a")
            cache.set(deleted, "v")
            assert cache.get(missing) is None and cache.get(touched, expire_time=True)[1] > 0
            assert cache.get(tagged, tag=True) == ("v", "a") and deleted in cache
            self.see(peer, lambda c: c.get(deleted), "v")
            assert peer.add(missing, "added") is True
            assert peer.touch(touched, None) is True
            assert peer.set(tagged, "w", tag="b") is True
            assert peer.delete(deleted) is True
            self.see(cache, lambda c: c.get(missing), "added", writer=peer)
            self.see(cache, lambda c: c.get(touched, expire_time=True), ("v", None), writer=peer)
            self.see(cache, lambda c: c.get(tagged, tag=True), ("w", "b"), writer=peer)
            self.see(cache, lambda c: deleted in c, False, writer=peer)

    # --- add / touch / delete / pop -------------------------------------------------------

    def test_add_stores_only_when_missing(self, cache, peers):
        assert cache.add("k", 1) is True
        assert cache.add("k", 2) is False
        assert cache.get("k") == 1
        for peer in peers:
            self.see(peer, lambda c: c.get("k"), 1)
            assert peer.add("k", 3) is False
        assert cache.get("k") == 1

    def test_add_over_an_expired_item_stores(self, cache):
        cache.set("k", "old", expire=0.05)
        time.sleep(0.1)
        assert cache.add("k", "new") is True
        assert cache.get("k") == "new"

    def test_touch_changes_the_expiry_of_present_items_only(self, cache, peers):
        assert cache.touch("missing", 10) is False
        cache.set("k", "v", expire=1000)
        before = time.time()
        assert cache.touch("k", 50) is True
        _, expire_time = cache.get("k", expire_time=True)
        assert before + 50 <= expire_time <= time.time() + 50
        assert cache.touch("k") is True  # no expiry
        assert cache.get("k", expire_time=True) == ("v", None)
        for peer in peers:
            self.see(peer, lambda c: c.get("k", expire_time=True), ("v", None))

    def test_delete_reports_whether_it_removed(self, cache, peers):
        cache.set("k", "v")
        for peer in peers:
            self.see(peer, lambda c: c.get("k"), "v")
        assert cache.delete("k") is True
        assert cache.delete("k") is False
        for peer in peers:
            self.see(peer, lambda c: c.get("k", ENOVAL), ENOVAL)

    def test_pop_returns_and_removes(self, cache, peers):
        cache.set("k", "v", expire=100, tag="t")
        for peer in peers:
            self.see(peer, lambda c: c.get("k"), "v")
        value, expire_time, tag = cache.pop("k", expire_time=True, tag=True)
        assert (value, tag) == ("v", "t") and expire_time > time.time()
        assert cache.pop("k") is None
        assert cache.pop("k", "d") == "d"
        assert cache.pop("k", "d", expire_time=True, tag=True) == ("d", None, None)
        for peer in peers:
            self.see(peer, lambda c: c.get("k", ENOVAL), ENOVAL)

    def test_pop_gives_the_item_to_one_caller_only(self, cache, peers):
        cache.set("k", "v")
        for peer in peers:
            self.see(peer, lambda c: c.get("k"), "v")
        results = [peer.pop("k", ENOVAL) for peer in peers] + [cache.pop("k", ENOVAL)]
        assert results.count("v") == 1 and results.count(ENOVAL) == len(results) - 1

    def test_read_gives_a_file_or_keyerror(self, cache):
        cache.set("k", b"r" * BIG)
        with cache.read("k") as handle:
            assert handle.read() == b"r" * BIG
        with pytest.raises(KeyError):
            cache.read("missing")

    def test_check_cull_and_volume_on_a_sound_cache(self, cache):
        for number in range(5):
            cache.set(number, b"v" * (BIG if number == 0 else 10))
        assert cache.check() == []
        assert cache.cull() == 0
        # With a remote the directory holds this host's copies only, and a write keeps none.
        assert cache.volume() > (0 if self.remote else BIG)
        assert [cache.get(number) is not None for number in range(5)] == [True] * 5

    # --- incr / decr ----------------------------------------------------------------------

    def test_incr_and_decr(self, cache, peers):
        assert cache.incr("n") == 1
        assert cache.incr("n", 10) == 11
        assert cache.decr("n", 3) == 8
        assert cache.incr("big", 2**70, default=2**70) == 2**71
        assert cache.incr("f", 0.5, default=1) == 1.5
        for peer in peers:
            self.see(peer, lambda c: c.get("n"), 8)
            self.see(peer, lambda c: c.get("big"), 2**71)

    def test_incr_of_a_missing_key_without_default_raises_keyerror(self, cache):
        with pytest.raises(KeyError):
            cache.incr("missing", default=None)
        with pytest.raises(KeyError):
            cache.decr("missing", default=None)
        assert "missing" not in cache

    def test_incr_of_a_value_that_is_not_a_number_raises_typeerror(self, cache):
        cache.set("s", "text")
        with pytest.raises(TypeError):
            cache.incr("s")
        assert cache.get("s") == "text"

    def test_incr_from_two_objects_adds_up(self, cache, peers):
        for _ in range(5):
            cache.incr("n")
            for peer in peers:
                peer.incr("n")
        expected = 5 * (1 + len(peers))
        assert cache.get("n") == expected
        for peer in peers:
            self.see(peer, lambda c: c.get("n"), expected)

    def test_incr_keeps_the_expiry_and_tag(self, cache):
        cache.set("n", 1, expire=100, tag="t")
        cache.incr("n")
        value, expire_time, tag = cache.get("n", expire_time=True, tag=True)
        assert (value, tag) == (2, "t") and expire_time > time.time() + 50

    # --- expiry, tags, clear --------------------------------------------------------------

    def test_expired_items_are_missing_everywhere(self, cache, peers):
        cache.set("short", "v", expire=0.05)
        cache.set("long", "w", expire=100)
        time.sleep(0.1)
        assert cache.get("short", ENOVAL) is ENOVAL
        assert "short" not in cache
        for peer in peers:
            self.see(peer, lambda c: (c.get("short", ENOVAL), c.get("long")), (ENOVAL, "w"))

    def test_expired_items_behave_as_missing_in_every_operation(self, cache):
        for key in ("touch", "pop", "delete", "incr", "add", "read"):
            cache.set(key, 10, expire=0.05, tag="t")
        time.sleep(0.1)
        assert cache.touch("touch", 100) is False
        assert cache.pop("pop", "d", expire_time=True, tag=True) == ("d", None, None)
        assert cache.delete("delete") is False
        assert cache.incr("incr", 1, default=5) == 6
        assert cache.get("incr", expire_time=True, tag=True) == (6, None, None)
        assert cache.add("add", "new") is True
        assert cache.get("add", tag=True) == ("new", None)
        assert cache.get("read", read=True) is None
        assert cache.evict("t") == 0 or cache.get("touch", ENOVAL) is ENOVAL

    def test_expire_removes_expired_items_and_counts_them(self, cache):
        cache.set("short", "v", expire=0.05)
        cache.set("long", "w", expire=100)
        cache.get("short")  # a copy to remove, on a near cache too
        time.sleep(0.1)
        if self.remote:
            # Host-local by design (docs/remote.rst): expire() removes this host's copies, and
            # Redis's own expiry may already have made the listener drop the copy.
            assert cache.expire() in (0, 1)
        else:
            assert cache.expire() == 1
        assert cache.expire() == 0
        assert cache.get("short", ENOVAL) is ENOVAL
        assert cache.get("long") == "w"

    def test_evict_removes_the_tag_only_and_counts(self, cache, peers):
        for number in range(6):
            cache.set(number, number, tag="even" if number % 2 == 0 else "odd")
        cache.set("untagged", 1)
        assert cache.evict("even") == 3
        assert cache.evict("even") == 0
        assert [cache.get(number, ENOVAL) for number in range(6)] == [ENOVAL, 1, ENOVAL, 3, ENOVAL, 5]
        for peer in peers:
            self.see(peer, lambda c: [c.get(n, ENOVAL) for n in range(6)], [ENOVAL, 1, ENOVAL, 3, ENOVAL, 5])
            self.see(peer, lambda c: c.get("untagged"), 1)

    def test_evict_of_no_tag_removes_nothing(self, cache, peers):
        """``evict(None)`` matches no item (SQLite's ``tag = NULL``), as in python-diskcache:
        untagged items stay."""
        cache.set("untagged", 1)
        cache.set("tagged", 2, tag="t")
        assert cache.evict(None) == 0
        assert (cache.get("untagged"), cache.get("tagged")) == (1, 2)
        for peer in peers:
            self.see(peer, lambda c: (c.get("untagged"), c.get("tagged")), (1, 2))

    def test_many_tags_per_item(self, cache, peers):
        """docs/tags.rst: ``tags=``, ``get(tags=True)``, ``evict`` over any tag, ``evict_tags``,
        ``iterkeys(tag=)``; every peer (another memory tier) sees the eviction at once."""
        for number in range(6):
            cache.set(number, number, tag="first", tags=["even" if number % 2 == 0 else "odd", "all"])
        cache.set("other", 1, tags=["odd", "x"])
        assert cache.get(0, tags=True) == (0, frozenset({"first", "even", "all"}))
        assert cache.get(1, tag=True, tags=True) == (1, "first", frozenset({"first", "odd", "all"}))
        if self.refused("iteration"):  # (iterkeys(tag=) too: a remote's tag sets have no order)
            with pytest.raises(RemoteUnsupportedError):
                list(cache.iterkeys(tag="odd"))
        else:
            assert sorted(cache.iterkeys(tag="odd"), key=str) == [1, 3, 5, "other"]
        for peer in peers:  # (read once: the memory tiers hold the values)
            assert [peer.get(number) for number in range(6)] == list(range(6))
        assert cache.evict_tags(["even", "x"]) == 4
        assert cache.evict("odd") == 3
        for peer in [cache, *peers]:
            assert [peer.get(number, ENOVAL) for number in range(6)] == [ENOVAL] * 6
            assert peer.get("other", ENOVAL) is ENOVAL
            if not self.refused("iteration"):
                assert list(peer.iterkeys(tag="all")) == []

    def test_clear_removes_everything_and_counts(self, cache, peers):
        for number in range(7):
            cache.set(number, number)
        cache.set("big", b"z" * BIG)
        assert cache.clear() == 8
        assert cache.clear() == 0
        assert cache.get(3, ENOVAL) is ENOVAL
        for peer in peers:
            self.see(peer, lambda c: (c.get(3, ENOVAL), c.get("big", ENOVAL)), (ENOVAL, ENOVAL))

    # --- statistics -----------------------------------------------------------------------

    def test_stats_count_hits_and_misses(self, cache):
        assert cache.stats(enable=True, reset=True) == (0, 0)
        cache.get("missing")
        cache.set("k", "v")
        cache.get("k")
        cache.get("k")
        assert cache.stats() == (2, 1)
        assert cache.stats(reset=True) == (2, 1)
        assert cache.stats() == (0, 0)

    # --- transactions, iteration, queues: refused where the variant cannot --------------

    def test_transact(self, cache):
        if self.refused("transact"):
            with pytest.raises(RemoteUnsupportedError):
                with cache.transact():
                    pass
            return
        with cache.transact():
            cache.set("a", 1)
            cache.incr("a")
        assert cache.get("a") == 2

    def test_iteration_and_len(self, cache):
        for key in ("a", "b", "c"):
            cache.set(key, key.upper())
        if self.refused("iteration"):
            with pytest.raises(RemoteUnsupportedError):
                list(cache)
            with pytest.raises(RemoteUnsupportedError):
                len(cache)
            return
        assert sorted(cache) == ["a", "b", "c"]
        assert sorted(reversed(cache)) == ["a", "b", "c"]
        assert len(cache) == 3

    def test_queue(self, cache):
        if self.cache_class is FanoutCache:  # python-diskcache's FanoutCache has none either
            assert not any(hasattr(cache, name) for name in ("push", "pull", "peek", "peekitem"))
            return
        if self.refused("queue"):
            for call in (lambda: cache.push(1), lambda: cache.pull(), lambda: cache.peek(),
                         lambda: cache.peekitem()):
                with pytest.raises(RemoteUnsupportedError):
                    call()
            return
        first = cache.push("one")
        cache.push("two")
        assert cache.peekitem() == (first, "one") or cache.peekitem()[1] == "two"
        assert cache.pull()[1] == "one"
        assert cache.pull()[1] == "two"
        assert cache.pull() == (None, None)

    # --- bad input ------------------------------------------------------------------------

    def test_bad_input_is_refused_before_anything_is_stored(self, cache):
        with pytest.raises(ValueError):
            cache.set(float("nan"), 1)
        with pytest.raises(ValueError):
            cache.set("\ud800", 1)
        with pytest.raises(ValueError):
            cache.set("k", 1, expire=float("nan"))
        with pytest.raises(TypeError):
            cache.set("k", 1, tag=object())
        with pytest.raises(TypeError):
            cache.incr("k", "one")
        assert cache.get("k", ENOVAL) is ENOVAL

    def test_reads_of_an_impossible_key_raise_valueerror(self, cache):
        for call in (lambda: cache.get("\ud800"), lambda: cache.delete("\ud800"),
                     lambda: cache.pop("\ud800")):
            with pytest.raises(ValueError):
                call()

    # --- memoize --------------------------------------------------------------------------

    def test_memoize_computes_once_per_arguments(self, cache, peers):
        calls: list[tuple[int, int]] = []

        @cache.memoize(typed=True)
        def add(a: int, b: int) -> int:
            calls.append((a, b))
            return a + b

        assert [add(1, 2), add(1, 2), add(2, 2)] == [3, 3, 4]
        assert calls == [(1, 2), (2, 2)]
        key = add.__cache_key__(1, 2)
        for peer in peers:
            self.see(peer, lambda c: c.get(key), 3)

    def test_memoize_with_expire_recomputes_after_expiry(self, cache):
        calls = []

        @cache.memoize(expire=0.05)
        def value() -> int:
            calls.append(1)
            return len(calls)

        assert value() == 1 and value() == 1
        time.sleep(0.1)
        assert value() == 2

    # --- threads --------------------------------------------------------------------------

    def test_threads_incr_one_counter_exactly(self, cache):
        def work() -> None:
            for _ in range(50):
                cache.incr("n")

        threads = [threading.Thread(target=work) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert cache.get("n") == 200


def _read_all(handle: Any) -> bytes | None:
    if handle is None:
        return None
    with handle:
        data: bytes = handle.read()
        return data


REMOTE_REFUSES = frozenset({"transact", "iteration", "queue"})
REMOTE_DIVERGES: dict[str, str] = {}


class TestCacheMemoryOn(CacheContract):
    cache_class = Cache
    memory = True


class TestCacheMemoryOff(CacheContract):
    cache_class = Cache
    memory = False


class TestFanoutMemoryOn(CacheContract):
    cache_class = FanoutCache
    memory = True


class TestFanoutMemoryOff(CacheContract):
    cache_class = FanoutCache
    memory = False


class TestCacheRemoteMemoryOn(CacheContract):
    cache_class = Cache
    memory = True
    remote = True
    UNSUPPORTED = REMOTE_REFUSES
    KNOWN_DIVERGENCES = REMOTE_DIVERGES


class TestCacheRemoteMemoryOff(CacheContract):
    cache_class = Cache
    memory = False
    remote = True
    UNSUPPORTED = REMOTE_REFUSES
    KNOWN_DIVERGENCES = REMOTE_DIVERGES


class TestFanoutRemoteMemoryOn(CacheContract):
    cache_class = FanoutCache
    memory = True
    remote = True
    UNSUPPORTED = REMOTE_REFUSES
    KNOWN_DIVERGENCES = REMOTE_DIVERGES


class TestFanoutRemoteMemoryOff(CacheContract):
    cache_class = FanoutCache
    memory = False
    remote = True
    UNSUPPORTED = REMOTE_REFUSES
    KNOWN_DIVERGENCES = REMOTE_DIVERGES


def test_every_variant_is_a_subclass_of_the_contract():
    """The matrix is complete: Cache and FanoutCache x memory tier on/off x remote or not."""
    variants = {(cls.cache_class, cls.memory, cls.remote) for cls in CacheContract.__subclasses__()}
    assert variants == {(kind, memory, remote) for kind in (Cache, FanoutCache)
                        for memory in (True, False) for remote in (True, False)}
    assert dc.Cache is Cache
