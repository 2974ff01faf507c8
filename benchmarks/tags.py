"""``python -m benchmarks.tags``: the speed rows of many tags per item (issue 37, docs/tags.rst),
side by side in one run, each as a ratio against its reference.

Rows (each a median over ``--rounds`` rounds, the two sides of a ratio measured alternately so a
noisy machine's drift hits both alike):

- ``set, no tags``: ours against a baseline checkout of the library (``--baseline DIR``, e.g. a
  ``git worktree`` of main: "today"), each in its own process with that tree first on the path;
  and on a cache whose tag table exists (its retag trigger runs on each overwrite). Target ±3 %.
- ``set, 3 tags`` against ``set, 1 tag`` (``tag=``), overwriting keys with the same tags. Target
  ≤ 1.5×. Also reported: the same of new keys (each set inserts the item and its tag entries).
- ``evict_tags`` of a tag carried by 1,000 items, and ``iterkeys(tag=)`` of those keys, in a cache
  of ``--small`` items against one of ``--large`` (10k and 1M by default). Target ≤ 2×: O(k log n).
  Each round evicts a set of items no earlier round touched, spread evenly through the cache or
  clustered; with the wall time, its CPU time and the pages the eviction wrote (WAL frames).
  ``iterkeys(tag=)`` lists the set twice: the second listing is the row, the first (which reads
  the rows' pages, from the OS in a cache larger than SQLite's page cache) is reported beside it.
- ``evict(tag)`` with one tag per item, ours against python-diskcache 5.6.3 on the same data.
  Target ≤ 1×.

Results: a table on stdout and in ``tags.txt``, the figures in ``tags.json`` (``--output``). ``--quick`` is a smoke run (small
sizes, few calls: no measurement).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The set loop, run in a process of its own for each side (its tree first on the path).
_SET_LOOP = """
import json, sys, tempfile, time
import diskcache_core as dc
calls, keys, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
with tempfile.TemporaryDirectory() as directory:
    cache = dc.Cache(directory, memory_size_limit=0, tag_index=True)
    if mode == "table":  # a cache whose tag table exists: made by one write with two tags
        cache.set("made", 0, tags=["x", "y"])
    for index in range(keys):
        cache.set(index, index)
    kwargs = {"none": {}, "table": {}, "one": {"tag": "t0"}, "three": {"tags": ["t0", "t1", "t2"]},
              "one_new": {"tag": "t0"}, "three_new": {"tags": ["t0", "t1", "t2"]}}[mode]
    # Overwrites of `keys` keys (the same tags each time), or (*_new) each set a new key.
    offset, modulo = (keys, calls) if mode.endswith("_new") else (0, keys)
    clock = time.perf_counter_ns
    start = clock()
    for index in range(calls):
        cache.set(offset + index % modulo, index, **kwargs)
    print(json.dumps((clock() - start) / calls))
    cache.close()
