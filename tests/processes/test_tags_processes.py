"""Processes racing ``set`` with tags against ``evict_tags`` (issue 37, docs/tags.rst, invariant 2):
each ends in one of the two serial orders. Writers store their keys one after another, so the
items an eviction removed are a prefix of each writer's keys and the items kept the rest; the
counts the evictions returned add up to those prefixes exactly, and no tag entry is left."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import diskcache_core as dc

ROOT = Path(__file__).resolve().parents[2]
ITEMS = 200  # per writer

WRITER = """
import sys
import diskcache_core as dc
directory, name, items = sys.argv[1], sys.argv[2], int(sys.argv[3])
with dc.Cache(directory, timeout=60, tag_index=True) as cache:
    for number in range(items):
        value = b"v" * 40_000 if number % 25 == 0 else number  # some value files too
        assert cache.set(f"{name}{number:04d}", value, tags=["shared", name, f"n{number}"])
        cache.set(f"progress-{name}", number + 1)  # (untagged: no eviction removes it)
"""


def _start_writer(directory: str, name: str) -> subprocess.Popen:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, directory, name, str(ITEMS)], env=env,
    )


def test_concurrent_sets_and_evict_tags_end_in_a_serial_order(tmp_path):
    directory = str(tmp_path / "cache")
    dc.Cache(directory, tag_index=True).close()
    writers = {name: _start_writer(directory, name) for name in ("a", "b")}
    counts = []
    deadline = time.monotonic() + 120
    with dc.Cache(directory, timeout=60, memory_size_limit=1 << 20) as cache:
        try:
            for _ in range(10_000):  # bounded: until both writers are half done, or the deadline
                if all(cache.get(f"progress-{name}", 0) >= ITEMS // 2 for name in writers):
                    break  # (what they write from now on stays)
                counts.append(cache.evict_tags(["shared"]))
                if time.monotonic() > deadline:
                    break
                time.sleep(0.005)
        finally:
            for writer in writers.values():
                assert writer.wait(timeout=120) == 0
        for name in writers:
            remaining = [key for key in cache.iterkeys(tag=name)]
            kept = ITEMS - len(remaining)
            # a suffix of the writer's keys: everything written before the last eviction is gone
            assert remaining == [f"{name}{number:04d}" for number in range(kept, ITEMS)]
            for key in remaining:
                number = int(key[1:])
                assert cache.get(key, tags=True)[1] == frozenset({"shared", name, f"n{number}"})
        removed = sum(ITEMS - len(list(cache.iterkeys(tag=name))) for name in writers)
        assert sum(counts) == removed  # each eviction counted exactly the items it removed
        assert len(cache) == 2 * ITEMS - removed + len(writers)  # (and the progress items)
        assert cache.check() == []
    con = sqlite3.connect(os.path.join(directory, "cache.db"))
    try:
        ((dangling,),) = con.execute(
            "SELECT COUNT(*) FROM CacheTag WHERE item NOT IN (SELECT rowid FROM Cache)"
        ).fetchall()
        ((entries,),) = con.execute("SELECT COUNT(*) FROM CacheTag").fetchall()
    finally:
        con.close()
    assert dangling == 0
    assert entries == 2 * (2 * ITEMS - removed)  # two extra tags per item kept
