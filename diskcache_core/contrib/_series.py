"""The metric series of a `CacheMetrics` snapshot, as both exporters name them.

One table for ``contrib.prometheus`` and ``contrib.opentelemetry``: each series has a name
(``diskcache_core_*``, without Prometheus's ``_total`` suffix), a kind, a help text, and one
sample per label set. Labels: ``cache`` (the name the application gave the cache), ``tier``
(``memory``, ``database``, ``remote``; ``none`` for a miss), ``result`` (``hit``, ``miss``) and
``reason`` (an eviction's). Imports neither client library.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import NamedTuple, Protocol

from .._metrics import CacheMetrics

__all__ = ["COUNTER", "GAUGE", "SERIES", "HasMetrics", "Sample", "samples"]

#: A count that only grows in a process (a Prometheus counter, an OTel observable counter).
COUNTER = "counter"
#: A value that goes up and down, or a count kept for the whole host (it can be reset).
GAUGE = "gauge"


class HasMetrics(Protocol):
    """A Cache, a FanoutCache, or the Django backend: anything with ``metrics()``."""

    def metrics(self) -> CacheMetrics: ...


class Series(NamedTuple):
    """One metric: its name, kind, help text, and its label names besides ``cache``."""

    name: str
    kind: str
    help: str
    labels: tuple[str, ...] = ()
    #: how Prometheus's multiprocess mode combines a gauge over processes
    combine: str = "livesum"


class Sample(NamedTuple):
    """One value of a series for one cache and label set."""

    series: Series
    labels: dict[str, str]
    value: float


_GETS = Series(
    "diskcache_core_gets",
    COUNTER,
    "Gets of this process by the tier that answered",
    ("tier", "result"),
)
_FILLS = Series("diskcache_core_memory_fills", COUNTER, "Entries the memory tier kept")
_INVALIDATIONS = Series(
    "diskcache_core_invalidations", COUNTER, "Memory-tier entries found invalidated by a write"
)
_EVICTIONS = Series("diskcache_core_evictions", COUNTER, "Items removed, by reason", ("reason",))
_WAITS = Series("diskcache_core_lock_waits", COUNTER, "Writes that waited for the write lock")
_GIVE_UPS = Series("diskcache_core_write_give_ups", COUNTER, "Writes that gave up waiting")
_MEMORY_ITEMS = Series("diskcache_core_memory_items", GAUGE, "Entries in the memory tier")
_MEMORY_BYTES = Series("diskcache_core_memory_bytes", GAUGE, "Bytes counted for those entries")
_MEMORY_LIMIT = Series("diskcache_core_memory_limit_bytes", GAUGE, "The memory tier's byte bound")
_ITEMS = Series(
    "diskcache_core_items", GAUGE, "Items in the database (the whole host)", combine="mostrecent"
)
_FILE_BYTES = Series(
    "diskcache_core_value_file_bytes",
    GAUGE,
    "Bytes in value files (the whole host)",
    combine="mostrecent",
)
_HOST_GETS = Series(
    "diskcache_core_host_gets",
    GAUGE,
    "Hits and misses of every process (statistics on)",
    ("result",),
    combine="mostrecent",
)
_COMMANDS = Series("diskcache_core_remote_commands", COUNTER, "Commands sent to the remote")
_ERRORS = Series("diskcache_core_remote_errors", COUNTER, "Remote commands that failed")
_RECONNECTS = Series(
    "diskcache_core_remote_reconnects", COUNTER, "Times the remote answered again after an outage"
)
_LEASE = Series(
    "diskcache_core_remote_lease_valid",
    GAUGE,
    "1 while the host's listener holds its lease",
    combine="mostrecent",
)
_LEASE_LEFT = Series("diskcache_core_remote_lease_remaining_seconds", GAUGE,
                     "Seconds the listener's lease is still good for", combine="mostrecent")
# The listener's report (the whole host's, from its stamp file): gauges, as `_ITEMS` is.
_RECEIVED = Series(
    "diskcache_core_remote_invalidations_received",
    GAUGE,
    "Names the host's listener heard change in Redis and invalidated",
    combine="mostrecent",
)
_LAG = Series(
    "diskcache_core_remote_invalidation_lag_seconds",
    GAUGE,
    "Invalidation lag over the listener's recent probes, by quantile",
    ("quantile",),
    combine="mostrecent",
)
_PROBES = Series(
    "diskcache_core_remote_lag_probes",
    GAUGE,
    "Probes the host's listener timed",
    combine="mostrecent",
)

#: Every series, in the order they are exported.
SERIES = (
    _GETS, _FILLS, _INVALIDATIONS, _EVICTIONS, _WAITS, _GIVE_UPS, _MEMORY_ITEMS, _MEMORY_BYTES,
    _MEMORY_LIMIT, _ITEMS, _FILE_BYTES, _HOST_GETS, _COMMANDS, _ERRORS, _RECONNECTS, _LEASE,
    _LEASE_LEFT, _RECEIVED, _LAG, _PROBES,
)


def samples(caches: Mapping[str, HasMetrics]) -> Iterator[Sample]:
    """A snapshot of each cache, as samples labelled with its name."""
    for name, cache in caches.items():
        yield from _of(name, cache.metrics())


def _of(name: str, metrics: CacheMetrics) -> Iterator[Sample]:
    gets = metrics.gets
    for tier, value in (("memory", gets.memory), ("database", gets.database)):
        yield Sample(_GETS, {"cache": name, "tier": tier, "result": "hit"}, value)
    if metrics.remote is not None:
        yield Sample(_GETS, {"cache": name, "tier": "remote", "result": "hit"}, gets.remote)
    yield Sample(_GETS, {"cache": name, "tier": "none", "result": "miss"}, gets.misses)
    plain = {"cache": name}
    yield Sample(_FILLS, plain, metrics.fills)
    yield Sample(_INVALIDATIONS, plain, metrics.invalidations)
    evictions = metrics.evictions
    for reason in ("size", "count", "expiry", "tag", "explicit"):
        yield Sample(_EVICTIONS, {"cache": name, "reason": reason}, getattr(evictions, reason))
    yield Sample(_WAITS, plain, metrics.writes.lock_waits)
    yield Sample(_GIVE_UPS, plain, metrics.writes.give_ups)
    yield Sample(_MEMORY_ITEMS, plain, metrics.memory.items)
    yield Sample(_MEMORY_BYTES, plain, metrics.memory.size)
    yield Sample(_MEMORY_LIMIT, plain, metrics.memory.size_limit)
    host = metrics.host
    yield Sample(_ITEMS, plain, host.count)
    yield Sample(_FILE_BYTES, plain, host.value_file_bytes)
    yield Sample(_HOST_GETS, {"cache": name, "result": "hit"}, host.hits)
    yield Sample(_HOST_GETS, {"cache": name, "result": "miss"}, host.misses)
    remote = metrics.remote
    if remote is not None:
        yield Sample(_COMMANDS, plain, remote.commands)
        yield Sample(_ERRORS, plain, remote.errors)
        yield Sample(_RECONNECTS, plain, remote.reconnects)
        yield Sample(_LEASE, plain, 1.0 if remote.lease_valid else 0.0)
        yield Sample(_LEASE_LEFT, plain, remote.lease_remaining)
        yield Sample(_RECEIVED, plain, remote.invalidations_received)
        yield Sample(_PROBES, plain, remote.lag_probes)
        quantiles = (("0.5", remote.lag_p50), ("0.9", remote.lag_p90), ("0.99", remote.lag_p99))
        for quantile, lag in quantiles:
            if lag is not None:  # (none before the listener's first probe)
                yield Sample(_LAG, {"cache": name, "quantile": quantile}, lag)
