"""The scale benchmark (``python -m benchmarks.scale``) runs end to end in its smoke mode."""

from __future__ import annotations

import json

import pytest

from benchmarks import scale

pytestmark = pytest.mark.slow


def test_quick_run_reports_every_phase_for_both_backends(tmp_path, capsys):
    pytest.importorskip("diskcache")
    assert scale.main(["--quick", "--output", str(tmp_path), "--scratch", str(tmp_path)]) == 0
    run = json.loads((tmp_path / "scale.json").read_text())
    assert sorted(run["sizes"]) == ["1000", "2000"]
    for result in run["sizes"].values():
        assert sorted(result) == ["ours", "theirs"]
        for backend in result.values():
            assert list(backend) == list(scale.PHASES)
            assert all(figures["calls"] > 0 and figures["median"] > 0 for figures in backend.values())
    assert sorted(run["eviction"]) == sorted(scale.POLICIES)
    for per_backend in run["eviction"].values():
        assert sorted(per_backend) == ["ours", "theirs"]
        assert all(0 < figures["peak_volume"] for figures in per_backend.values())
    text = (tmp_path / "scale.txt").read_text()
    assert all(phase in text for phase in scale.PHASES)
    assert (tmp_path / "scale.rst").exists() and (tmp_path / "scale.png").exists()
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith("scale-")] == []
