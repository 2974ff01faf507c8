"""The remote tier against a real redis-server: many simulated hosts (directories), each with its
own processes, sharing one Redis as the source of truth (docs/remote.rst)."""

from __future__ import annotations

import bisect
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

import diskcache_core
from diskcache_core import (
    Cache,
    FanoutCache,
    RemoteError,
    RemoteUnavailableError,
    RemoteUnsupportedError,
)

import remote_helpers as helpers
from remote_helpers import eventually
from redis_servers import RedisTestCluster, RedisTestServer, needs_redis

pytestmark = needs_redis

SPAWN = multiprocessing.get_context("spawn")


@pytest.fixture
def url(server):
    return server.url


@pytest.fixture
def prefix():
    return f"test-{uuid.uuid4().hex[:12]}:"


@pytest.fixture
def hosts(tmp_path, url, prefix):
    """Open caches for simulated hosts: hosts(n) -> n caches on n directories."""
    opened = []

    def make(count=2, **options):
        caches = [
            Cache(str(tmp_path / f"host{len(opened) + number}"), remote=url, remote_prefix=prefix,
                  **options)
            for number in range(count)
        ]
        opened.extend(caches)
        return caches

    yield make
    for cache in opened:
        cache.close()



# --- the API, across two hosts -------------------------------------------------------------------


def test_set_get_across_hosts(hosts):
    a, b = hosts()
    assert a.set("k", "v1") is True
    assert b.get("k") == "v1"
    a.set("k", {"nested": [1, 2]})
    eventually(lambda: b.get("k") == {"nested": [1, 2]})
    assert b.get("missing", "dflt") == "dflt"
    assert "k" in b and "missing" not in b


def test_a_write_is_seen_at_once_by_its_own_host(hosts):
    (a,) = hosts(1)
    for value in range(50):
        a.set("k", value)
        assert a.get("k") == value  # read-your-writes: no wait for the listener
    a.delete("k")
    assert a.get("k") is None


def test_keys_of_every_type_and_values_of_every_kind(hosts):
    a, b = hosts()
    items = {
        "text": "déjà vu", b"bytes": b"\x00\xff", 7: 2**70, 1.5: 3.25, (1, "t"): [None, {1}],
        "big": b"x" * 200_000, "bigtext": "y" * 100_000, "neg": -(2**63), "float": float("inf"),
    }
    for key, value in items.items():
        a.set(key, value)
    for key, value in items.items():
        assert b.get(key) == value, key
    assert b.get(1.0) is None and b.get(7.0) == 2**70  # 7 and 7.0 are one key, as in SQLite
    handle = b.read("big")
    assert handle.read() == b"x" * 200_000


def test_add_expire_tag_touch_pop_delete(hosts):
    a, b = hosts()
    assert a.add("k", 1) is True
    assert b.add("k", 2) is False
    a.set("t", "value", expire=100, tag="group")
    value, expires, tag = b.get("t", expire_time=True, tag=True)
    assert value == "value" and tag == "group" and expires == pytest.approx(time.time() + 100, abs=5)
    assert b.touch("t", 1000) is True and b.touch("nope", 1) is False
    eventually(lambda: b.get("t", expire_time=True)[1] > time.time() + 500)
    a.set("short", 1, expire=0.2)
    eventually(lambda: b.get("short") is None)
    assert a.pop("k", expire_time=True, tag=True) == (1, None, None)
    assert b.pop("k", "gone") == "gone"
    assert a.delete("t") is True and a.delete("t") is False
    eventually(lambda: b.get("t") is None)


def _count_remote_reads(cache):
    """Wrap `cache`'s Redis GET so its own reads are counted: a list whose length is the count."""
    store = cache._remote._remote
    calls = []
    plain_get = store.get

    def counting_get(name):
        calls.append(name)
        return plain_get(name)

    store.get = counting_get
    return calls


def _local_values(cache, keys):
    """The values of `cache`'s rows for `keys` in its own database (copies, read without it)."""
    import sqlite3

    with sqlite3.connect(os.path.join(cache.directory, "cache.db")) as connection:
        rows = dict(connection.execute("SELECT key, value FROM Cache").fetchall())
    return [rows.get(key) for key in keys]


@pytest.mark.parametrize("refresh", [True, False])
def test_the_listener_renews_copies_of_changed_items(hosts, refresh):
    """With remote_refresh (the default), host B's listener reads the new value of an item B
    holds a copy of as soon as it hears of the change, so B's next get is answered locally;
    without it, B's next get asks Redis. Either way B never serves the old value."""
    a, b = hosts(remote_refresh=refresh)
    eventually(b._remote._words.lease_valid)  # B's listener hears changes from now on
    keys = list(range(40))
    for key in keys:
        a.set(key, f"old-{key}")
    olds = [f"old-{key}" for key in keys]

    def b_holds_copies():
        # A get keeps its row only if its stamp did not move while Redis was asked (B's listener
        # may hear of A's sets late) and the host's write lock is free at once; a get that could
        # not is repeated, past B's memory tier (which may hold the copy alone).
        b._memory.clear()
        return [b.get(key) for key in keys] == olds and _local_values(b, keys) == olds

    eventually(b_holds_copies)
    reads = _count_remote_reads(b)
    for round_ in range(3):
        for key in keys:
            a.set(key, f"new-{round_}-{key}")
        expected = [f"new-{round_}-{key}" for key in keys]
        if refresh:
            eventually(lambda: _local_values(b, keys) == expected)  # renewed, B not asked
            before = len(reads)
            assert [b.get(key) for key in keys] == expected
            assert len(reads) == before  # every get answered by this host
        else:
            before = len(reads)

            def local_pass():
                start = len(reads)
                return [b.get(key) for key in keys] == expected and len(reads) == start

            eventually(local_pass)
            assert len(reads) - before >= len(keys)  # each change cost B a read from Redis


