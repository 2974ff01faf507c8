"""Latency statistics of one action, computed from every recorded sample.

Percentiles interpolate linearly between the two closest ranks — the definition of numpy's default
and of ``statistics.quantiles(method="inclusive")`` — so a percentile of sorted samples ``x`` at
``p`` is ``x[k] + (x[k+1] - x[k]) * f`` where ``k + f = (n - 1) * p / 100``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

#: The percentiles reported in tables, by column name.
REPORTED: tuple[tuple[str, float], ...] = (
    ("median", 50.0),
    ("p90", 90.0),
    ("p99", 99.0),
    ("p99.9", 99.9),
)

#: Where the latency-versus-percentile curve is sampled: denser towards the tail.
CURVE_PERCENTILES: tuple[float, ...] = (
    tuple(float(p) for p in range(1, 100))
    + tuple(round(99 + p / 10, 1) for p in range(1, 10))
    + tuple(round(99.9 + p / 100, 2) for p in range(1, 10))
)


def min_samples(percent: float) -> int:
    """The fewest samples whose ``percent`` percentile says something of its own: at least one
    sample must lie beyond it (p90 needs 10, p99 100, p99.9 1,000); the median and below need
    one. With fewer, the figure is just the largest sample or an interpolation towards it."""
    if not 0.0 <= percent <= 100.0:
        raise ValueError(f"percent must be within 0..100, not {percent}")
    if percent <= 50.0 or percent == 100.0:
        return 1
    return math.ceil(round(100.0 / (100.0 - percent), 6))


def supported(percent: float, count: int) -> bool:
    """Whether ``count`` samples can support their ``percent`` percentile (`min_samples`)."""
    return count >= min_samples(percent)


def percentile(sorted_values: Sequence[float], percent: float) -> float:
    """The ``percent`` percentile (0..100) of already sorted values."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    if not 0.0 <= percent <= 100.0:
        raise ValueError(f"percent must be within 0..100, not {percent}")
    position = (len(sorted_values) - 1) * percent / 100.0
    lower = int(position)
    if lower + 1 >= len(sorted_values):
        return float(sorted_values[-1])
    fraction = position - lower
    low, high = sorted_values[lower], sorted_values[lower + 1]
    return float(low + (high - low) * fraction)


@dataclass
class ActionStats:
    """Count, misses and latency percentiles (nanoseconds) of one action of one run."""

    action: str
    count: int
    misses: int
    percentiles: dict[str, float] = field(default_factory=dict)  #: REPORTED names -> ns
    min: float = 0.0
    max: float = 0.0
    total: float = 0.0
    curve: list[tuple[float, float]] = field(default_factory=list)  #: (percent, ns) pairs

    def supports(self, name: str) -> bool:
        """Whether this action's sample count supports the metric ``name`` (`min_samples`):
        reports show "—" for a percentile it does not, and comparisons leave it out."""
        if name in ("max", "min", "total"):
            return self.count > 0
        return self.count > 0 and supported(dict(REPORTED)[name], self.count)

    @property
    def median(self) -> float:
        return self.percentiles.get("median", 0.0)

    def metric(self, name: str) -> float:
        """A reported percentile, ``max`` or ``total``, by name."""
        if name in ("max", "min", "total"):
            return float(getattr(self, name))
        return self.percentiles[name]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values; nanoseconds rounded to 0.1, far below what can be measured."""
        data = asdict(self)
        data["percentiles"] = {name: round(ns, 1) for name, ns in self.percentiles.items()}
        data["curve"] = [[percent, round(ns, 1)] for percent, ns in self.curve]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ActionStats:
        return cls(
            action=data["action"],
            count=int(data["count"]),
            misses=int(data["misses"]),
            percentiles={k: float(v) for k, v in data["percentiles"].items()},
            min=float(data["min"]),
            max=float(data["max"]),
            total=float(data["total"]),
            curve=[(float(p), float(v)) for p, v in data["curve"]],
        )


def summarize(action: str, samples: Iterable[int], misses: int) -> ActionStats:
    """Statistics of all samples of one action (an action with no samples gets zeros)."""
    ordered = sorted(samples)
    if misses > len(ordered):
        raise ValueError(f"{misses} misses among only {len(ordered)} {action} samples")
    if not ordered:
        zeros = {name: 0.0 for name, _ in REPORTED}
        return ActionStats(action=action, count=0, misses=misses, percentiles=zeros)
    return ActionStats(
        action=action,
        count=len(ordered),
        misses=misses,
        percentiles={name: percentile(ordered, p) for name, p in REPORTED},
        min=float(ordered[0]),
        max=float(ordered[-1]),
        total=float(sum(ordered)),
        curve=[(p, percentile(ordered, p)) for p in CURVE_PERCENTILES],
    )
