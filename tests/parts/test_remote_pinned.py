"""The remote tier's hot commands on connections pinned to threads (_remote/pinned.py).

GET, MGET and EVALSHA go on a connection each thread keeps, not through redis-py's
``execute_command`` (a pool checkout and check-in, a retry wrapper and observability hooks per
command). What the pool did that matters must still hold: a thread never shares its
connection, a forked child never uses its parent's, a connection the server closed while it was
idle is made again before a command is sent on it (so a write after a restart is not reported
as of unknown outcome), and a thread's connection goes when the thread ends.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import weakref

import pytest

from diskcache_core import Cache
from diskcache_core._remote import client as remote_client

from redis_servers import needs_redis
from remote_helpers import in_forked_child

pytestmark = needs_redis


def pinned_of(cache):
    return cache._remote._remote.client.pinned


def pool_checkouts(cache, monkeypatch):
    """The connections taken from the cache's client's pool from now on (a list kept up to
    date)."""
    pool = cache._remote._remote.client.connection_pool
    taken = []
    get_connection = pool.get_connection

    def counted(*args, **kwargs):
        taken.append(args)
        return get_connection(*args, **kwargs)

    monkeypatch.setattr(pool, "get_connection", counted)
    return taken


def test_the_hot_commands_take_no_connection_from_the_pool(tmp_path, options, monkeypatch):
    cache = Cache(str(tmp_path / "c"), **options)
    try:
        assert cache.set("k", 0) and cache.delete("k")  # (their scripts loaded: through the pool)
        taken = pool_checkouts(cache, monkeypatch)
        for number in range(10):
            assert cache.set(f"k{number}", number)  # EVALSHA
            assert cache.get(f"absent{number}") is None  # GET (nothing local to answer)
        assert cache.delete("k0") and cache.pop("k1") == 1
        assert taken == []
        assert len(pinned_of(cache).connections()) == 1
    finally:
        cache.close()


def test_each_thread_has_a_connection_of_its_own_dropped_when_the_thread_ends(
    tmp_path, options
):
    cache = Cache(str(tmp_path / "c"), **options)
    try:
        cache.set("k", "v")
        (mine,) = pinned_of(cache).connections()
        theirs = []

        def work() -> None:
            assert cache.set("k", "w")
            theirs.append(weakref.ref(pinned_of(cache)._local.held.connection))

        for _ in range(2):
            thread = threading.Thread(target=work)
            thread.start()
            thread.join()
        assert len(theirs) == 2
        assert theirs[0]() is not mine and theirs[1]() is not mine
        assert theirs[0]() is not theirs[1]() or theirs[0]() is None
        gc.collect()
        assert [ref() for ref in theirs] == [None, None]  # (its finalizer closes the socket)
        assert pinned_of(cache).connections() == [mine]
        assert mine._sock is not None
    finally:
        cache.close()


def test_a_connection_the_server_closed_is_made_again_before_a_write(
    tmp_path, options, server
):
    """The server drops the idle connection (as at a restart, or its idle ``timeout``): the
    next write connects again and is applied, and its outcome is known (no
    RemoteOutcomeUnknownError from sending on the dead socket)."""
    cache = Cache(str(tmp_path / "c"), **options)
    admin = server.client()
    try:
        assert cache.set("k", "one")
        client_id = pinned_of(cache).command("CLIENT", "ID")
        assert admin.client_kill_filter(_id=client_id) == 1
        assert cache.set("k", "two") is True
        assert cache.get("k") == "two"
        assert pinned_of(cache).command("CLIENT", "ID") != client_id  # a new connection
    finally:
        cache.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_child_never_uses_its_parents_connection(tmp_path, options):
    cache = Cache(str(tmp_path / "c"), **options)
    try:
        assert cache.set("k", "v")
        (parent_connection,) = pinned_of(cache).connections()
        parent_port = parent_connection._sock.getsockname()[1]

        def child_writes_on_its_own() -> bool:
            written = cache.set("k", "child") and cache.get("k") == "child"
            (connection,) = pinned_of(cache).connections()
            return (
                written and connection is not parent_connection
                and connection._sock.getsockname()[1] != parent_port
            )

        assert in_forked_child(child_writes_on_its_own)
        assert cache.set("k", "parent")  # the parent's connection is untouched
        assert pinned_of(cache).connections() == [parent_connection]
        assert parent_connection._sock.getsockname()[1] == parent_port
    finally:
        cache.close()


def test_close_closes_the_idle_connections_and_a_later_command_connects_again(
    tmp_path, options
):
    cache = Cache(str(tmp_path / "c"), **options)
    other = Cache(str(tmp_path / "d"), **options)
    try:
        cache.set("k", "v")
        (connection,) = pinned_of(cache).connections()
        other.close()  # another user of the client is left: nothing is closed
        assert connection._sock is not None
        cache.close()  # the last one: the idle connection is closed
        assert connection._sock is None
        assert cache.set("k", "again") and cache.get("k") == "again"
    finally:
        cache.close()
        other.close()


def test_a_command_while_the_threads_connection_is_busy_goes_through_the_pool(
    tmp_path, options, monkeypatch
):
    """A signal handler's get while its thread waits for Redis (the connection's lock held)
    must neither wait for that lock (a deadlock) nor send on the same connection (two answers
    mixed): it goes through the client's pool."""
    cache = Cache(str(tmp_path / "c"), **options)
    try:
        assert cache.set("k", "v")
        taken = pool_checkouts(cache, monkeypatch)
        held = pinned_of(cache)._local.held
        with held.lock:  # (as during a command of this thread's)
            assert cache.set("k", "w") is True
            assert cache.get("other") is None
        assert len(taken) == 2
        assert cache.set("k", "x") and len(taken) == 2  # (its own connection again)
        assert cache.get("k") == "x"
    finally:
        cache.close()


