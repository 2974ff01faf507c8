"""Tests of the multiprocess benchmark harness (``python -m benchmarks``).

Unit tests cover the workload, percentiles, tables, rst, JSON, comparison, ratios and each
adapter's miss rule; the end-to-end tests run tiny benchmarks against every available backend,
real Memcached and Redis servers included, and check that no server outlives the run.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import random
import statistics
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `benchmarks` is not an installed package: import it from the tree
    sys.path.insert(0, str(ROOT))

from benchmarks import catalog, summary  # noqa: E402
from benchmarks.backends import Adapter, DiskCacheAdapter, MemcachedAdapter, RedisAdapter  # noqa: E402
from benchmarks.cli import build_parser, main, workload_from  # noqa: E402
from benchmarks.compare import compare, format_comparison  # noqa: E402
from benchmarks.django_backends import DjangoAdapter  # noqa: E402
from benchmarks.progress import Progress  # noqa: E402
from benchmarks.report import backend_table, format_duration, ratio_table, rst_report  # noqa: E402
from benchmarks.results import BackendResult, RunResults  # noqa: E402
from benchmarks.runner import RunConfig, Runner  # noqa: E402
from benchmarks.servers import HOST, SERVERS, MemcachedServer, RedisServer, Server  # noqa: E402
from benchmarks.report import text_report  # noqa: E402
from benchmarks.stats import REPORTED, ActionStats, min_samples, percentile, summarize  # noqa: E402
from benchmarks.workload import ACTIONS, DELETE, GET, SET, Workload, plan_operations  # noqa: E402
from benchmarks import webapp  # noqa: E402

PERCENTILE_ORDER = ["median", "p90", "p99", "p99.9"]


# --- helpers -------------------------------------------------------------------------------------


def child_server_processes() -> list[str]:
    """Memcached or Redis processes whose parent is this test process (a fixture's, or left
    behind by a bug). Their running/sleeping state is left out (it changes by the moment);
    an exited but unreaped one is marked."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and comm in ("memcached", "redis-server"):
            found.append(f"{comm} pid {entry.name}" + (" exited" if fields[0] in "ZX" else ""))
    return found


def listening_addresses(port: int) -> list[str]:
    """Local addresses (hex, as /proc/net shows them) of TCP sockets listening on ``port``."""
    addresses = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A == LISTEN
                addresses.append(address)
    return addresses


def stats(action: str, median: float, count: int = 100, misses: int = 0) -> ActionStats:
    """Synthetic statistics whose percentiles all scale with ``median``."""
    return ActionStats(
        action=action, count=count, misses=misses,
        percentiles={"median": median, "p90": 2 * median, "p99": 4 * median, "p99.9": 8 * median},
        min=median / 2, max=16 * median, total=count * median,
        curve=[(50.0, median), (90.0, 2 * median)],
    )


def backend_result(name: str, median: float, processes: int = 1, **extra: Any) -> BackendResult:
    spec = catalog.by_name(name)
    return BackendResult(
        name=name, label=spec.label, short=spec.short, level=spec.level, processes=processes,
        actions={action: stats(action, median) for action in ACTIONS},
        baseline=spec.baseline, server=spec.server, **extra,
    )


class FakeClient:
    """Stands in for a client whose replies a test chooses."""

    def __init__(self, get: Any = None, set: Any = True, delete: Any = True) -> None:
        self.replies = {"get": get, "set": set, "delete": delete}

    def get(self, key: Any) -> Any:
        return self.replies["get"]

    def set(self, key: Any, value: Any) -> Any:
        return self.replies["set"]

    def delete(self, key: Any) -> Any:
        return self.replies["delete"]


def server_or_skip(kind: type[Server]) -> Server:
    reason = kind.missing_reason()
    if reason:
        pytest.skip(reason)
    return kind()


@pytest.fixture(scope="module")
def memcached() -> Iterator[Server]:
    with server_or_skip(MemcachedServer) as server:
        yield server
    assert server.process is None


@pytest.fixture(scope="module")
def redis_server() -> Iterator[Server]:
    with server_or_skip(RedisServer) as server:
        yield server
    assert server.process is None


# --- workload ------------------------------------------------------------------------------------


def test_plan_follows_the_workload() -> None:
    workload = Workload(operations=5_000, key_range=10, warmup=0, value_sizes=(2, 5), seed=3)
    plan = plan_operations(workload, worker_index=0)
    assert len(plan) == 5_000
    counts = {code: sum(1 for op in plan if op[0] == code) for code in (GET, SET, DELETE)}
    assert 0.86 < counts[GET] / 5_000 < 0.94
    assert 0.06 < counts[SET] / 5_000 < 0.12
    assert 0 < counts[DELETE] / 5_000 < 0.03
    for index, (action, key, value) in enumerate(plan):
        assert 0 <= int(key) < 10 and key == str(int(key)).encode()
        if action == SET:
            unit = str(index).encode()
            assert value is not None and len(value) % len(unit) == 0
            assert value == unit * (len(value) // len(unit))
            assert 2 <= len(value) // len(unit) < 5
        else:
            assert value is None


def test_plan_is_reproducible_per_seed_and_worker() -> None:
    workload = Workload(operations=200, warmup=10, seed=7)
    assert plan_operations(workload, 0) == plan_operations(workload, 0)
    assert plan_operations(workload, 0) != plan_operations(workload, 1)
    assert plan_operations(workload, 0) != plan_operations(Workload(operations=200, warmup=10), 0)


def test_mix_weights_select_actions() -> None:
    only_sets = plan_operations(Workload(operations=300, warmup=0, mix=(0, 1, 0)), 0)
    assert {op[0] for op in only_sets} == {SET}


@pytest.mark.parametrize("bad", [
    {"operations": 0}, {"warmup": 100, "operations": 100}, {"warmup": -1},
    {"value_sizes": (5, 5)}, {"value_sizes": (0, 3)}, {"mix": (0, 0, 0)}, {"mix": (1, 2)},
    {"key_range": 0},
])
def test_workload_rejects_bad_parameters(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        Workload(**bad)


# --- statistics ----------------------------------------------------------------------------------


def test_percentile_hand_computed() -> None:
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([1, 2, 3, 4], 90) == pytest.approx(3.7)
    assert percentile([10, 20], 0) == 10 and percentile([10, 20], 100) == 20
    assert percentile([5], 99.9) == 5
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1], 101)


