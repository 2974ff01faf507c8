"""``python -m benchmarks --hosts N``: many simulated hosts sharing one Redis.

Each simulated host is a directory with its own worker processes (``--processes``, default 4, per
host). One redis-server on 127.0.0.1, started and stopped here, is the shared store. Rows, each
measured on the same workload (the harness's get/set/delete mix, keys and values) in turn:

- ``core-remote``: ``diskcache_core.Cache(host_directory, remote=url)``;
- ``redis-py``: plain ``redis.Redis`` get/set/delete of pickled values;
- ``django-redis``: Django's own ``RedisCache`` through ``django.core.cache``;
- ``django-core-remote``: our Django backend with ``OPTIONS={"remote": url}``.

Reported per row: get/set/delete latency percentiles; Redis commands per operation (from
``INFO commandstats`` before and after the row: every client's, our listeners' and refreshers'
included); for ours, the local hit ratio (the share of the workers' gets answered without a
Redis read: 1 - reads the workers sent / gets, counted in the workers). Then the invalidation delay: a process of host
A writes a fresh value and notes when the write returned; a process of host B polls the key and
notes when it first reads that value (both on CLOCK_MONOTONIC, shared by the machine's
processes). The goals are printed next to the figures, met or not.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from .servers import RedisServer
from .stats import percentile
from .workload import GET, SET, Workload, initial_items, plan_operations

ROWS = ("core-remote", "redis-py", "django-redis", "django-core-remote")
PERCENTS = (50.0, 90.0, 99.0, 100.0)
_READS = ("get", "mget", "getdel", "hmget")
_POLL_LIMIT = 20.0  # seconds a poller waits for one value before giving up on it
_DELAY_WRITES = 300


# --- worker side ------------------------------------------------------------------------------


def _open(row: str, directory: str, url: str) -> Any:
    """(get, set, delete, close, caches) of one row's client in this process; `caches`: our
    Cache objects underneath (none for the rows without this library)."""
    if row == "core-remote":
        import diskcache_core

        cache = diskcache_core.Cache(directory, remote=url, remote_prefix="bench:")
        return cache.get, cache.set, cache.delete, cache.close, [cache]
    if row == "redis-py":
        import redis

        client = redis.Redis.from_url(url)

        def get(key: bytes) -> Any:
            data: Any = client.get(b"plain:" + key)
            return None if data is None else pickle.loads(data)

        def set_(key: bytes, value: bytes) -> Any:
            return client.set(b"plain:" + key, pickle.dumps(value))

        return get, set_, lambda key: client.delete(b"plain:" + key), client.close, []
    from django.conf import settings

    config: dict[str, Any]
    if row == "django-redis":
        config = {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": url,
                  "TIMEOUT": None}
    else:
        config = {"BACKEND": "diskcache_core.contrib.django.DjangoCache", "LOCATION": directory,
                  "TIMEOUT": None, "OPTIONS": {"remote": url, "remote_prefix": "dj:"}}
    settings.configure(CACHES={"default": config})
    from django.core.cache import cache as django_cache

    caches = list(django_cache.fanout._shards) if row == "django-core-remote" else []
    return (lambda key: django_cache.get(key.decode()),
            lambda key, value: django_cache.set(key.decode(), value),
            lambda key: django_cache.delete(key.decode()),
            django_cache.close, caches)


def _wait_listening(caches: list[Any], limit: float = 120.0) -> None:
    """Wait (bounded) until the listener of each cache's host directory has subscribed, so the
    clock does not start while every get must still ask Redis."""
    deadline = time.monotonic() + limit
    for cache in caches:
        words = cache._remote._words
        while not words.lease_valid() and time.monotonic() < deadline:
            time.sleep(0.01)


def _prefill(row: str, directory: str, url: str, workload: Workload) -> None:
    """Store every key of the range before the clock starts, as the harness does."""
    _, set_, _, close, _ = _open(row, directory, url)
    for key, value in initial_items(workload):
        set_(key, value)
    close()


def _count_remote_reads() -> list[int]:
    """Count the reads this process's caches send to Redis: ``[count]``, kept up to date.

    Counted here rather than from Redis's INFO: the listener's refresher (in its own process)
    also reads from Redis, to renew copies, and its reads are not gets the workers waited for.
    They still show in the row's Redis commands per operation."""
    from diskcache_core import _remote

    counter = [0]
    plain_get = _remote.RemoteStore.get

    def counting_get(self: Any, name: bytes) -> Any:
        counter[0] += 1
        return plain_get(self, name)

    _remote.RemoteStore.get = counting_get  # type: ignore[method-assign]
    return counter