def test_remote_names_decode_to_their_keys():
    from diskcache_core._remote.form import decode_key, encode_key

    for db_key, raw in (("text é", True), (b"\x00b", True), (7, True), (-(2**80), True),
                        (1.5, True), (float("inf"), True), (b"pickled", False)):
        assert decode_key(encode_key(db_key, raw)) == (db_key, raw)
    assert decode_key(encode_key(3.0, True)) == (3, True)  # one name for 3 and 3.0, as SQLite
    for foreign in (b"", b"x", b"i1.2.3", b"s\xff", b"fnot-a-float"):
        assert decode_key(foreign) is None


def test_evict_and_clear_act_on_the_prefix_only(hosts, url, tmp_path):
    a, b = hosts()
    other = Cache(str(tmp_path / "other"), remote=url, remote_prefix=f"other-{uuid.uuid4().hex}:")
    try:
        for number in range(30):
            a.set(number, number, tag="even" if number % 2 == 0 else "odd")
        other.set(0, "kept")
        assert b.evict("even") == 15
        eventually(lambda: b.get(0) is None)
        assert b.get(1) == 1
        assert a.clear() == 15
        eventually(lambda: b.get(1) is None)
        assert other.get(0) == "kept"
    finally:
        other.clear()
        other.close()


def test_incr_decr_are_exact_beyond_64_bits(hosts):
    a, b = hosts()
    assert a.incr("n") == 1
    assert b.incr("n", 2**64) == 2**64 + 1
    assert a.decr("n", 1) == 2**64
    with pytest.raises(KeyError):
        a.incr("absent", default=None)
    a.set("text", "x")
    with pytest.raises(TypeError):
        a.incr("text")


def test_operations_that_would_stay_local_raise(hosts):
    (a,) = hosts(1)
    for call in (lambda: len(a), lambda: list(a), lambda: list(a.iterkeys()),
                 lambda: a.push(1), lambda: a.pull(), lambda: a.peek(), lambda: a.peekitem(),
                 lambda: a.transact().__enter__()):
        with pytest.raises(RemoteUnsupportedError, match="not supported on a cache with a remote"):
            call()


def test_pickled_cache_keeps_its_remote(hosts):
    (a,) = hosts(1)
    a.set("k", "v")
    clone = pickle.loads(pickle.dumps(a))
    try:
        assert clone.get("k") == "v" and clone.remote == a.remote
    finally:
        clone.close()


def test_the_directory_is_not_a_plain_cache_any_more(hosts):
    (a,) = hosts(1)
    with pytest.raises(ValueError, match="near cache of a remote"):
        Cache(a.directory)


# --- bad configuration ---------------------------------------------------------------------------


def test_bad_urls_fail_at_construction(tmp_path):
    for bad in ("http://127.0.0.1:1/", "redis://127.0.0.1:notaport/0", "redis:///0", 42,
                # redis-py would quietly use database 0, no cluster, or fail at first use:
                "redis://127.0.0.1:1/1x", "redis://127.0.0.1:1/0?db=x",
                "redis://127.0.0.1:1/0?cluster=maybe", "unix://", "redis://127.0.0.1:1/0?protocol=9"):
        with pytest.raises((ValueError, TypeError)):
            Cache(str(tmp_path / "c"), remote=bad)
    with pytest.raises(ValueError, match="remote_prefix"):
        Cache(str(tmp_path / "c"), remote="redis://127.0.0.1:1/0", remote_prefix="")
    with pytest.raises(ValueError, match="max_staleness"):
        Cache(str(tmp_path / "c"), remote="redis://127.0.0.1:1/0", max_staleness=-1)


@pytest.mark.parametrize("url, named", [
    # '²'.isdigit() holds, int('²') fails: redis-py quietly used database 0.
    ("redis://127.0.0.1:1/\u00b2", "the database must be a number"),
    # redis-py would resend a timed-out write: an add that stored its item reported it lost,
    # and a pop lost its item; a socket timeout in the URL overrode remote_timeout.
    ("redis://127.0.0.1:1/0?retry_on_timeout=true", "retry_on_timeout"),
    ("redis://127.0.0.1:1/0?socket_timeout=0.05", "socket_timeout"),
    ("redis://127.0.0.1:1/0?socket_connect_timeout=1", "socket_connect_timeout"),
])
def test_urls_redis_py_would_read_otherwise_are_refused(tmp_path, url, named):
    with pytest.raises(ValueError, match=named):
        Cache(str(tmp_path / "c"), remote=url)
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("option", ["remote_timeout", "max_staleness"])
def test_a_wait_beyond_what_a_socket_takes_is_refused_naming_it(tmp_path, option):
    # 1e10 passed, then the first command raised OverflowError naming no setting.
    with pytest.raises(ValueError, match=option):
        Cache(str(tmp_path / "c"), remote="redis://127.0.0.1:1/0", **{option: 1e10})


