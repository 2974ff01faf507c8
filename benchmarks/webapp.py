"""``python -m benchmarks --workload webapp``: a web application's tagged cache (issue 37).

Several processes each run a drawn plan of 65 % get, 25 % set (each item carrying ``--tags-per-item``
tags drawn from a pool of ``--tag-pool``) and 10 % invalidations of one tag, on keys
``str(randrange(--range))``. Backends (rows):

- ``core-cache`` / ``core-fanout``: our ``Cache`` and ``FanoutCache`` (``set(tags=)``, ``get``,
  ``evict_tags``), ``tag_index=True``;
- ``redis-tags``: Redis with tags done the usual way: a set per tag, ``SET`` + ``SADD`` in one
  MULTI/EXEC on write, ``SMEMBERS`` + ``DEL`` in one Lua script to invalidate;
- ``memcached-versions``: pylibmc + Memcached with Symfony-style tag versions: a version key per
  tag (``incr`` to invalidate); an item stores the versions it was written under, and every get
  reads the current versions of the item's tags (one ``get_multi``) and misses on a mismatch.

Stale reads: every value embeds its writer, the index of the write in the writer's plan and its
tags; each writer notes in shared memory when each of its sets returned. A process counts a get
as stale when the item's write had returned before that same process *started* an invalidation
of one of the item's tags that had *completed* before the get started: no ordering of the
operations can then explain the read. Must be 0 for ours; the peers' counts are reported as
measured. Redis and Memcached rows run when their servers are installed (benchmarks/servers.py
starts them on 127.0.0.1).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import random
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from .backends import PYLIBMC_HINT
from .report import COLUMNS, UNSUPPORTED, _row, format_duration, plural
from .servers import MemcachedServer, RedisServer, Server
from .stats import ActionStats, summarize

ROWS = ("core-cache", "core-fanout", "redis-tags", "memcached-versions")
ACTIONS = ("get", "set", "invalidate")
GET, SET, INVALIDATE = range(3)
MIX = (65, 25, 10)
_PERCENTILES = ("median", "p90", "p99", "p99.9")

#: One planned operation: (action, key, tags of a set or the invalidated tag).
Operation = tuple[int, str, tuple[int, ...]]

# Redis: the invalidation script (SMEMBERS + DEL of each tag's members and of the tag set).
_INVALIDATE_LUA = """
local removed = 0
for _, tag in ipairs(KEYS) do
  local members = redis.call('SMEMBERS', tag)
  for i = 1, #members, 1000 do
    removed = removed + redis.call('DEL', unpack(members, i, math.min(i + 999, #members)))
  end
  redis.call('DEL', tag)
end
return removed
"""


@dataclass(frozen=True)
class WebappWorkload:
    """Parameters of one worker's run; a plain, picklable value."""

    operations: int = 20_000
    warmup: int = 500
    key_range: int = 100
    tag_pool: int = 50
    tags_per_item: int = 3
    value_size: int = 200
    seed: int = 0

    def __post_init__(self) -> None:
        if self.operations < 1 or not 0 <= self.warmup < self.operations:
            raise ValueError("need operations >= 1 and 0 <= warmup < operations")
        if self.key_range < 1 or not 1 <= self.tags_per_item <= min(self.tag_pool, 63):
            raise ValueError("need key_range >= 1 and 1 <= tags_per_item <= min(tag_pool, 63)")


def plan(workload: WebappWorkload, worker: int) -> list[Operation]:
    """The whole plan of one worker, drawn before its clock starts."""
    rng = random.Random(workload.seed * 1_000_003 + worker)
    operations: list[Operation] = []
    for _ in range(workload.operations):
        draw = rng.randrange(100)
        key = str(rng.randrange(workload.key_range))
        if draw < MIX[0]:
            operations.append((GET, key, ()))
        elif draw < MIX[0] + MIX[1]:
            tags = tuple(rng.sample(range(workload.tag_pool), workload.tags_per_item))
            operations.append((SET, key, tags))
        else:
            operations.append((INVALIDATE, key, (rng.randrange(workload.tag_pool),)))
    return operations


def encode(worker: int, index: int, tags: tuple[int, ...], size: int) -> bytes:
    """A value naming its writer, the write's index in the writer's plan and its tags."""
    head = f"{worker}:{index}:{','.join(map(str, tags))}:".encode()
    return head + b"x" * max(0, size - len(head))


def decode(value: bytes) -> tuple[int, int, tuple[int, ...]]:
    """Inverse of `encode`: (worker, index, tags)."""
    worker, index, tags, _ = value.split(b":", 3)
    return int(worker), int(index), tuple(int(tag) for tag in tags.split(b","))


# --- clients: (get, set, invalidate, close) per row ----------------------------------------------


Client = tuple[Callable[[str], Optional[bytes]], Callable[[str, bytes, tuple[int, ...]], Any],
               Callable[[int], Any], Callable[[], None]]


def open_client(row: str, location: str) -> Client:
    """The row's client in this process: directory for ours, host:port for the servers."""
    if row in ("core-cache", "core-fanout"):
        import diskcache_core

        if row == "core-cache":
            cache: Any = diskcache_core.Cache(location, tag_index=True)
        else:
            cache = diskcache_core.FanoutCache(location, shards=4, tag_index=True)

        def cache_set(key: str, value: bytes, tags: tuple[int, ...]) -> Any:
            return cache.set(key, value, tags=tags)

        return cache.get, cache_set, lambda tag: cache.evict_tags([tag]), cache.close
    if row == "redis-tags":
        import redis

        host, port = location.rsplit(":", 1)
        client = redis.Redis(host=host, port=int(port))
        script = client.register_script(_INVALIDATE_LUA)

        def redis_set(key: str, value: bytes, tags: tuple[int, ...]) -> Any:
            pipe = client.pipeline(transaction=True)
            pipe.set(key, value)
            for tag in tags:
                pipe.sadd(f"tag:{tag}", key)
            return pipe.execute()

        return (client.get, redis_set, lambda tag: script(keys=[f"tag:{tag}"]),  # type: ignore
                client.close)
    import pylibmc

    mc = pylibmc.Client([location], behaviors={"tcp_nodelay": True})

    def versions(tags: tuple[int, ...]) -> dict[str, int]:
        names = [f"v:{tag}" for tag in tags]
        found: dict[str, int] = mc.get_multi(names)
        for name in names:
            if name not in found:
                mc.add(name, 0)  # (a racing add loses: then re-read)
                found[name] = int(mc.get(name) or 0)
        return found

    def mc_get(key: str) -> Optional[bytes]:
        item = mc.get(key)
        if item is None:
            return None
        value, written = pickle.loads(item)
        current = mc.get_multi(list(written))
        return value if all(current.get(k) == v for k, v in written.items()) else None

    def mc_set(key: str, value: bytes, tags: tuple[int, ...]) -> Any:
        return mc.set(key, pickle.dumps((value, versions(tags))))

    def mc_invalidate(tag: int) -> Any:
        try:
            return mc.incr(f"v:{tag}")
        except pylibmc.NotFound:
            return mc.add(f"v:{tag}", 1) or mc.incr(f"v:{tag}")

    return mc_get, mc_set, mc_invalidate, mc.disconnect_all


# --- worker ------------------------------------------------------------------------------------


def _worker(row: str, location: str, workload: WebappWorkload, worker: int, written: Any,
            barrier: Any, results: Any) -> None:
    """Run the plan; send (worker, samples per action, misses per action, stale reads, wall
    time of the recorded part)."""
    get, set_, invalidate, close = open_client(row, location)
    operations = plan(workload, worker)
    samples: list[list[int]] = [[], [], []]
    misses = [0, 0, 0]
    stale = 0
    invalidation_started: dict[int, int] = {}  # tag -> start of own last completed invalidation
    clock = time.monotonic_ns
    base = worker * workload.operations
    barrier.wait()
    begin = clock()
    for index, (action, key, tags) in enumerate(operations):
        if index == workload.warmup:
            begin = clock()
        start = clock()
        if action == GET:
            value = get(key)
        elif action == SET:
            value = set_(key, encode(worker, index, tags, workload.value_size), tags)
        else:
            value = invalidate(tags[0])
        end = clock()
        if action == SET:
            written[base + index] = end
        elif action == INVALIDATE:
            invalidation_started[tags[0]] = start
        elif value is None:
            misses[GET] += 1
        else:
            writer, at, item_tags = decode(value)
            returned = 1 if writer < 0 else written[writer * workload.operations + at]
            if returned and any(returned < invalidation_started.get(tag, 0) for tag in item_tags):
                stale += 1
        if index >= workload.warmup:
            samples[action].append(end - start)
    elapsed = clock() - begin
    close()
    results.put((worker, samples, misses, stale, elapsed))


def _prefill(row: str, location: str, workload: WebappWorkload) -> None:
    """Every key stored once, with tags, before the workers start (writer -1: done before any
    worker's operation)."""
    _, set_, _, close = open_client(row, location)
    rng = random.Random(workload.seed)
    for number in range(workload.key_range):
        tags = tuple(rng.sample(range(workload.tag_pool), workload.tags_per_item))
        set_(str(number), encode(-1, 0, tags, workload.value_size), tags)
    close()


@dataclass
class RowResult:
    """One row measured with one number of processes."""

    row: str
    processes: int
    actions: dict[str, ActionStats] = field(default_factory=dict)
    stale_reads: int = 0
    throughput: float = 0.0  #: recorded operations per second, all processes together
    skipped: Optional[str] = None

    def to_dict(self) -> dict[str, Any]:
        return {"row": self.row, "processes": self.processes, "stale_reads": self.stale_reads,
                "throughput": self.throughput, "skipped": self.skipped,
                "actions": {name: stats.to_dict() for name, stats in self.actions.items()}}


def run_row(row: str, location: str, workload: WebappWorkload, processes: int,
            context: Any, limit: float = 1800.0) -> RowResult:
    """Prefill, then `processes` workers released together; their merged figures."""
    import queue

    prefill = context.Process(target=_prefill, args=(row, location, workload))
    prefill.start()
    prefill.join(limit)
    if prefill.exitcode != 0:
        raise RuntimeError(f"{row}: prefill failed (exit code {prefill.exitcode})")
    written = context.RawArray("q", processes * workload.operations)
    barrier, results = context.Barrier(processes), context.Queue()
    workers = [context.Process(target=_worker, args=(row, location, workload, n, written,
                                                     barrier, results))
               for n in range(processes)]
    for process in workers:
        process.start()
    found: list[Any] = []
    deadline = time.monotonic() + limit
    while len(found) < processes:
        try:
            found.append(results.get(timeout=1.0))
        except queue.Empty:
            failed = [p.exitcode for p in workers if p.exitcode not in (None, 0)]
            if failed or time.monotonic() > deadline:
                for process in workers:
                    process.kill()
                raise RuntimeError(f"{row}: a worker failed: {failed or 'time limit'}")
    for process in workers:
        process.join()
    result = RowResult(row, processes)
    for action, name in enumerate(ACTIONS):
        result.actions[name] = summarize(
            name, [ns for f in found for ns in f[1][action]], sum(f[2][action] for f in found))
    result.stale_reads = sum(f[3] for f in found)
    recorded = processes * (workload.operations - workload.warmup)
    result.throughput = recorded / (max(f[4] for f in found) / 1e9)
    return result


def _table(result: RowResult) -> str:
    """The harness's timings table (benchmarks/report.py) with get/set/invalidate rows."""
    rule = " ".join("=" * 9 for _ in COLUMNS)
    lines = [rule, f"Timings for {result.row}, {plural(result.processes, 'process')}",
             "-" * len(rule), _row(COLUMNS), rule]
    for name in ACTIONS:
        stats = result.actions[name]
        cells = [name, str(stats.count), str(stats.misses)]
        cells += [format_duration(stats.percentiles[p]) if stats.supports(p) else UNSUPPORTED
                  for p in _PERCENTILES]
        cells += [format_duration(stats.max), format_duration(stats.total)]
        lines.append(_row(cells))
    lines.append(rule)
    return "\n".join(lines)


def text_report(results: list[RowResult], workload: WebappWorkload, smoke: bool,
                machine: str = "") -> str:
    """Every row's table, then throughput and stale reads side by side."""
    lines = [machine, ""] if machine else []
    if smoke:
        lines += ["*** SMOKE RUN (--quick): its figures are not measurements. ***", ""]
    lines += [f"Tags workload (webapp): {'/'.join(map(str, MIX))} get/set/invalidate, "
              f"{workload.operations} operations per process ({workload.warmup} warmup), keys "
              f"0..{workload.key_range - 1}, {workload.tags_per_item} tags of {workload.tag_pool}"
              " per item", ""]
    for result in results:
        if not result.skipped:
            lines += [_table(result), ""]
    lines += [f"{'row':<20}{'processes':>10}{'ops/s':>12}{'get hits':>10}{'stale reads':>13}"]
    for result in results:
        if result.skipped:
            lines.append(f"{result.row:<20}skipped: {result.skipped}")
            continue
        gets = result.actions["get"]
        hits = 1 - gets.misses / gets.count if gets.count else 0.0
        lines.append(f"{result.row:<20}{result.processes:>10}{result.throughput:>12,.0f}"
                     f"{hits:>10.1%}{result.stale_reads:>13}")
    return "\n".join(lines)


_SERVERS: dict[str, type[Server]] = {"redis-tags": RedisServer, "memcached-versions": MemcachedServer}


def run(rows: list[str], processes: list[int], workload: WebappWorkload,
        scratch: Optional[str] = None) -> list[RowResult]:
    """Every row at every process count; servers started here and always stopped."""
    context = multiprocessing.get_context("fork")
    results: list[RowResult] = []
    for row in rows:
        server_class = _SERVERS.get(row)
        reason = server_class.missing_reason() if server_class else None
        if row.startswith("memcached") and reason is None:
            try:
                import pylibmc  # noqa: F401
            except ImportError:
                reason = f"pylibmc is not installed: {PYLIBMC_HINT}"
        if reason is not None:
            results.extend(RowResult(row, count, skipped=reason) for count in processes)
            continue
        for count in processes:
            if server_class is not None:
                with server_class() as server:
                    results.append(run_row(row, server.address, workload, count, context))
                continue
            directory = tempfile.mkdtemp(prefix="webapp-", dir=scratch)
            try:
                results.append(run_row(row, directory, workload, count, context))
            finally:
                shutil.rmtree(directory, ignore_errors=True)
    return results


def main(rows: list[str], processes: list[int], workload: WebappWorkload, output: str,
         scratch: Optional[str], smoke: bool, plots: bool = True) -> int:
    """Run, print the report, write webapp.txt and webapp.json in `output`, and with `plots`
    webapp.png (throughput, stale reads and per-operation percentiles per row: see
    `benchmarks.plots.webapp_chart`, which redraws it from webapp.json too)."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    machine = (f"Machine: {os.cpu_count()} CPUs, load average {load:.1f} when the run started "
               "(a loaded machine's figures are noisy: compare rows of one run only)")
    results = run(rows, processes, workload, scratch)
    text = text_report(results, workload, smoke, machine)
    print(text)
    os.makedirs(output, exist_ok=True)
    with open(os.path.join(output, "webapp.txt"), "w", encoding="utf-8") as handle:
        handle.write(text + "\n")
    data = {"parameters": {**workload.__dict__, "processes": processes, "mix": list(MIX),
                           "smoke": smoke},
            "machine": machine,
            "results": [result.to_dict() for result in results]}
    with open(os.path.join(output, "webapp.json"), "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2)
    if plots:
        from .plots import webapp_chart

        webapp_chart(data, os.path.join(output, "webapp.png"))
    ours = [r for r in results if r.row.startswith("core") and not r.skipped]
    if any(r.stale_reads for r in ours):
        print("stale reads from diskcache_core: a bug", file=sys.stderr)
        return 1
    return 0
