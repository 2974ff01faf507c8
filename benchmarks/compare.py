"""Compare two result files: per backend, process count, action and percentile, the ratio new/old,
with regressions beyond a threshold flagged (the CLI then exits non-zero).

Only runs of the same workload compare (`workload_differences`: the CLI refuses others), and
only percentiles that both sample counts support (`ActionStats.supports`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .report import format_duration
from .results import RunResults

METRICS = ("median", "p90", "p99", "p99.9", "max")
#: Metrics that can flag a regression; the far tail and the maximum are too noisy on a shared box.
FLAGGED_METRICS = ("median", "p90", "p99")
DEFAULT_THRESHOLD = 0.10
#: The parameters that make the workload: runs that differ in one measure different things.
WORKLOAD_PARAMETERS = ("operations", "warmup", "key_range", "value_sizes", "mix")


@dataclass(frozen=True)
class Change:
    """One metric of one (backend, processes, action) in both files."""

    backend: str
    processes: int
    action: str
    metric: str
    old: float
    new: float
    regression: bool

    @property
    def ratio(self) -> float:
        if self.old == 0:
            return 1.0 if self.new == 0 else math.inf
        return self.new / self.old

    @property
    def percent(self) -> float:
        return (self.ratio - 1.0) * 100.0


@dataclass
class Comparison:
    changes: list[Change]
    only_old: list[tuple[str, int]]  #: (backend, processes) measured only in the old file
    only_new: list[tuple[str, int]]
    threshold: float = DEFAULT_THRESHOLD
    flagged: tuple[str, ...] = FLAGGED_METRICS
    left_out: int = 0  #: metrics not compared: a side has too few samples for the percentile

    @property
    def regressions(self) -> list[Change]:
        return [change for change in self.changes if change.regression]


def workload_differences(old: RunResults, new: RunResults) -> list[str]:
    """How the two runs' workloads differ, one line per parameter (empty: the same workload)."""
    return [
        f"{name}: {old.parameters.get(name)!r} in the old file, {new.parameters.get(name)!r} in"
        " the new"
        for name in WORKLOAD_PARAMETERS
        if old.parameters.get(name) != new.parameters.get(name)
    ]


def compare(old: RunResults, new: RunResults, threshold: float = DEFAULT_THRESHOLD,
            flagged: Sequence[str] = FLAGGED_METRICS) -> Comparison:
    """Every metric change between the runs; a flagged metric slower by more than ``threshold``
    (0.10 = 10 %) is a regression."""
    changes = []
    left_out = 0
    old_keys = {(r.name, r.processes) for r in old.results}
    new_keys = {(r.name, r.processes) for r in new.results}
    for result in new.results:
        before = old.find(result.name, result.processes)
        if before is None:
            continue
        for action, stats in result.actions.items():
            previous = before.actions.get(action)
            if previous is None or not previous.count or not stats.count:
                continue
            for metric in METRICS:
                if not (previous.supports(metric) and stats.supports(metric)):
                    left_out += 1
                    continue
                change = Change(result.name, result.processes, action, metric,
                                previous.metric(metric), stats.metric(metric), False)
                if metric in flagged and change.ratio > 1.0 + threshold:
                    change = Change(**{**change.__dict__, "regression": True})
                changes.append(change)
    return Comparison(changes, sorted(old_keys - new_keys), sorted(new_keys - old_keys),
                      threshold, tuple(flagged), left_out)


def format_comparison(comparison: Comparison) -> str:
    """A plain-text table, regressions marked with ``!!``, followed by a one-line verdict."""
    header = f"{'':2} {'backend':<18} {'procs':>5} {'action':<6} {'metric':<6} " \
             f"{'old':>11} {'new':>11} {'ratio':>7} {'change':>8}"
    lines = [header, "-" * len(header)]
    for change in comparison.changes:
        mark = "!!" if change.regression else ""
        lines.append(
            f"{mark:2} {change.backend:<18} {change.processes:>5} {change.action:<6} "
            f"{change.metric:<6} {format_duration(change.old):>11} "
            f"{format_duration(change.new):>11} {change.ratio:>6.2f}x {change.percent:>+7.1f}%"
        )
    for name, processes in comparison.only_old:
        lines.append(f"   {name} with {processes} processes: only in the old file")
    for name, processes in comparison.only_new:
        lines.append(f"   {name} with {processes} processes: only in the new file")
    if comparison.left_out:
        lines.append(f"   {comparison.left_out} percentile(s) left out: too few samples on a side")
    count = len(comparison.regressions)
    limit = f"{comparison.threshold:.0%} in {', '.join(comparison.flagged)}"
    verdict = f"{count} regression(s)" if count else "no regression"
    lines.append(f"{verdict} beyond {limit}")
    return "\n".join(lines)