@pytest.fixture(scope="module")
def transports_server():
    with RedisTestServer(transports=True) as running:
        yield running


@pytest.mark.parametrize("transport", ["unix", "tls"])
def test_unix_socket_and_tls_urls(transports_server, tmp_path, transport):
    """unix:// and rediss:// remotes: items, counters and the listener's invalidations (and
    refreshes) all go through that transport."""
    url = transports_server.unix_url if transport == "unix" else transports_server.tls_url
    prefix = f"{transport}-{uuid.uuid4().hex[:8]}:"
    a, b = (Cache(str(tmp_path / f"host{n}"), remote=url, remote_prefix=prefix) for n in (0, 1))
    try:
        assert a.remote == url
        eventually(b._remote._words.lease_valid)  # B's listener is subscribed over `url`
        a.set("k", "v1")
        assert b.get("k") == "v1"
        a.set("k", "v2")
        eventually(lambda: b.get("k") == "v2")
        assert a.incr("n") == 1 and b.incr("n") == 2
        with pytest.raises(RemoteUnavailableError):  # the plain port does not speak TLS
            Cache(str(tmp_path / "plain"), remote=url.replace(
                f":{transports_server.tls_port}/", f":{transports_server.port}/"
            ) if transport == "tls" else f"unix://{tmp_path}/absent.sock",
                remote_prefix=prefix).set("x", 1)
    finally:
        a.close()
        b.close()


def test_unreachable_server_is_a_clear_error_at_first_use(tmp_path):
    from benchmarks.servers import free_port

    cache = Cache(str(tmp_path / "c"), remote=f"redis://127.0.0.1:{free_port()}/0", remote_timeout=1)
    try:
        with pytest.raises(RemoteUnavailableError, match="unreachable"):
            cache.set("k", 1)
        with pytest.raises(RemoteUnavailableError):
            cache.get("k")
    finally:
        cache.close()


def test_wrong_password_is_a_clear_error(tmp_path):
    with RedisTestServer(password="right-secret") as guarded:
        wrong = guarded.url.replace("right-secret", "wrong-secret")
        cache = Cache(str(tmp_path / "c"), remote=wrong)
        try:
            with pytest.raises(RemoteError, match="authentication failed") as info:
                cache.set("k", 1)
            assert "wrong-secret" not in str(info.value)
        finally:
            cache.close()
        good = Cache(str(tmp_path / "d"), remote=guarded.url)
        try:
            good.set("k", 1)
            assert good.get("k") == 1
        finally:
            good.close()