def test_percentile_matches_statistics_quantiles() -> None:
    rng = random.Random(1)
    values = sorted(rng.randrange(1, 10**6) for _ in range(2_345))
    hundredths = statistics.quantiles(values, n=100, method="inclusive")
    thousandths = statistics.quantiles(values, n=1000, method="inclusive")
    assert percentile(values, 50) == pytest.approx(statistics.median(values))
    assert percentile(values, 90) == pytest.approx(hundredths[89])
    assert percentile(values, 99) == pytest.approx(hundredths[98])
    assert percentile(values, 99.9) == pytest.approx(thousandths[998])


def test_summarize_uses_every_sample() -> None:
    samples = list(range(1000, 0, -1))  # unsorted on purpose
    result = summarize("get", samples, misses=7)
    assert (result.count, result.misses) == (1000, 7)
    assert result.max == 1000 and result.min == 1 and result.total == sum(samples)
    assert result.percentiles["median"] == pytest.approx(500.5)
    assert result.percentiles["p99.9"] == pytest.approx(percentile(sorted(samples), 99.9))
    values = [result.percentiles[name] for name, _ in REPORTED] + [result.max]
    assert values == sorted(values)
    assert summarize("delete", [], 0).count == 0
    with pytest.raises(ValueError):
        summarize("get", [1, 2], misses=3)


@pytest.mark.parametrize("percent, needed", [
    (0.0, 1), (50.0, 1), (90.0, 10), (99.0, 100), (99.9, 1_000), (99.99, 10_000), (100.0, 1),
    (75.0, 4),
])
def test_min_samples_puts_one_sample_beyond_the_percentile(percent: float, needed: int) -> None:
    assert min_samples(percent) == needed


def test_a_percentile_is_supported_from_its_minimum_sample_count() -> None:
    few = summarize("delete", range(1, 100), misses=0)  # 99 samples
    enough = summarize("delete", range(1, 101), misses=0)
    assert [few.supports(name) for name, _ in REPORTED] == [True, True, False, False]
    assert [enough.supports(name) for name, _ in REPORTED] == [True, True, True, False]
    assert few.supports("max") and not summarize("get", [], 0).supports("median")


# --- report --------------------------------------------------------------------------------------


def smoke_parameters(smoke: bool) -> dict[str, Any]:
    return {"operations": 1_000, "warmup": 100, "key_range": 100, "mix": [90, 9, 1],
            "value_sizes": [1, 100], "start_method": "fork", "smoke": smoke}


def test_a_smoke_run_is_marked_and_a_measurement_is_not() -> None:
    results = [backend_result("core-cache", 5_000.0), backend_result("diskcache-cache", 10_000.0)]
    smoke = RunResults(parameters=smoke_parameters(True), results=results)
    ratios = summary.compute(smoke)
    text = text_report(smoke, ratios)
    assert text.startswith("*** SMOKE RUN (--quick): 900 recorded operations per process.")
    assert "Smoke run: these ratios are not measurements." in text
    page = rst_report(smoke, ratios)
    assert ".. warning::\n\n   SMOKE RUN (``--quick``)" in page
    assert _docutils_tables(page) is None or len(_docutils_tables(page) or []) == 3
    measured = RunResults(parameters=smoke_parameters(False), results=results)
    assert "SMOKE" not in text_report(measured, ratios) + rst_report(measured, ratios)
    assert "Smoke run" not in text_report(measured, ratios) + rst_report(measured, ratios)


def test_reports_print_a_dash_for_unsupported_percentiles_with_a_note() -> None:
    result = backend_result("core-cache", 5_000.0)
    result.actions["delete"] = summarize("delete", [1_000 * n for n in range(1, 8)], misses=0)
    result.actions["get"] = summarize("get", range(1, 2_001), misses=0)
    run = RunResults(parameters=smoke_parameters(False), results=[result])
    rows = {line.split()[0]: line.split() for line in backend_table(result).splitlines()[5:8]}
    assert rows["get"][3:7] == ["1.000µs", "1.800µs", "1.980µs", "1.998µs"]  # 2,000 samples
    assert rows["delete"][3:7] == ["4.000µs", "—", "—", "—"]  # 7 samples: a median only
    assert rows["set"][3:7][-1] == "—"  # 100 samples: no p99.9
    note = "—: fewer samples than the percentile needs to say more than the largest sample " \
           "(p90 10, p99 100, p99.9 1,000); run more --operations."
    assert note in text_report(run, [])
    assert note.replace("--operations", "``--operations``") in rst_report(run, [])
    full = backend_result("core-cache", 5_000.0)
    for action in ACTIONS:
        full.actions[action] = summarize(action, range(1, 1_001), misses=0)
    assert "—" not in text_report(RunResults(results=[full]), [])