def _worker(row: str, directory: str, url: str, workload: Workload, index: int,
            ready: Any, start: Any, results: Any) -> None:
    remote_reads = _count_remote_reads() if "core" in row else None
    get, set_, delete, close, caches = _open(row, directory, url)
    plan = plan_operations(workload, index)
    timings: dict[str, list[int]] = {"get": [], "set": [], "delete": []}
    clock = time.perf_counter_ns
    _wait_listening(caches)
    ready.put(index)
    start.wait(300)
    for number, (action, key, value) in enumerate(plan):
        begin = clock()
        if action == GET:
            get(key)
        elif action == SET:
            set_(key, value)
        else:
            delete(key)
        elapsed = clock() - begin
        if number >= workload.warmup:
            timings[("get", "set", "delete")[action]].append(elapsed)
    close()
    all_gets = sum(1 for action, _, _ in plan if action == GET)
    results.put((timings, all_gets, len(plan), None if remote_reads is None else remote_reads[0]))


def _writer(directory: str, url: str, key: str, count: int, start: Any, results: Any) -> None:
    import diskcache_core

    cache = diskcache_core.Cache(directory, remote=url, remote_prefix="delay:")
    returned = []
    start.wait(60)
    for value in range(1, count + 1):
        cache.set(key, value)
        returned.append(time.monotonic())
        time.sleep(0.010)
    cache.close()
    results.put(("written", returned))


def _poller(directory: str, url: str, key: str, count: int, ready: Any, results: Any) -> None:
    import diskcache_core

    cache = diskcache_core.Cache(directory, remote=url, remote_prefix="delay:")
    cache.get(key)
    ready.set()
    seen: dict[int, float] = {}
    last = 0
    limit = time.monotonic() + _POLL_LIMIT + count * 0.05
    while last < count and time.monotonic() < limit:
        value = cache.get(key, 0)
        if value > last:
            seen[value] = time.monotonic()
            last = value
    cache.close()
    results.put(("seen", seen))


def _idle(directory: str, url: str, stop: Any) -> None:
    """Another process of host B, holding the cache open (it may be the listener)."""
    import diskcache_core

    cache = diskcache_core.Cache(directory, remote=url, remote_prefix="delay:")
    stop.wait(_POLL_LIMIT * 10)
    cache.close()


# --- the run --------------------------------------------------------------------------------------


@dataclass
class RowResult:
    row: str
    latencies_us: dict[str, dict[str, float]]
    operations: int
    gets: int
    redis_commands: int
    redis_reads: int
    skipped: Optional[str] = None

    @property
    def commands_per_op(self) -> float:
        return self.redis_commands / self.operations if self.operations else 0.0

    @property
    def hit_ratio(self) -> float:
        return 1.0 - self.redis_reads / self.gets if self.gets else 0.0


@dataclass
class HostsRun:
    hosts: int
    processes: int
    workload: Workload
    rows: list[RowResult] = field(default_factory=list)
    delays_ms: list[float] = field(default_factory=list)
    missed_values: int = 0


def _command_counts(url: str) -> tuple[int, int]:
    """(all commands, read commands) Redis has processed, from INFO commandstats."""
    import redis

    client = redis.Redis.from_url(url)
    stats = client.info("commandstats")
    client.close()
    total = reads = 0
    for name, entry in stats.items():
        calls = int(entry["calls"])
        total += calls
        if name.replace("cmdstat_", "") in _READS:
            reads += calls
    return total, reads


def _summarize(values_ns: list[int]) -> dict[str, float]:
    ordered = sorted(values_ns)
    if not ordered:
        return {}
    return {f"p{p:g}": percentile(ordered, p) / 1000 for p in PERCENTS}


def _collect(results: Any, processes: list[Any], count: int, limit: float = 1800.0) -> list[Any]:
    """`count` results from the queue; RuntimeError when a process died without sending one."""
    import queue

    found: list[Any] = []
    deadline = time.monotonic() + limit
    while len(found) < count:
        try:
            found.append(results.get(timeout=1.0))
        except queue.Empty:
            failed = [p for p in processes if p.exitcode not in (None, 0)]
            if failed or time.monotonic() > deadline:
                for process in processes:
                    process.kill()
                raise RuntimeError(f"a benchmark process failed: {failed or 'time limit'}")
    return found


