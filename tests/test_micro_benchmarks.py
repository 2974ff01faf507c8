"""The single-process micro-benchmarks (``benchmarks/micro``): a quick end-to-end run, the
statistics and table code, and that a plain pytest run never collects the benchmarks.

Speed targets are reported by ``python -m benchmarks.micro``, never asserted here.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
# benchmarks/ is not an installed package; make it importable however pytest was started.
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.micro.implementations import OTHER_PEERS, missing_peers  # noqa: E402
from benchmarks.micro.operations import (  # noqa: E402
    OPERATIONS,
    OPERATIONS_BY_NAME,
    QUICK_REPEATS,
)
from benchmarks.micro.report import (  # noqa: E402
    Comparison,
    Summary,
    compare,
    format_table,
    percentile,
    summarise,
)

# The quick run needs ~30 s of CPU (seven implementations), and took 70-150 s of wall time on a
# loaded 2-core machine, over 8 minutes at a load of 13: the bound only keeps a hung run from
# waiting for the suite's timeout.
QUICK_RUN_TIMEOUT = 900
pytestmark = pytest.mark.timeout(QUICK_RUN_TIMEOUT + 60)  # past the suite's 600 s per test


@pytest.fixture(scope="module")
def quick_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    merged = tmp_path_factory.mktemp("micro") / "micro.json"
    process = subprocess.run(
        [sys.executable, "-m", "benchmarks.micro", "--quick", "--json", str(merged)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=QUICK_RUN_TIMEOUT,
        check=False,
    )
    assert process.returncode == 0, process.stdout[-4000:] + process.stderr[-4000:]
    return process, json.loads(merged.read_text())


def test_quick_run_measures_every_operation_for_both_implementations(
    quick_run: tuple[subprocess.CompletedProcess[str], dict[str, Any]],
) -> None:
    _, report = quick_run
    rows = {(row["operation"], row["family"]): row for row in report["comparisons"]}
    for operation in OPERATIONS:
        row = rows[operation.name, "Cache"]
        assert row["ours"]["implementation"] == "diskcache_core.Cache"
        assert row["peer"]["implementation"] == "diskcache.Cache"
        expected_rounds = operation.rounds_per_repeat(quick=True)[0] * QUICK_REPEATS
        for side in ("ours", "peer"):
            summary = row[side]
            assert summary["rounds"] == expected_rounds
            assert len(summary["repeat_medians_s"]) == QUICK_REPEATS
            assert 0 < summary["median_s"] <= summary["pooled_median_s"]
            assert 0 < summary["pooled_median_s"] <= summary["p90_s"] <= summary["p99_s"]
        assert row["ratio"] > 0
        assert row["target"] == operation.target
        assert isinstance(row["passed"], bool)
        # The other peers, measured alike, when installed (the bench extra installs them).
        for library, module in OTHER_PEERS.items():
            other = row["others"][library]
            if library in missing_peers():
                assert other is None
                continue
            assert other["implementation"] == f"{module}.Cache"
            assert other["library"] == library
            assert other["rounds"] == expected_rounds
        medians = [row["peer"]["median_s"]] + [
            other["median_s"] for other in row["others"].values() if other is not None
        ]
        assert row["best_ratio"] == pytest.approx(row["ours"]["median_s"] / min(medians))


def test_quick_run_prints_the_table(
    quick_run: tuple[subprocess.CompletedProcess[str], dict[str, Any]],
) -> None:
    process, _ = quick_run
    table_lines = [line for line in process.stdout.splitlines() if " | " in line]
    for operation in OPERATIONS:
        # One row per implementation family: "title", "title [FanoutCache]", ...
        rows = [
            line for line in table_lines
            if line.split(" | ")[0].strip() == operation.title
            or line.split(" | ")[0].strip().startswith(operation.title + " [")
        ]  # fmt: skip
        assert any(row.split(" | ")[0].strip() == operation.title for row in rows)
        for line in rows:
            cells = [cell.strip() for cell in line.split(" | ")]
            assert len(cells) == 7 + len(OTHER_PEERS)
            assert all(
                float(value.replace(",", "")) > 0 for value in cells[1].split() + cells[2].split()
            )
            assert cells[5] in ("pass", "FAIL")
            assert float(cells[-1]) > 0  # ours / the best peer
    assert "targets met" in process.stdout


def test_plain_pytest_does_not_collect_the_benchmarks() -> None:
    process = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         str(REPO_ROOT / "benchmarks" / "micro")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=QUICK_RUN_TIMEOUT,
        check=False,
    )  # fmt: skip
    assert process.returncode == pytest.ExitCode.NO_TESTS_COLLECTED, process.stdout


def test_the_run_needs_no_pytest_timeout(tmp_path: Path) -> None:
    """With the bench extra alone (no pytest-timeout: blocked here), the benchmarks' pytest run
    reads pyproject.toml's `timeout` without "Unknown config option: timeout"."""
    from benchmarks.micro.__main__ import pytest_command

    command = pytest_command(tmp_path / "raw.json", quick=True, only="get_miss")
    command += ["--collect-only", "-p", "no:timeout", "-W", "error::pytest.PytestConfigWarning"]
    process = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True,
                             timeout=QUICK_RUN_TIMEOUT, check=False)
    output = process.stdout + process.stderr
    assert process.returncode == 0, output[-4000:]
    assert "Unknown config option" not in output
    assert re.search(r"^[\d/]+ tests? collected", process.stdout, re.MULTILINE), output[-4000:]


