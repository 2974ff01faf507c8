"""Command line of ``python -m benchmarks``: run the comparison, or compare two result files."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Sequence
from typing import Any, Optional

from . import catalog, summary
from .compare import DEFAULT_THRESHOLD, compare, format_comparison, workload_differences
from .output import write_outputs
from .progress import Progress
from .report import text_report
from .results import RunResults
from .runner import RunConfig, Runner
from .workload import Workload

DEFAULT_OUTPUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "output")
#: Tiny parameters for a smoke run (explicit options still win).
QUICK: dict[str, Any] = {"processes": [1, 2], "operations": 1_000, "warmup": 100}
DEFAULTS: dict[str, Any] = {"processes": [1, 8], "operations": 100_000, "warmup": 1_000}


def _numbers(text: str, count: Optional[int] = None) -> list[int]:
    try:
        values = [int(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not values or (count is not None and len(values) != count):
        raise argparse.ArgumentTypeError(f"expected {count or 'some'} integers, got {text!r}")
    return values


def _process_counts(text: str) -> list[int]:
    counts = _numbers(text)
    if min(counts) < 1:
        raise argparse.ArgumentTypeError("process counts must be at least 1")
    return counts


def _pair(text: str) -> tuple[int, int]:
    low, high = _numbers(text, 2)
    return low, high


def _mix(text: str) -> tuple[int, int, int]:
    get, set_, delete = _numbers(text, 3)
    return get, set_, delete


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Multiprocess latency comparison of diskcache_core, python-diskcache, "
        "Memcached and Redis (servers are started on 127.0.0.1 when installed).",
    )
    run = parser.add_argument_group("workload")
    run.add_argument("--processes", type=_process_counts, metavar="N,N",
                     help="process counts to run, in order (default 1,8)")
    run.add_argument("--operations", type=int, metavar="N",
                     help="operations per process, warmup included (default 100000)")
    run.add_argument("--range", dest="key_range", type=int, default=100, metavar="N",
                     help="keys are str(randrange(N)).encode() (default 100)")
    run.add_argument("--warmup", type=int, metavar="N",
                     help="first operations of each process not recorded (default 1000)")
    run.add_argument("--value-sizes", type=_pair, default=(1, 100), metavar="MIN,MAX",
                     help="a value is str(i).encode() * randrange(MIN, MAX) (default 1,100)")
    run.add_argument("--mix", type=_mix, default=(90, 9, 1), metavar="GET,SET,DELETE",
                     help="percentages of gets, sets and deletes (default 90,9,1)")
    run.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    run.add_argument("--workload", choices=("standard", "webapp"), default="standard",
                     help="webapp: the tags workload of benchmarks/webapp.py (65/25/10 %% "
                     "get/set/tag invalidation, several tags per item; rows: "
                     "core-cache, core-fanout, redis-tags, memcached-versions)")
    run.add_argument("--quick", action="store_true",
                     help="smoke run: processes 1,2, 1000 operations, 100 warmup")
    choice = parser.add_argument_group("backends")
    choice.add_argument("--backends", type=lambda text: [p for p in text.split(",") if p],
                        metavar="NAME,...",
                        help="backend names or patterns such as 'core-*' (see --list-backends)")
    choice.add_argument("--django", action="store_true",
                        help="also run the Django-level backends; --backends 'django-*' "
                        "runs only them")
    choice.add_argument("--list-backends", action="store_true",
                        help="list backend names and whether each can run here, then exit")
    where = parser.add_argument_group("execution and output")
    where.add_argument("--output", default=DEFAULT_OUTPUT, metavar="DIR",
                       help="folder for results.json/.txt/.rst and PNG plots "
                       "(default benchmarks/output; use benchmarks/results for the docs)")
    where.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    where.add_argument("--start-method", choices=("fork", "spawn", "forkserver"),
                       help="multiprocessing start method (default: the platform's)")
    where.add_argument("--scratch", metavar="DIR",
                       help="where the caches' temporary directories go (default: system temp)")
    where.add_argument("--run-timeout", type=float, default=1800.0, metavar="SECONDS",
                       help="time limit of one backend at one process count (default 1800)")
    where.add_argument("--quiet", action="store_true", help="no progress display on stderr")
    many = parser.add_argument_group("many hosts (docs/remote.rst)")
    many.add_argument("--hosts", type=int, metavar="N",
                      help="instead: N simulated hosts (directories) sharing one Redis, each with"
                      " --processes workers (default 4): our Cache with remote=, plain redis-py"
                      " and Django's RedisCache; hit ratio, commands/op, invalidation delay")
    diff = parser.add_argument_group("comparing result files")
    diff.add_argument("--compare", nargs=2, metavar=("OLD.json", "NEW.json"),
                      help="compare two results.json files of the same workload instead of "
                      "running (exit 1: regressions; 2: different workloads)")
    diff.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD * 100, metavar="PCT",
                      help="slowdown in percent flagged as a regression (default 10)")
    return parser


def _list_backends() -> int:
    for spec in catalog.ALL_BACKENDS:
        reason = catalog.skip_reason(spec)
        state = "ready" if reason is None else f"skipped: {reason}"
        print(f"{spec.name:<18} {spec.label:<45} {state}")
    return 0


#: Exit status of ``--compare`` when the files cannot be compared (1 is: regressions found).
NOT_COMPARABLE = 2


def _compare(old: str, new: str, threshold_percent: float) -> int:
    """Compare two result files; refuse files of different workloads, whose figures differ for
    that reason alone (a smoke run against a full run reports dozens of false regressions)."""
    before, after = RunResults.load(old), RunResults.load(new)
    differences = workload_differences(before, after)
    if differences:
        print(f"cannot compare {old} with {new}: they measured different workloads",
              file=sys.stderr)
        for line in differences:
            print(f"  {line}", file=sys.stderr)
        print("run both with the same workload options (--quick, --operations, --warmup, --range,"
              " --value-sizes, --mix)", file=sys.stderr)
        return NOT_COMPARABLE
    comparison = compare(before, after, threshold_percent / 100)
    print(format_comparison(comparison))
    if before.parameters.get("smoke") or after.parameters.get("smoke"):
        print("smoke runs (--quick): their figures are not measurements, nor these changes")
    return 1 if comparison.regressions else 0


def workload_from(args: argparse.Namespace) -> Workload:
    """The workload the options ask for, ``--quick`` giving defaults that options override."""
    preset = QUICK if args.quick else DEFAULTS
    operations = args.operations if args.operations is not None else preset["operations"]
    warmup = args.warmup if args.warmup is not None else preset["warmup"]
    return Workload(operations=operations, key_range=args.key_range, warmup=warmup,
                    value_sizes=args.value_sizes, mix=args.mix, seed=args.seed)


def _hosts(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``--hosts N``: see benchmarks/hosts.py."""
    from . import hosts

    if args.hosts < 1:
        parser.error("--hosts must be at least 1")
    rows = args.backends or list(hosts.ROWS)
    unknown = sorted(set(rows) - set(hosts.ROWS))
    if unknown:
        parser.error(f"--hosts rows are {', '.join(hosts.ROWS)}; unknown: {', '.join(unknown)}")
    try:
        workload = workload_from(args)
    except ValueError as exc:
        parser.error(str(exc))
    plots = not args.no_plots and importlib.util.find_spec("matplotlib") is not None
    processes = (args.processes or [4])[0]
    return hosts.main(args.hosts, processes, workload, args.output, plots, args.scratch, rows,
                      smoke=args.quick)


