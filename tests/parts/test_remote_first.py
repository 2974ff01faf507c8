"""A fresh process's first gets through a near cache: what they do besides redis-py's GET.

The listener's election and the start of its process happen while the cache opens, not in the
listener thread while the first gets run (its Python work held the GIL they waited for after
each Redis answer); a get that asks Redis makes no system call of its own on top of redis-py's
(no getpid(), no thread liveness lock), one command on the one connection of the process's
client (a FanoutCache's shards share it); and the first remote read of a key leaves a local copy,
through a Cache and through a FanoutCache.
"""

from __future__ import annotations

import os
import threading

import pytest

from diskcache_core import Cache, FanoutCache
from diskcache_core._remote import listener as listener_module

from remote_helpers import eventually
from redis_servers import needs_redis

pytestmark = needs_redis


def tiers(cache):
    """The remote tiers of a Cache (one) or of a FanoutCache (one per shard)."""
    shards = getattr(cache, "_shards", None)
    return [shard._remote for shard in shards] if shards is not None else [cache._remote]


@pytest.mark.parametrize("factory", [Cache, FanoutCache])
def test_the_election_and_the_listener_process_start_while_the_cache_opens(
    tmp_path, options, monkeypatch, factory
):
    made_in, spawned_in = [], []
    stamp_set, popen = listener_module.StampSet, listener_module.subprocess.Popen

    def recording_stamp_set(*args, **kwargs):
        made_in.append(threading.current_thread())
        return stamp_set(*args, **kwargs)

    class RecordingPopen(popen):  # type: ignore[misc,valid-type]
        def __init__(self, *args, **kwargs):
            spawned_in.append(threading.current_thread())
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(listener_module, "StampSet", recording_stamp_set)
    monkeypatch.setattr(listener_module.subprocess, "Popen", RecordingPopen)
    opening = threading.current_thread()
    cache = factory(str(tmp_path / "c"), **options)
    try:
        candidate = tiers(cache)[0]._listener
        assert candidate is not None and candidate.child is not None  # started already
        assert made_in == [opening] and spawned_in == [opening]
        eventually(lambda: tiers(cache)[0]._leased())  # and it listens
        assert spawned_in == [opening]  # (the thread started no other)
    finally:
        cache.close()
    assert not candidate.is_alive() and candidate.child.poll() is not None


def test_a_candidate_stopped_before_its_thread_ran_stops_the_process_it_started(
    tmp_path, options
):
    cache = Cache(str(tmp_path / "c"), **options)
    tier = cache._remote
    os.mkdir(tmp_path / "d")  # (a directory of its own: the lock there is free)
    thread = listener_module.ListenerThread(
        str(tmp_path / "d"), tier._remote, [(str(tmp_path / "c"), options["remote_prefix"])],
        1.0, False,
    )
    try:
        thread._first_try()  # (as start() does, the thread not started yet)
        assert thread.child is not None and thread.child.poll() is None
        thread.stop()
        thread.run()  # the thread's body: stopped already, it ends the process it inherited
        assert thread.child.poll() is not None and thread.fd == -1 and not thread.current
    finally:
        if thread.child is not None and thread.child.poll() is None:
            thread.child.kill()
            thread.child.wait()
        cache.close()


@pytest.mark.parametrize("factory", [Cache, FanoutCache])
def test_a_get_that_asks_redis_makes_no_system_call_beyond_redis_pys_get(
    tmp_path, options, monkeypatch, factory
):
    writer = factory(str(tmp_path / "w"), **options)
    reader = factory(str(tmp_path / "r"), **options)
    calls = {"getpid": 0, "is_alive": 0}
    getpid, is_alive = os.getpid, threading.Thread.is_alive

    def counted_getpid():
        calls["getpid"] += 1
        return getpid()

    def counted_is_alive(self):
        calls["is_alive"] += 1
        return is_alive(self)

    try:
        for number in range(6):
            writer.set(f"k{number}", number)
        reader.get("k0")  # (the connection made)
        client = tiers(reader)[0]._remote.client
        name = tiers(reader)[0]._remote.name(b"none")
        import redis.connection  # (redis-py: a test dependency of the remote tests only)

        sent = []
        send = redis.connection.Connection.send_packed_command

        def counted_send(self, *args, **kwargs):
            sent.append(self)
            return send(self, *args, **kwargs)

        monkeypatch.setattr(os, "getpid", counted_getpid)
        monkeypatch.setattr(threading.Thread, "is_alive", counted_is_alive)
        monkeypatch.setattr(redis.connection.Connection, "send_packed_command", counted_send)
        client.execute_command("GET", name)
        redis_pys = dict(calls)
        calls.update(getpid=0, is_alive=0)
        sent.clear()
        for number in range(1, 6):
            assert reader.get(f"k{number}") == number  # each asks Redis (first read)
        # redis-py's own GET checks for a fork (its pool's getpid()); ours, on the thread's
        # pinned connection, makes no system call but the command's.
        assert redis_pys["getpid"] >= 1
        assert calls == {"getpid": 0, "is_alive": 0}
        assert len(sent) == 5 and len(set(sent)) == 1  # one command each, on one connection
    finally:
        monkeypatch.undo()
        writer.close()
        reader.close()


@pytest.mark.parametrize("factory", [Cache, FanoutCache])
def test_the_first_remote_read_of_a_key_leaves_a_local_copy(tmp_path, options, factory):
    writer = factory(str(tmp_path / "w"), **options)
    reader = factory(str(tmp_path / "r"), **options)
    try:
        for number in range(8):
            writer.set(f"k{number}", f"v{number}")
        eventually(lambda: all(tier._leased() for tier in tiers(reader)))
        assert [reader.get(f"k{n}") for n in range(8)] == [f"v{n}" for n in range(8)]
        assert sum(tier.answered.found for tier in tiers(reader)) == 8  # each asked Redis once
        assert [reader.get(f"k{n}") for n in range(8)] == [f"v{n}" for n in range(8)]
        assert sum(tier.answered.found for tier in tiers(reader)) == 8  # then answered here
    finally:
        writer.close()
        reader.close()