def test_no_redis_import_without_a_remote(tmp_path):
    code = (
        "import sys, diskcache_core as d;"
        f"c = d.Cache({str(tmp_path / 'c')!r}); c.set('k', 1); c.get('k');"
        f"f = d.FanoutCache({str(tmp_path / 'f')!r}); f.set('k', 1);"
        "assert 'redis' not in sys.modules, 'redis imported';"
        "assert 'diskcache_core._remote.tier' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --- many processes, many hosts --------------------------------------------------------------------


def _run(processes):
    for process in processes:
        process.start()
    for process in processes:
        process.join(helpers.WAIT * 4)
        assert process.exitcode == 0, process


@pytest.fixture
def options(url, prefix):
    return {"remote": url, "remote_prefix": prefix}


def test_incr_totals_are_exact_across_hosts_and_processes(tmp_path, options):
    results = SPAWN.Queue()
    processes = [
        SPAWN.Process(target=helpers.incr_many, args=(
            str(tmp_path / f"host{number % 2}"), options, "counter", 100, results))
        for number in range(4)
    ]
    _run(processes)
    cache = Cache(str(tmp_path / "host0"), **options)
    try:
        assert cache.get("counter") == 400
    finally:
        cache.close()


def test_add_has_a_single_winner_across_hosts(tmp_path, options):
    results = SPAWN.Queue()
    start = SPAWN.Event()
    processes = [
        SPAWN.Process(target=helpers.race_add, args=(
            str(tmp_path / f"host{number % 3}"), options, "key", start, results))
        for number in range(6)
    ]
    for process in processes:
        process.start()
    start.set()
    for process in processes:
        process.join(helpers.WAIT * 2)
        assert process.exitcode == 0
    outcomes = [results.get(timeout=helpers.WAIT) for _ in processes]
    assert outcomes.count(True) == 1 and outcomes.count(False) == 5


def test_another_process_of_a_host_sees_other_hosts_writes(tmp_path, options):
    writer = Cache(str(tmp_path / "hostA"), **options)
    local = Cache(str(tmp_path / "hostB"), **options)  # this process: host B's listener
    try:
        writer.set("k", "old")
        helpers.wait_for_value(local, "k", "old")
        ready = SPAWN.Event()
        results = SPAWN.Queue()
        reader = SPAWN.Process(target=helpers.reader_until, args=(
            str(tmp_path / "hostB"), options, "k", "new", ready, results))
        reader.start()
        assert ready.wait(helpers.WAIT)
        writer.set("k", "new")
        assert results.get(timeout=helpers.WAIT * 2) == ("saw", "new")
        reader.join(helpers.WAIT)
        helpers.wait_for_value(local, "k", "new")
    finally:
        writer.close()
        local.close()


def test_killing_the_listener_hands_over_and_serves_nothing_stale(tmp_path, options):
    writer = Cache(str(tmp_path / "hostA"), **options)
    writer.set("k", "old")
    ready = SPAWN.Event()
    holder = SPAWN.Process(target=helpers.hold_listener, args=(
        str(tmp_path / "hostB"), options, "k", ready))
    holder.start()
    try:
        assert ready.wait(helpers.WAIT)
        local = Cache(str(tmp_path / "hostB"), **options)  # a second process of host B
        try:
            assert local.get("k") == "old"
            for _ in range(3):
                local.get("k")  # served from host B's copies
            os.kill(holder.pid, signal.SIGKILL)
            holder.join(helpers.WAIT)
            writer.set("k", "new")  # while host B's listener is dead or being replaced
            helpers.wait_for_value(local, "k", "new")
            eventually(lambda: local._remote._listener.listening)  # this process took over
            writer.set("k", "newer")
            helpers.wait_for_value(local, "k", "newer")
        finally:
            local.close()
    finally:
        if holder.is_alive():
            holder.kill()
        writer.close()


def test_staleness_is_bounded_across_hosts(tmp_path, options):
    """Readers on host B never return a value older than one written (on host A) more than
    BOUND seconds before the read began. BOUND is generous for loaded CI machines; the benchmark
    (python -m benchmarks --hosts 3) measures the real delay."""
    bound = 0.5
    results = SPAWN.Queue()
    done = SPAWN.Event()
    count = 300
    readers = [
        SPAWN.Process(target=helpers.staleness_reader, args=(
            str(tmp_path / "hostB"), options, "k", done, results))
        for _ in range(2)
    ]
    writer = SPAWN.Process(target=helpers.staleness_writer, args=(
        str(tmp_path / "hostA"), options, "k", count, done, results))
    for process in readers:
        process.start()
    writer.start()
    outputs = [results.get(timeout=helpers.WAIT * 4) for _ in range(3)]
    for process in (*readers, writer):
        process.join(helpers.WAIT)
    (written,) = [data for kind, data in outputs if kind == "written"]
    reads = [read for kind, data in outputs if kind == "reads" for read in data]
    assert len(written) == count
    returned_at = [returned for _, returned in written]
    stale = checked = 0
    for start, value in reads:
        due = bisect.bisect_right(returned_at, start - bound)  # writes returned before start-bound
        if due:
            checked += 1
            if value < written[due - 1][0]:
                stale += 1
    assert checked > 100, "too few reads overlapped the writes to check anything"
    assert stale == 0, f"{stale} of {checked} reads older than the bound"


# --- FanoutCache, Django, Flask ----------------------------------------------------------------------


def test_fanout_cache_with_a_remote(tmp_path, options):
    a = FanoutCache(str(tmp_path / "fa"), shards=4, **options)
    b = FanoutCache(str(tmp_path / "fb"), shards=4, **options)
    try:
        for number in range(40):
            assert a.set(number, number * 2) is True
        assert [b.get(number) for number in range(40)] == [n * 2 for n in range(40)]
        assert b.incr("n") == 1 and a.incr("n") == 2
        a.delete(3)
        eventually(lambda: b.get(3) is None)
        with pytest.raises(RemoteUnsupportedError):
            len(a)
    finally:
        a.close()
        b.close()


def test_stopped_server_makes_writes_raise_and_fanout_give_up(tmp_path):
    with RedisTestServer() as temporary:
        options = {"remote": temporary.url, "remote_timeout": 0.5, "max_staleness": 0.3}
        cache = Cache(str(tmp_path / "c"), **options)
        fanout = FanoutCache(str(tmp_path / "f"), shards=2, **options)
        try:
            cache.set("k", "v")
            fanout.set("k", "v")
            eventually(lambda: cache._remote._words.lease_valid())
            assert cache.get("k") == "v"
            temporary.stop()
            with pytest.raises(RemoteUnavailableError):
                cache.set("k", "w")
            assert fanout.set("k", "w") is False  # a give-up, counted
            assert fanout.stats()[0] >= 0
            # Local copies go on being served at most max_staleness: then reads fail.
            eventually(lambda: not cache._remote._words.lease_valid(), deadline=5)
            with pytest.raises(RemoteUnavailableError):
                cache.get("k")
            assert fanout.get("k", "default") == "default"
            # Bulk removals resumed after every timeout: with Redis down, for ever (spinning).
            for removal in (fanout.clear, lambda: fanout.evict("tag")):
                with pytest.raises(RemoteUnavailableError):
                    removal()
        finally:
            cache.close()
            fanout.close()


def test_a_pickled_fanout_cache_keeps_its_remote(tmp_path, options):
    fanout = FanoutCache(str(tmp_path / "f"), shards=2, **options)
    try:
        fanout.set("k", "v")
        clone = pickle.loads(pickle.dumps(fanout))  # ValueError: opened without the remote
        try:
            assert clone.get("k") == "v"
            assert all(shard.remote == options["remote"] for shard in clone._shards)
        finally:
            clone.close()
    finally:
        fanout.close()


def test_a_fanout_caches_named_collections_refuse_to_stay_local(tmp_path, options):
    # They were made on this host only: another host's FanoutCache never saw their items.
    fanout = FanoutCache(str(tmp_path / "f"), shards=2, **options)
    try:
        for call in (lambda: fanout.deque("jobs"), lambda: fanout.index("users"),
                     lambda: fanout.cache("sessions")):
            with pytest.raises(RemoteUnsupportedError, match="this host's items only"):
                call()
        named = fanout.cache("shared", remote=options["remote"],
                             remote_prefix=options["remote_prefix"] + "named/")
        assert named.set("k", 1) and named.get("k") == 1
    finally:
        fanout.close()


def test_copies_are_served_after_close_and_reuse_and_with_resp3_urls(tmp_path, url, prefix):
    # A cache used again after close() started no listener: every get read Redis. A URL asking
    # for RESP3 gave the listener RESP3 connections, whose replies it never read: the same.
    for number, remote in enumerate((url, url + "?protocol=3")):
        cache = Cache(str(tmp_path / f"c{number}"), remote=remote, remote_prefix=prefix)
        try:
            for _ in range(2):
                cache.set("k", "v")
                eventually(lambda: cache._remote._words.lease_valid())
                reads = _count_remote_reads(cache)
                assert [cache.get("k") for _ in range(50)] == ["v"] * 50
                assert len(reads) <= 1
                cache.close()
        finally:
            cache.close()


# --- recipes across hosts (each thread on its own host directory: only Redis is shared) ----------


def _threads(count, body):
    errors = []

    def run(number):
        try:
            body(number)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(number,)) for number in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(helpers.WAIT * 2)
    assert not errors, errors