def _run_row(row: str, run: HostsRun, url: str, scratch: str, context: Any) -> RowResult:
    if row.startswith("django"):
        try:
            import django  # noqa: F401
        except ImportError:
            return RowResult(row, {}, 0, 0, 0, 0, skipped="Django is not installed")
    import redis

    redis.Redis.from_url(url).flushall()
    directories = [os.path.join(scratch, f"{row}-host{number}") for number in range(run.hosts)]
    prefill = context.Process(target=_prefill, args=(row, directories[0], url, run.workload))
    prefill.start()
    prefill.join(600)
    before = _command_counts(url)
    start = context.Event()
    ready, results = context.Queue(), context.Queue()
    workers = [
        context.Process(target=_worker, args=(
            row, directories[number % run.hosts], url, run.workload, number, ready, start,
            results))
        for number in range(run.hosts * run.processes)
    ]
    for worker in workers:
        worker.start()
    # Every worker has opened its cache and its host's listener has subscribed.
    _collect(ready, workers, len(workers), limit=300.0)
    time.sleep(0.5)  # and the start-up work of the processes has settled
    start.set()
    timings: dict[str, list[int]] = {"get": [], "set": [], "delete": []}
    gets = operations = counted_reads = 0
    counted = False
    for worker_timings, worker_gets, worker_operations, worker_reads in _collect(
        results, workers, len(workers)
    ):
        for action, values in worker_timings.items():
            timings[action].extend(values)
        gets += worker_gets
        operations += worker_operations
        if worker_reads is not None:
            counted = True
            counted_reads += worker_reads
    for worker in workers:
        worker.join(60)
    after = _command_counts(url)
    # Commands and Redis reads are counted over every operation, the warmup's included; our
    # rows' reads are those the workers sent (_count_remote_reads), the others' Redis's count.
    return RowResult(
        row, {action: _summarize(values) for action, values in timings.items()},
        operations, gets, after[0] - before[0], counted_reads if counted else after[1] - before[1],
    )


def _measure_delays(run: HostsRun, url: str, scratch: str, context: Any) -> None:
    key = "delay-key"
    host_a, host_b = os.path.join(scratch, "delay-a"), os.path.join(scratch, "delay-b")
    start, ready, stop = context.Event(), context.Event(), context.Event()
    results = context.Queue()
    idle = context.Process(target=_idle, args=(host_b, url, stop))
    poller = context.Process(target=_poller, args=(host_b, url, key, _DELAY_WRITES, ready, results))
    writer = context.Process(target=_writer, args=(host_a, url, key, _DELAY_WRITES, start, results))
    for process in (idle, poller, writer):
        process.start()
    ready.wait(60)
    time.sleep(0.5)
    start.set()
    outputs = dict(_collect(results, [poller, writer], 2))
    stop.set()
    for process in (idle, poller, writer):
        process.join(60)
    returned, seen = outputs["written"], outputs["seen"]
    # Host B has stopped serving values older than i once it has read i or a later value: the
    # delay of write i ends at the first read of any value >= i (so fast overwrites, which hide
    # value i itself, do not drop the slow cases from the figures).
    firsts = sorted(seen.items())
    for value, when in enumerate(returned, start=1):
        later = [at for number, at in firsts if number >= value]
        if later:
            run.delays_ms.append(max(0.0, min(later) - when) * 1000)
        else:
            run.missed_values += 1  # never read before the poller's time limit


def run_hosts(hosts: int, processes: int, workload: Workload, rows: list[str],
              scratch: Optional[str] = None) -> HostsRun:
    """Start Redis, run every row and the delay measurement, stop Redis."""
    run = HostsRun(hosts, processes, workload)
    context = multiprocessing.get_context("spawn")
    base = tempfile.mkdtemp(prefix="bench-hosts-", dir=scratch)
    try:
        with RedisServer() as server:
            url = f"redis://127.0.0.1:{server.port}/0"
            for row in rows:
                print(f"[hosts] {row} ...", file=sys.stderr, flush=True)
                run.rows.append(_run_row(row, run, url, base, context))
            print("[hosts] invalidation delay ...", file=sys.stderr, flush=True)
            _measure_delays(run, url, base, context)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return run


# --- the report -----------------------------------------------------------------------------------


def goals(run: HostsRun) -> list[tuple[str, bool, str]]:
    """The issue's goals, each (text, met, the figures it was judged on)."""
    rows = {row.row: row for row in run.rows if not row.skipped}
    found: list[tuple[str, bool, str]] = []
    ours, plain = rows.get("core-remote"), rows.get("redis-py")
    if ours and plain and ours.latencies_us["get"] and plain.latencies_us["get"]:
        speedup = plain.latencies_us["get"]["p50"] / ours.latencies_us["get"]["p50"]
        found.append(("gets >= 50x faster than plain redis-py at the median", speedup >= 50,
                      f"{speedup:.0f}x"))
        found.append(("local hit ratio >= 90%", ours.hit_ratio >= 0.9,
                      f"{ours.hit_ratio:.1%}"))
        ratio = ours.latencies_us["set"]["p50"] / plain.latencies_us["set"]["p50"]
        found.append(("sets no slower than plain redis-py + 20% (median)", ratio <= 1.2,
                      f"{ratio:.2f}x"))
    if run.delays_ms:
        ordered = sorted(run.delays_ms)
        p99 = percentile(ordered, 99)
        found.append(("invalidation p99 <= 5 ms", p99 <= 5.0, f"{p99:.2f} ms"))
        found.append(("invalidation max <= 50 ms", ordered[-1] <= 50.0, f"{ordered[-1]:.2f} ms"))
    return found