@pytest.mark.parametrize(
    ("samples", "fraction", "expected"),
    [
        ([5.0], 0.99, 5.0),
        ([3.0, 1.0, 2.0], 0.5, 2.0),
        ([1.0, 2.0, 3.0, 4.0], 0.5, 2.5),
        ([float(n) for n in range(1, 11)], 0.9, 9.1),
        ([float(n) for n in range(1, 101)], 0.99, 99.01),
        ([1.0, 2.0], 0.0, 1.0),
        ([1.0, 2.0], 1.0, 2.0),
    ],
)
def test_percentile_interpolates_between_closest_ranks(
    samples: list[float], fraction: float, expected: float
) -> None:
    assert percentile(samples, fraction) == pytest.approx(expected)


@pytest.mark.parametrize(("samples", "fraction"), [([], 0.5), ([1.0], -0.1), ([1.0], 1.5)])
def test_percentile_rejects_bad_input(samples: list[float], fraction: float) -> None:
    with pytest.raises(ValueError):
        percentile(samples, fraction)


def raw_benchmark(
    operation: str, implementation: str, ours: bool, data: list[float], repeat: int = 0
) -> dict[str, Any]:
    """One entry shaped like pytest-benchmark's JSON output."""
    info = {
        "operation": operation,
        "implementation": implementation,
        "family": "Cache",
        "ours": ours,
        "repeat": repeat,
    }
    return {"extra_info": info, "stats": {"data": data}}


def summary(operation: str, ours: bool, median: float) -> Summary:
    label = "diskcache_core.Cache" if ours else "diskcache.Cache"
    return Summary(operation, label, "Cache", ours, 3, median, median, median, median, (median,))


def test_summarise_pools_repeats_and_takes_the_least_disturbed_median() -> None:
    raw = {
        "benchmarks": [
            raw_benchmark("incr", "diskcache_core.Cache", True, [1.0, 2.0, 3.0], repeat=0),
            raw_benchmark("incr", "diskcache_core.Cache", True, [7.0, 8.0, 9.0], repeat=1),
        ]
    }
    (result,) = summarise(raw)
    assert result.rounds == 6
    assert result.repeat_medians_s == (2.0, 8.0)
    assert result.median_s == 2.0
    assert result.pooled_median_s == 5.0
    assert result.p99_s == pytest.approx(percentile([1, 2, 3, 7, 8, 9], 0.99))
    assert result.ours and result.family == "Cache"


def test_compare_pairs_ours_with_the_peer_in_table_order() -> None:
    rows = compare(
        [
            summary("incr", ours=False, median=10.0),
            summary("get_miss", ours=True, median=8.0),
            summary("incr", ours=True, median=5.0),
            summary("get_miss", ours=False, median=8.0),
        ]
    )
    assert [row.operation.name for row in rows] == ["get_miss", "incr"]
    get_miss, incr = rows
    assert get_miss.ratio == 1.0 and get_miss.passed is False  # target 0.85
    assert incr.ratio == 0.5 and incr.passed is True  # target 0.6


def test_a_side_not_measured_is_reported_missing() -> None:
    (row,) = compare([summary("delete", ours=True, median=1.0)])
    assert row.ratio is None and row.passed is None
    table = format_table([row])
    assert "MISSING" in table and "n/a" in table


