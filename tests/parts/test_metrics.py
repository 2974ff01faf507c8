"""`Cache.metrics()` and `FanoutCache.metrics()`: each tier's counts, the host-wide counts, and
the remote's (docs/observing.rst)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading
import time
import uuid

import pytest

import diskcache_core
from diskcache_core import (
    Cache, CacheMetrics, Evictions, FanoutCache, Gets, RemoteUnavailableError, Timeout,
)

from redis_servers import RedisTestServer, needs_redis
from remote_helpers import WAIT, eventually


def test_snapshot_is_frozen_and_typed(store):
    metrics = store.metrics()
    assert isinstance(metrics, CacheMetrics)
    with pytest.raises(dataclasses.FrozenInstanceError):
        metrics.fills = 1  # type: ignore[misc]
    assert metrics.remote is None and metrics.shards == ()
    assert metrics.gets == Gets() and metrics.gets.hit_ratio is None


def test_gets_by_answering_tier(make_store):
    cache = make_store()
    cache["k"] = "v"
    assert cache.get("k") == "v"  # kept by the write: a memory hit
    assert cache.get("k") == "v"
    assert cache.get("absent") is None  # the database: no row
    assert cache.get("absent") is None  # seen lately now: its absence is kept
    assert cache.get("absent") is None  # the memory tier answers "absent": a miss
    gets = cache.metrics().gets
    assert (gets.memory, gets.database, gets.remote, gets.misses) == (2, 0, 0, 3)
    assert gets.hits == 2 and gets.hit_ratio == pytest.approx(2 / 5)

    plain = make_store(memory_size_limit=0)  # no memory tier: the database answers
    assert plain.get("k") == "v" and plain.get("nothing") is None
    gets = plain.metrics().gets
    assert (gets.memory, gets.database, gets.misses) == (0, 1, 1)
    assert plain.metrics().fills == 0 and plain.metrics().memory.items == 0


def test_fills_and_invalidations_received(make_store):
    reader, writer = make_store(), make_store()
    writer["k"] = 1
    assert reader.get("k") == 1 and reader.get("k") == 1  # noted, then read and kept
    assert reader.metrics().fills == 1
    assert reader.get("k") == 1
    assert reader.metrics().gets.memory == 1
    writer["k"] = 2  # another object (as another process would): invalidates reader's entry
    assert reader.get("k") == 2
    metrics = reader.metrics()
    assert metrics.invalidations == 1
    assert metrics.gets.database == 3 and metrics.gets.memory == 1
    assert "k" in reader and reader.metrics().invalidations == 1  # kept again by that read


def test_evictions_by_reason(make_store):
    cache = make_store(disk_min_file_size=0, size_limit=2**20)
    for number in range(6):
        cache.set(f"t{number}", number, tag="group")
    assert cache.evict("group") == 6
    cache.set("e", 1, expire=1e-6)
    time.sleep(0.01)
    assert cache.expire() == 1
    for number in range(5):
        cache[f"k{number}"] = number
    assert cache.delete("k0") and cache.pop("k1") == 1
    del cache["k2"]
    assert cache.evict_items(1) == 1
    assert cache.clear() == 1
    assert cache.metrics().evictions == Evictions(size=0, count=1, expiry=1, tag=6, explicit=4)


def test_size_evictions_match_what_left(make_store):
    cache = make_store(size_limit=200_000, disk_min_file_size=1024, eviction_policy="least-recently-stored")
    for number in range(40):
        cache.set(number, b"x" * 20_000)
    cache.cull()
    evictions = cache.metrics().evictions
    assert evictions.size > 0
    assert evictions.size == 40 - len(cache)
    assert (evictions.count, evictions.expiry, evictions.tag, evictions.explicit) == (0, 0, 0, 0)


def test_host_counts_are_the_databases(make_store):
    first, second = make_store(statistics=1), make_store()
    first.set("big", b"b" * 100_000)
    first["small"] = 1
    first.get("small")
    first.get("missing")
    second.flush_access_log()
    host = second.metrics().host  # another object of the host sees the same counts
    assert (host.count, host.value_file_bytes) == (2, 100_000)
    first.flush_access_log()
    host = second.metrics().host
    assert (host.hits, host.misses) == (1, 1)
    assert second.metrics().gets == Gets()  # its own gets: none


def test_lock_waits_and_give_ups(make_store):
    holder = make_store()
    writer = make_store(timeout=0.05)
    entered, release = threading.Event(), threading.Event()

    def hold():
        with holder.transact():
            holder["held"] = 1
            entered.set()
            release.wait(WAIT)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert entered.wait(WAIT)
        with pytest.raises(Timeout):
            writer.set("k", 1)
        writes = writer.metrics().writes
        assert (writes.lock_waits, writes.give_ups) == (1, 1)
    finally:
        release.set()
        thread.join()
    patient = make_store(timeout=WAIT)
    entered.clear()
    release.clear()
    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert entered.wait(WAIT)
        done = threading.Thread(target=patient.set, args=("k", 2))
        done.start()
        eventually(lambda: patient.metrics().writes.lock_waits == 1)
    finally:
        release.set()
        thread.join()
    done.join(WAIT)
    assert patient["k"] == 2
    assert patient.metrics().writes.give_ups == 0


def test_fanout_sums_shards_and_keeps_each(tmp_path):
    with FanoutCache(str(tmp_path / "f"), shards=4) as cache:
        for number in range(20):
            cache[number] = number
        for number in range(20):
            assert cache.get(number) == number
        assert cache.get("missing") is None
        assert cache.delete(3)
        metrics = cache.metrics()
        assert len(metrics.shards) == 4
        assert metrics.gets.memory == 20 and metrics.gets.misses == 1
        assert sum(shard.gets.memory for shard in metrics.shards) == 20
        assert metrics.evictions.explicit == 1
        assert metrics.host.count == 19 == sum(shard.host.count for shard in metrics.shards)
        assert metrics.memory.items == sum(shard.memory.items for shard in metrics.shards)
        stats = cache.memory_stats()
        assert (stats.hits, stats.items) == (20, metrics.memory.items)  # memory_stats still works


def test_backends_reach_metrics(tmp_path):
    from diskcache_core.contrib.flask import DiskCache

    flask_cache = DiskCache(str(tmp_path / "flask"))
    flask_cache.set("k", 1)
    assert flask_cache.get("k") == 1
    assert flask_cache.cache.metrics().gets.hits == 1


def test_import_loads_no_exporter_library():
    code = (
        "import sys, diskcache_core, diskcache_core.contrib\n"
        "c = diskcache_core.Cache(); c['k'] = 1; c.metrics()\n"
        "print(sorted(n for n in sys.modules if n.split('.')[0] in"
        " ('prometheus_client', 'opentelemetry')))"
    )
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True, timeout=120)  # fmt: skip
    assert out.stdout.strip() == "[]"


# --- with a remote ---------------------------------------------------------------------------


@needs_redis
def test_remote_counts_commands_errors_reconnects_and_lease(tmp_path):
    with RedisTestServer() as server:
        options = {"remote": server.url, "remote_prefix": f"m-{uuid.uuid4().hex[:8]}:",
                   "remote_timeout": 0.3}  # fmt: skip
        cache = Cache(str(tmp_path / "host"), **options)
        try:
            eventually(lambda: cache.metrics().remote.lease_valid)
            cache.set("k", 1)
            assert cache.get("missing") is None
            assert cache.delete("k")
            metrics = cache.metrics()
            remote = metrics.remote
            assert remote.commands >= 3 and remote.errors == 0
            assert remote.listener_pid > 0 and 0.0 < remote.lease_remaining
            assert metrics.gets.misses == 1 and metrics.evictions.explicit == 1
            cache.set("k", 2)
            other = Cache(str(tmp_path / "other"), **options)
            try:
                assert other.get("k") == 2
                assert other.metrics().gets.remote == 1
            finally:
                other.close()
            server.pause()
            try:
                with pytest.raises(RemoteUnavailableError):
                    cache.get("never-kept")
            finally:
                server.resume()
            assert cache.metrics().remote.errors == 1
            before = cache.metrics().remote.reconnects
            eventually(lambda: cache.get("never-kept") is None)
            assert cache.metrics().remote.reconnects == before + 1
        finally:
            cache.close()


@needs_redis
def test_remote_invalidations_received_and_lag_percentiles(tmp_path):
    """Two hosts (two directories on one Redis): the writes of one are heard by the other's
    listener, counted once each (no probe name of either listener counted), and its probes'
    lag percentiles are published, positive and ordered, in every process's snapshot."""
    with RedisTestServer() as server:
        options = {"remote": server.url, "remote_prefix": f"lag-{uuid.uuid4().hex[:8]}:",
                   "remote_timeout": 1.0}  # fmt: skip
        writer = Cache(str(tmp_path / "writer"), **options)
        reader = Cache(str(tmp_path / "reader"), **options)
        try:
            eventually(lambda: writer.metrics().remote.lease_valid)
            eventually(lambda: reader.metrics().remote.lease_valid)
            before = reader.metrics().remote
            assert before.invalidations_received == 0
            for number in range(25):
                writer.set(f"k{number}", number)
            writer.delete("k0")
            writer.set("k1", "again")
            # Both listeners time further probes (each also hears the other's probe names).
            probes = before.lag_probes
            eventually(lambda: reader.metrics().remote.lag_probes >= probes + 3)
            eventually(lambda: writer.metrics().remote.lag_probes >= 3)
            eventually(lambda: reader.metrics().remote.invalidations_received >= 27)
            remote = reader.metrics().remote
            assert remote.invalidations_received == 27
            assert writer.metrics().remote.invalidations_received == 27  # its own writes too
            assert remote.lag_p50 is not None and remote.lag_p90 is not None
            assert remote.lag_p99 is not None
            assert 0.0 < remote.lag_p50 <= remote.lag_p90 <= remote.lag_p99
            assert server.client().keys(options["remote_prefix"] + "~*")  # the probes' names
            # Another process of the reader's host reads the same report.
            script = (
                "import sys; from diskcache_core import Cache; "
                "c = Cache(sys.argv[1], remote=sys.argv[2], remote_prefix=sys.argv[3]); "
                "r = c.metrics().remote; print(r.invalidations_received, r.lag_probes > 0); c.close()"
            )
            out = subprocess.run(
                [sys.executable, "-c", script, str(tmp_path / "reader"), server.url,
                 options["remote_prefix"]], capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            assert out.stdout.split() == ["27", "True"], out.stderr
            assert reader.clear() == 24  # the probes' names are no cache's keys
        finally:
            reader.close()
            writer.close()


@needs_redis
def test_fanout_remote_sums_invalidations_received(tmp_path):
    """A FanoutCache's one listener counts each shard's names in that shard's file: the sum
    is the writes heard, and every shard shows the lag."""
    with RedisTestServer() as server:
        cache = FanoutCache(str(tmp_path / "many"), shards=2, remote=server.url,
                            remote_prefix=f"f-{uuid.uuid4().hex[:8]}:")  # fmt: skip
        try:
            eventually(lambda: cache.metrics().remote.lease_valid)
            for number in range(8):
                cache.set(number, number)
            eventually(lambda: cache.metrics().remote.invalidations_received >= 8)
            eventually(lambda: cache.metrics().remote.lag_probes >= 2)
            metrics = cache.metrics()
            assert metrics.remote.invalidations_received == 8
            parts = [shard.remote.invalidations_received for shard in metrics.shards]
            assert sum(parts) == 8 and all(parts)  # (8 keys over 2 shards: both get some)
            # (each shard's file has the lag: read one after the other, a probe may fall between)
            assert all(shard.remote.lag_probes >= 2 for shard in metrics.shards)
            assert all(shard.remote.lag_p99 is not None for shard in metrics.shards)
            assert metrics.remote.lag_p99 == metrics.shards[0].remote.lag_p99
        finally:
            cache.close()


def test_lag_words_round_trip_and_clamp(tmp_path):
    """The listener's report in a stamp file: three lags packed into one word (microseconds, at
    least one, at most LAG_MAX), read back by another mapping of the file."""
    from diskcache_core._remote.stamps import LAG_MAX, RemoteWords, StampSet, pack_lag

    directory = str(tmp_path)
    listener = StampSet([(directory, "p:")])
    reader = RemoteWords(directory, b"p:")
    try:
        assert reader.heard_state() == (0, 0, 0.0, 0.0, 0.0)
        assert listener.heard(b"p:sa") and listener.heard(b"p:sb")
        assert not listener.heard(b"p:~probe/x/1") and not listener.heard(b"q:sa")
        listener.set_lag(pack_lag(1e-8, 0.5, 10.0), 3)
        heard = reader.heard_state()
        assert (heard.names, heard.probes) == (2, 3)
        assert heard.p50 == pytest.approx(1e-6) and heard.p90 == pytest.approx(0.5)
        assert heard.p99 == pytest.approx(LAG_MAX)
    finally:
        reader.close()
        listener.close()


def test_public_names():
    for name in ("CacheMetrics", "Evictions", "Gets", "HostCounts", "MemoryMetrics",
                 "RemoteMetrics", "Writes"):  # fmt: skip
        assert dataclasses.is_dataclass(getattr(diskcache_core, name))
