"""A remote write whose outcome is unknown says so, and the recipes never leave a lock held by
nobody (docs/remote.rst, Guarantees; issue 35, item 1).

The stall is a real one: redis-server is stopped (SIGSTOP) for longer than ``remote_timeout``
and continued (SIGCONT) by a timer thread; the client gives up waiting for its reply, and Redis
applies the command when it runs again.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import threading
import time

import pytest

import diskcache_core
from diskcache_core import (
    Cache,
    FanoutCache,
    RemoteOutcomeUnknownError,
    RemoteUnavailableError,
)
from diskcache_core._recipes import leases as _leases

import remote_helpers as helpers
from redis_servers import RedisTestServer, needs_redis

pytestmark = needs_redis

SPAWN = multiprocessing.get_context("spawn")
TIMEOUT = 0.3  # remote_timeout of every cache here
STALL = 0.5  # seconds Redis is stopped: longer than TIMEOUT, the reproduction
LONG_STALL = 2.5  # longer than two round trips of TIMEOUT: a second request fails too


@pytest.fixture
def options(options):
    return {**options, "remote_timeout": TIMEOUT}


@pytest.fixture
def hosts(tmp_path, options):
    """hosts(n, fanout=False) -> n caches on n directories (simulated hosts), closed after."""
    opened = []

    def make(count=2, fanout=False):
        caches = []
        for _ in range(count):
            directory = str(tmp_path / f"host{len(opened)}")
            cache = FanoutCache(directory, shards=1, **options) if fanout else Cache(directory, **options)
            cache.set("warm-up", 1)  # (a connection made: a stalled write is then sent at once)
            cache.add("warm-up", 1)  # (and the write scripts loaded: a stalled one then runs)
            opened.append(cache)
            caches.append(cache)
        return caches

    yield make
    for cache in opened:
        cache.close()


class Staller:
    """Stops Redis (`stop_for`) and continues it `seconds` later, from a thread started
    beforehand: nothing (a thread starting, under load) holds up the caller's next command
    between the stop and its sending."""

    def __init__(self, server):
        self._server = server
        self._go = threading.Event()
        self._seconds = 0.0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        self._go.wait()
        time.sleep(self._seconds)
        self._server.resume()

    def stop_for(self, seconds):
        self._seconds = seconds
        self._server.pause()
        self._go.set()

    def join(self):
        """Wait for the resumption (and resume in any case)."""
        self._go.set()
        self._thread.join(helpers.WAIT)
        self._server.resume()


@contextlib.contextmanager
def stalled(server, seconds):
    """Redis stopped now, continued `seconds` later (and at the latest on exit)."""
    staller = Staller(server)
    staller.stop_for(seconds)
    try:
        yield
    finally:
        staller.join()


@pytest.fixture
def stall_next(server, monkeypatch):
    """stall_next(cache, key, method, seconds, skip): Redis stops just before the next call (after
    `skip` calls) of the RemoteStore `method` (set, delete, pop, touch, compare_and_set, ...) of
    `key`'s shard sends its command, for `seconds`: the stall hits that write, not a read."""
    stallers = []

    def arm(cache, key, method, seconds=STALL, skip=0):
        shard = cache.shard_for(key) if hasattr(cache, "shard_for") else cache
        store = shard._remote._remote
        original = getattr(store, method)
        staller = Staller(server)
        stallers.append(staller)
        calls = []

        def stalling(*args, **kwargs):
            calls.append(args)
            if len(calls) <= skip:
                return original(*args, **kwargs)
            monkeypatch.setattr(store, method, original)  # this call only
            staller.stop_for(seconds)
            return original(*args, **kwargs)

        monkeypatch.setattr(store, method, stalling)

    yield arm
    for staller in stallers:
        staller.join()


def settled(cache, key):
    """`key`'s value once Redis answers again (read twice in a row: see _leases.settled_read)."""
    return _leases.settled_read(cache.shard_for(key) if hasattr(cache, "shard_for") else cache,
                                key, None, time.monotonic() + helpers.WAIT)