def text_report(run: HostsRun) -> str:
    load = f"{run.hosts} hosts x {run.processes} processes, {run.workload.operations} operations" \
        f" each, keys 0..{run.workload.key_range - 1}, mix {'/'.join(map(str, run.workload.mix))}"
    lines = [f"Many hosts, one Redis on loopback: {load}", ""]
    header = f"{'row':<20}{'op':<8}" + "".join(f"{f'p{p:g}':>10}" for p in PERCENTS)
    lines += [header + f"{'cmds/op':>10}{'local hits':>12}", "-" * (len(header) + 22)]
    for row in run.rows:
        if row.skipped:
            lines.append(f"{row.row:<20}skipped: {row.skipped}")
            continue
        for action in ("get", "set", "delete"):
            figures = row.latencies_us.get(action) or {}
            cells = "".join(f"{figures.get(f'p{p:g}', 0.0):>8.1f}us" for p in PERCENTS)
            extra = ""
            if action == "get":
                extra = f"{row.commands_per_op:>10.2f}{row.hit_ratio:>11.1%} "
            lines.append(f"{row.row if action == 'get' else '':<20}{action:<8}{cells}{extra}")
    if run.delays_ms:
        ordered = sorted(run.delays_ms)
        lines += ["", f"Invalidation delay (write returned on host A -> host B reads it or a"
                  f" newer value), {len(ordered)} writes ({run.missed_values} never seen):",
                  "  " + "  ".join(f"p{p:g} {percentile(ordered, p):.2f} ms" for p in PERCENTS)]
    lines += ["", "Goals (measured side by side in this run):"]
    for text, met, figure in goals(run):
        lines.append(f"  [{'met' if met else 'NOT met'}] {text}: {figure}")
    return "\n".join(lines)


def to_dict(run: HostsRun) -> dict[str, Any]:
    return {
        "hosts": run.hosts, "processes": run.processes, "workload": run.workload.to_dict(),
        "rows": [{"row": row.row, "latencies_us": row.latencies_us, "operations": row.operations,
                  "gets": row.gets, "redis_commands": row.redis_commands,
                  "redis_reads": row.redis_reads, "commands_per_op": row.commands_per_op,
                  "hit_ratio": row.hit_ratio, "skipped": row.skipped} for row in run.rows],
        "delays_ms": run.delays_ms, "missed_values": run.missed_values,
        "goals": [{"goal": text, "met": met, "figure": figure} for text, met, figure in goals(run)],
    }


def write_outputs(run: HostsRun, directory: str, plots: bool) -> list[str]:
    """hosts.txt, hosts.json and (with matplotlib) hosts.png in `directory`."""
    os.makedirs(directory, exist_ok=True)
    paths = [os.path.join(directory, "hosts.txt"), os.path.join(directory, "hosts.json")]
    with open(paths[0], "w") as out:
        out.write(text_report(run) + "\n")
    with open(paths[1], "w") as out:
        json.dump(to_dict(run), out, indent=1)
    if plots:
        paths.append(_plot(run, os.path.join(directory, "hosts.png")))
    return paths


def _plot(run: HostsRun, path: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [row for row in run.rows if not row.skipped]
    figure, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for axis, action in zip(axes, ("get", "set", "delete")):
        for offset, row in enumerate(rows):
            figures = row.latencies_us.get(action) or {}
            values = [figures.get(f"p{p:g}", 0.0) for p in PERCENTS[:-1]]
            positions = [index + offset * 0.8 / len(rows) for index in range(len(values))]
            axis.bar(positions, values, width=0.8 / len(rows), label=row.row)
        axis.set_xticks([index + 0.3 for index in range(len(PERCENTS) - 1)])
        axis.set_xticklabels([f"p{p:g}" for p in PERCENTS[:-1]])
        axis.set_yscale("log")
        axis.set_title(f"{action} latency (us, log scale)")
    axes[0].legend(fontsize="small")
    figure.suptitle(f"{run.hosts} hosts x {run.processes} processes, one Redis on loopback")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def main(hosts: int, processes: int, workload: Workload, output: str, plots: bool,
         scratch: Optional[str], rows: Optional[list[str]] = None) -> int:
    if RedisServer.missing_reason() is not None:
        print(f"--hosts needs redis-server: {RedisServer.missing_reason()}", file=sys.stderr)
        return 1
    try:
        import redis  # noqa: F401
    except ImportError:
        print("--hosts needs redis-py: pip install redis", file=sys.stderr)
        return 1
    run = run_hosts(hosts, processes, workload, rows or list(ROWS), scratch)
    print(text_report(run))
    paths = write_outputs(run, output, plots)
    print(f"results written: {', '.join(paths)}", file=sys.stderr)
    return 0
