"""``python -m benchmarks.micro``: run the micro-benchmarks under pytest-benchmark, print the table.

Exits 0 even when speed targets are missed (they are printed), unless ``--strict``; exits non-zero
when a benchmark fails or an operation was not measured for both implementations.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from benchmarks.micro.report import compare, format_table, merged_report, summarise

MICRO_DIR = Path(__file__).absolute().parent
REPO_ROOT = MICRO_DIR.parent.parent


def pytest_command(
    raw_json: Path, quick: bool, only: str | None, verbose: bool = False
) -> list[str]:
    """The pytest invocation that runs the benchmarks and writes pytest-benchmark's JSON."""
    command = [
        sys.executable, "-m", "pytest", str(MICRO_DIR),
        # Benchmark modules are named bench_*.py so that the normal test run never collects them.
        "-o", "python_files=bench_*.py",
        "-o", "addopts=",
        "-p", "no:cacheprovider",
        "-q", "-rfE",
        "--benchmark-enable",
        f"--benchmark-json={raw_json}",
    ]  # fmt: skip
    if verbose:
        command += ["--benchmark-columns=median,iqr,rounds", "--benchmark-sort=name"]
    else:
        command.append("--benchmark-quiet")
    if quick:
        command.append("--micro-quick")
    if only:
        command += ["-k", only]
    return command


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.micro",
        description="Single-process micro-benchmarks: diskcache_core vs python-diskcache.",
    )
    parser.add_argument("--quick", action="store_true", help="a few rounds per benchmark (smoke)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the merged results here")
    parser.add_argument(
        "--only",
        metavar="PATTERN",
        help="pytest -k expression, e.g. 'get_hit' or 'set and not 1mb'",
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="also print pytest-benchmark's own tables"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="micro-bench-json-") as scratch:
        raw_json = Path(scratch) / "pytest-benchmark.json"
        command = pytest_command(raw_json, args.quick, args.only, args.verbose)
        returncode = subprocess.run(command, cwd=REPO_ROOT, check=False).returncode
        if not raw_json.exists():
            print(f"\nmicro-benchmarks: no results (pytest exited {returncode})", file=sys.stderr)
            return returncode or 1
        raw = json.loads(raw_json.read_text())

    comparisons = compare(summarise(raw))
    print()
    print(format_table(comparisons))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        report = merged_report(comparisons, raw, quick=args.quick)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"merged results written to {args.json}")

    if returncode != 0:
        print(f"micro-benchmarks: pytest exited {returncode}: a benchmark failed", file=sys.stderr)
        return returncode
    if args.only is None and any(row.passed is None for row in comparisons):
        return 1  # a side missing from a full selection means a benchmark did not run
    if args.strict and not all(row.passed for row in comparisons):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
