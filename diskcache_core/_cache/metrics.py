"""`Cache.metrics` and `FanoutCache.metrics`: the snapshot assembled from each part's counters.

Each part counts its own events (see _metrics.py); here they are read, not changed, and put
together with the host-wide counts the database keeps. A FanoutCache's snapshot is the sum of
its shards' (every count adds up; the remote's reconnects are per URL, so the largest is taken,
and its lease is valid only while every shard's is; the listener's lag is the same in every
shard's stamp file, and its invalidations received add up).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .._metrics import (
    CacheMetrics, Evictions, Gets, HostCounts, MemoryMetrics, RemoteMetrics, Writes, add_counts,
)
from .._store import schema as sql

if TYPE_CHECKING:
    from .._remote.stamps import RemoteWords
    from .._remote.tier import RemoteTier
    from .base import CacheBase

__all__ = ["Observed", "cache_metrics", "combined_metrics"]


def cache_metrics(cache: CacheBase) -> CacheMetrics:
    """One Cache's snapshot (see `CacheMetrics`)."""
    memory = cache._memory
    reads = cache._store.reads
    # A cache with a remote is a RemoteCache, whose item methods are its remote tier's
    # (_cache/remote.py); a local one has no such tier.
    remote: RemoteTier | None = getattr(cache, "_remote", None)
    absent = memory.absent_hits if memory is not None else 0
    if remote is None:
        gets = Gets(
            memory=memory.value_hits if memory is not None else 0,
            database=reads.found,
            misses=reads.missed + absent,
        )
    else:
        answered = remote.answered
        gets = Gets(
            memory=memory.value_hits if memory is not None else 0,
            database=answered.local,
            remote=answered.found,
            misses=answered.missed + absent,
        )
    removed = cache._evictor.removed
    # With a remote, what the application removes goes from Redis (the remote tier counts it);
    # the evictor's explicit removals are then only this host's copies going with a clear.
    explicit, tag = (removed.explicit, removed.tag) if remote is None else (
        remote.removed.explicit, remote.removed.tag
    )
    writes = cache._store.writes
    return CacheMetrics(
        gets=gets,
        fills=memory.fills if memory is not None else 0,
        invalidations=memory.invalidated if memory is not None else 0,
        evictions=Evictions(removed.size, removed.count, removed.expiry, tag, explicit),
        writes=Writes(writes.lock_waits, writes.give_ups),
        memory=_memory_now(memory),
        host=_host_counts(cache),
        remote=_remote_now(remote) if remote is not None else None,
    )


def _remote_now(remote: RemoteTier) -> RemoteMetrics:
    """The remote tier's own counts, and the listener's report read from the stamp file
    (its mapping: no system call) that this cache shares with the host's listener."""
    words: RemoteWords = remote._words
    heard = words.heard_state()
    lag: dict[str, Any] = {}
    if heard.probes:
        lag = {"lag_p50": heard.p50, "lag_p90": heard.p90, "lag_p99": heard.p99}
    return replace(
        remote.metrics(), invalidations_received=heard.names, lag_probes=heard.probes, **lag
    )


def _memory_now(memory: Any) -> MemoryMetrics:
    if memory is None:
        return MemoryMetrics()
    return MemoryMetrics(len(memory.entries), memory.size, memory.size_limit, memory.item_limit)


def _host_counts(cache: CacheBase) -> HostCounts:
    """The Settings table's counters, read now (a count row the database does not keep, or
    one damaged by hand, is counted; hits and misses include this process's pending batch)."""
    rows = dict(cache._store.read(sql.SELECT_COUNTERS))
    count = rows.get("count")
    if type(count) is not int or count < 0:
        count = int(cache._store.read(sql.COUNT)[0][0])
    size = rows.get("size")
    hits, misses = cache._evictor.hits_misses(False)
    return HostCounts(count, size if type(size) is int and size > 0 else 0, hits, misses)


def combined_metrics(parts: list[CacheMetrics]) -> CacheMetrics:
    """A FanoutCache's snapshot: its shards' summed, each shard's kept in ``shards``."""
    remotes = [part.remote for part in parts if part.remote is not None]
    remote = None
    if remotes:
        remote = RemoteMetrics(
            commands=sum(item.commands for item in remotes),
            errors=sum(item.errors for item in remotes),
            reconnects=max(item.reconnects for item in remotes),
            lease_valid=all(item.lease_valid for item in remotes),
            lease_remaining=min(item.lease_remaining for item in remotes),
            listener_pid=remotes[0].listener_pid,
            invalidations_received=sum(item.invalidations_received for item in remotes),
            # (one listener serves every shard: the same probes in each shard's file)
            lag_probes=remotes[0].lag_probes, lag_p50=remotes[0].lag_p50,
            lag_p90=remotes[0].lag_p90, lag_p99=remotes[0].lag_p99,
        )
    return CacheMetrics(
        gets=add_counts([part.gets for part in parts]),
        fills=sum(part.fills for part in parts),
        invalidations=sum(part.invalidations for part in parts),
        evictions=add_counts([part.evictions for part in parts]),
        writes=add_counts([part.writes for part in parts]),
        memory=add_counts([part.memory for part in parts]),
        host=add_counts([part.host for part in parts]),
        remote=remote,
        shards=tuple(parts),
    )


class Observed:
    """`Cache.metrics`: a Cache's own counters read into a snapshot (the mixin keeps the
    facade's class to its item API)."""

    def metrics(self: Any) -> CacheMetrics:
        """What this cache did in this process, by tier, and the host-wide counts its database
        keeps: a `CacheMetrics` snapshot (:doc:`observing`). Counting costs the hot path one
        attribute increment: no lock, no write to a shared place."""
        return cache_metrics(self)