def test_ratios_leave_out_percentiles_a_side_cannot_support() -> None:
    ours, theirs = backend_result("core-cache", 5_000.0), backend_result("diskcache-cache", 1.0)
    ours.actions["delete"] = summarize("delete", [7_000] * 7, misses=0)
    theirs.actions["delete"] = summarize("delete", [100] * 500, misses=0)
    ratios = {(r.action, r.metric): r.ratio for r in summary.compute(RunResults(
        results=[ours, theirs]))}
    assert ratios[("delete", "median")] == 70.0
    assert ("delete", "p99") not in ratios  # 7 samples: no p99, so no 59x ratio of it
    assert ("get", "p99") in ratios and ("set", "p99") in ratios




@pytest.mark.parametrize("nanoseconds, text", [
    (0, "0.000µs"), (12_159, "12.159µs"), (999_999, "999.999µs"),
    (1_000_000, "1.000ms"), (10_297_000, "10.297ms"), (2_147_000_000, "2.147s"),
])
def test_format_duration(nanoseconds: float, text: str) -> None:
    assert format_duration(nanoseconds) == text


def test_backend_table_layout() -> None:
    result = backend_result("core-cache", 12_000.0, processes=8)
    result.actions["get"] = summarize("get", [10_000, 12_000, 14_000], misses=1)
    table = backend_table(result).splitlines()
    assert table[1] == "Timings for diskcache_core.Cache, 8 processes"
    assert table[3].split() == ["Action", "Count", "Miss", "Median", "P90", "P99", "P99.9",
                                "Max", "Total"]
    assert table[0] == table[4] == table[-1] and set(table[0]) == {"=", " "}
    # Three samples support a median, not a p90 or beyond ("—": stats.min_samples).
    assert table[5].split() == ["get", "3", "1", "12.000µs", "—", "—", "—", "14.000µs",
                                "36.000µs"]
    assert [line.split()[0] for line in table[5:9]] == ["get", "set", "delete", "Total"]
    total_row = table[8].split()
    assert total_row[1] == str(3 + 100 + 100) and total_row[-1] == "2.436ms"
    assert len({len(line) for line in (table[0], table[3])}) == 1


def _docutils_tables(text: str) -> Optional[list[Any]]:
    """The tables docutils finds in ``text`` (which must parse without a warning), or None when
    docutils is not installed."""
    try:
        import docutils.core as docutils_core
        from docutils import nodes
    except ImportError:
        return None

    warnings = io.StringIO()
    tree = docutils_core.publish_doctree(
        text, settings_overrides={"warning_stream": warnings, "report_level": 1}
    )
    assert warnings.getvalue() == ""
    return list(tree.findall(nodes.table))


def test_rst_report_is_valid_restructuredtext() -> None:
    run = RunResults(
        parameters={"operations": 100, "warmup": 10, "key_range": 100, "mix": [90, 9, 1],
                    "value_sizes": [1, 100], "start_method": "fork"},
        metadata={"timestamp": "now", "python": "3", "sqlite": "3", "packages": {"x": "1"}},
        results=[backend_result("core-cache", 5_000.0),
                 backend_result("diskcache-cache", 10_000.0)],
        skipped=[{"backend": "redis", "reason": "redis-server is not installed"}],
    )
    ratios = summary.compute(run)
    text = rst_report(run, ratios, {("cache", 1): ["cache-bars-1.png"]})
    tables = _docutils_tables(text)
    if tables is None:
        pytest.skip("docutils is not installed: pip install docutils")
    assert len(tables) == 3  # two backends and the ratio summary
    assert ".. image:: cache-bars-1.png" in text
    assert "redis-server is not installed" in text
    assert "Timings for diskcache.Cache, 1 process" in text


# --- JSON, summary, comparison -------------------------------------------------------------------


def test_json_round_trip(tmp_path: Path) -> None:
    run = RunResults(
        metadata={"python": "3.x", "packages": {"diskcache": "5.6.3"}},
        parameters={"operations": 10},
        results=[backend_result("memcached", 7_000.0, processes=8, elapsed=1.5)],
        skipped=[{"backend": "redis", "reason": "missing"}],
        failed=[{"backend": "core-cache", "processes": 8, "reason": "boom"}],
    )
    path = str(tmp_path / "r.json")
    run.save(path, extra={"summary": []})
    loaded = RunResults.load(path)
    assert loaded.to_dict() == run.to_dict()
    assert loaded.results[0].actions["get"].percentiles["p99.9"] == 8 * 7_000.0
    with open(path, encoding="utf-8") as source:
        assert json.load(source)["summary"] == []
    (tmp_path / "other.json").write_text('{"format": "something else"}')
    with pytest.raises(ValueError):
        RunResults.load(str(tmp_path / "other.json"))