def _webapp(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``--workload webapp``: see benchmarks/webapp.py."""
    from . import webapp

    rows = args.backends or list(webapp.ROWS)
    unknown = sorted(set(rows) - set(webapp.ROWS))
    if unknown:
        parser.error(f"webapp rows are {', '.join(webapp.ROWS)}; unknown: {', '.join(unknown)}")
    defaults = webapp.WebappWorkload()
    quick = {"operations": 600, "warmup": 100}
    operations = args.operations or (quick["operations"] if args.quick else defaults.operations)
    warmup = args.warmup if args.warmup is not None else (
        quick["warmup"] if args.quick else defaults.warmup)
    try:
        workload = webapp.WebappWorkload(operations=operations, warmup=warmup,
                                         key_range=args.key_range, seed=args.seed)
    except ValueError as exc:
        parser.error(str(exc))
    processes = args.processes or ([2] if args.quick else [4])
    plots = not args.no_plots
    if plots and importlib.util.find_spec("matplotlib") is None:
        print("no plot: matplotlib is not installed: pip install matplotlib", file=sys.stderr)
        plots = False
    return webapp.main(rows, processes, workload, args.output, args.scratch, smoke=args.quick,
                       plots=plots)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.compare:
        return _compare(args.compare[0], args.compare[1], args.threshold)
    if args.list_backends:
        return _list_backends()
    if args.hosts is not None:
        return _hosts(parser, args)
    if args.workload == "webapp":
        return _webapp(parser, args)
    try:
        workload = workload_from(args)
        specs = catalog.select(args.backends, django=args.django)
    except ValueError as exc:
        parser.error(str(exc))
    processes = args.processes or (QUICK if args.quick else DEFAULTS)["processes"]
    config = RunConfig(workload=workload, processes=processes, backends=specs,
                       start_method=args.start_method, scratch=args.scratch,
                       run_timeout=args.run_timeout, smoke=args.quick)
    progress = Progress(total_runs=0, quiet=args.quiet)
    try:
        run = Runner(config, progress).run()
    except KeyboardInterrupt:
        print("interrupted: every worker and server started by this run was stopped",
              file=sys.stderr)
        return 130
    ratios = summary.compute(run)
    print(text_report(run, ratios))
    plots = not args.no_plots
    if plots and importlib.util.find_spec("matplotlib") is None:
        print("no plots: matplotlib is not installed: pip install matplotlib", file=sys.stderr)
        plots = False
    paths = write_outputs(run, ratios, args.output, plots=plots)
    if not args.quiet:
        print(f"results written to {os.path.dirname(paths['json'])}: "
              f"{', '.join(sorted(os.path.basename(p) for p in paths.values()))}", file=sys.stderr)
    if not run.results:
        print("nothing was measured: see the reasons above", file=sys.stderr)
    return 1 if run.failed or not run.results else 0
