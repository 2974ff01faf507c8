"""Text and reStructuredText reports of a run.

A backend's table has the layout of python-diskcache's benchmark tables (Action, Count, Miss,
Median, P90, P99, Max, Total) plus a P99.9 column, with times in µs, ms or s. The table is a valid
reStructuredText simple table, so the console and the docs show the very same thing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Optional

from .results import BackendResult, RunResults
from .stats import REPORTED, min_samples
from .summary import SUMMARY_METRICS, Ratio
from .workload import ACTIONS

COLUMNS = ("Action", "Count", "Miss", "Median", "P90", "P99", "P99.9", "Max", "Total")
_PERCENTILE_COLUMNS = ("median", "p90", "p99", "p99.9")
_WIDTH = 9
LEVEL_TITLES = {"cache": "Cache level", "django": "Django level (django.core.cache)"}
#: A table cell of a percentile that the action's sample count cannot support.
UNSUPPORTED = "—"


def format_duration(nanoseconds: float) -> str:
    """A duration in the most readable of µs, ms and s, with three decimals."""
    if nanoseconds < 1e6:
        return f"{nanoseconds / 1e3:.3f}µs"
    if nanoseconds < 1e9:
        return f"{nanoseconds / 1e6:.3f}ms"
    return f"{nanoseconds / 1e9:.3f}s"


def plural(count: int, noun: str, many: Optional[str] = None) -> str:
    return f"{count} {noun if count == 1 else (many or noun + 'es')}"


def _row(cells: Sequence[str]) -> str:
    return " ".join(cell.rjust(_WIDTH) for cell in cells).rstrip()


def backend_table(result: BackendResult) -> str:
    """The timings table of one backend at one process count."""
    rule = " ".join("=" * _WIDTH for _ in COLUMNS)
    lines = [
        rule,
        f"Timings for {result.label}, {plural(result.processes, 'process')}",
        "-" * len(rule),
        _row(COLUMNS),
        rule,
    ]
    for action in ACTIONS:
        stats = result.actions[action]
        cells = [action, str(stats.count), str(stats.misses)]
        cells += [format_duration(stats.percentiles[name]) if stats.supports(name) else UNSUPPORTED
                  for name in _PERCENTILE_COLUMNS]
        cells += [format_duration(stats.max), format_duration(stats.total)]
        lines.append(_row(cells))
    count = sum(stats.count for stats in result.actions.values())
    misses = sum(stats.misses for stats in result.actions.values())
    total = sum(stats.total for stats in result.actions.values())
    blanks = [""] * (len(COLUMNS) - 4)
    lines.append(_row(["Total", str(count), str(misses), *blanks, format_duration(total)]))
    lines.append(rule)
    return "\n".join(lines)


def has_unsupported(results: Sequence[BackendResult]) -> bool:
    """Whether some table of ``results`` shows a percentile as `UNSUPPORTED`."""
    return any(stats.count and not stats.supports(name)
               for result in results for stats in result.actions.values()
               for name in _PERCENTILE_COLUMNS)


def unsupported_note() -> str:
    """What a `UNSUPPORTED` cell means."""
    needs = ", ".join(f"{name} {min_samples(percent):,}" for name, percent in REPORTED
                      if min_samples(percent) > 1)
    return (f"{UNSUPPORTED}: fewer samples than the percentile needs to say more than the largest"
            f" sample ({needs}); run more --operations.")


def smoke_warning(parameters: dict[str, Any]) -> Optional[str]:
    """The caveat of a smoke run (``--quick``), or None for a measurement."""
    if not parameters.get("smoke"):
        return None
    recorded = int(parameters.get("operations", 0)) - int(parameters.get("warmup", 0))
    return (f"SMOKE RUN (--quick): {recorded:,} recorded operations per process. It shows that "
            "every backend runs; its figures are not measurements and its ratios can be far off. "
            "Run without --quick to measure.")


def describe_parameters(parameters: dict[str, Any]) -> str:
    """One sentence saying what every worker did."""
    mix = "/".join(str(weight) for weight in parameters.get("mix", ()))
    sizes = ", ".join(str(size) for size in parameters.get("value_sizes", ()))
    return (
        f"Each process performs {parameters.get('operations', 0):,} operations "
        f"({parameters.get('warmup', 0):,} warmup operations not recorded) on keys "
        f"0..{parameters.get('key_range', 0) - 1}, mixing get/set/delete {mix}; values are "
        f"str(i).encode() * randrange({sizes}); start method {parameters.get('start_method')}."
    )


def describe_machine(metadata: dict[str, Any]) -> str:
    """One sentence saying where and with what software the numbers were measured."""
    packages = metadata.get("packages") or {}
    software = [f"Python {metadata.get('python')}", f"SQLite {metadata.get('sqlite')}"]
    software += [f"{name} {version}" for name, version in packages.items() if version]
    software += [str(v) for v in (metadata.get("servers") or {}).values() if v]
    load = metadata.get("load_average")
    busy = f", load average {load[0]:.1f} at the start" if load else ""
    return (
        f"Measured {metadata.get('timestamp')} on {metadata.get('os')} "
        f"({metadata.get('usable_cpus')} usable CPUs{busy}): {', '.join(software)}."
    )


def ratio_table(ratios: Sequence[Ratio]) -> str:
    """Ratios as one simple table: a row per (backend, reference, processes), a column per
    action and metric."""
    columns = [(action, metric) for action in ACTIONS for metric in SUMMARY_METRICS]
    rows: dict[tuple[str, str, int], dict[tuple[str, str], float]] = {}
    for ratio in ratios:
        key = (ratio.backend, ratio.reference, ratio.processes)
        rows.setdefault(key, {})[(ratio.action, ratio.metric)] = ratio.ratio
    header = ["Backend", "Reference", "Procs"] + [f"{a} {m}" for a, m in columns]
    body = [
        [backend, reference, str(processes)]
        + [f"{cells[c]:.2f}x" if c in cells else "" for c in columns]
        for (backend, reference, processes), cells in rows.items()
    ]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    rule = " ".join("=" * width for width in widths)

    def line(cells: list[str]) -> str:
        texts = [cell.ljust(w) if i < 2 else cell.rjust(w)
                 for i, (cell, w) in enumerate(zip(cells, widths))]
        return " ".join(texts).rstrip()

    return "\n".join([rule, line(header), rule, *(line(row) for row in body), rule])


def _groups(run: RunResults) -> list[tuple[str, int, list[BackendResult]]]:
    return [
        (level, processes, run.select(level, processes))
        for level in run.levels()
        for processes in run.process_counts()
        if run.select(level, processes)
    ]


def _notes(run: RunResults) -> list[str]:
    lines = [f"skipped {item['backend']}: {item['reason']}" for item in run.skipped]
    lines += [
        f"FAILED {item['backend']} with {plural(int(item['processes']), 'process')}: "
        f"{item['reason']}"
        for item in run.failed
    ]
    return lines


def text_report(run: RunResults, ratios: Sequence[Ratio]) -> str:
    """Everything for the console: parameters, one table per backend, the ratio summary."""
    smoke = smoke_warning(run.parameters)
    parts = [f"*** {smoke} ***", ""] if smoke else []
    parts += [describe_parameters(run.parameters), describe_machine(run.metadata), ""]
    for level, processes, group in _groups(run):
        parts.append(f"## {LEVEL_TITLES.get(level, level)}, {plural(processes, 'process')}")
        parts.append("")
        for result in group:
            parts += [backend_table(result), ""]
    if has_unsupported(run.results):
        parts += [unsupported_note(), ""]
    if ratios:
        parts += ["## Summary: latency ratio, backend / reference (below 1 is faster)", ""]
        if smoke:
            parts += ["Smoke run: these ratios are not measurements.", ""]
        parts += [ratio_table(ratios), ""]
    notes = _notes(run)
    if notes:
        parts += ["## Not measured", *(f"  {line}" for line in notes), ""]
    return "\n".join(parts)


def _rst_options(text: str) -> str:
    """``--option`` as literal text in reStructuredText (else "--" renders as a dash)."""
    return re.sub(r"(?<![\w`])(--[a-z][a-z-]*)", r"``\1``", text)


def _heading(text: str, underline: str) -> list[str]:
    return [text, underline * len(text), ""]


def rst_report(run: RunResults, ratios: Sequence[Ratio],
               images: Optional[dict[tuple[str, int], list[str]]] = None) -> str:
    """A reStructuredText page for the docs; ``images`` maps (level, processes) to PNG names."""
    images = images or {}
    lines = _heading("Benchmark results", "=")
    smoke = smoke_warning(run.parameters)
    if smoke:
        lines += [".. warning::", "", f"   {_rst_options(smoke)}", ""]
    lines += [describe_parameters(run.parameters), "", describe_machine(run.metadata), ""]
    if has_unsupported(run.results):
        lines += [_rst_options(unsupported_note()), ""]
    for level, processes, group in _groups(run):
        lines += _heading(f"{LEVEL_TITLES.get(level, level)}, {plural(processes, 'process')}", "-")
        for result in group:
            lines += [backend_table(result), ""]
        for image in images.get((level, processes), []):
            lines += [f".. image:: {image}", f"   :alt: {image}", ""]
    if ratios:
        lines += _heading("Summary", "-")
        lines += ["Ratio of latencies, backend / reference, measured in the same run: below 1 "
                  "is faster." + (" Smoke run: these ratios are not measurements." if smoke
                                  else ""), "", ratio_table(ratios), ""]
    notes = _notes(run)
    if notes:
        lines += _heading("Not measured", "-")
        lines += [f"- {line}" for line in notes] + [""]
    return "\n".join(lines)