def test_summary_ratios_against_diskcache_and_memcached() -> None:
    run = RunResults(results=[
        backend_result("core-cache", 5_000.0),
        backend_result("diskcache-cache", 10_000.0),
        backend_result("memcached", 20_000.0),
        backend_result("redis", 1_000.0),
        backend_result("core-cache", 1_000.0, processes=8),  # no baseline at 8 processes
    ])
    ratios = {(r.backend, r.reference, r.processes, r.action, r.metric): r.ratio
              for r in summary.compute(run)}
    assert ratios[("diskcache_core.Cache", "diskcache.Cache", 1, "get", "median")] == 0.5
    assert ratios[("diskcache_core.Cache", "pylibmc + Memcached", 1, "set", "p99")] == 0.25
    assert ratios[("diskcache.Cache", "pylibmc + Memcached", 1, "delete", "median")] == 0.5
    assert not any(key[0] == "redis-py + Redis" for key in ratios)
    assert not any(key[2] == 8 for key in ratios)
    line = next(r for r in summary.compute(run) if r.metric == "median").describe()
    assert line == "diskcache_core.Cache get median 0.50x diskcache.Cache (1 process)"
    table = ratio_table(summary.compute(run))
    assert "0.50x" in table and "0.25x" in table


def _pair_of_runs(new_median: float) -> tuple[RunResults, RunResults]:
    old = RunResults(results=[backend_result("core-cache", 10_000.0)])
    new = RunResults(results=[backend_result("core-cache", new_median),
                              backend_result("redis", 1.0)])
    return old, new


def test_compare_flags_a_regression() -> None:
    old, new = _pair_of_runs(12_000.0)
    comparison = compare(old, new, threshold=0.10)
    assert comparison.regressions
    assert {c.metric for c in comparison.regressions} == {"median", "p90", "p99"}
    assert all(c.ratio == pytest.approx(1.2) and c.percent == pytest.approx(20.0)
               for c in comparison.changes)
    assert comparison.only_new == [("redis", 1)]
    assert "!!" in format_comparison(comparison)
    assert not compare(old, new, threshold=0.25).regressions


def test_compare_does_not_flag_an_improvement_or_noise() -> None:
    old, new = _pair_of_runs(5_000.0)
    comparison = compare(old, new, threshold=0.10)
    assert comparison.changes and not comparison.regressions
    assert all(c.percent == pytest.approx(-50.0) for c in comparison.changes)
    assert "no regression" in format_comparison(comparison)
    assert not compare(*_pair_of_runs(10_500.0), threshold=0.10).regressions


def test_compare_leaves_out_percentiles_a_side_cannot_support() -> None:
    old, new = _pair_of_runs(10_000.0)
    new.results[0].actions["delete"] = summarize("delete", [90_000] * 7, misses=0)
    comparison = compare(old, new, threshold=0.10)
    compared = {(c.action, c.metric) for c in comparison.changes}
    assert ("delete", "median") in compared and ("delete", "p90") not in compared
    assert ("get", "p99") in compared and ("get", "p99.9") not in compared  # 100 samples
    # The delete median is 9x slower: one regression, not one per noisy tail percentile.
    assert [(c.action, c.metric) for c in comparison.regressions] == [("delete", "median")]
    assert comparison.left_out == 3 + 2  # p90, p99, p99.9 of delete; p99.9 of get and set
    assert "5 percentile(s) left out: too few samples on a side" in format_comparison(comparison)


def test_compare_refuses_results_of_different_workloads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    full = RunResults(parameters={**smoke_parameters(False), "operations": 100_000,
                                  "warmup": 1_000},
                      results=[backend_result("core-cache", 10_000.0)])
    smoke = RunResults(parameters=smoke_parameters(True),
                       results=[backend_result("core-cache", 90_000.0)])
    full.save(str(tmp_path / "full.json"))
    smoke.save(str(tmp_path / "smoke.json"))
    assert main(["--compare", str(tmp_path / "full.json"), str(tmp_path / "smoke.json")]) == 2
    captured = capsys.readouterr()
    assert "regression" not in captured.out + captured.err
    assert "they measured different workloads" in captured.err
    assert "operations: 100000 in the old file, 1000 in the new" in captured.err
    # The same workload with another seed compares.
    other_seed = RunResults(parameters={**smoke_parameters(True), "seed": 5},
                            results=[backend_result("core-cache", 90_000.0)])
    other_seed.save(str(tmp_path / "seed.json"))
    assert main(["--compare", str(tmp_path / "smoke.json"), str(tmp_path / "seed.json")]) == 0
    assert "smoke runs (--quick): their figures are not measurements" in capsys.readouterr().out


def test_compare_command_exit_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old, slower = _pair_of_runs(15_000.0)
    _, faster = _pair_of_runs(8_000.0)
    for name, run in (("old", old), ("slower", slower), ("faster", faster)):
        run.save(str(tmp_path / f"{name}.json"))
    assert main(["--compare", str(tmp_path / "old.json"), str(tmp_path / "slower.json")]) == 1
    assert "regression" in capsys.readouterr().out
    assert main(["--compare", str(tmp_path / "old.json"), str(tmp_path / "faster.json")]) == 0
    assert main(["--compare", str(tmp_path / "old.json"), str(tmp_path / "slower.json"),
                 "--threshold", "60"]) == 0


# --- command line and progress -------------------------------------------------------------------


