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


class _RecordingCache:
    """Stands in for a library's Cache in `scale._fill`: records its settings and its sets."""

    opened: list[dict[str, object]] = []

    def __init__(self, directory: str, **settings: object) -> None:
        self.opened.append(settings)
        self.count = 0

    def transact(self):  # type: ignore[no-untyped-def]
        import contextlib

        return contextlib.nullcontext()

    def set(self, key: bytes, value: bytes) -> bool:
        self.count += 1
        return True

    def close(self) -> None:
        pass


def test_the_fill_makes_room_for_every_item(tmp_path):
    """The default size_limit (1 GB, the database file included) holds fewer than a million
    1 KB items: a fill past that is given a limit that holds them all, the smaller ones the
    default (a setting python-diskcache keeps in the database, so the phases open with it)."""
    module = type("Library", (), {"Cache": _RecordingCache})
    _RecordingCache.opened = []
    size = scale.DEFAULT_SIZE_LIMIT // scale.BYTES_PER_ITEM + 1000
    assert len(scale._fill(module, str(tmp_path), size)) == -(-size // 1000)
    assert len(scale._fill(module, str(tmp_path), 2000)) == 2
    big, small = _RecordingCache.opened
    assert big["size_limit"] >= size * (len(scale.VALUE) + 200)
    assert small["size_limit"] == 2**30


def test_a_size_the_disk_cannot_hold_is_skipped(tmp_path, capsys, monkeypatch):
    pytest.importorskip("diskcache")
    free = 5000 * scale.BYTES_PER_ITEM * 2  # room for 5,000 items of both libraries, not 50,000
    usage = type("Usage", (), {"free": free, "total": free, "used": 0})
    monkeypatch.setattr(scale.shutil, "disk_usage", lambda path: usage)
    argv = ["--sizes", "1000,50000", "--calls", "20", "--eviction-mb", "0", "--no-plots",
            "--output", str(tmp_path), "--scratch", str(tmp_path)]  # fmt: skip
    assert scale.main(argv) == 0
    run = json.loads((tmp_path / "scale.json").read_text())
    assert sorted(run["sizes"]) == ["1000"]
    assert "skipping N=50,000" in capsys.readouterr().err
