"""What a cache tells about itself: the counter objects each tier keeps, and the typed snapshot
`Cache.metrics` returns.

Counters are per process and per cache object: plain attributes, incremented where the event
happens by the part that owns it (the memory tier its hits, the Store its lock waits and
give-ups, the Evictor its removals by reason, the remote tier its commands). An increment is one
attribute store in this process: no lock, no write to a shared place, so a get pays nothing
measurable for it. With threads racing on one counter an increment may be lost now and then:
the counts are exact with one thread and approximate under contention, which is what a rate on
a dashboard needs. Counts that the database keeps for the whole host (the ``Settings`` table's
item count, value-file bytes, hits and misses) are read when a snapshot is taken and reported
apart, as `HostCounts`.

The snapshot is a tree of frozen dataclasses, documented field by field, so that an exporter
(``contrib.prometheus``, ``contrib.opentelemetry``) or a test reads names, never positions.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import NamedTuple, TypeVar

__all__ = [
    "CacheMetrics",
    "CommandCounts",
    "EvictionCounts",
    "Evictions",
    "Gets",
    "HostCounts",
    "MemoryMetrics",
    "MemoryStats",
    "ReadCounts",
    "RemoteCounts",
    "RemoteMetrics",
    "WriteCounts",
    "Writes",
    "add_counts",
]


# --- the counters each tier keeps (mutable, per process) ----------------------------------------


class ReadCounts:
    """The local database's answers to gets that reached it (kept by the Store, counted on
    the facade's one read path): rows `found`, and `missed` (no live row)."""

    __slots__ = ("found", "missed")

    def __init__(self) -> None:
        self.found = 0
        self.missed = 0


class WriteCounts:
    """The Store's waits for SQLite's write lock: writes that found it held and waited
    (`lock_waits`), and those that gave up after the cache's timeout (`give_ups`, raised as
    `Timeout` or, in a FanoutCache, returned as the give-up result)."""

    __slots__ = ("lock_waits", "give_ups")

    def __init__(self) -> None:
        self.lock_waits = 0
        self.give_ups = 0


class EvictionCounts:
    """Items removed, by reason (kept by the Evictor, and by the remote tier for its removals
    in Redis); see `Evictions` for what each reason covers."""

    __slots__ = ("size", "count", "expiry", "tag", "explicit")

    def __init__(self) -> None:
        self.size = 0
        self.count = 0
        self.expiry = 0
        self.tag = 0
        self.explicit = 0


class RemoteCounts:
    """The remote tier's gets below its memory tier: answered by this host's copy (`local`),
    or by Redis, the item `found` there or `missed`."""

    __slots__ = ("local", "found", "missed")

    def __init__(self) -> None:
        self.local = 0
        self.found = 0
        self.missed = 0


class CommandCounts:
    """The remote client's `commands` sent to Redis, and those that failed (`errors`)."""

    __slots__ = ("commands", "errors")

    def __init__(self) -> None:
        self.commands = 0
        self.errors = 0


# --- the snapshot (immutable) --------------------------------------------------------------------


class MemoryStats(NamedTuple):
    """What `Cache.memory_stats` returns: this process's memory tier of one cache."""

    hits: int  #: gets and ``in`` tests answered from memory
    misses: int  #: gets that went to SQLite while the tier was on
    items: int  #: entries held now
    size: int  #: bytes counted for them (keys, values and a fixed overhead per entry)
    size_limit: int  #: memory_size_limit
    item_limit: int  #: memory_item_limit


@dataclass(frozen=True)
class Gets:
    """Gets of this process by the tier that answered them (``get``, ``[]``, ``read`` and the
    memoizing decorators; an ``in`` test answered from memory counts as a memory get)."""

    #: answered from the memory tier with a value
    memory: int = 0
    #: answered from this host's SQLite database (with a remote: from the host's copy)
    database: int = 0
    #: answered from the remote (Redis), the item found there
    remote: int = 0
    #: answered "missing" by whichever tier knew: the memory tier (a kept absence), the
    #: database (no live row) or the remote
    misses: int = 0

    @property
    def hits(self) -> int:
        """Gets that found a value, in any tier."""
        return self.memory + self.database + self.remote

    @property
    def hit_ratio(self) -> float | None:
        """``hits / (hits + misses)``; None before the first get."""
        total = self.hits + self.misses
        return self.hits / total if total else None


@dataclass(frozen=True)
class Evictions:
    """Items removed by this process, by reason."""

    #: evicted by the eviction policy because the cache was over ``size_limit`` (the size
    #: check of writes, ``cull``)
    size: int = 0
    #: evicted by the policy for an entry-count limit (``evict_items``: Django's MAX_ENTRIES)
    count: int = 0
    #: expired items removed (``expire``, ``cull``, the size check of writes)
    expiry: int = 0
    #: removed by ``evict(tag)``
    tag: int = 0
    #: removed by the application: ``delete``, ``pop``, ``clear`` (and ``del cache[key]``)
    explicit: int = 0


