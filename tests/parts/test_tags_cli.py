"""The command line with many tags per item (issue 37, docs/cli.rst): ``keys --tag`` lists the
items carrying the tag among any of their tags; ``evict`` takes several tags (positional or
``--tag``, repeatable) and removes the items carrying any of them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import diskcache_core as dc

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "diskcache_core", *map(str, args)],
        check=False, capture_output=True, text=True, env=env, timeout=60, input="",
    )


@pytest.fixture(params=[1, 3], ids=["cache", "fanout"])
def directory(request, tmp_path) -> Path:
    path = tmp_path / "cache"
    cache = dc.Cache(path) if request.param == 1 else dc.FanoutCache(path, shards=request.param)
    with cache:
        cache.set("first", 1, tag="a")
        cache.set("extra", 2, tags=["b", "a"])
        cache.set("other", 3, tags=["b", "c"])
        cache.set("none", 4)
    return path


def test_keys_by_tag_lists_items_carrying_it_as_an_extra_tag(directory):
    result = run("keys", directory, "--tag", "a", "--json")
    assert result.returncode == 0, result.stderr
    assert sorted(item["key"]["value"] for item in json.loads(result.stdout)) == ["extra", "first"]
    result = run("keys", directory, "--tag", "c")
    assert result.stdout.split() == ["'other'"]


def test_evict_takes_several_tags(directory):
    result = run("evict", directory, "a", "--tag", "c", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "tags": [{"type": "str", "value": "a"}, {"type": "str", "value": "c"}], "removed": 3
    }
    with dc.Cache(directory) if (directory / "cache.db").exists() else dc.FanoutCache(
        directory, shards=3
    ) as cache:
        assert sorted(cache) == ["none"]


def test_evict_with_one_tag_reports_as_before_and_without_a_tag_is_a_usage_error(directory):
    result = run("evict", directory, "b")
    assert result.returncode == 0, result.stderr
    assert "removed 2 item(s) tagged 'b'" in result.stdout
    result = run("evict", directory, "--tag", "a", "--json")
    assert json.loads(result.stdout) == {"tag": {"type": "str", "value": "a"}, "removed": 1}
    result = run("evict", directory)
    assert result.returncode != 0
    assert "TAG" in result.stderr