def test_format_table_lists_each_row_with_its_result() -> None:
    op = OPERATIONS_BY_NAME["set_1mb"]
    rows = [
        Comparison(op, "Cache", summary(op.name, True, 500e-6), summary(op.name, False, 1000e-6)),
        Comparison(op, "FanoutCache", summary(op.name, True, 2e-3), summary(op.name, False, 1e-3)),
    ]
    lines = format_table(rows).splitlines()
    cache_line = next(line for line in lines if line.startswith(op.title + " "))
    fanout_line = next(line for line in lines if line.startswith(op.title + " [FanoutCache]"))
    assert "500.0" in cache_line and "1,000" in cache_line
    cache_cells = [cell.strip() for cell in cache_line.split(" | ")]
    fanout_cells = [cell.strip() for cell in fanout_line.split(" | ")]
    assert cache_cells[3:6] == ["0.500", "<= 0.80", "pass"]
    assert fanout_cells[3:6] == ["2.000", "<= 0.80", "FAIL"]
    # No other peer measured: their medians n/a, ours / the best is ours / python-diskcache's.
    assert cache_cells[6:] == ["n/a", "n/a", "0.500"]
    assert fanout_cells[6:] == ["n/a", "n/a", "2.000"]
    assert any(line.startswith("TARGET MISSED: " + op.title + " [FanoutCache]") for line in lines)
    assert "1 of 2 targets met." in lines


def peer_summary(operation: str, library: str, median: float) -> Summary:
    return Summary(operation, f"{library}.Cache", "Cache", False, 3, median, median, median,
                   median, (median,), library=library)  # fmt: skip


def test_compare_shows_the_other_peers_and_the_ratio_to_the_best() -> None:
    community, rust = OTHER_PEERS
    (row,) = compare(
        [
            summary("delete", ours=True, median=30.0e-6),
            summary("delete", ours=False, median=40.0e-6),
            peer_summary("delete", community, 35.0e-6),
            peer_summary("delete", rust, 15.0e-6),
        ]
    )
    assert row.ratio == pytest.approx(0.75) and row.passed is False  # target 0.6, against python-diskcache
    fastest = dict(row.others)[rust]
    assert fastest is not None and fastest.median_s == 15.0e-6
    assert row.best_peer is not None and row.best_peer.library_name == rust
    assert row.best_ratio == pytest.approx(2.0)
    table = format_table([row])
    line = next(line for line in table.splitlines() if line.startswith("delete existing key"))
    cells = [cell.strip() for cell in line.split(" | ")]
    assert cells[6:] == ["35.0", "15.0", "2.000"]
    assert f"BEHIND: delete existing key: {rust} is faster, ours/best 2.000" in table
    assert "Ahead of or level with every peer on 0 of 1 rows." in table


def test_the_memory_off_rows_compare_with_every_peer_of_the_cache_family() -> None:
    community, rust = OTHER_PEERS
    off = Summary("incr", "off", "Cache, memory off", True, 3, 9e-6, 9e-6, 9e-6, 9e-6, (9e-6,),
                  peer_family="Cache")  # fmt: skip
    rows = compare(
        [
            summary("incr", ours=True, median=10.0e-6),
            summary("incr", ours=False, median=20.0e-6),
            peer_summary("incr", community, 18.0e-6),
            peer_summary("incr", rust, 12.0e-6),
            off,
        ]
    )
    assert [row.family for row in rows] == ["Cache", "Cache, memory off"]
    assert rows[1].peer is not None and rows[1].peer.median_s == 20.0e-6
    assert rows[1].best_ratio == pytest.approx(0.75)
    assert "Ahead of or level with every peer on 2 of 2 rows." in format_table(rows)


def test_a_peer_not_installed_is_reported_missing_never_given_a_figure() -> None:
    community, rust = OTHER_PEERS
    (row,) = compare(
        [
            summary("incr", ours=True, median=10.0e-6),
            summary("incr", ours=False, median=20.0e-6),
            peer_summary("incr", community, 18.0e-6),
        ]
    )
    assert dict(row.others)[rust] is None
    table = format_table([row])
    line = next(line for line in table.splitlines() if line.startswith("incr"))
    assert [cell.strip() for cell in line.split(" | ")][6:] == ["18.0", "n/a", "0.556"]
    assert f"MISSING PEER: {rust}: not measured (pip install {rust})" in table
    assert f"MISSING PEER: {community}" not in table