"""


def _set_ns(tree: str, calls: int, keys: int, mode: str) -> float:
    """Nanoseconds per set of `mode` with the library of `tree`."""
    env = dict(os.environ, PYTHONPATH=tree)
    out = subprocess.run(
        [sys.executable, "-c", _SET_LOOP, str(calls), str(keys), mode],
        check=True, capture_output=True, text=True, env=env, cwd=tempfile.gettempdir(),
    ).stdout
    return float(json.loads(out))


def _alternate(rounds: int, first: Callable[[], float], second: Callable[[], float]) -> tuple[float, float]:
    """Medians of `first` and `second`, measured alternately (ABBA...)."""
    a, b = [], []
    for number in range(rounds):
        if number % 2 == 0:
            a.append(first())
            b.append(second())
        else:
            b.append(second())
            a.append(first())
    return statistics.median(a), statistics.median(b)


def _filled(
    module: Any, directory: str, size: int, tagged: int, extra: bool, spread: bool = True,
    sets: int = 1,
) -> Any:
    """A cache of `size` items: `sets` disjoint sets of `tagged` items carry tags "hot0",
    "hot1"... (as an extra tag with `extra`: each item's first tag is then its own group), the
    rest "cold". Each set is spread evenly through the insertion order (set r: the items whose
    index is r modulo size // tagged), or (not `spread`) a block among the last ones written."""
    cache = module.Cache(directory, tag_index=True)  # (python-diskcache's setting too)
    step = max(1, size // tagged)
    if sets > (step if spread else size // tagged):
        raise ValueError(f"{sets} sets of {tagged} items do not fit in {size}")
    with cache.transact():
        for index in range(size):
            if spread:
                which = index % step if index // step < tagged else sets
            else:  # blocks of `tagged` among the last `sets` × `tagged` items
                first = size - sets * tagged
                which = (index - first) // tagged if index >= first else sets
            name = f"hot{which}" if which < sets else "cold"
            if extra and module.__name__ == "diskcache_core":
                cache.set(index, index, tag=f"group{index % 10}", tags=[name])
            else:
                cache.set(index, index, tag=name)
    return cache


def _timed(operation: Callable[[], Any]) -> float:
    start = time.perf_counter_ns()
    operation()
    return (time.perf_counter_ns() - start) / 1e6  # ms


def _timed_both(operation: Callable[[], Any]) -> tuple[float, float]:
    """Wall and CPU milliseconds of `operation` (CPU time: this process's, its threads' too;
    steadier than wall time on a machine other jobs share)."""
    cpu = time.process_time_ns()
    wall = _timed(operation)
    return wall, (time.process_time_ns() - cpu) / 1e6


def _empty_wal(probe: Any) -> bool:
    """Checkpoint the whole WAL and empty it (retried while the cache's checkpoint thread holds
    it, up to a second); whether it is empty now, so the next commit's frames are all it holds."""
    for _ in range(100):
        busy, frames, _ = probe.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if not busy and frames == 0:
            return True
        time.sleep(0.01)
    return False


def _scaling(
    scratch: str, small: int, large: int, tagged: int, rounds: int, spread: bool
) -> dict[str, Any]:
    """evict_tags and iterkeys(tag=) of `tagged` items among `small` and `large`; and the pages
    each eviction wrote (WAL frames: the log is emptied before it, untimed, and counted after).

    Each round evicts a set of items no earlier round touched (a set put back is written anew,
    at the end of the insertion order: it would be clustered the next time); the evicted items
    are put back untagged, untimed, so the cache keeps its size."""
    import sqlite3

    import diskcache_core

    results: dict[str, Any] = {}
    for size in (small, large):
        directory = tempfile.mkdtemp(dir=scratch)
        cache = _filled(diskcache_core, directory, size, tagged, extra=True, spread=spread,
                        sets=rounds)
        # Our own connection to read the WAL's length (SQLite's, in this process: its locks are
        # shared with the cache's connections, never dropped).
        probe = sqlite3.connect(os.path.join(directory, "cache.db"), isolation_level=None)
        first, iterations, evictions, cpu, pages = [], [], [], [], []
        for number in range(rounds):
            tag = f"hot{number}"
            # The first listing of a set reads its rows' pages (from the OS where the cache is
            # larger than SQLite's page cache); the second finds them there: O(k log n) alone.
            first.append(_timed(lambda c=cache, t=tag: sum(1 for _ in c.iterkeys(tag=t))))
            iterations.append(_timed(lambda c=cache, t=tag: sum(1 for _ in c.iterkeys(tag=t))))
            keys = list(cache.iterkeys(tag=tag))
            emptied = _empty_wal(probe)
            wall, used = _timed_both(lambda c=cache, t=tag: c.evict_tags([t]))
            evictions.append(wall)
            cpu.append(used)
            if emptied:  # (else this round's count is left out)
                pages.append(probe.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1])
            with cache.transact():  # put them back, untagged, for the next rounds
                for key in keys:
                    cache.set(key, key, tag=f"group{key % 10}", tags=["cold"])
        probe.close()
        cache.close()
        results[str(size)] = {"evict_tags_ms": statistics.median(evictions),
                              "evict_tags_cpu_ms": statistics.median(cpu),
                              "evict_tags_pages": statistics.median(pages) if pages else None,
                              "iterkeys_ms": statistics.median(iterations),
                              "iterkeys_first_ms": statistics.median(first)}
    return results


def _evict_against_peer(scratch: str, size: int, tagged: int, rounds: int) -> tuple[float, float] | None:
    """evict(tag) with one tag per item: ours and python-diskcache's, in ms."""
    try:
        import diskcache
    except ImportError:
        return None
    import diskcache_core

    def measure(module: Any) -> float:
        directory = tempfile.mkdtemp(dir=scratch)
        cache = _filled(module, directory, size, tagged, extra=False)
        took = _timed(lambda: cache.evict("hot0"))
        cache.close()
        return took

    return _alternate(rounds, lambda: measure(diskcache_core), lambda: measure(diskcache))


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every row; the figures as a JSON-ready dict."""
    os.makedirs(args.scratch, exist_ok=True)
    calls, keys = args.calls, 1000
    rows: dict[str, Any] = {"parameters": vars(args).copy()}
    if args.baseline:
        ours, today = _alternate(args.rounds, lambda: _set_ns(ROOT, calls, keys, "none"),
                                 lambda: _set_ns(args.baseline, calls, keys, "none"))
        rows["set_no_tags_vs_today"] = {"ours_ns": ours, "today_ns": today, "ratio": ours / today}
    none, table = _alternate(args.rounds, lambda: _set_ns(ROOT, calls, keys, "none"),
                             lambda: _set_ns(ROOT, calls, keys, "table"))
    rows["set_no_tags_table_vs_none"] = {"no_table_ns": none, "table_ns": table, "ratio": table / none}
    one, three = _alternate(args.rounds, lambda: _set_ns(ROOT, calls, keys, "one"),
                            lambda: _set_ns(ROOT, calls, keys, "three"))
    rows["set_three_tags_vs_one"] = {"one_ns": one, "three_ns": three, "ratio": three / one}
    one, three = _alternate(args.rounds, lambda: _set_ns(ROOT, calls, keys, "one_new"),
                            lambda: _set_ns(ROOT, calls, keys, "three_new"))
    rows["set_three_tags_vs_one_new_keys"] = {
        "one_ns": one, "three_ns": three, "ratio": three / one
    }
    for name, spread in (("evict_tags_large_vs_small", True),
                         ("evict_tags_large_vs_small_clustered", False)):
        scaling = _scaling(args.scratch, args.small, args.large, args.tagged, args.rounds, spread)
        small, large = scaling[str(args.small)], scaling[str(args.large)]
        rows[name] = {
            **scaling, "evict_ratio": large["evict_tags_ms"] / small["evict_tags_ms"],
            "evict_cpu_ratio": large["evict_tags_cpu_ms"] / small["evict_tags_cpu_ms"],
            "iterkeys_ratio": large["iterkeys_ms"] / small["iterkeys_ms"],
            "iterkeys_first_ratio": large["iterkeys_first_ms"] / small["iterkeys_first_ms"],
        }
    peer = _evict_against_peer(args.scratch, args.small, args.tagged, args.rounds)
    if peer is not None:
        rows["evict_one_tag_vs_python_diskcache"] = {
            "ours_ms": peer[0], "theirs_ms": peer[1], "ratio": peer[0] / peer[1]
        }
    return rows


def _count(pages: float | None) -> str:
    return "?" if pages is None else f"{pages:.0f}"


def report(rows: dict[str, Any]) -> str:
    """The rows as a text table: figure, reference, ratio, target."""
    lines = [f"{'row':44} {'ratio':>8}  target"]
    targets = {
        "set_no_tags_vs_today": ("ratio", "0.97-1.03"),
        "set_no_tags_table_vs_none": ("ratio", "~1 (no target)"),
        "set_three_tags_vs_one": ("ratio", "<= 1.5"),
        "set_three_tags_vs_one_new_keys": ("ratio", "(reported)"),
        "evict_one_tag_vs_python_diskcache": ("ratio", "<= 1"),
    }
    for name, (field, target) in targets.items():
        if name in rows:
            lines.append(f"{name:44} {rows[name][field]:8.3f}  {target}")
    for name, layout in (("evict_tags_large_vs_small", "spread"),
                         ("evict_tags_large_vs_small_clustered", "clustered")):
        scaling = rows[name]
        small, large = (scaling[size] for size in sorted(scaling, key=lambda s: (len(s), s))[:2])
        lines.append(f"{f'evict_tags, large vs small ({layout})':44} {scaling['evict_ratio']:8.3f}"
                     f"  <= 2   ({small['evict_tags_ms']:.1f} / {large['evict_tags_ms']:.1f} ms;"
                     f" pages written {_count(small['evict_tags_pages'])} /"
                     f" {_count(large['evict_tags_pages'])})")
        lines.append(f"{f'  the same in CPU time ({layout})':44} {scaling['evict_cpu_ratio']:8.3f}"
                     f"          ({small['evict_tags_cpu_ms']:.1f} /"
                     f" {large['evict_tags_cpu_ms']:.1f} ms)")
        lines.append(f"{f'iterkeys(tag=), large vs small ({layout})':44}"
                     f" {scaling['iterkeys_ratio']:8.3f}  <= 2   ({small['iterkeys_ms']:.1f} /"
                     f" {large['iterkeys_ms']:.1f} ms)")
        lines.append(f"{f'  its first listing of the set ({layout})':44}"
                     f" {scaling['iterkeys_first_ratio']:8.3f}          ("
                     f"{small['iterkeys_first_ms']:.1f} / {large['iterkeys_first_ms']:.1f} ms)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tags", description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", help="a checkout of the library to compare 'set, no tags' with")
    parser.add_argument("--calls", type=int, default=50_000, help="sets per measurement")
    parser.add_argument("--rounds", type=int, default=6, help="measurements per side")
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--large", type=int, default=1_000_000)
    parser.add_argument("--tagged", type=int, default=1_000, help="items carrying the evicted tag")
    parser.add_argument("--output", default=os.path.join(ROOT, "benchmarks", "output"))
    parser.add_argument("--scratch", default=tempfile.gettempdir(), help="where caches are made")
    parser.add_argument("--quick", action="store_true", help="smoke run: no measurement")
    args = parser.parse_args(argv)
    if args.quick:
        args.calls, args.rounds, args.small, args.large, args.tagged = 500, 2, 300, 1_000, 50
    args.scratch = tempfile.mkdtemp(prefix="tags-", dir=args.scratch)
    try:
        rows = run(args)
    finally:
        import shutil

        shutil.rmtree(args.scratch, ignore_errors=True)
    os.makedirs(args.output, exist_ok=True)
    with open(os.path.join(args.output, "tags.json"), "w", encoding="utf-8") as handle:
        json.dump(rows, handle, indent=2)
    text = report(rows)
    with open(os.path.join(args.output, "tags.txt"), "w", encoding="utf-8") as handle:
        handle.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
