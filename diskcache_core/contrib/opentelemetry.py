"""OpenTelemetry metrics of caches: observable instruments, read when the SDK collects.

Install with ``pip install diskcache_core[opentelemetry]``; only importing this module imports
``opentelemetry-api`` (the application brings the SDK and its exporter)::

    from diskcache_core.contrib.opentelemetry import instrument
    instrument({"default": cache})          # the global MeterProvider's meter

The instruments are those of ``contrib.prometheus``, with the same names (``diskcache_core_*``)
and attributes (``cache``, ``tier``, ``result``, ``reason``): counts that only grow are
observable counters, the others observable gauges. A collection takes one snapshot of each
cache, shared by all instruments (a snapshot is reused for `_REUSE` seconds).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry import metrics as otel_metrics
from opentelemetry.metrics import CallbackOptions, Meter, Observation

from ._series import COUNTER, SERIES, HasMetrics, Sample, Series, samples

__all__ = ["Instruments", "instrument"]

_REUSE = 1.0  # seconds: one collection calls every instrument's callback in turn


class Instruments:
    """The observable instruments made for some caches; `instruments` by series name."""

    def __init__(self, caches: Mapping[str, HasMetrics], meter: Meter) -> None:
        self._caches = dict(caches)
        self._lock = threading.Lock()
        self._taken = -_REUSE
        self._samples: list[Sample] = []
        self.instruments: dict[str, Any] = {}
        for series in SERIES:
            callback = self._callback(series)
            if series.kind == COUNTER:
                made: Any = meter.create_observable_counter(
                    series.name, [callback], description=series.help
                )
            else:
                made = meter.create_observable_gauge(
                    series.name, [callback], description=series.help
                )
            self.instruments[series.name] = made

    def _snapshot(self) -> list[Sample]:
        """Every cache's samples, taken anew unless taken within the last `_REUSE` seconds."""
        with self._lock:
            now = time.monotonic()
            if now - self._taken >= _REUSE:
                self._samples = list(samples(self._caches))
                self._taken = now
            return self._samples

    def _callback(self, series: Series) -> Any:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            return [
                Observation(sample.value, sample.labels)
                for sample in self._snapshot()
                if sample.series is series
            ]

        return observe


def instrument(caches: Mapping[str, HasMetrics], meter: Meter | None = None) -> Instruments:
    """Observable instruments for `caches` (the ``cache`` attribute's value → a Cache,
    FanoutCache or Django backend) on `meter` (default: the global provider's
    ``diskcache_core`` meter)."""
    if meter is None:
        meter = otel_metrics.get_meter("diskcache_core")
    return Instruments(caches, meter)