# --- writes ----------------------------------------------------------------------------------------


def test_a_write_without_reply_says_its_outcome_is_unknown_and_redis_applies_it(
    hosts, stall_next
):
    a, b = hosts()
    stall_next(a, "k", "set")  # Redis stopped for 0.5 s as the add is sent (timeout: 0.3 s)
    with pytest.raises(RemoteOutcomeUnknownError) as raised:
        a.add("k", "v")
    assert isinstance(raised.value, RemoteUnavailableError)  # existing handlers still catch it
    assert settled(b, "k") == "v"  # applied after the client gave up: "not stored" would lie
    assert a.get("k") == "v" and b.get("k") == "v"


@pytest.mark.parametrize("operation", ["set", "add", "delete", "pop", "incr", "touch"])
def test_fanout_cache_never_reports_not_done_for_a_write_redis_applies(
    hosts, stall_next, operation
):
    # The old code returned its give-up answer (False, None, the default): read as "not
    # stored" / "not there", while every host then read the write's effect.
    (fanout,) = hosts(1, fanout=True)
    fanout.set("other", 1)
    fanout.incr("other")  # (Redis has loaded the scripts: the stalled command runs them)
    fanout.touch("other", 600)
    fanout.delete("absent")  # (delete and pop: one script, loaded)
    if operation in ("delete", "pop", "touch", "incr"):
        fanout.set("k", 1)
    calls = {
        "set": ("set", lambda: fanout.set("k", 1)), "add": ("set", lambda: fanout.add("k", 1)),
        "delete": ("delete", lambda: fanout.delete("k")), "pop": ("pop", lambda: fanout.pop("k")),
        "incr": ("compare_and_set", lambda: fanout.incr("k")),
        "touch": ("touch", lambda: fanout.touch("k", 600)),
    }
    method, call = calls[operation]
    stall_next(fanout, "k", method)
    with pytest.raises(RemoteOutcomeUnknownError):
        call()
    expected = {"delete": None, "pop": None, "incr": 2}.get(operation, 1)
    assert settled(fanout, "k") == expected
    if operation == "touch":
        assert fanout.get("k", expire_time=True)[1] is not None


def test_fanout_cache_gives_up_only_on_writes_that_never_reached_redis(server, hosts):
    (fanout,) = hosts(1, fanout=True)
    with stalled(server, LONG_STALL):
        with pytest.raises(RemoteOutcomeUnknownError):
            fanout.add("sent", 1)  # sent, no reply
        # The next write finds no connection: it makes one, whose handshake gets no reply
        # either, so its own command was never sent. A give-up, and a true one.
        assert fanout.add("unsent", 1) is False
        assert fanout.stats().timeouts == 1
    assert settled(fanout, "sent") == 1
    assert settled(fanout, "unsent") is None
    server.client().ping()


def test_a_write_that_could_not_be_sent_whole_is_certainly_not_applied(hosts, stall_next):
    # More than the loopback's socket buffers hold (4 MiB sent, up to 32 MiB received): with
    # Redis stopped, the write itself times out, and an incomplete command is never run.
    (fanout,) = hosts(1, fanout=True)
    big = b"x" * (64 << 20)
    stall_next(fanout, "big", "set", LONG_STALL)
    assert fanout.set("big", big) is False  # a give-up, and a true one
    assert settled(fanout, "big") is None


def test_a_clear_failing_midway_says_how_many_it_removed_and_that_the_rest_is_unknown(
    hosts, stall_next
):
    a, b = hosts()
    for number in range(700):  # two batches of names (500 a batch)
        a.set(number, number)
    stall_next(a, 0, "delete_names", skip=1)
    with pytest.raises(RemoteOutcomeUnknownError) as raised:
        a.clear()
    assert raised.value.args[0] == 500  # the first batch; the second may yet be applied
    assert [settled(b, number) for number in (0, 699)] == [None, None]  # (it was)


