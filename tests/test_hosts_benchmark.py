"""``python -m benchmarks --hosts N``: its report and plot from a made-up run, and end to end,
tiny: real redis-server, real processes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from benchmarks import hosts
from benchmarks.servers import RedisServer
from benchmarks.workload import Workload

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

needs_redis = pytest.mark.skipif(
    RedisServer.missing_reason() is not None and os.environ.get("CI") != "true",
    reason=str(RedisServer.missing_reason()),
)


def made_up_run(smoke: bool = False) -> hosts.HostsRun:
    """Two rows; our deletes have 20 samples (no p99), everything else enough for p99."""
    full = {"p50": 100.0, "p90": 200.0, "p99": 400.0, "p100": 900.0}
    ours = hosts.RowResult(
        "core-remote", {"get": {**full, "p50": 1.2}, "set": full,
                        "delete": {"p50": 120.0, "p90": 250.0, "p100": 700.0}},
        operations=2_000, gets=1_800, redis_commands=500, redis_reads=300,
        samples={"get": 1_600, "set": 160, "delete": 20})
    plain = hosts.RowResult("redis-py", {"get": full, "set": full, "delete": full},
                            operations=2_000, gets=1_800, redis_commands=2_000,
                            redis_reads=1_800, samples={"get": 1_600, "set": 160, "delete": 120})
    skipped = hosts.RowResult("django-redis", {}, 0, 0, 0, 0, skipped="Django is not installed")
    return hosts.HostsRun(2, 1, Workload(operations=1_000, warmup=100), rows=[ours, plain, skipped],
                          delays_ms=[0.1 * n for n in range(1, 51)], smoke=smoke)


def test_the_report_gives_figures_not_the_projects_targets():
    text = hosts.text_report(made_up_run())
    assert "Goals" not in text and "met]" not in text  # targets: docs/benchmarks.rst
    assert "goals" not in hosts.to_dict(made_up_run())
    assert not re.search(r"\dus\b", text) and "1.2µs" in text
    lines = text.splitlines()
    delete = next(line for line in lines if line.split()[:1] == ["delete"])
    assert delete.split()[1:] == ["120.0µs", "250.0µs", "—", "700.0µs"]
    note = "—: fewer samples than the percentile needs (p90 10, p99 100); run more --operations."
    assert note in lines
    # 50 delays: p90 but no p99.
    assert lines[-1].split() == ["p50", "2.55", "ms", "p90", "4.51", "ms", "p100", "5.00", "ms"]
    assert "SMOKE" not in text


def test_a_smoke_run_is_marked():
    text = hosts.text_report(made_up_run(smoke=True))
    assert text.startswith("*** SMOKE RUN (--quick): 900 recorded operations per process.")
    assert hosts.to_dict(made_up_run(smoke=True))["smoke"] is True


def test_a_saved_run_reads_back():
    run = made_up_run(smoke=True)
    again = hosts.from_dict(json.loads(json.dumps(hosts.to_dict(run))))
    assert again == run
    assert hosts.text_report(again) == hosts.text_report(run)


def test_the_plot_has_plain_labels_in_microseconds_and_the_legend_off_the_bars():
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (pip install .[bench])")
    drawn = hosts.figure(made_up_run())
    try:
        drawn.canvas.draw()
        renderer = drawn.canvas.get_renderer()
        axes = drawn.get_axes()
        assert [axis.get_title() for axis in axes] == ["get latency", "set latency",
                                                       "delete latency"]
        for axis in axes:
            labels = [label.get_text() for label in axis.get_yticklabels()
                      if label.get_text() and label.get_visible()]
            assert labels, axis.get_title()
            # Plain values with their unit: no "2×10²" (mathtext) and no "us".
            assert all(re.fullmatch(r"\d+(\.\d+)?(µs|ms|s)", label) for label in labels), labels
        (legend,) = drawn.legends
        assert [text.get_text() for text in legend.get_texts()] == ["core-remote", "redis-py"]
        box = legend.get_window_extent(renderer)
        for axis in axes:
            assert not box.overlaps(axis.get_window_extent(renderer)), axis.get_title()
        assert "SMOKE" not in drawn.texts[0].get_text()
    finally:
        from benchmarks.plots import _pyplot

        _pyplot().close(drawn)
    smoke = hosts.figure(made_up_run(smoke=True))
    try:
        assert "(SMOKE RUN: not a measurement)" in smoke.texts[0].get_text()
    finally:
        _pyplot().close(smoke)


@needs_redis
def test_hosts_mode_reports_rows_hit_ratio_and_delays(tmp_path):
    output = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--hosts", "2", "--processes", "1",
         "--operations", "300", "--warmup", "30", "--no-plots", "--output", str(output),
         "--backends", "core-remote,redis-py,django-core-remote"],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    text = result.stdout
    assert "2 hosts x 1 processes" in text
    for row in ("core-remote", "redis-py", "django-core-remote"):
        assert row in text
    assert "Invalidation delay" in text
    assert "Goals" not in text and "NOT met" not in text and "SMOKE" not in text
    data = json.loads((output / "hosts.json").read_text())
    assert "goals" not in data and data["smoke"] is False
    rows = {row["row"]: row for row in data["rows"]}
    assert rows["redis-py"]["hit_ratio"] == 0.0 and rows["redis-py"]["commands_per_op"] >= 1.0
    ours = rows["core-remote"]
    assert 0.0 < ours["hit_ratio"] <= 1.0 and ours["commands_per_op"] < 1.0
    assert len(data["delays_ms"]) + data["missed_values"] == 300
    assert all(delay >= 0 for delay in data["delays_ms"])
    assert (output / "hosts.txt").read_text().startswith("Many hosts")