def test_lock_excludes_across_hosts(hosts):
    caches = hosts(3)
    inside = []
    overlaps = []

    def body(number):
        lock = diskcache_core.Lock(caches[number], "lock", expire=30)
        for _ in range(15):
            with lock:
                inside.append(number)
                if len(inside) > 1:
                    overlaps.append(list(inside))
                time.sleep(0.001)
                inside.remove(number)

    _threads(3, body)
    assert overlaps == []
    assert not diskcache_core.Lock(caches[0], "lock").locked()


def test_rlock_semaphore_averager_throttle_across_hosts(hosts):
    a, b = hosts()
    rlock = diskcache_core.RLock(a, "r")
    assert rlock.acquire() and rlock.acquire()
    other = []  # another thread (another owner), on host B
    _threads(1, lambda _: other.append(diskcache_core.RLock(b, "r").acquire(blocking=False)))
    assert other == [False]
    rlock.release()
    assert diskcache_core.RLock(b, "r").locked()
    rlock.release()  # other hosts see it within the invalidation delay
    eventually(lambda: not diskcache_core.RLock(b, "r").locked())

    first = diskcache_core.BoundedSemaphore(a, "s", value=2)
    second = diskcache_core.BoundedSemaphore(b, "s", value=2)
    assert first.acquire(blocking=False) and second.acquire(blocking=False)
    assert not second.acquire(blocking=False) and second.locked()
    first.release()
    assert second.acquire(timeout=helpers.WAIT)  # the acquire reads Redis when it may win

    average = [diskcache_core.Averager(cache, "avg") for cache in (a, b)]
    _threads(2, lambda number: [average[number].add(float(number)) for _ in range(20)])
    assert average[0].get() == pytest.approx(0.5)

    calls = []
    clock = [1000.0]
    for number, cache in enumerate((a, b)):
        @diskcache_core.throttle(cache, 3, 60, name="t", time_func=lambda: clock[0],
                                 sleep_func=lambda delay: clock.__setitem__(0, clock[0] + delay))
        def call(number=number):
            calls.append((number, clock[0]))
        call()
        call()
    assert [when for _, when in calls[:3]] == [1000.0] * 3  # one bucket of 3 shared by both
    assert calls[3][1] > 1000.0


def test_memoize_stampede_single_flight_across_hosts(hosts):
    caches = hosts(3)
    computed = []

    def body(number):
        @diskcache_core.memoize_stampede(caches[number], expire=60, single_flight=True, name="f")
        def slow(x):
            computed.append(number)
            time.sleep(0.3)
            return x * 2

        assert slow(21) == 42

    _threads(3, body)
    assert len(computed) == 1


# --- Redis restarting, Redis Cluster ---------------------------------------------------------------