def test_command_line_options() -> None:
    parser = build_parser()
    quick = parser.parse_args(["--quick", "--warmup", "5"])
    assert workload_from(quick) == Workload(operations=1_000, warmup=5)
    full = parser.parse_args(["--processes", "2,4", "--operations", "50", "--warmup", "0",
                              "--range", "7", "--value-sizes", "3,9", "--mix", "50,25,25",
                              "--seed", "4", "--backends", "core-*,redis"])
    assert full.processes == [2, 4]
    assert workload_from(full) == Workload(operations=50, key_range=7, warmup=0,
                                           value_sizes=(3, 9), mix=(50, 25, 25), seed=4)
    assert [s.name for s in catalog.select(full.backends)] == [
        "core-cache", "core-fanout4", "core-fanout8", "redis"]
    assert workload_from(parser.parse_args([])) == Workload()
    for bad in (["--mix", "90,10"], ["--processes", "0"], ["--value-sizes", "x,1"]):
        with pytest.raises(SystemExit):
            parser.parse_args(bad)


def test_backend_selection() -> None:
    default = [s.name for s in catalog.select(None)]
    assert default == ["core-cache", "core-fanout4", "core-fanout8", "diskcache-cache",
                       "diskcache-fanout4", "diskcache-fanout8", "memcached", "redis"]
    with_django = [s.name for s in catalog.select(None, django=True)]
    assert with_django[len(default):] == ["django-core", "django-diskcache", "django-locmem",
                                          "django-memcached", "django-redis", "django-filebased"]
    assert [s.name for s in catalog.select(["django-*"])] == with_django[len(default):]
    with pytest.raises(ValueError):
        catalog.select(["nope"])


def test_progress_is_one_line_per_run_off_a_terminal() -> None:
    stream = io.StringIO()
    progress = Progress(total_runs=2, stream=stream, interactive=False)
    for label in ("A", "B"):
        progress.start(label, 8, 800)
        for done in range(0, 800, 10):
            progress.update(done)
        progress.finish("ok")
    assert stream.getvalue().splitlines() == [
        line for line in stream.getvalue().splitlines() if "\r" not in line]
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and lines[0].startswith("[1/2] A, 8 processes: ok")
    live = io.StringIO()
    progress = Progress(total_runs=1, stream=live, interactive=True)
    progress.start("A", 1, 100)
    progress.finish("ok")
    assert "\r" in live.getvalue() and live.getvalue().endswith("ok (0.0 s)\n")


# --- adapters: the miss rules --------------------------------------------------------------------


@pytest.mark.parametrize("adapter_class", [Adapter, DiskCacheAdapter, MemcachedAdapter,
                                           RedisAdapter, DjangoAdapter])
def test_adapters_count_misses(adapter_class: type[Adapter]) -> None:
    # What delete returns: redis-py counts removed keys, the other clients return a bool.
    removed, absent = (1, 0) if adapter_class is RedisAdapter else (True, False)
    missing = adapter_class(FakeClient(get=None, delete=absent))
    present = adapter_class(FakeClient(get=b"v", delete=removed))
    assert missing.missed(GET, missing.get(b"k"))
    assert not present.missed(GET, present.get(b"k"))
    assert missing.missed(DELETE, missing.delete(b"k"))
    assert not present.missed(DELETE, present.delete(b"k"))
    assert not present.missed(SET, present.set(b"k", b"v"))
    refused = adapter_class(FakeClient(set=False))  # e.g. FanoutCache giving up on its timeout
    assert refused.missed(SET, refused.set(b"k", b"v"))


def test_django_set_returning_none_is_not_a_miss() -> None:
    assert not DjangoAdapter.missed(SET, None)  # Django's own backends return None from set


@pytest.mark.parametrize("module", ["diskcache", "diskcache_core"])
def test_disk_adapter_misses_on_a_real_cache(module: str, tmp_path: Path) -> None:
    spec = catalog.by_name("core-cache" if module == "diskcache_core" else "diskcache-cache")
    reason = catalog.skip_reason(spec)
    if reason:
        pytest.skip(reason)
    adapter = catalog.open_adapter(spec, str(tmp_path / "cache"))
    try:
        assert adapter.missed(GET, adapter.get(b"1"))
        assert not adapter.missed(SET, adapter.set(b"1", b"one"))
        assert not adapter.missed(GET, adapter.get(b"1"))
        assert not adapter.missed(DELETE, adapter.delete(b"1"))
        assert adapter.missed(DELETE, adapter.delete(b"1"))
    finally:
        adapter.close()


def test_django_adapter_misses_on_locmem() -> None:
    pytest.importorskip("django")
    from django.core.cache.backends.locmem import LocMemCache

    adapter = DjangoAdapter(LocMemCache("harness-test", {}))
    assert adapter.missed(GET, adapter.get("1"))
    assert not adapter.missed(SET, adapter.set("1", b"one"))
    assert not adapter.missed(GET, adapter.get("1"))
    assert not adapter.missed(DELETE, adapter.delete("1"))
    assert adapter.missed(DELETE, adapter.delete("1"))


@pytest.mark.parametrize("name", ["memcached", "redis"])
def test_server_adapters_miss_rules_on_real_servers(
    name: str, request: pytest.FixtureRequest
) -> None:
    spec = catalog.by_name(name)
    reason = catalog.skip_reason(spec)
    if reason:
        pytest.skip(reason)
    server = request.getfixturevalue("memcached" if name == "memcached" else "redis_server")
    server.flush()
    adapter = catalog.open_adapter(spec, server.address)
    try:
        assert adapter.missed(GET, adapter.get(b"1"))
        assert not adapter.missed(SET, adapter.set(b"1", b"one"))
        assert not adapter.missed(GET, adapter.get(b"1"))
        assert not adapter.missed(DELETE, adapter.delete(b"1"))
        assert adapter.missed(DELETE, adapter.delete(b"1"))
        adapter.set(b"2", b"two")
        server.flush()
        assert adapter.missed(GET, adapter.get(b"2"))
    finally:
        adapter.close()


