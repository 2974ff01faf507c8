"""Turn pytest-benchmark's JSON into paired comparisons, a text table and a merged JSON report.

Times are in seconds throughout; the table shows microseconds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.micro.implementations import OTHER_PEERS, OURS, REFERENCE_PEER
from benchmarks.micro.operations import OPERATIONS, Operation

REPORT_VERSION = 2


def percentile(samples: Sequence[float], fraction: float) -> float:
    """Return the ``fraction`` (0..1) quantile, interpolating linearly between closest ranks."""
    if not samples:
        raise ValueError("percentile of no samples")
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be within [0, 1], got {fraction!r}")
    ordered = sorted(samples)
    position = (len(ordered) - 1) * fraction
    lower = math.floor(position)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)


@dataclass(frozen=True)
class Summary:
    """Per-call latency of one operation on one implementation, in seconds.

    ``median_s`` is the median of the least-disturbed repeat (the lowest of the per-repeat
    medians): noise on a shared machine only ever slows a repeat down, and in A-against-A runs
    this ratio stays within a few percent where the pooled median drifts by 10-20 %.
    ``p90_s`` and ``p99_s`` are taken over every timed call of every repeat.
    """

    operation: str
    implementation: str
    family: str
    ours: bool
    rounds: int
    median_s: float
    p90_s: float
    p99_s: float
    pooled_median_s: float
    repeat_medians_s: tuple[float, ...]
    #: The family whose peer this is compared with when its own has none (None: its own).
    peer_family: str | None = None
    #: ``diskcache_core``, ``python-diskcache`` or one of ``OTHER_PEERS`` ("": from ``ours``).
    library: str = ""

    @property
    def library_name(self) -> str:
        return self.library or (OURS if self.ours else REFERENCE_PEER)


def summarise(raw: Mapping[str, Any]) -> list[Summary]:
    """Summarise a pytest-benchmark JSON document (``--benchmark-json`` always includes the
    per-round ``data``), pooling the samples of every repeat of an (operation, implementation)."""
    pooled: dict[tuple[str, str], list[float]] = {}
    repeat_medians: dict[tuple[str, str], list[float]] = {}
    labels: dict[tuple[str, str], Mapping[str, Any]] = {}
    for bench in raw.get("benchmarks", []):
        info = bench["extra_info"]
        key = (info["operation"], info["implementation"])
        samples = bench["stats"]["data"]
        pooled.setdefault(key, []).extend(samples)
        repeat_medians.setdefault(key, []).append(percentile(samples, 0.5))
        labels[key] = info
    return [
        Summary(
            operation=operation,
            implementation=implementation,
            family=labels[operation, implementation]["family"],
            ours=bool(labels[operation, implementation]["ours"]),
            rounds=len(samples),
            median_s=min(repeat_medians[operation, implementation]),
            p90_s=percentile(samples, 0.9),
            p99_s=percentile(samples, 0.99),
            pooled_median_s=percentile(samples, 0.5),
            repeat_medians_s=tuple(repeat_medians[operation, implementation]),
            peer_family=labels[operation, implementation].get("peer_family"),
            library=labels[operation, implementation].get("library", ""),
        )
        for (operation, implementation), samples in pooled.items()
    ]


@dataclass(frozen=True)
class Comparison:
    """One table row: an operation within a family, ours against python-diskcache (``peer``, the
    target's reference) and the other peers (``others``, by library, in ``OTHER_PEERS`` order)."""

    operation: Operation
    family: str
    ours: Summary | None
    peer: Summary | None
    others: tuple[tuple[str, Summary | None], ...] = ()

    @property
    def title(self) -> str:
        if self.family == "Cache":
            return self.operation.title
        return f"{self.operation.title} [{self.family}]"

    @property
    def ratio(self) -> float | None:
        """Ratio of medians, ours / peer; None unless both were measured."""
        if self.ours is None or self.peer is None or self.peer.median_s <= 0:
            return None
        return self.ours.median_s / self.peer.median_s

    @property
    def best_peer(self) -> Summary | None:
        """The measured peer with the lowest median (python-diskcache's or another's)."""
        measured = [peer for peer in (self.peer, *(s for _, s in self.others)) if peer is not None]
        return min(measured, key=lambda peer: peer.median_s, default=None)

    @property
    def best_ratio(self) -> float | None:
        """Ratio of medians, ours / the best peer's; None unless ours and a peer were measured."""
        best = self.best_peer
        if self.ours is None or best is None or best.median_s <= 0:
            return None
        return self.ours.median_s / best.median_s

    @property
    def passed(self) -> bool | None:
        """Whether the ratio meets the target; None unless both were measured."""
        ratio = self.ratio
        return None if ratio is None else ratio <= self.operation.target


def compare(summaries: Iterable[Summary]) -> list[Comparison]:
    """Pair ours with the peers per (operation, family), in ``OPERATIONS`` order; families keep
    the order in which they first appear (a family of peers alone adds no rows of its own when
    ours compares with it through ``peer_family``)."""
    by_key: dict[tuple[str, str, str], Summary] = {}
    families: list[str] = []
    for summary in summaries:
        by_key[(summary.operation, summary.family, summary.library_name)] = summary
        if summary.family not in families:
            families.append(summary.family)
    comparisons = []
    for family in families:
        for operation in OPERATIONS:
            ours = by_key.get((operation.name, family, OURS))
            peer_family = family
            if ours is not None and ours.peer_family not in (None, family):
                peer_family = ours.peer_family
            peer = by_key.get((operation.name, family, REFERENCE_PEER)) or by_key.get(
                (operation.name, peer_family, REFERENCE_PEER)
            )
            others = tuple(
                (library, by_key.get((operation.name, peer_family, library)))
                for library in OTHER_PEERS
            )
            if ours is not None or peer is not None:
                comparisons.append(Comparison(operation, family, ours, peer, others))
    return comparisons


def _micros(seconds: float) -> str:
    micros = seconds * 1e6
    return f"{micros:,.0f}" if micros >= 1000 else f"{micros:.1f}"


LATENCY_WIDTH = 9
LEGEND = (
    "Microseconds per call. median: of the least-disturbed repeat (the lowest per-repeat median);\n"
    "p90, p99: over all calls of all repeats. ratio: diskcache_core median / python-diskcache's\n"
    "(the target's); the other peers: their median; ours/best: diskcache_core median / the lowest\n"
    "median of all peers in the row (python-diskcache, diskcache-community, diskcache-rs). The\n"
    "memory-off rows are compared with the peers' Cache."
)


def _latencies(summary: Summary | None) -> str:
    """Median, p90 and p99 in microseconds, as one fixed-width cell."""
    if summary is None:
        cells = ["n/a"] * 3
    else:
        cells = [_micros(summary.median_s), _micros(summary.p90_s), _micros(summary.p99_s)]
    return "".join(cell.rjust(LATENCY_WIDTH) for cell in cells)


def _median(summary: Summary | None) -> str:
    return "n/a" if summary is None else _micros(summary.median_s)


def _result(comparison: Comparison) -> str:
    passed = comparison.passed
    return "MISSING" if passed is None else ("pass" if passed else "FAIL")


def format_table(comparisons: Sequence[Comparison]) -> str:
    """Render the comparison table (microseconds per call) followed by the verdict."""
    latency_titles = "".join(title.rjust(LATENCY_WIDTH) for title in ("median", "p90", "p99"))
    lines = [
        ["operation", "diskcache_core (us)", "python-diskcache (us)", "ratio", "target", "result",
         *OTHER_PEERS, "ours/best"],
        ["", latency_titles, latency_titles, "ours/peer", "", "", *["median"] * len(OTHER_PEERS),
         ""],
    ]  # fmt: skip
    for row in comparisons:
        ratio = "n/a" if row.ratio is None else f"{row.ratio:.3f}"
        best = "n/a" if row.best_ratio is None else f"{row.best_ratio:.3f}"
        target = f"<= {row.operation.target:.2f}"
        others = dict(row.others)
        lines.append(
            [row.title, _latencies(row.ours), _latencies(row.peer), ratio, target, _result(row),
             *[_median(others.get(library)) for library in OTHER_PEERS], best]
        )  # fmt: skip
    widths = [max(len(line[col]) for line in lines) for col in range(len(lines[0]))]

    def render(cells: list[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = [cell.rjust(width) for cell, width in zip(cells[1:], widths[1:])]
        return " | ".join([first, *rest]).rstrip()

    rule = "-+-".join("-" * width for width in widths)
    rendered = [render(lines[0]), render(lines[1]), rule] + [render(line) for line in lines[2:]]
    return "\n".join([*rendered, "", LEGEND, "", verdict(comparisons)])


def verdict(comparisons: Sequence[Comparison]) -> str:
    """One line per missed target or missing measurement, then a count of targets met, then the
    rows where a peer is faster than ours."""
    lines = []
    for row in comparisons:
        ratio = row.ratio
        if ratio is None:
            lines.append(f"MISSING: {row.title}: not measured for both implementations")
        elif ratio > row.operation.target:
            target = row.operation.target
            lines.append(f"TARGET MISSED: {row.title}: ratio {ratio:.3f} > {target:.2f}")
    met = sum(1 for row in comparisons if row.passed)
    lines.append(f"{met} of {len(comparisons)} targets met.")
    for library in OTHER_PEERS:
        if not any(dict(row.others).get(library) for row in comparisons):
            lines.append(f"MISSING PEER: {library}: not measured (pip install {library})")
    behind = [row for row in comparisons if row.best_ratio is not None and row.best_ratio > 1]
    for row in behind:
        best = row.best_peer
        assert best is not None and row.best_ratio is not None
        lines.append(f"BEHIND: {row.title}: {best.library_name} is faster, "
                     f"ours/best {row.best_ratio:.3f}")  # fmt: skip
    lines.append(f"Ahead of or level with every peer on {len(comparisons) - len(behind)} "
                 f"of {len(comparisons)} rows.")  # fmt: skip
    return "\n".join(lines)


def merged_report(
    comparisons: Sequence[Comparison], raw: Mapping[str, Any], quick: bool
) -> dict[str, Any]:
    """The JSON document kept by ``--json``: every comparison with both summaries."""
    return {
        "version": REPORT_VERSION,
        "quick": quick,
        "datetime": raw.get("datetime"),
        "machine_info": raw.get("machine_info"),
        "comparisons": [
            {
                "operation": row.operation.name,
                "title": row.title,
                "family": row.family,
                "target": row.operation.target,
                "ratio": row.ratio,
                "passed": row.passed,
                "best_ratio": row.best_ratio,
                "ours": None if row.ours is None else asdict(row.ours),
                "peer": None if row.peer is None else asdict(row.peer),
                "others": {
                    library: None if other is None else asdict(other)
                    for library, other in row.others
                },
            }
            for row in comparisons
        ],
    }
