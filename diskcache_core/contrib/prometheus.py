"""Prometheus metrics of caches: `CacheCollector` for one process, `MultiprocessExporter` for
prometheus_client's multiprocess mode (gunicorn and other pre-fork servers).

Install with ``pip install diskcache_core[prometheus]``; only importing this module imports
``prometheus_client``. Series are named ``diskcache_core_*`` with ``cache``, ``tier``, ``result``
and ``reason`` labels (the table is in :doc:`observing`).

One process (a thread-based server, a worker of its own)::

    from prometheus_client import REGISTRY
    REGISTRY.register(CacheCollector({"default": cache}))

Multiprocess mode: prometheus_client ignores custom collectors there (each scrape reads the
files the processes write into ``PROMETHEUS_MULTIPROC_DIR``), so each process publishes its
snapshot into those files instead: `MultiprocessExporter.publish` (on demand, e.g. at the end of
each request) or `MultiprocessExporter.start` (a daemon thread, every `interval` seconds).
Counters are published as increments, so a worker that exits keeps its counts in the sum;
per-process gauges are summed over live processes, host-wide ones are the latest written.
"""

from __future__ import annotations

import threading
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .._log import RateLimit
from ._series import COUNTER, SERIES, HasMetrics, Series, samples

__all__ = ["CacheCollector", "MultiprocessExporter"]

_LOG = logging.getLogger("diskcache_core.metrics")


class CacheCollector(Collector):
    """A custom collector: each scrape takes a snapshot of every cache (``caches``: the name
    for the ``cache`` label → a Cache, FanoutCache or Django backend)."""

    def __init__(self, caches: Mapping[str, HasMetrics]) -> None:
        self._caches = dict(caches)

    def collect(self) -> Iterable[Metric]:
        families: dict[Series, Any] = {}
        for sample in samples(self._caches):
            series = sample.series
            family = families.get(series)
            if family is None:
                kind = CounterMetricFamily if series.kind == COUNTER else GaugeMetricFamily
                family = families[series] = kind(
                    series.name, series.help, labels=("cache", *series.labels)
                )
            family.add_metric(
                [sample.labels[name] for name in ("cache", *series.labels)], sample.value
            )
        return [families[series] for series in SERIES if series in families]

    def describe(self) -> Iterable[Metric]:
        """No description: registering takes no snapshot (a scrape does)."""
        return []


class MultiprocessExporter:
    """Publishes this process's snapshots into prometheus_client's metric objects, which in
    multiprocess mode write to ``PROMETHEUS_MULTIPROC_DIR`` (see the module docstring).

    Make one per process (after the fork: in gunicorn's ``post_fork`` or at the first request),
    and serve ``/metrics`` with a registry holding ``multiprocess.MultiProcessCollector``.
    `registry`: where the metric objects register; None (the default) registers them nowhere,
    as multiprocess mode requires.
    """

    def __init__(self, caches: Mapping[str, HasMetrics], registry: Any = None) -> None:
        self._caches = dict(caches)
        self._metrics: dict[Series, Any] = {}
        for series in SERIES:
            labels = ("cache", *series.labels)
            if series.kind == COUNTER:
                self._metrics[series] = Counter(
                    series.name, series.help, labels, registry=registry
                )
            else:
                combine: Any = series.combine  # (one of the modes Gauge names)
                self._metrics[series] = Gauge(
                    series.name, series.help, labels, registry=registry,
                    multiprocess_mode=combine,
                )
        self._published: dict[tuple[str, tuple[str, ...]], float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def publish(self) -> None:
        """Take a snapshot of every cache and write it: counters by what they grew since the
        last publish (from zero again after a ``memory_stats(reset=True)``), gauges as they are."""
        with self._lock:
            for sample in samples(self._caches):
                series = sample.series
                values = tuple(sample.labels[name] for name in ("cache", *series.labels))
                child = self._metrics[series].labels(*values)
                if series.kind != COUNTER:
                    child.set(sample.value)
                    continue
                key = (series.name, values)
                last = self._published.get(key, 0.0)
                grown = sample.value - last if sample.value >= last else sample.value
                if grown > 0:
                    child.inc(grown)
                self._published[key] = sample.value

    def start(self, interval: float = 5.0) -> threading.Thread:
        """Publish now and then every `interval` seconds from a daemon thread (until `stop`)."""
        self.publish()
        thread = threading.Thread(
            target=self._run, args=(interval,), name="diskcache_core-prometheus", daemon=True
        )
        thread.start()
        return thread

    def stop(self) -> None:
        """End the thread `start` made (after its current publish)."""
        self._stop.set()

    def _run(self, interval: float) -> None:
        failures = RateLimit()
        while not self._stop.wait(interval):
            try:
                self.publish()
            except Exception as exc:  # a cache closed or busy: the next round tries again
                failures.warn(_LOG, "publishing cache metrics failed: %s", exc)
