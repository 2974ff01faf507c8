"""Latency ratios: each diskcache_core backend against python-diskcache in the same
configuration, and each embedded backend against Memcached, within the same run.

A ratio is ``backend / reference``: below 1 means faster than the reference.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Optional

from .catalog import ALL_BACKENDS
from .results import BackendResult, RunResults
from .workload import ACTIONS

SUMMARY_METRICS = ("median", "p99")
#: The python-diskcache backends some diskcache_core backend is paired with.
_BASELINES = {spec.baseline for spec in ALL_BACKENDS if spec.baseline}


@dataclass(frozen=True)
class Ratio:
    """One line of the summary."""

    backend: str  #: label of the measured backend
    reference: str  #: label of the backend it is compared with
    processes: int
    action: str
    metric: str
    ratio: float

    def describe(self) -> str:
        noun = "process" if self.processes == 1 else "processes"
        return (f"{self.backend} {self.action} {self.metric} {self.ratio:.2f}x "
                f"{self.reference} ({self.processes} {noun})")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _memcached(results: list[BackendResult]) -> Optional[BackendResult]:
    return next((r for r in results if r.server == "memcached"), None)


def _ratios(result: BackendResult, reference: BackendResult) -> list[Ratio]:
    ratios = []
    for action in ACTIONS:
        mine, theirs = result.actions.get(action), reference.actions.get(action)
        if mine is None or theirs is None or not mine.count or not theirs.count:
            continue
        for metric in SUMMARY_METRICS:
            if not (mine.supports(metric) and theirs.supports(metric)):
                continue  # too few samples on a side for this percentile: no ratio
            denominator = theirs.metric(metric)
            if denominator > 0:
                ratios.append(Ratio(result.label, reference.label, result.processes, action,
                                    metric, mine.metric(metric) / denominator))
    return ratios


def compute(run: RunResults) -> list[Ratio]:
    """All ratios of a run: each diskcache_core backend against its python-diskcache baseline,
    then both families against Memcached at the same level (cache or Django)."""
    ratios: list[Ratio] = []
    for level in run.levels():
        for processes in run.process_counts():
            group = run.select(level, processes)
            for result in group:
                if result.baseline:
                    baseline = run.find(result.baseline, processes)
                    if baseline is not None:
                        ratios += _ratios(result, baseline)
            memcached = _memcached(group)
            if memcached is None:
                continue
            for result in group:
                if result.baseline or result.name in _BASELINES:
                    ratios += _ratios(result, memcached)
    return ratios
