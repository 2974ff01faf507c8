"""``python -m benchmarks.scale``: how each operation's cost grows with the number of items.

For each size N (default 10k, 100k, 1M and 10M items of 1 KB; a size the scratch disk cannot
hold is skipped, with a message), diskcache_core's Cache and python-diskcache's Cache are
filled in fresh directories (with a size_limit that holds all N items), then measured phase by
phase, alternately (ours, theirs, then the next phase theirs, ours), so that a noisy machine's
drifts hit both alike: fill (per item, in transactions of 1,000), open (a new Cache object on
the filled directory and its first ``len()``: diskcache_core connects on first use), gets
uniform over the N keys, skewed gets (90% on 10% of the keys), overwrites, deletes, and ``len()``. Each phase runs
a fixed count of calls, each timed on its own, after one untimed ``len()`` on the phase's Cache
object; the report gives the median and p99 of each and the ratio ours / theirs (below 1: we are
faster).

Apart from N, the eviction phase writes 100 MB of 10 KB values into a cache limited to 20 MB, per
eviction policy, and reports set latencies and the largest volume seen against the limit.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any, Callable

from benchmarks import environment

BACKENDS = {"ours": "diskcache_core", "theirs": "diskcache"}
DEFAULT_SIZES = (10_000, 100_000, 1_000_000, 10_000_000)
VALUE = b"v" * 1000
#: Disk bytes per item and backend a size is allowed: SQLite holds a 1 KB value and its row in
#: ~1.2 KB, twice that leaves room for the WAL and the delete phase's free pages.
BYTES_PER_ITEM = 2 * (len(VALUE) + 200)
DEFAULT_SIZE_LIMIT = 2**30  # both libraries' default
PHASES = ("fill", "open", "get_uniform", "get_skewed", "set", "delete", "len")
POLICIES = ("least-recently-stored", "least-recently-used", "least-frequently-used")


def human_microseconds(value: float) -> str:
    """A latency for the tables: 12.3µs, 1.25ms, 2.10s."""
    if value < 1000:
        return f"{value:.1f}µs"
    if value < 1e6:
        return f"{value / 1e3:.2f}ms"
    return f"{value / 1e6:.2f}s"


def _percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def _timed(calls: int, operation: Callable[[int], Any]) -> list[float]:
    """Microseconds of each of `calls` calls of `operation(i)`."""
    clock = time.perf_counter_ns
    samples = []
    for index in range(calls):
        start = clock()
        operation(index)
        samples.append((clock() - start) / 1000)
    return samples


def _summary(samples: list[float]) -> dict[str, float]:
    return {"median": statistics.median(samples), "p99": _percentile(samples, 0.99),
            "max": max(samples), "calls": len(samples)}  # fmt: skip


def _fill(module: Any, directory: str, size: int) -> list[float]:
    # Room for every item: the default size_limit (1 GB, the database file included) would cull
    # a fill of more than ~900k items, and the phases would measure a cache of ~900k items. The
    # setting is kept in the database: the phases' Cache objects open with it.
    cache = module.Cache(directory, size_limit=max(DEFAULT_SIZE_LIMIT, size * BYTES_PER_ITEM))
    per_item = []
    batch = 1000
    for start in range(0, size, batch):
        began = time.perf_counter_ns()
        with cache.transact():
            for index in range(start, min(start + batch, size)):
                cache.set(str(index).encode(), VALUE)
        per_item.append((time.perf_counter_ns() - began) / 1000 / batch)
    cache.close()
    return per_item


def _phase(module: Any, directory: str, size: int, phase: str, calls: int) -> list[float]:
    """The samples of one phase on the filled cache in `directory`."""
    draw = random.Random(size)
    if phase == "open":
        def open_once(_: int) -> None:
            opened = module.Cache(directory)
            len(opened)  # ready to serve: diskcache_core opens its connections on first use
            opened.close()
        return _timed(max(3, calls // 1000), open_once)
    cache = module.Cache(directory)
    try:
        len(cache)  # untimed: no phase's first call pays for opening the connection
        if phase == "get_uniform":
            keys = [str(draw.randrange(size)).encode() for _ in range(calls)]
            return _timed(calls, lambda i: cache.get(keys[i]))
        if phase == "get_skewed":
            hot = max(1, size // 10)
            keys = [str(draw.randrange(hot) if draw.random() < 0.9 else draw.randrange(size))
                    .encode() for _ in range(calls)]  # fmt: skip
            return _timed(calls, lambda i: cache.get(keys[i]))
        if phase == "set":
            keys = [str(draw.randrange(size)).encode() for _ in range(calls)]
            return _timed(calls, lambda i: cache.set(keys[i], VALUE))
        if phase == "delete":
            keys = [str(index).encode() for index in draw.sample(range(size), min(calls, size))]
            samples = _timed(len(keys), lambda i: cache.delete(keys[i]))
            with cache.transact():  # put them back for the next phases
                for key in keys:
                    cache.set(key, VALUE)
            return samples
        if phase == "len":
            return _timed(max(10, calls // 100), lambda i: len(cache))
        raise ValueError(f"unknown phase {phase!r}")
    finally:
        cache.close()


def measure_size(modules: dict[str, Any], size: int, calls: int, scratch: str) -> dict[str, Any]:
    """Every phase at one size, for each backend; the two alternate phase by phase."""
    results: dict[str, Any] = {name: {} for name in modules}
    directories = {name: tempfile.mkdtemp(prefix=f"scale-{name}-", dir=scratch) for name in modules}
    try:
        order = list(modules)
        for number, phase in enumerate(PHASES):
            for name in order if number % 2 == 0 else order[::-1]:
                if phase == "fill":
                    samples = _fill(modules[name], directories[name], size)
                else:
                    samples = _phase(modules[name], directories[name], size, phase, calls)
                results[name][phase] = _summary(samples)
                _progress(f"  {size:>9,} {phase:<12} {name:<7} median "
                          f"{results[name][phase]['median']:.1f} µs")  # fmt: skip
    finally:
        for directory in directories.values():
            shutil.rmtree(directory, ignore_errors=True)
    return results


def measure_eviction(modules: dict[str, Any], scratch: str, total_mb: int) -> dict[str, Any]:
    """Sets of 10 KB values past a 20 MB size limit, per policy and backend."""
    limit = 20 * 2**20
    value = b"e" * 10_000
    count = total_mb * 2**20 // len(value)
    results: dict[str, Any] = {}
    for number, policy in enumerate(POLICIES):
        results[policy] = {}
        order = list(modules)
        for name in order if number % 2 == 0 else order[::-1]:
            directory = tempfile.mkdtemp(prefix=f"scale-evict-{name}-", dir=scratch)
            try:
                cache = modules[name].Cache(directory, size_limit=limit, eviction_policy=policy)
                peak = 0

                def write(index: int) -> None:
                    cache.set(index, value)

                samples = []
                for start in range(0, count, 100):
                    samples.extend(_timed(min(100, count - start), lambda i: write(start + i)))
                    peak = max(peak, cache.volume())
                cache.close()
            finally:
                shutil.rmtree(directory, ignore_errors=True)
            results[policy][name] = {**_summary(samples), "peak_volume": peak, "limit": limit}
            _progress(f"  evict {policy:<24} {name:<7} p99 {results[policy][name]['p99']:.0f} µs")
    return results


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.2f}" if theirs else "-"


def render_text(run: dict[str, Any]) -> str:
    """The tables of a run, as plain text (also valid reStructuredText simple tables)."""
    lines = []
    header = f"{'N':>10} {'operation':<12} {'ours med':>10} {'theirs med':>11} {'ratio':>6}" \
             f" {'ours p99':>10} {'theirs p99':>11} {'ratio':>6}"  # fmt: skip
    rule = " ".join("=" * width for width in (10, 12, 10, 11, 6, 10, 11, 6))
    lines += [rule, header, rule]
    for size, result in run["sizes"].items():
        ours, theirs = result.get("ours", {}), result.get("theirs", {})
        for phase in PHASES:
            a, b = ours.get(phase), theirs.get(phase)
            if a is None:
                continue
            lines.append(
                f"{int(size):>10,} {phase:<12} {human_microseconds(a['median']):>10}"
                f" {human_microseconds(b['median']) if b else '-':>11}"
                f" {_ratio(a['median'], b['median']) if b else '-':>6}"
                f" {human_microseconds(a['p99']):>10}"
                f" {human_microseconds(b['p99']) if b else '-':>11}"
                f" {_ratio(a['p99'], b['p99']) if b else '-':>6}"
            )
    lines.append(rule)
    if run.get("eviction"):
        lines += ["", "Eviction at the size limit (20 MB limit, 10 KB values):", ""]
        rule = " ".join("=" * width for width in (24, 7, 10, 10, 10, 12))
        lines += [rule, f"{'policy':<24} {'backend':<7} {'set med':>10} {'set p99':>10}"
                  f" {'set max':>10} {'peak / limit':>12}", rule]  # fmt: skip
        for policy, per_backend in run["eviction"].items():
            for name, figures in per_backend.items():
                lines.append(
                    f"{policy:<24} {name:<7} {human_microseconds(figures['median']):>10}"
                    f" {human_microseconds(figures['p99']):>10}"
                    f" {human_microseconds(figures['max']):>10}"
                    f" {figures['peak_volume'] / figures['limit']:>12.2f}"
                )
        lines.append(rule)
    return "\n".join(lines) + "\n"


def plot(run: dict[str, Any], path: str) -> None:
    """Median cost of each operation against N, log-log, one line per backend."""
    from benchmarks.plots import _pyplot

    plt = _pyplot()
    sizes = [int(size) for size in run["sizes"]]
    figure, axes = plt.subplots(2, 4, figsize=(16, 7), sharex=True)
    for axis, phase in zip(axes.flat, PHASES):
        for name, style in (("ours", "-o"), ("theirs", "--s")):
            values = [run["sizes"][str(size)].get(name, {}).get(phase, {}).get("median")
                      for size in sizes]  # fmt: skip
            if all(value is not None for value in values):
                axis.plot(sizes, values, style, label=BACKENDS[name])
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_title(phase)
        axis.set_xlabel("items (N)")
        axis.set_ylabel("median µs")
    axes.flat[-1].axis("off")
    axes.flat[0].legend()
    figure.suptitle("Cost per operation against the number of items")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)),
                        help="item counts, comma-separated (default 10000,100000,1000000,10000000)")
    parser.add_argument("--calls", type=int, default=5000, help="timed calls per phase")
    parser.add_argument("--eviction-mb", type=int, default=100,
                        help="MB written in the eviction phase (0: skip it)")
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny sizes and counts")
    parser.add_argument("--scratch", default=None, help="where the caches go (default: temp)")
    parser.add_argument("--output", default="benchmarks/output", help="folder for the results")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plot")
    args = parser.parse_args(argv)
    sizes = [1000, 2000] if args.quick else [int(part) for part in args.sizes.split(",")]
    calls = 200 if args.quick else args.calls
    eviction_mb = 2 if args.quick else args.eviction_mb
    modules = {}
    for name, module in BACKENDS.items():
        try:
            modules[name] = importlib.import_module(module)
        except ImportError:
            _progress(f"{module} is not installed: measuring without it")
    scratch = args.scratch or tempfile.gettempdir()
    run: dict[str, Any] = {"environment": environment.collect(), "calls": calls,
                           "value_bytes": len(VALUE), "sizes": {}, "eviction": {}}  # fmt: skip
    for size in sizes:
        needed = size * BYTES_PER_ITEM * len(modules)
        free = shutil.disk_usage(scratch).free
        if needed > free:
            _progress(f"skipping N={size:,}: needs ~{needed >> 20} MiB, {free >> 20} MiB free")
            continue
        run["sizes"][str(size)] = measure_size(modules, size, calls, scratch)
    if eviction_mb:
        run["eviction"] = measure_eviction(modules, scratch, eviction_mb)
    text = render_text(run)
    print(text)
    os.makedirs(args.output, exist_ok=True)
    with open(os.path.join(args.output, "scale.json"), "w") as handle:
        json.dump(run, handle, indent=1)
    for suffix in ("txt", "rst"):
        with open(os.path.join(args.output, f"scale.{suffix}"), "w") as handle:
            handle.write(text if suffix == "txt" else "::\n\n" + "".join(
                "    " + line + "\n" if line else "\n" for line in text.splitlines()))
    if not args.no_plots and len(run["sizes"]) > 1:
        plot(run, os.path.join(args.output, "scale.png"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