# --- servers -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [MemcachedServer, RedisServer])
def test_server_listens_on_loopback_only_and_stops(kind: type) -> None:
    server = server_or_skip(kind)
    with server:
        pid = server.process.pid  # type: ignore[union-attr]
        assert server.address == f"{HOST}:{server.port}"
        assert listening_addresses(server.port) == ["0100007F"]  # 127.0.0.1, no IPv6, no 0.0.0.0
        server.flush()
        process = server.process
    assert server.process is None and process is not None and process.poll() is not None
    assert not Path(f"/proc/{pid}").exists()


def test_server_is_stopped_when_the_block_fails() -> None:
    server = server_or_skip(RedisServer)
    with pytest.raises(RuntimeError, match="boom"):
        with server:
            process = server.process
            raise RuntimeError("boom")
    assert process is not None and process.poll() is not None
    assert not Path(f"/proc/{process.pid}").exists()


def test_missing_server_binary_is_a_skip_with_install_hint(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert SERVERS["memcached"].missing_reason() == (
        "memcached is not installed: apt-get install memcached")
    for name in ("memcached", "redis", "django-memcached", "django-redis"):
        spec = catalog.by_name(name)
        reason = catalog.skip_reason(spec)
        assert reason is not None and "install" in reason
    run = Runner(RunConfig(workload=Workload(operations=60, warmup=10), processes=[1],
                           backends=catalog.select(["diskcache-cache", "memcached", "redis"]),
                           start_method="fork")).run()
    skipped = {item["backend"]: item["reason"] for item in run.skipped}
    if "diskcache-cache" in skipped:
        pytest.skip(skipped["diskcache-cache"])
    # The client is checked before the server: without pylibmc (no wheel past Python 3.11) the
    # row says how to get it instead.
    if importlib.util.find_spec("pylibmc") is None:
        assert skipped["memcached"].startswith("pylibmc is not installed: ")
        assert ("libmemcached-dev" in skipped["memcached"]) == (sys.version_info >= (3, 12))
    else:
        assert skipped["memcached"] == "memcached is not installed: apt-get install memcached"
    assert skipped["redis"] == "redis-server is not installed: apt-get install redis-server"
    assert [r.name for r in run.results] == ["diskcache-cache"] and not run.failed


# --- end to end ----------------------------------------------------------------------------------


def test_quick_run_is_reported_as_a_smoke_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--quick`` end to end on our Cache alone: the report, results.txt, results.rst and the
    JSON say it is a smoke run, and a p99.9 of its few hundred gets is not printed."""
    output = tmp_path / "out"
    code = main(["--quick", "--backends", "core-cache", "--processes", "1", "--no-plots",
                 "--start-method", "fork", "--output", str(output), "--quiet"])
    printed = capsys.readouterr().out
    assert code == 0
    assert printed.startswith("*** SMOKE RUN (--quick): 900 recorded operations per process.")
    assert (output / "results.txt").read_text(encoding="utf-8") + "\n" == printed
    assert ".. warning::" in (output / "results.rst").read_text(encoding="utf-8")
    data = json.loads((output / "results.json").read_text(encoding="utf-8"))
    assert data["parameters"]["smoke"] is True
    (result,) = data["results"]
    get_row = next(line for line in printed.splitlines() if line.split()[:1] == ["get"])
    assert result["actions"]["get"]["count"] < 1_000 and get_row.split()[6] == "—"


def check_result_numbers(result: dict[str, Any], workload: Workload, processes: int) -> None:
    actions = result["actions"]
    assert list(actions) == list(ACTIONS)
    assert sum(a["count"] for a in actions.values()) == processes * workload.recorded
    assert actions["get"]["count"] > actions["delete"]["count"]
    # Every key was stored before the workers started, and deletes are rare: a get misses only
    # after a delete (or a FanoutCache timeout), never because a worker saw an empty store.
    assert actions["get"]["misses"] <= 0.2 * actions["get"]["count"]
    for action in actions.values():
        assert 0 <= action["misses"] <= action["count"]
        if action["count"]:
            ordered = [action["percentiles"][n] for n in PERCENTILE_ORDER] + [action["max"]]
            assert 0 < action["min"] <= ordered[0] and ordered == sorted(ordered)
            assert action["max"] <= action["total"] < 60e9  # ns: well under a minute
            assert ordered[0] < 1e9  # a median below a second


@pytest.mark.slow
def test_end_to_end_every_available_backend(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Tiny run of every backend, cache and Django level, with the real servers when installed."""
    servers_before = child_server_processes()  # module fixtures' servers may be running
    output = tmp_path / "out"
    code = main(["--processes", "2", "--operations", "300", "--warmup", "50", "--django",
                 "--start-method", "fork", "--output", str(output), "--quiet"])
    printed = capsys.readouterr().out
    assert code == 0
    assert child_server_processes() == servers_before  # every server the run started exited

    data = json.loads((output / "results.json").read_text(encoding="utf-8"))
    workload = Workload(operations=300, warmup=50)
    assert data["parameters"]["operations"] == 300 and data["parameters"]["warmup"] == 50
    assert data["parameters"]["processes"] == [2]
    metadata = data["metadata"]
    for key in ("python", "sqlite", "os", "cpu_count", "timestamp", "packages", "servers"):
        assert metadata[key], key
    assert metadata["packages"]["diskcache"] == "5.6.3"
    assert data["failed"] == []

    measured = {r["name"] for r in data["results"]}
    skipped = {s["backend"]: s["reason"] for s in data["skipped"]}
    every = {spec.name for spec in catalog.ALL_BACKENDS}
    assert measured | set(skipped) == every and not measured & set(skipped)
    for spec in catalog.ALL_BACKENDS:  # skipped exactly when the environment lacks something
        assert (spec.name in skipped) == (catalog.skip_reason(spec) is not None), spec.name
    assert {"diskcache-cache", "diskcache-fanout4", "diskcache-fanout8", "django-locmem",
            "django-filebased", "django-diskcache"} <= measured
    if MemcachedServer.missing_reason() is None and importlib.util.find_spec("pylibmc"):
        assert {"memcached", "django-memcached"} <= measured
    if RedisServer.missing_reason() is None:
        assert {"redis", "django-redis"} <= measured
    for result in data["results"]:
        check_result_numbers(result, workload, processes=2)
        assert result["processes"] == 2

    text = (output / "results.txt").read_text(encoding="utf-8")
    for result in data["results"]:
        assert f"Timings for {result['label']}, 2 processes" in text
        assert f"Timings for {result['label']}, 2 processes" in printed
    if "diskcache-cache" in measured and "memcached" in measured:
        assert "pylibmc + Memcached" in text.split("## Summary")[1]
    rst = (output / "results.rst").read_text(encoding="utf-8")
    tables = _docutils_tables(rst)
    # One table per measured backend, plus the ratio summary when a reference was measured.
    assert tables is None or len(tables) - len(data["results"]) in (0, 1)
    for level in ("cache", "django"):
        for kind in ("bars", "percentiles"):
            png = output / f"{level}-{kind}-2.png"
            assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
            assert f".. image:: {png.name}" in rst


@pytest.mark.slow
@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_parameters_reach_workers_under_every_start_method(method: str, tmp_path: Path) -> None:
    """A non-default workload (sets only) must be what the spawned workers actually run."""
    workload = Workload(operations=120, warmup=20, mix=(0, 1, 0), value_sizes=(3, 4), seed=9)
    backends = catalog.select(["diskcache-cache", "django-locmem"])
    run = Runner(RunConfig(workload=workload, processes=[2], backends=backends,
                           start_method=method, scratch=str(tmp_path))).run()
    if run.skipped:
        pytest.skip(str(run.skipped))
    assert run.parameters["start_method"] == method and not run.failed
    for result in run.results:
        assert result.actions["set"].count == 2 * 100
        assert result.actions["get"].count == result.actions["delete"].count == 0
    assert list(tmp_path.iterdir()) == []  # scratch directories are removed


@pytest.mark.slow
def test_django_level_works_when_the_host_configured_django(tmp_path: Path) -> None:
    """Forked workers of a process that already configured Django (a test suite, say)."""
    pytest.importorskip("django")
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from django.conf import settings
        settings.configure(CACHES={{}})
        from benchmarks import catalog
        from benchmarks.runner import RunConfig, Runner
        from benchmarks.workload import Workload
        run = Runner(RunConfig(workload=Workload(operations=80, warmup=10), processes=[2],
                               backends=catalog.select(["django-locmem", "django-filebased"]),
                               start_method="fork")).run()
        assert not run.failed and not run.skipped, (run.failed, run.skipped)
        assert [r.actions["get"].count + r.actions["set"].count + r.actions["delete"].count
                for r in run.results] == [140, 140]
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_each_run_starts_from_a_flushed_server(redis_server: Server) -> None:
    spec = catalog.by_name("redis")
    if catalog.skip_reason(spec):
        pytest.skip(catalog.skip_reason(spec) or "")
    adapter = catalog.open_adapter(spec, redis_server.address)
    try:
        adapter.set(b"left-over", b"from an earlier run")
        runner = Runner(RunConfig(workload=Workload(operations=50, warmup=5), backends=[spec]))
        runner.servers = {"redis": redis_server}
        result = runner.run_one(spec, processes=1)
        assert sum(stats.count for stats in result.actions.values()) == 45
        assert adapter.missed(GET, adapter.get(b"left-over"))
        assert not adapter.missed(GET, adapter.get(b"0"))  # populated by the run
    finally:
        adapter.close()


def test_failed_worker_is_reported_not_hidden(tmp_path: Path) -> None:
    """A backend whose workers crash is recorded as failed and the others still run."""
    broken = catalog.by_name("diskcache-cache")
    if catalog.skip_reason(broken):
        pytest.skip(catalog.skip_reason(broken) or "")
    # A regular file where the cache directory should be: every open fails.
    (tmp_path / "dcbench-blocker").write_text("")
    runner = Runner(RunConfig(workload=Workload(operations=40, warmup=5), processes=[1],
                              backends=[broken], start_method="fork", scratch=str(tmp_path)))
    runner._location = lambda spec, workdir: str(tmp_path / "dcbench-blocker")  # type: ignore
    run = runner.run()
    assert run.results == [] and len(run.failed) == 1
    assert run.failed[0]["backend"] == "diskcache-cache" and "exit code" in run.failed[0]["reason"]


# --- the tags workload (--workload webapp) -------------------------------------------------------


def test_webapp_quick_run_of_ours_has_no_stale_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--workload webapp --quick`` on our Cache and FanoutCache, 2 processes: every planned
    operation is recorded once, the JSON and the text agree, and no get is stale."""
    output = tmp_path / "out"
    code = main(["--workload", "webapp", "--quick", "--backends", "core-cache,core-fanout",
                 "--processes", "2", "--output", str(output), "--scratch", str(tmp_path)])
    printed = capsys.readouterr().out
    assert code == 0
    data = json.loads((output / "webapp.json").read_text(encoding="utf-8"))
    assert data["parameters"]["smoke"] is True
    assert [r["row"] for r in data["results"]] == ["core-cache", "core-fanout"]
    workload = webapp.WebappWorkload(operations=600, warmup=100)
    planned = [op for worker in range(2) for op in webapp.plan(workload, worker)[100:]]
    for result in data["results"]:
        assert result["stale_reads"] == 0 and result["throughput"] > 0
        counts = [result["actions"][name]["count"] for name in webapp.ACTIONS]
        assert counts == [sum(op[0] == code for op in planned) for code in range(3)]
        assert 0 < result["actions"]["get"]["misses"] < counts[0]  # some hits, some invalidated
        assert result["actions"]["set"]["misses"] == 0
    assert (output / "webapp.txt").read_text(encoding="utf-8") == printed
    assert printed.count("Timings for core-") == 2
    assert [d.name for d in tmp_path.iterdir()] == ["out"]  # cache directories removed
    if importlib.util.find_spec("matplotlib") is not None:  # the plot, written by the run
        assert (output / "webapp.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_webapp_chart_draws_the_rows_that_ran_from_the_json(tmp_path: Path) -> None:
    """The plot is drawn from webapp.json alone (so it can be redrawn from a saved run), one bar
    group per row that ran: a skipped row is left out, a smoke run says so in the title."""
    pytest.importorskip("matplotlib")
    import matplotlib.figure

    from benchmarks.plots import webapp_chart

    def row(name: str, stale: int) -> dict[str, Any]:
        result = webapp.RowResult(name, 2, stale_reads=stale, throughput=1000.0)
        for number, action in enumerate(webapp.ACTIONS, 1):
            result.actions[action] = summarize(action, range(1000 * number, 1000 * number + 500), 0)
        return result.to_dict()

    skipped = webapp.RowResult("redis-tags", 2, skipped="not installed").to_dict()
    data = {"parameters": {"mix": [65, 25, 10], "operations": 600, "tags_per_item": 3,
                           "smoke": True},
            "results": [row("core-cache", 0), skipped, row("memcached-versions", 3)]}
    drawn: list[Any] = []
    real_savefig = matplotlib.figure.Figure.savefig

    def savefig(figure: Any, path: Any, **kwargs: Any) -> None:
        drawn.append(figure)
        real_savefig(figure, path, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(matplotlib.figure.Figure, "savefig", savefig)
        webapp_chart(data, str(tmp_path / "webapp.png"))
    assert (tmp_path / "webapp.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (figure,) = drawn
    axes = figure.get_axes()
    assert [axis.get_title() for axis in axes] == [
        "throughput (stale reads on each bar)", "get", "set", "invalidate"]
    assert [label.get_text() for label in axes[0].get_xticklabels()] == [
        "core-cache", "memcached-versions"]
    assert [text.get_text() for text in axes[0].texts] == ["0 stale", "3 stale"]
    assert len(axes[1].patches) == 2 * 4  # two rows × median, p90, p99, p99.9
    assert "SMOKE RUN" in figure._suptitle.get_text()


def test_webapp_counts_the_stale_reads_of_an_invalidation_that_does_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stale-read check can fail: our Cache with `evict_tags` replaced by a no-op, one
    process (deterministic), reads items whose tags it invalidated."""
    real_open = webapp.open_client

    def broken(row: str, location: str) -> webapp.Client:
        get, set_, _, close = real_open(row, location)
        return get, set_, lambda tag: 0, close

    monkeypatch.setattr(webapp, "open_client", broken)
    import multiprocessing

    workload = webapp.WebappWorkload(operations=600, warmup=100)
    result = webapp.run_row("core-cache", str(tmp_path / "c"), workload, 1,
                            multiprocessing.get_context("fork"))
    assert result.stale_reads > 0
    monkeypatch.setattr(webapp, "open_client", real_open)
    result = webapp.run_row("core-cache", str(tmp_path / "d"), workload, 1,
                            multiprocessing.get_context("fork"))
    assert result.stale_reads == 0


def test_webapp_values_carry_writer_index_and_tags() -> None:
    value = webapp.encode(3, 417, (5, 0, 49), 200)
    assert len(value) == 200 and webapp.decode(value) == (3, 417, (5, 0, 49))
    assert webapp.decode(webapp.encode(-1, 0, (7,), 4)) == (-1, 0, (7,))


def test_webapp_redis_and_memcached_rows_run(tmp_path: Path) -> None:
    """The peers' rows, when their servers are installed: they run and their stale reads are
    counted (whatever they are)."""
    rows = [row for row in ("redis-tags", "memcached-versions")
            if webapp._SERVERS[row].missing_reason() is None]
    if not rows:
        pytest.skip("neither redis-server nor memcached is installed")
    servers_before = child_server_processes()
    results = webapp.run(rows, [2], webapp.WebappWorkload(operations=300, warmup=50))
    assert child_server_processes() == servers_before
    for result in results:
        assert result.skipped or (result.stale_reads >= 0
                                  and result.actions["get"].count + result.actions["set"].count
                                  + result.actions["invalidate"].count == 500)
