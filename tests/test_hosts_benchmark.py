"""``python -m benchmarks --hosts N`` end to end, tiny: real redis-server, real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from benchmarks.servers import RedisServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.skipif(
    RedisServer.missing_reason() is not None and os.environ.get("CI") != "true",
    reason=str(RedisServer.missing_reason()),
)


def test_hosts_mode_reports_rows_hit_ratio_delays_and_goals(tmp_path):
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
    assert "Invalidation delay" in text and "Goals" in text
    data = json.loads((output / "hosts.json").read_text())
    rows = {row["row"]: row for row in data["rows"]}
    assert rows["redis-py"]["hit_ratio"] == 0.0 and rows["redis-py"]["commands_per_op"] >= 1.0
    ours = rows["core-remote"]
    assert 0.0 < ours["hit_ratio"] <= 1.0 and ours["commands_per_op"] < 1.0
    assert len(data["delays_ms"]) + data["missed_values"] == 300
    assert all(delay >= 0 for delay in data["delays_ms"])
    assert (output / "hosts.txt").read_text().startswith("Many hosts")