def test_redis_restarting_empty_or_with_data(tmp_path):
    with RedisTestServer() as restarting:
        options = {"remote": restarting.url}
        a = Cache(str(tmp_path / "a"), **options)
        b = Cache(str(tmp_path / "b"), **options)
        try:
            a.set("kept", "v")
            assert b.get("kept") == "v" and b.get("kept") == "v"  # a copy on host B
            eventually(lambda: b._remote._words.lease_valid())
            restarting.restart(keep_data=True)
            eventually(lambda: b.get("kept") == "v" and b._remote._words.lease_valid())
            a.set("kept", "after restart")
            eventually(lambda: b.get("kept") == "after restart")
            restarting.restart(keep_data=False)
            # Redis lost everything: hosts drop what it no longer holds.
            eventually(lambda: b.get("kept") is None)
            assert a.get("kept") is None
        finally:
            a.close()
            b.close()


def test_redis_cluster_with_a_slot_moving(tmp_path):
    import redis.cluster

    with RedisTestCluster() as cluster:
        options = {"remote": cluster.url, "remote_prefix": "c:"}
        a = Cache(str(tmp_path / "a"), **options)
        b = Cache(str(tmp_path / "b"), **options)
        try:
            for number in range(200):
                a.set(f"key{number}", number)
            assert [b.get(f"key{number}") for number in range(200)] == list(range(200))
            assert a.incr("n") == 1 and b.incr("n") == 2
            a.set("key7", "changed")
            eventually(lambda: b.get("key7") == "changed")
            slot = redis.cluster.key_slot(b"c:skey7")
            source = cluster.owner(slot)
            target = next(port for port in cluster.ports if port != source)
            cluster.move_slot(slot, target)
            assert cluster.owner(slot) == target
            assert a.get("key7") == "changed" and b.get("key7") == "changed"
            a.set("key7", "after the move")  # follows MOVED to the new owner
            eventually(lambda: b.get("key7") == "after the move")
            assert b.delete("key7") is True
            eventually(lambda: a.get("key7") is None)
            assert a.clear() == 200  # every primary scanned
            # A cluster that stops answering: the library's error, or a FanoutCache's give-up
            # (redis-py's RedisClusterException is no RedisError, and it sent commands again).
            quick = {**options, "remote_timeout": 0.3}
            c = Cache(str(tmp_path / "c"), **quick)
            f = FanoutCache(str(tmp_path / "f"), shards=2, **quick)
            for process in cluster.processes:
                process.send_signal(signal.SIGSTOP)
            try:
                with pytest.raises(RemoteUnavailableError):
                    c.get("never set")
                assert f.set("key", 1) is False and f.get("key", "gave up") == "gave up"
            finally:
                for process in cluster.processes:
                    process.send_signal(signal.SIGCONT)
                c.close()
                f.close()
        finally:
            a.close()
            b.close()


# --- Django and Flask with a remote ----------------------------------------------------------------


def test_django_backend_with_a_remote(tmp_path, options):
    from django.conf import settings

    if not settings.configured:
        settings.configure()
    from diskcache_core.contrib.django import DjangoCache

    a = DjangoCache(str(tmp_path / "da"), {"OPTIONS": dict(options), "SHARDS": 2})
    b = DjangoCache(str(tmp_path / "db"), {"OPTIONS": dict(options), "SHARDS": 2})
    try:
        a.set("k", "v", 60)
        assert b.get("k") == "v"
        assert a.set_many({"x": 1, "y": 2}) == []
        assert b.get_many(["x", "y"]) == {"x": 1, "y": 2}
        assert b.incr("x", 10) == 11
        eventually(lambda: a.get("x") == 11)
        a.delete_many(["x", "y"])
        eventually(lambda: b.get("y") is None)
        assert a.add("k", "other") is False
    finally:
        a.close()
        b.close()
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match="MAX_ENTRIES"):
        DjangoCache(str(tmp_path / "dc"), {"OPTIONS": {**options, "MAX_ENTRIES": 10}}).get("k")


def test_flask_backend_with_a_remote(tmp_path, options):
    from diskcache_core.contrib.flask import DiskCache

    a = DiskCache(str(tmp_path / "fa"), **options)
    b = DiskCache(str(tmp_path / "fb"), **options)
    try:
        assert a.set("k", "v") and b.get("k") == "v"
        assert a.set_many({"x": 1, "y": 2}) == ["x", "y"]
        assert b.get_many("x", "y") == [1, 2]
        assert b.inc("x") == 2
        a.delete_many("x", "y")
        eventually(lambda: b.get("y") is None)
        assert a.threshold == 0
    finally:
        a.close()
        b.close()


def test_a_directory_serves_one_prefix(tmp_path, url):
    first = Cache(str(tmp_path / "h"), remote=url, remote_prefix="one:")
    try:
        with pytest.raises(ValueError, match="same remote_prefix"):
            Cache(str(tmp_path / "h"), remote=url, remote_prefix="two:")
    finally:
        first.close()


# --- names, expiry and the listener's connections --------------------------------------------------