@dataclass(frozen=True)
class Writes:
    """This process's waits for the database's write lock."""

    #: writes (and transactions) that found the write lock held and waited for it
    lock_waits: int = 0
    #: writes that gave up waiting after the timeout (``Timeout``; a FanoutCache returns its
    #: give-up result, also counted in ``stats().timeouts``)
    give_ups: int = 0


@dataclass(frozen=True)
class MemoryMetrics:
    """This process's memory tier (all zeros while it is off)."""

    #: entries held now
    items: int = 0
    #: bytes counted for them
    size: int = 0
    #: ``memory_size_limit``
    size_limit: int = 0
    #: ``memory_item_limit``
    item_limit: int = 0


@dataclass(frozen=True)
class HostCounts:
    """What the database keeps for every process of the host (its ``Settings`` table), read
    when the snapshot was taken; with a remote, the counts of this host's copies."""

    #: items stored (expired ones not yet removed included)
    count: int = 0
    #: bytes in value files
    value_file_bytes: int = 0
    #: hits counted by every process (only while ``statistics`` is on; includes this
    #: process's batch not yet written)
    hits: int = 0
    #: misses likewise
    misses: int = 0


@dataclass(frozen=True)
class RemoteMetrics:
    """The remote (Redis) as this process sees it."""

    #: commands sent to Redis (a pipeline or script counts once)
    commands: int = 0
    #: commands that failed (unreachable, timed out, refused)
    errors: int = 0
    #: times Redis answered again after it had become unreachable (per remote URL in this
    #: process: shards of one FanoutCache share it)
    reconnects: int = 0
    #: whether the host's listener holds a valid lease now (copies may be served)
    lease_valid: bool = False
    #: seconds the lease is still good for (0.0 when it has lapsed)
    lease_remaining: float = 0.0
    #: process id of the host's listener, 0 when none has written it
    listener_pid: int = 0
    #: names of this cache the host's listener heard change in Redis (writes of every host,
    #: expiry, eviction) and invalidated: a count for the whole host, kept across listener
    #: restarts (the stamp file's; this process's memory-tier entries found stale are
    #: ``CacheMetrics.invalidations``)
    invalidations_received: int = 0
    #: probes the host's listener timed (a SET of its own at each ping, see below; 0 before
    #: the first, and on a Redis Cluster, where none is sent)
    lag_probes: int = 0
    #: the invalidation lag's median over the listener's last 64 probes (about 16 s): seconds
    #: from sending a write to Redis to applying its invalidation on this host; None while
    #: ``lag_probes`` is 0
    lag_p50: float | None = None
    #: its 90th percentile
    lag_p90: float | None = None
    #: its 99th percentile (a probe unheard for 2 s counts as 2 s)
    lag_p99: float | None = None


@dataclass(frozen=True)
class CacheMetrics:
    """`Cache.metrics` (and `FanoutCache.metrics`): one cache as this process sees it.

    Every count is since this object was made in this process, except `host`'s. A FanoutCache's
    is the sum over its shards, and each shard's own is in `shards`.
    """

    #: gets by the tier that answered them
    gets: Gets = field(default_factory=Gets)
    #: entries the memory tier kept (from a get's read or a write's value)
    fills: int = 0
    #: memory-tier entries found invalidated by a write (of any process, or with a remote of
    #: any host): the get then read a tier below
    invalidations: int = 0
    #: items removed, by reason
    evictions: Evictions = field(default_factory=Evictions)
    #: waits for the write lock and give-ups
    writes: Writes = field(default_factory=Writes)
    #: the memory tier now
    memory: MemoryMetrics = field(default_factory=MemoryMetrics)
    #: counts the database keeps for the whole host
    host: HostCounts = field(default_factory=HostCounts)
    #: the remote, or None for a cache without one
    remote: RemoteMetrics | None = None
    #: a FanoutCache's shards, each one's own metrics (empty for a Cache)
    shards: tuple[CacheMetrics, ...] = ()


_Counted = TypeVar("_Counted", Gets, Evictions, Writes, HostCounts, MemoryMetrics)


def add_counts(parts: list[_Counted]) -> _Counted:
    """The sum of same-typed count dataclasses (`Gets`, `Evictions`, `Writes`, `HostCounts`,
    `MemoryMetrics`), field by field."""
    kind = type(parts[0])
    totals = {item.name: sum(getattr(part, item.name) for part in parts) for item in fields(kind)}
    return kind(**totals)