def test_no_command_is_ever_sent_twice(hosts):
    # A retry after a timeout would run a write twice (an incr counted twice, a pop emptying
    # another caller's item), and would hide where the first attempt failed.
    (a,) = hosts(1)
    connection = a._remote._remote.client.connection_pool.make_connection()
    assert connection.retry.get_retries() == 0


def test_a_write_to_a_server_that_refuses_is_certainly_not_applied(tmp_path):
    with RedisTestServer() as temporary:
        cache = Cache(str(tmp_path / "c"), remote=temporary.url, remote_timeout=TIMEOUT)
        fanout = FanoutCache(str(tmp_path / "f"), shards=1, remote=temporary.url,
                             remote_timeout=TIMEOUT)
        try:
            cache.set("k", 1)
            temporary.stop()
            with pytest.raises(RemoteUnavailableError) as raised:
                cache.add("j", 1)
            assert type(raised.value) is RemoteUnavailableError  # refused: never sent
            assert fanout.add("j", 1) is False
        finally:
            cache.close()
            fanout.close()


# --- recipes -------------------------------------------------------------------------------------


def elsewhere(call):
    """``call()`` in a thread of its own (an RLock's owner is a thread); its result."""
    results = []
    thread = threading.Thread(target=lambda: results.append(call()))
    thread.start()
    thread.join(helpers.WAIT * 2)
    assert len(results) == 1
    return results[0]


def _lock(kind, cache, key, **options):
    if kind == "semaphore":
        return diskcache_core.BoundedSemaphore(cache, key, value=1, **options)
    return {"lock": diskcache_core.Lock, "rlock": diskcache_core.RLock}[kind](cache, key, **options)


@pytest.mark.parametrize("fanout", [False, True], ids=["cache", "fanout"])
@pytest.mark.parametrize("kind", ["lock", "rlock", "semaphore"])
def test_an_acquire_during_a_stall_holds_the_lock_it_stored(hosts, stall_next, kind, fanout):
    # The old code: Lock.acquire raised (Cache) or went on polling a lock it had itself
    # stored (FanoutCache); either way, with expire=None, no acquire on any host ever
    # succeeded again.
    a, b = hosts(2, fanout=fanout)
    mine, other = _lock(kind, a, "L"), _lock(kind, b, "L")
    stall_next(a, "L", "set" if kind == "lock" else "compare_and_set")
    assert mine.acquire(timeout=helpers.WAIT) is True  # settled: its own token is stored
    assert elsewhere(lambda: other.acquire(blocking=False)) is False
    mine.release()
    assert elsewhere(lambda: other.acquire(timeout=helpers.WAIT) and other.release() is None)
    assert not other.locked()


@pytest.mark.parametrize("kind", ["lock", "rlock", "semaphore"])
def test_a_non_blocking_acquire_that_cannot_settle_leaves_no_lock_held(hosts, stall_next, kind):
    a, b = hosts()
    mine, other = _lock(kind, a, "L"), _lock(kind, b, "L")
    stall_next(a, "L", "set" if kind == "lock" else "compare_and_set", LONG_STALL)
    # No reply to the write, nor to the read that would tell: not acquired (the old code
    # raised, the hold stored for ever); the keeper takes the hold back once Redis answers.
    assert mine.acquire(blocking=False) is False
    settled(b, "L")  # (Redis answers again)
    # Taken back: not held by nobody.
    assert elsewhere(lambda: other.acquire(timeout=helpers.WAIT) and other.release() is None)


@pytest.mark.parametrize("kind", ["lock", "rlock", "semaphore"])
def test_a_release_during_a_stall_frees_the_lock_once_redis_answers(server, hosts, kind):
    a, b = hosts()
    mine, other = _lock(kind, a, "L"), _lock(kind, b, "L")
    assert mine.acquire()
    with stalled(server, LONG_STALL):
        mine.release()  # the old code raised, and the lock stayed held for ever
    assert elsewhere(lambda: other.acquire(timeout=helpers.WAIT) and other.release() is None)


