"""PNG plots of a run (matplotlib, Agg backend): grouped percentile bars and percentile curves.

Plots are drawn from ``RunResults`` alone, so they can be redrawn from a saved JSON file.
"""

from __future__ import annotations

import os
from typing import Any

from .report import LEVEL_TITLES, plural
from .results import BackendResult, RunResults
from .stats import supported
from .workload import ACTIONS

BAR_METRICS = ("median", "p90", "p99")
#: Ticks of the percentile axis (a logit scale, which spreads out the tail).
_CURVE_TICKS = (0.01, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999)
_LINE_STYLES = ("-", "--", "-.", ":")


def _pyplot() -> Any:
    """pyplot on the file-only Agg backend, imported only when plots are wanted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def human_microseconds(value: float) -> str:
    """A tick label for a latency in µs: 20µs, 1.5ms, 2s."""
    if value < 1000:
        return f"{value:g}µs"
    if value < 1e6:
        return f"{value / 1e3:g}ms"
    return f"{value / 1e6:g}s"


def latency_axis(axis: Any) -> None:
    """A log-scaled y axis labelled in human units; 1-2-5 steps unless it spans many decades."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_yscale("log")
    low, high = axis.get_ylim()
    steps = (1.0,) if high / max(low, 1e-9) > 1e3 else (1.0, 2.0, 5.0)
    axis.yaxis.set_major_locator(LogLocator(base=10, subs=steps))
    axis.yaxis.set_major_formatter(FuncFormatter(lambda value, _: human_microseconds(value)))
    axis.yaxis.set_minor_formatter(NullFormatter())
    axis.set_ylabel("latency (log scale)")


def bar_chart(group: list[BackendResult], path: str, title: str) -> None:
    """One panel per action; per backend, bars for the median, p90 and p99 latency."""
    plt = _pyplot()
    figure, axes = plt.subplots(1, len(ACTIONS), figsize=(5 * len(ACTIONS), 5.5))
    width = 0.8 / len(BAR_METRICS)
    positions = range(len(group))
    for axis, action in zip(axes, ACTIONS):
        lowest = float("inf")
        for offset, metric in enumerate(BAR_METRICS):
            # No bar for a percentile the sample count cannot support (the tables show "—").
            heights = [
                r.actions[action].metric(metric) / 1e3 if r.actions[action].supports(metric)
                else 0.0
                for r in group
            ]
            lowest = min([lowest, *(h for h in heights if h > 0)])
            shift = (offset - (len(BAR_METRICS) - 1) / 2) * width
            axis.bar([x + shift for x in positions], heights, width, label=metric)
        if lowest != float("inf"):
            # Bars on a log scale start at the axis bottom: put it well below the shortest bar
            # so that small differences do not look like large ones.
            axis.set_ylim(bottom=lowest / 4)
        latency_axis(axis)
        axis.set_title(action)
        axis.set_xticks(list(positions))
        axis.set_xticklabels([r.short for r in group], rotation=35, ha="right")
        axis.grid(axis="y", which="major", alpha=0.4)
    axes[0].legend()
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def percentile_chart(group: list[BackendResult], path: str, title: str) -> None:
    """One panel per action; per backend, latency against percentile (both axes stretched)."""
    plt = _pyplot()
    from matplotlib.ticker import FixedLocator, NullFormatter

    figure, axes = plt.subplots(1, len(ACTIONS), figsize=(5 * len(ACTIONS), 5.5))
    colors = plt.get_cmap("tab10")
    for axis, action in zip(axes, ACTIONS):
        for index, result in enumerate(group):
            stats = result.actions[action]
            # The curve stops at the last percentile the sample count supports.
            curve = [(p / 100, ns / 1e3) for p, ns in stats.curve
                     if ns > 0 and supported(p, stats.count)]
            if curve:
                axis.plot([p for p, _ in curve], [us for _, us in curve], label=result.short,
                          color=colors(index % 10), linestyle=_LINE_STYLES[index // 10 % 4])
        axis.set_xscale("logit")
        latency_axis(axis)
        axis.set_xlim(_CURVE_TICKS[0], _CURVE_TICKS[-1])
        axis.xaxis.set_major_locator(FixedLocator(list(_CURVE_TICKS)))
        axis.xaxis.set_minor_formatter(NullFormatter())
        axis.set_xticklabels([f"p{100 * tick:g}" for tick in _CURVE_TICKS], rotation=35)
        axis.set_title(action)
        axis.set_xlabel("percentile")
        axis.grid(which="major", alpha=0.4)
    handles, labels = axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=min(len(labels), 5) or 1)
    figure.suptitle(title)
    figure.tight_layout(rect=(0, 0.1, 1, 1))
    figure.savefig(path, dpi=100)
    plt.close(figure)


def write_plots(run: RunResults, folder: str) -> dict[tuple[str, int], list[str]]:
    """Draw both charts for every (level, process count); returns the file names by group."""
    images: dict[tuple[str, int], list[str]] = {}
    for level in run.levels():
        for processes in run.process_counts():
            group = run.select(level, processes)
            if not group:
                continue
            heading = f"{LEVEL_TITLES.get(level, level)}, {plural(processes, 'process')}"
            bars = f"{level}-bars-{processes}.png"
            curves = f"{level}-percentiles-{processes}.png"
            bar_chart(group, os.path.join(folder, bars), f"{heading}: median, p90 and p99")
            percentile_chart(group, os.path.join(folder, curves),
                             f"{heading}: latency by percentile")
            images[(level, processes)] = [bars, curves]
    return images