@pytest.mark.parametrize("patched", ["gevent", "eventlet"])
def test_under_green_threads_every_command_goes_through_the_pool(
    tmp_path, options, monkeypatch, patched
):
    """With gevent's or eventlet's threading, every greenlet would keep a connection of its own
    (one per request in a web server): the client's pool serves them instead."""
    import types

    if patched == "gevent":
        monkey = types.SimpleNamespace(is_module_patched=lambda name: name == "threading")
        monkeypatch.setitem(sys.modules, "gevent.monkey", monkey)
    else:
        patcher = types.SimpleNamespace(is_monkey_patched=lambda name: name == "thread")
        monkeypatch.setitem(sys.modules, "eventlet.patcher", patcher)
    monkeypatch.setattr(remote_client, "_clients", {})  # (a client made anew, under them)
    cache = Cache(str(tmp_path / "c"), **options)
    try:
        client = cache._remote._remote.client
        assert client.pinned is None
        taken = pool_checkouts(cache, monkeypatch)
        assert cache.set("k", "v") and cache.get("k") == "v" and cache.get("absent") is None
        assert len(taken) >= 2  # (the set and the absent key's get, at least)
    finally:
        cache.close()


def test_a_busy_connection_whose_client_is_gone_reports_nothing_sent():
    """The fallback of a busy connection is the client's; with the client gone, the command
    is refused as never sent (RemoteUnavailableError, not a redis-py error that would read as
    a write of unknown outcome)."""
    from diskcache_core import RemoteUnavailableError
    from diskcache_core._remote.pinned import PinnedConnections

    class Client:
        def execute_command(self, *args):  # pragma: no cover - never reached: it is gone
            return args

    class Pool:
        def make_connection(self):
            return object()

    client = Client()
    pinned = PinnedConnections(Pool(), client.execute_command)
    del client
    gc.collect()
    pinned._hold()
    with pinned._local.held.lock:  # (busy)
        with pytest.raises(RemoteUnavailableError, match="nothing was sent"):
            pinned.command("GET", b"k")