def test_a_remote_lock_is_renewed_while_held(server, hosts, monkeypatch):
    monkeypatch.setattr(_leases, "REMOTE_LEASE", 2.0)
    a, b = hosts()
    lock = diskcache_core.Lock(a, "L")
    assert lock.acquire()
    ttl = server.client().pttl(a._remote._remote.name(b"sL"))
    assert 0 < ttl <= 2000  # a lease, though expire=None
    time.sleep(3.0)  # past the first lease: renewed meanwhile
    assert diskcache_core.Lock(b, "L").acquire(blocking=False) is False
    lock.release()  # (host B hears of it within the bound of remote.rst: it polls)
    assert diskcache_core.Lock(b, "L").acquire(timeout=helpers.WAIT) is True


def test_a_lock_whose_holder_died_is_freed_when_its_lease_ends(tmp_path, options):
    ready = SPAWN.Event()
    holder = SPAWN.Process(
        target=helpers.hold_lock, args=(str(tmp_path / "dying"), options, "L", 1.5, ready)
    )
    holder.start()
    cache = Cache(str(tmp_path / "alive"), **options)
    try:
        assert ready.wait(helpers.WAIT)
        assert diskcache_core.Lock(cache, "L").acquire(blocking=False) is False
        holder.kill()
        holder.join(helpers.WAIT)
        # expire=None: the old code kept the lock of a dead holder for ever.
        assert diskcache_core.Lock(cache, "L").acquire(timeout=helpers.WAIT) is True
    finally:
        holder.kill()
        holder.join(helpers.WAIT)
        cache.close()


def test_a_memoized_hit_is_returned_when_its_refresh_marker_has_an_unknown_outcome(
    hosts, stall_next
):
    (a,) = hosts(1)
    calls = []

    @diskcache_core.memoize_stampede(a, expire=60, beta=1e12)  # every hit refreshes early
    def double(x):
        calls.append(x)
        time.sleep(0.001)
        return x * 2

    assert double(21) == 42
    stall_next(a, double.__cache_key__(21) + "#refresh", "set")
    assert double(21) == 42  # the old code raised: the marker's add had no reply
    assert calls == [21]  # no refresh started: the marker may be stored (it expires)


def test_a_local_lock_carries_no_lease(tmp_path):
    with Cache(str(tmp_path / "local")) as cache:
        lock = diskcache_core.Lock(cache, "L")
        assert lock.acquire()
        assert cache.get("L", expire_time=True)[1] is None  # python-diskcache's behaviour
        lock.release()


# --- the Django and Flask backends ----------------------------------------------------------------


def test_the_django_and_flask_backends_never_report_not_stored_for_a_write_redis_applies(
    tmp_path, options, stall_next
):
    # Their give-up answers (a key listed as not stored by set_many, False from set) would
    # read "not stored" while Redis applies the write: they raise instead, as FanoutCache does.
    from django.conf import settings

    if not settings.configured:
        settings.configure()
    from diskcache_core.contrib.django import DjangoCache
    from diskcache_core.contrib.flask import DiskCache

    django_cache = DjangoCache(str(tmp_path / "django"), {"OPTIONS": dict(options), "SHARDS": 1})
    flask_cache = DiskCache(str(tmp_path / "flask"), **options)
    try:
        django_cache.set("warm-up", 1)
        made = django_cache.make_and_validate_key("many")
        stall_next(django_cache.fanout, made, "set")
        with pytest.raises(RemoteOutcomeUnknownError):
            django_cache.set_many({"many": 1})
        assert settled(django_cache.fanout, made) == 1

        flask_cache.set("warm-up", 1)
        stall_next(flask_cache.cache, "one", "set")
        with pytest.raises(RemoteOutcomeUnknownError):
            flask_cache.set("one", 1)
        assert settled(flask_cache.cache, "one") == 1
    finally:
        django_cache.close()
        flask_cache.cache.close()