def test_a_cache_and_a_fanoutcache_on_one_prefix_keep_their_items_apart(tmp_path, options):
    cache = Cache(str(tmp_path / "cache"), **options)
    fanout = FanoutCache(str(tmp_path / "fanout"), shards=2, **options)
    try:
        for number in range(10):
            fanout.set(number, number, tag="t")
        cache.set("one", 1, tag="t")
        assert cache.evict("t") == 1
        assert cache.clear() == 0
        assert [fanout.get(number) for number in range(10)] == list(range(10))
    finally:
        cache.close()
        fanout.close()


def test_redis_drops_an_item_before_a_host_reads_it_as_expired(hosts, server):
    (cache,) = hosts(1)
    for number in range(20):
        key = f"brief{number}"
        cache.set(key, "old", expire=0.02)
        eventually(lambda: cache.get(key) is None)
        assert cache.add(key, "new") is True  # Redis no longer has the old item
    for expire in (float("inf"), 1e300, 2**70):  # never expire, as a local cache's would
        assert cache.set("forever", expire) is True and cache.get("forever") == expire
        assert server.client().pttl(cache._remote._remote.name(b"sforever")) == -1  # no TTL


def test_a_closed_tracking_connection_ends_the_lease_before_any_ping(
    tmp_path, url, prefix, server, monkeypatch
):
    from diskcache_core._remote import listener as _listener
    from diskcache_core._remote.client import RemoteStore
    from diskcache_core._remote.stamps import StampSet

    monkeypatch.setattr(_listener, "_PING_EVERY", 3600.0)  # only the closed socket can tell
    errors: list[BaseException] = []
    listen = _listener.Listener._listen

    def recording(self, nodes):
        try:
            listen(self, nodes)
        except BaseException as exc:
            errors.append(exc)
            raise

    monkeypatch.setattr(_listener.Listener, "_listen", recording)
    remote = RemoteStore(url, prefix.encode(), 5.0)
    words = StampSet([(str(tmp_path), prefix)])
    granted: list[int] = []  # for each lease granted, how many times listening had started
    starts: list[int] = []
    renew_all, set_lease = words.renew_all, words.set_lease
    words.renew_all = lambda: (starts.append(1), renew_all())  # type: ignore[method-assign]
    words.set_lease = lambda until: (  # type: ignore[method-assign]
        granted.append(len(starts)) if until else None, set_lease(until)
    )
    stop = threading.Event()
    listener = _listener.Listener(remote, words, 3600.0, stop.is_set)
    thread = threading.Thread(target=listener.run, daemon=True)
    thread.start()
    try:
        try:
            eventually(lambda: granted)
        except AssertionError:
            raise AssertionError(f"no lease granted; listening failed with {errors!r}") from None
        assert not errors, errors
        admin = server.client()
        for client in admin.client_list():
            if "t" in client["flags"]:  # tracking on: this listener's (and any other's)
                admin.client_kill_filter(_id=client["id"])
        eventually(lambda: len(starts) >= 2)  # it noticed, and started listening over
        assert errors, "listening started over without an error"
        eventually(lambda: granted[-1] >= 2)  # and grants the lease again
    finally:
        stop.set()
        thread.join(10)
        remote.close()


def test_the_listener_listens_on_descriptors_past_1024(tmp_path, url, prefix):
    import resource

    from diskcache_core._remote.listener import Listener
    from diskcache_core._remote.client import RemoteStore
    from diskcache_core._remote.stamps import StampSet

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 1200
    if soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.skip(f"cannot open {wanted} descriptors here (limit {hard})")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    filler = os.open(os.devnull, os.O_RDONLY)
    held = [os.dup(filler) for _ in range(1100)]  # the listener's sockets come after these
    remote = RemoteStore(url, prefix.encode(), 5.0)
    words = StampSet([(str(tmp_path), prefix)])
    stop = threading.Event()
    thread = threading.Thread(target=Listener(remote, words, 3600.0, stop.is_set).run, daemon=True)
    try:
        thread.start()
        eventually(words.lease_valid)  # (select() raised ValueError for such descriptors)
    finally:
        stop.set()
        thread.join(10)
        remote.close()
        for fd in [*held, filler]:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_lease_further_ahead_than_one_renewal_serves_no_copy(tmp_path, url, prefix, monkeypatch):
    """The wall clock set back after the listener's last renewal (as by an NTP step): the lease
    then looks far ahead, and must not vouch for copies (a listener that died just before
    could not renew it, and copies would be served for as long as the step)."""
    import types

    from diskcache_core._remote import tier as _remotetier

    cache = Cache(str(tmp_path), remote=url, remote_prefix=prefix)
    try:
        cache.set("k", "v")
        eventually(lambda: cache._remote._words.lease_valid())
        assert cache.get("k") == "v"
        below: list[object] = []
        copies: list[object] = []
        tier = cache._remote
        get_below, local_copy = tier._get_below_memory, tier._local_copy
        monkeypatch.setattr(
            tier, "_get_below_memory", lambda *a: (below.append(a), get_below(*a))[1]
        )
        monkeypatch.setattr(tier, "_local_copy", lambda *a: (copies.append(a), local_copy(*a))[1])
        assert cache.get("k") == "v" and not below  # a copy, served on the lease
        real = time.time
        set_back = types.SimpleNamespace(**{**vars(time), "time": lambda: real() - 3600.0})
        monkeypatch.setattr(_remotetier, "time", set_back)
        assert cache.get("k") == "v"  # from Redis
        assert below and not copies, "a copy was served on a lease an hour ahead"
    finally:
        cache.close()


