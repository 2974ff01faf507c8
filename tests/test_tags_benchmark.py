"""The tags benchmark (``python -m benchmarks.tags``) runs end to end in its smoke mode and
reports every row (the figures are not judged here: speed targets live in benchmarks)."""

from __future__ import annotations

import json

import pytest

from benchmarks import tags

pytestmark = pytest.mark.slow


def test_quick_run_reports_every_row(tmp_path, capsys):
    pytest.importorskip("diskcache")
    assert tags.main(["--quick", "--output", str(tmp_path), "--scratch", str(tmp_path),
                      "--baseline", tags.ROOT]) == 0
    rows = json.loads((tmp_path / "tags.json").read_text())
    for name in ("set_no_tags_vs_today", "set_no_tags_table_vs_none", "set_three_tags_vs_one",
                 "evict_one_tag_vs_python_diskcache"):
        assert rows[name]["ratio"] > 0, name
    assert rows["set_three_tags_vs_one_new_keys"]["ratio"] > 0
    for layout in ("evict_tags_large_vs_small", "evict_tags_large_vs_small_clustered"):
        scaling = rows[layout]
        assert scaling["evict_ratio"] > 0 and scaling["iterkeys_ratio"] > 0
        assert scaling["evict_cpu_ratio"] > 0
        for size in ("300", "1000"):  # (--quick's sizes) the eviction wrote pages: counted
            assert scaling[size]["evict_tags_pages"] > 0
    printed = capsys.readouterr().out
    assert (tmp_path / "tags.txt").read_text().strip() == printed.strip()
    assert "evict_tags, large vs small (clustered)" in printed and "set_three_tags_vs_one" in printed
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith("tags-")] == []
