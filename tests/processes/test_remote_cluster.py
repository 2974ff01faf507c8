"""The remote tier on a real Redis Cluster whose topology changes under it (docs/remote.rst,
"Guarantees" and "Redis Cluster"): a primary killed and its replica promoted, a manual failover,
slots moving while hosts write, a primary added, a primary that never comes back.

Two simulated hosts: two directories, each with its elected listener process. Host A writes one
item again and again while host B reads it; no read of B that began more than BOUND after a write
returned may give an older value. The clusters' nodes run on 127.0.0.1, started and stopped here.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
import uuid

import pytest

from diskcache_core import Cache, RemoteUnavailableError

from redis_servers import RedisTestCluster, needs_redis

pytest.importorskip("redis")

import redis.cluster  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    needs_redis,
]

# A read may return the old value this long after the write returned: the documented bound after
# a topology change is one check of the listener (0.25 s) and a lease; generous under load.
BOUND = 0.5
WAIT = 60.0  # the longest any awaited event may take before the test fails
NODE_TIMEOUT = 2000  # ms before the cluster takes a silent primary for failed


class Traffic:
    """Host A sets `key` to 1, 2, 3, ... (going on through outages), host B reads it; both
    recorded with time.time(). Each loop is bounded in time."""

    def __init__(self, a: Cache, b: Cache, key: str) -> None:
        self.a, self.b, self.key = a, b, key
        self.written: list[tuple[int, float]] = []  # (value, returned at)
        self.reads: list[tuple[float, int]] = []  # (began at, value read)
        self.copies = 0  # reads B served without asking Redis
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._write, daemon=True),
            threading.Thread(target=self._read, daemon=True),
        ]

    def __enter__(self) -> Traffic:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(WAIT)

    def _write(self) -> None:
        try:
            self._writes()
        except BaseException as exc:
            self.errors.append(exc)
            raise

    def _writes(self) -> None:
        value = 0
        limit = time.monotonic() + WAIT * 4
        while not self._stop.is_set() and time.monotonic() < limit:
            try:
                self.a.set(self.key, value + 1)
            except RemoteUnavailableError:  # the primary is down, or being replaced
                time.sleep(0.01)
                continue
            value += 1
            self.written.append((value, time.time()))
            time.sleep(0.003)

    def _read(self) -> None:
        try:
            self._reads()
        except BaseException as exc:
            self.errors.append(exc)
            raise

    def _reads(self) -> None:
        limit = time.monotonic() + WAIT * 4
        tier = self.b._remote
        while not self._stop.is_set() and time.monotonic() < limit:
            began = time.time()
            try:
                self.reads.append((began, self.b.get(self.key, 0)))
            except RemoteUnavailableError:
                time.sleep(0.01)
                continue
            if tier._words.lease_valid():
                self.copies += 1
            if len(self.reads) % 64 == 0:
                time.sleep(0.001)  # let the listeners of this loaded machine run too

    def wait_writes(self, count: int) -> None:
        """Wait until `count` more writes have returned."""
        target = len(self.written) + count
        limit = time.monotonic() + WAIT
        while len(self.written) < target:
            assert not self.errors, self.errors
            assert time.monotonic() < limit, f"host A's writes stalled at {len(self.written)}"
            time.sleep(0.01)

    def stale_reads(self) -> tuple[int, list[tuple[float, int, int]]]:
        """How many reads began more than BOUND after some write returned, and those of them
        that read an older value (began at, read, the value due)."""
        returned_at = [at for _, at in self.written]
        checked, stale = 0, []
        for began, value in list(self.reads):
            due = bisect.bisect_right(returned_at, began - BOUND)
            if due:
                checked += 1
                if value < self.written[due - 1][0]:
                    stale.append((began, value, self.written[due - 1][0]))
        return checked, stale


def eventually(check, deadline=WAIT):
    limit = time.monotonic() + deadline
    while time.monotonic() < limit:
        if check():
            return
        time.sleep(0.01)
    raise AssertionError("condition never held")


@pytest.fixture
def cluster():
    with RedisTestCluster(replicas=1, node_timeout=NODE_TIMEOUT) as running:
        yield running


@pytest.fixture
def hosts(tmp_path):
    opened: list[Cache] = []

    def make(url: str, prefix: str) -> tuple[Cache, Cache]:
        a = Cache(str(tmp_path / "hostA"), remote=url, remote_prefix=prefix)
        b = Cache(str(tmp_path / "hostB"), remote=url, remote_prefix=prefix)
        opened.extend((a, b))
        return a, b

    yield make
    for cache in opened:
        cache.close()


def _slot(prefix: str, key: str) -> int:
    return redis.cluster.key_slot(prefix.encode() + b"s" + key.encode())


def _assert_fresh(traffic: Traffic) -> None:
    assert not traffic.errors, traffic.errors
    checked, stale = traffic.stale_reads()
    assert checked > 100, f"too few reads to check anything ({checked})"
    assert not stale, (
        f"{len(stale)} of {checked} reads older than {BOUND} s, the first (began, read, due): "
        f"{stale[:3]}, the last: {stale[-1]}"
    )


def test_a_primary_killed_and_its_replica_promoted_serves_nothing_stale(cluster, hosts):
    prefix = f"t{uuid.uuid4().hex[:8]}:"
    a, b = hosts(cluster.url, prefix)
    slot = _slot(prefix, "item")
    primary = cluster.owner(slot)
    replica = cluster.replica_of(primary)
    with Traffic(a, b, "item") as traffic:
        traffic.wait_writes(50)
        eventually(b._remote._words.lease_valid)
        cluster.kill(primary)
        assert cluster.wait_promoted(slot, primary) == replica
        traffic.wait_writes(100)  # written to the promoted replica
        # Without its old primary, which may never come back, host B serves copies again.
        eventually(b._remote._words.lease_valid)
        copies = traffic.copies
        cluster.restart(primary)  # it rejoins as a replica of the promoted one
        eventually(lambda: cluster.role(primary) == "slave")
        traffic.wait_writes(300)
        assert traffic.copies > copies, "host B served no copy after the failover"
    _assert_fresh(traffic)


def test_a_manual_failover_serves_nothing_stale(cluster, hosts):
    prefix = f"t{uuid.uuid4().hex[:8]}:"
    a, b = hosts(cluster.url, prefix)
    slot = _slot(prefix, "item")
    primary = cluster.owner(slot)
    replica = cluster.replica_of(primary)
    with Traffic(a, b, "item") as traffic:
        traffic.wait_writes(50)
        eventually(b._remote._words.lease_valid)
        cluster.failover(replica)
        assert cluster.owner(slot) == replica
        traffic.wait_writes(300)
        copies = traffic.copies
        traffic.wait_writes(100)
        assert traffic.copies > copies, "host B served no copy after the failover"
    _assert_fresh(traffic)


def test_slots_moving_to_a_primary_added_while_hosts_write(cluster, hosts):
    prefix = f"t{uuid.uuid4().hex[:8]}:"
    a, b = hosts(cluster.url, prefix)
    slot = _slot(prefix, "item")
    with Traffic(a, b, "item") as traffic:
        traffic.wait_writes(50)
        # A reshard between the first primaries while writing...
        first = cluster.owner(slot)
        other = next(port for port in cluster.primaries() if port != first)
        cluster.move_slot(slot, other)
        traffic.wait_writes(100)
        # ... then to a primary added to the cluster after the listeners started.
        added = cluster.add_primary()
        cluster.move_slot(slot, added)
        assert cluster.owner(slot) == added
        traffic.wait_writes(300)
        copies = traffic.copies
        traffic.wait_writes(100)
        assert traffic.copies > copies, "host B served no copy after the moves"
    _assert_fresh(traffic)


def test_a_primary_that_does_not_come_back_is_logged_once_and_its_return_too(tmp_path, caplog):
    """No replica: the killed primary's slots have no one to serve them. The listener then
    grants no lease, says so once (a WARNING, not one per retry), and says when it listens on
    every primary again."""
    caplog.set_level(logging.INFO, logger="diskcache_core")
    with RedisTestCluster(replicas=0, node_timeout=NODE_TIMEOUT) as small:
        prefix = f"t{uuid.uuid4().hex[:8]}:"
        cache = Cache(str(tmp_path / "host"), remote=small.url, remote_prefix=prefix)
        try:
            eventually(cache._remote._words.lease_valid)
            victim = small.ports[1]
            small.kill(victim)

            def warnings():  # (the electing process's lease lines are test_logging.py's)
                return [
                    record for record in caplog.records
                    if record.name == "diskcache_core.listener"
                    and record.levelno == logging.WARNING
                    and "cannot listen on" in record.getMessage()
                ]

            eventually(lambda: warnings())
            assert f"127.0.0.1:{victim}" in warnings()[0].getMessage()
            assert not cache._remote._words.lease_valid()
            listener = cache._remote._listener
            assert listener is not None and listener.child is not None
            retries = 20  # the listener tries again every 0.2 s: some of them, all silent
            time.sleep(retries * 0.2)
            assert len(warnings()) == 1
            assert not cache._remote._words.lease_valid()
            small.restart(victim)
            eventually(cache._remote._words.lease_valid)
            eventually(lambda: any(
                record.name == "diskcache_core.listener"
                and record.levelno == logging.INFO and "again" in record.getMessage()
                for record in caplog.records
            ))
        finally:
            cache.close()