def test_a_process_leaving_before_handing_its_listener_the_settings_prints_nothing(
    tmp_path, url, prefix
):
    """A process elected listener that leaves (os._exit, as multiprocessing's children do)
    right after starting the listener process, before writing its settings: the listener
    process ends without a traceback on the application's stderr, and the next process of the
    host takes over."""
    directory = str(tmp_path / "host")
    code = (
        "import os, subprocess, sys, time\n"
        "import diskcache_core\n"
        "real = subprocess.Popen\n"
        "class Leaving(real):\n"
        "    def __init__(self, argv, *args, **kwargs):\n"
        "        super().__init__(argv, *args, **kwargs)\n"
        "        if 'diskcache_core._remote.listenerprocess' in argv:\n"
        "            os._exit(0)  # the listener process is started, its settings not written\n"
        "subprocess.Popen = Leaving\n"
        "diskcache_core.Cache(sys.argv[1], remote=sys.argv[2], remote_prefix=sys.argv[3])\n"
        "time.sleep(30)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    leaving = subprocess.run(
        [sys.executable, "-c", code, directory, url, prefix], env=env, capture_output=True,
        timeout=helpers.WAIT * 2,
    )
    assert leaving.returncode == 0
    assert leaving.stderr == b"", leaving.stderr.decode(errors="replace")
    cache = Cache(directory, remote=url, remote_prefix=prefix)
    try:
        eventually(cache._remote._words.lease_valid)
    finally:
        cache.close()


# --- the remote-backed Cache class, and update ---------------------------------------------------


class _Logged(Cache):
    """A user's subclass overriding an item method: its override comes first with a remote too."""

    def __init__(self, *args, **kwargs):
        self.calls = []
        super().__init__(*args, **kwargs)

    def get(self, key, *args, **kwargs):
        self.calls.append(key)
        return super().get(key, *args, **kwargs)


def test_a_cache_with_a_remote_is_a_remote_backed_cache(hosts, tmp_path, url, prefix):
    (cache,) = hosts(1)
    from diskcache_core._cache.cache import RemoteCache

    assert type(cache) is RemoteCache and isinstance(cache, Cache)
    assert repr(cache).startswith("Cache(") and "remote=" in repr(cache)
    local = Cache(str(tmp_path / "local"))
    try:
        assert type(local) is Cache and local.remote is None
    finally:
        local.close()
    logged = _Logged(str(tmp_path / "logged"), remote=url, remote_prefix=prefix)
    try:
        assert isinstance(logged, _Logged) and isinstance(logged, RemoteCache)
        assert repr(logged).startswith("_Logged(")
        logged.set("k", "v")
        assert logged.get("k") == "v" and logged.calls == ["k"]
        with pytest.raises(RemoteUnsupportedError):
            len(logged)
        copy = pickle.loads(pickle.dumps(logged))
        try:
            assert type(copy) is type(logged) and copy.remote == url and copy.get("k") == "v"
            assert copy.calls == ["k"]
        finally:
            copy.close()
    finally:
        logged.close()


def test_update_is_a_compare_and_set_across_hosts(hosts):
    a, b = hosts(2)

    def work(cache):
        for _ in range(40):
            cache.update("total", lambda value: value + 1, default=0)

    threads = [threading.Thread(target=work, args=(cache,)) for cache in (a, b, a, b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(helpers.WAIT)
    assert a.get("total") == 160
    eventually(lambda: b.get("total") == 160)


def test_update_with_a_remote_keeps_expiry_and_tag_and_knows_keep_and_delete(hosts):
    a, b = hosts(2)
    a.set("k", 1, expire=100, tag="t")
    assert b.update("k", lambda value: value + 1) == 2
    value, expiry, tag = a.get("k", expire_time=True, tag=True)
    assert (value, tag) == (2, "t") and expiry > time.time() + 90
    assert b.update("k", lambda value: b.KEEP, expire=1) == 2
    assert a.get("k", expire_time=True, tag=True) == (2, expiry, "t")
    assert b.update("k", lambda value: b.DELETE, default="gone") == "gone"
    eventually(lambda: "k" not in a)
    assert a.update("new", lambda value: value, default=5, expire=None, tag="x") == 5
    assert b.get("new", tag=True) == (5, "x")


def test_the_remote_tier_answers_from_the_memory_tiers_own_hit_path(hosts):
    """A remote cache's get asks its memory tier through the function that tier builds
    (`MemoryTier.hit`, the local get's too), which answers a copy only while the lease holds."""
    (cache,) = hosts(1)
    eventually(cache._remote._words.lease_valid)
    cache.set("key", "value")
    tier = cache._remote._memory
    asked = []
    hit = tier.hit

    def counting(key, default):
        asked.append(key)
        return hit(key, default)

    tier.hit = counting
    assert cache.get("key") == "value"
    assert cache.get("key") == "value"
    assert asked == ["key", "key"]
    assert cache.memory_stats().hits >= 1  # answered from memory
