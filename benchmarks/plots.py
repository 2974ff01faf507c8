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


#: The webapp workload's per-operation bars (benchmarks/webapp.py reports these four).
WEBAPP_METRICS = ("median", "p90", "p99", "p99.9")


def webapp_chart(data: dict[str, Any], path: str) -> None:
    """The tags workload (``--workload webapp``), drawn from its ``webapp.json`` (so it can be
    redrawn from a saved file): throughput per row, with its stale reads written on each bar;
    then one panel per operation with the row's median, p90, p99 and p99.9 latency."""
    from .stats import ActionStats

    plt = _pyplot()
    rows = [r for r in data["results"] if not r.get("skipped")]
    if not rows:
        return
    several = len({r["processes"] for r in rows}) > 1
    labels = [f"{r['row']} ×{r['processes']}" if several else r["row"] for r in rows]
    actions = list(rows[0]["actions"])
    figure, axes = plt.subplots(1, 1 + len(actions), figsize=(4.5 * (1 + len(actions)), 5.5))
    positions = list(range(len(rows)))
    colors = plt.get_cmap("tab10")

    throughput = axes[0]
    bars = throughput.bar(positions, [r["throughput"] for r in rows],
                          color=[colors(i % 10) for i in positions])
    for bar, row in zip(bars, rows):
        throughput.annotate(f"{row['stale_reads']} stale", (bar.get_x() + bar.get_width() / 2,
                            bar.get_height()), ha="center", va="bottom", fontsize=8)
    throughput.set_title("throughput (stale reads on each bar)")
    throughput.set_ylabel("operations per second, all processes")
    throughput.grid(axis="y", alpha=0.4)

    width = 0.8 / len(WEBAPP_METRICS)
    for axis, action in zip(axes[1:], actions):
        stats = [ActionStats.from_dict(r["actions"][action]) for r in rows]
        lowest, highest = float("inf"), 0.0
        for offset, metric in enumerate(WEBAPP_METRICS):
            # No bar for a percentile the sample count cannot support (the tables show "—").
            heights = [s.metric(metric) / 1e3 if s.supports(metric) else 0.0 for s in stats]
            lowest = min([lowest, *(h for h in heights if h > 0)])
            highest = max([highest, *heights])
            shift = (offset - (len(WEBAPP_METRICS) - 1) / 2) * width
            axis.bar([x + shift for x in positions], heights, width, label=metric,
                     color=colors(offset + len(rows)))
        if lowest != float("inf"):
            # (as bar_chart: small differences stay small; the tallest bar stays inside)
            axis.set_ylim(bottom=lowest / 4, top=highest * 2)
        latency_axis(axis)
        axis.set_title(action)
        axis.grid(axis="y", which="major", alpha=0.4)
    handles, names = axes[1].get_legend_handles_labels()
    figure.legend(handles, names, loc="lower center", ncol=len(names))
    for axis in axes:
        axis.set_xticks(positions)
        axis.set_xticklabels(labels, rotation=35, ha="right")
    parameters = data.get("parameters", {})
    mix = "/".join(map(str, parameters.get("mix", ())))
    figure.suptitle(f"Tags workload (webapp): {mix} get/set/invalidate, "
                    f"{parameters.get('operations', '?')} operations per process, "
                    f"{parameters.get('tags_per_item', '?')} tags per item"
                    + (" — SMOKE RUN, not a measurement" if parameters.get("smoke") else ""))
    figure.tight_layout(rect=(0, 0.06, 1, 1))
    figure.savefig(path, dpi=100)
    plt.close(figure)
