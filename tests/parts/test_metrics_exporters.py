"""The exporters against the real libraries: ``contrib.prometheus`` (a scrape's text exposition,
one process and multiprocess mode) and ``contrib.opentelemetry`` (the SDK's in-memory reader)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from diskcache_core import Cache, FanoutCache

from redis_servers import RedisTestServer, needs_redis

prometheus_client = pytest.importorskip("prometheus_client")
pytest.importorskip("opentelemetry.sdk")

from prometheus_client import CollectorRegistry, generate_latest  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from diskcache_core.contrib.prometheus import CacheCollector  # noqa: E402


def scraped(registry):
    """{(sample name, frozenset of labels): value} of one scrape's text exposition."""
    text = generate_latest(registry).decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def used_caches(tmp_path):
    cache = Cache(str(tmp_path / "one"))
    cache["k"] = "v"
    cache.get("k")
    cache.get("k")
    cache.get("missing")
    cache.set("t", 1, tag="x")
    cache.evict("x")
    fanout = FanoutCache(str(tmp_path / "many"), shards=2)
    fanout["a"] = 1
    fanout.get("a")
    return cache, fanout


def test_prometheus_collector_scrape(tmp_path):
    cache, fanout = used_caches(tmp_path)
    registry = CollectorRegistry()
    registry.register(CacheCollector({"pages": cache, "sessions": fanout}))
    try:
        values = scraped(registry)
        gets = "diskcache_core_gets_total"
        assert values[(gets, frozenset({("cache", "pages"), ("tier", "memory"), ("result", "hit")}))] == 2
        assert values[(gets, frozenset({("cache", "pages"), ("tier", "none"), ("result", "miss")}))] == 1
        assert values[(gets, frozenset({("cache", "sessions"), ("tier", "memory"), ("result", "hit")}))] == 1
        evictions = "diskcache_core_evictions_total"
        assert values[(evictions, frozenset({("cache", "pages"), ("reason", "tag")}))] == 1
        assert values[(evictions, frozenset({("cache", "pages"), ("reason", "size")}))] == 0
        assert values[("diskcache_core_items", frozenset({("cache", "pages")}))] == 1
        assert values[("diskcache_core_items", frozenset({("cache", "sessions")}))] == 1
        assert ("diskcache_core_remote_commands_total", frozenset({("cache", "pages")})) not in values
        cache.get("k")  # each scrape is a new snapshot
        hits = scraped(registry)[(gets, frozenset({("cache", "pages"), ("tier", "memory"), ("result", "hit")}))]
        assert hits == 3
    finally:
        cache.close()
        fanout.close()


_WORKER = textwrap.dedent(
    """
    import sys
    from diskcache_core import Cache
    from diskcache_core.contrib.prometheus import MultiprocessExporter

    cache = Cache(sys.argv[1])
    exporter = MultiprocessExporter({"pages": cache})
    cache["k"] = "v"
    for _ in range(int(sys.argv[2])):
        cache.get("k")
    exporter.publish()
    cache.get("k")
    exporter.publish()  # grows by one more: counted once, not twice
    cache.close()
    """
)

_SCRAPE = textwrap.dedent(
    """
    from prometheus_client import CollectorRegistry, generate_latest, multiprocess
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    print(generate_latest(registry).decode())
    """
)


def test_prometheus_multiprocess_mode(tmp_path):
    """Two worker processes publish into PROMETHEUS_MULTIPROC_DIR and exit; a scrape by a third
    (as gunicorn's worker answering /metrics) sums their counters."""
    shared = tmp_path / "prometheus"
    shared.mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(shared), "PYTHONPATH": os.getcwd()}
    directory = str(tmp_path / "cache")
    for gets in (3, 5):
        subprocess.run([sys.executable, "-c", _WORKER, directory, str(gets)], env=env,
                       check=True, timeout=120)  # fmt: skip
    out = subprocess.run([sys.executable, "-c", _SCRAPE], env=env, check=True, timeout=120,
                         capture_output=True, text=True).stdout  # fmt: skip
    values = {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(out)
        for sample in family.samples
    }
    memory_hits = frozenset({("cache", "pages"), ("tier", "memory"), ("result", "hit")})
    assert values[("diskcache_core_gets_total", memory_hits)] == (3 + 1) + (5 + 1)
    assert values[("diskcache_core_items", frozenset({("cache", "pages")}))] == 1


def test_opentelemetry_in_memory_reader(tmp_path):
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from diskcache_core.contrib.opentelemetry import instrument

    cache, fanout = used_caches(tmp_path)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    try:
        instrument({"pages": cache, "sessions": fanout}, provider.get_meter("test"))
        data = reader.get_metrics_data()
        points = {
            (metric.name, frozenset(point.attributes.items())): point.value
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            for point in metric.data.data_points
        }
        memory_hits = frozenset({("cache", "pages"), ("tier", "memory"), ("result", "hit")})
        assert points[("diskcache_core_gets", memory_hits)] == 2
        assert points[("diskcache_core_evictions", frozenset({("cache", "pages"), ("reason", "tag")}))] == 1
        assert points[("diskcache_core_items", frozenset({("cache", "sessions")}))] == 1
        kinds = {
            metric.name: type(metric.data).__name__
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
        }
        assert kinds["diskcache_core_gets"] == "Sum" and kinds["diskcache_core_items"] == "Gauge"
    finally:
        provider.shutdown()
        cache.close()
        fanout.close()


@needs_redis
def test_exporters_show_the_listeners_report(tmp_path):
    """With a remote: the invalidations the host's listener received and its lag quantiles, in
    a Prometheus scrape and in the OpenTelemetry reader, equal to the snapshot's."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from diskcache_core.contrib.opentelemetry import instrument

    with RedisTestServer() as server:
        cache = Cache(str(tmp_path / "host"), remote=server.url,
                      remote_prefix=f"x-{uuid.uuid4().hex[:8]}:")  # fmt: skip
        provider = MeterProvider(metric_readers=[otel := InMemoryMetricReader()])
        try:
            limit = time.monotonic() + 30
            while time.monotonic() < limit and not cache.metrics().remote.lease_valid:
                time.sleep(0.01)  # (the listener hears the writes made once it listens)
            for number in range(5):
                cache.set(number, number)
            while time.monotonic() < limit and (
                cache.metrics().remote.invalidations_received < 5
                or cache.metrics().remote.lag_probes < 2
            ):
                time.sleep(0.01)
            registry = CollectorRegistry()
            registry.register(CacheCollector({"pages": cache}))
            values = scraped(registry)
            instrument({"pages": cache}, provider.get_meter("test"))
            points = {
                (metric.name, frozenset(point.attributes.items())): point.value
                for resource in otel.get_metrics_data().resource_metrics
                for scope in resource.scope_metrics
                for metric in scope.metrics
                for point in metric.data.data_points
            }
            remote = cache.metrics().remote
            plain = frozenset({("cache", "pages")})
            for found in (values, points):
                assert found[("diskcache_core_remote_invalidations_received", plain)] == 5
                lags = [
                    found[("diskcache_core_remote_invalidation_lag_seconds",
                           plain | {("quantile", quantile)})]
                    for quantile in ("0.5", "0.9", "0.99")
                ]
                assert 0 < lags[0] <= lags[1] <= lags[2]
                assert found[("diskcache_core_remote_lag_probes", plain)] >= 2
            # (a probe may be timed between the reads: the snapshot's are those of one moment)
            assert remote.lag_p50 is not None and remote.lag_p50 > 0
        finally:
            provider.shutdown()
            cache.close()
