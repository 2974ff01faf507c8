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
Redis read: 1 - reads the workers sent / gets, counted in the workers). A worker keeps its cache
open until every worker has finished: one that closed early, when it held its host's listener,
left the host's stragglers without copies while another process started a listener (about a
second on loaded cores), which is a process's exit measured, not the steady state. Then the
invalidation delay: a process of host A writes a fresh value and notes when the write returned;
a process of host B polls the key and notes when it first reads that value (both on
CLOCK_MONOTONIC, shared by the machine's processes). The report gives the figures only: the project's own targets for them are in
docs/benchmarks.rst, not in a user's report. A percentile that its sample count cannot support
(`stats.min_samples`) is left out and printed as "—".
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
from .stats import min_samples, percentile, supported
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
    from diskcache_core._remote import client as _remote

    counter = [0]
    plain_get = _remote.RemoteStore.get

    def counting_get(self: Any, name: bytes) -> Any:
        counter[0] += 1
        return plain_get(self, name)

    _remote.RemoteStore.get = counting_get  # type: ignore[method-assign]
    return counter


def _worker(row: str, directory: str, url: str, workload: Workload, index: int,
            ready: Any, start: Any, results: Any, finish: Any) -> None:
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
    all_gets = sum(1 for action, _, _ in plan if action == GET)
    results.put((timings, all_gets, len(plan), None if remote_reads is None else remote_reads[0]))
    finish.wait(300)
    close()


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
    samples: dict[str, int] = field(default_factory=dict)  #: recorded calls per action

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
    smoke: bool = False  #: a ``--quick`` smoke run: the report says its figures are no measurement


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
    """Percentiles in µs by name ("p50"...), those the sample count supports only."""
    ordered = sorted(values_ns)
    return {f"p{p:g}": percentile(ordered, p) / 1000 for p in PERCENTS
            if ordered and supported(p, len(ordered))}


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
    start, finish = context.Event(), context.Event()
    ready, results = context.Queue(), context.Queue()
    workers = [
        context.Process(target=_worker, args=(
            row, directories[number % run.hosts], url, run.workload, number, ready, start,
            results, finish))
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
    finish.set()
    for worker in workers:
        worker.join(60)
    after = _command_counts(url)
    # Commands and Redis reads are counted over every operation, the warmup's included; our
    # rows' reads are those the workers sent (_count_remote_reads), the others' Redis's count.
    return RowResult(
        row, {action: _summarize(values) for action, values in timings.items()},
        operations, gets, after[0] - before[0], counted_reads if counted else after[1] - before[1],
        samples={action: len(values) for action, values in timings.items()},
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
              scratch: Optional[str] = None, smoke: bool = False) -> HostsRun:
    """Start Redis, run every row and the delay measurement, stop Redis."""
    run = HostsRun(hosts, processes, workload, smoke=smoke)
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


def _cell(figures: dict[str, float], name: str) -> str:
    """One latency cell: µs with one decimal, or "—" for a percentile left out."""
    return f"{figures[name]:>8.1f}µs" if name in figures else f"{'—':>10}"


def _unsupported_note() -> str:
    needs = ", ".join(f"p{p:g} {min_samples(p):,}" for p in PERCENTS if min_samples(p) > 1)
    return f"—: fewer samples than the percentile needs ({needs}); run more --operations."


def text_report(run: HostsRun) -> str:
    """The figures of the run, for the console and hosts.txt."""
    load = f"{run.hosts} hosts x {run.processes} processes, {run.workload.operations} operations" \
        f" each, keys 0..{run.workload.key_range - 1}, mix {'/'.join(map(str, run.workload.mix))}"
    lines = []
    if run.smoke:
        recorded = run.workload.operations - run.workload.warmup
        lines += [f"*** SMOKE RUN (--quick): {recorded:,} recorded operations per process. It "
                  "shows that every row runs; its figures are not measurements. Run without "
                  "--quick to measure. ***", ""]
    lines += [f"Many hosts, one Redis on loopback: {load}", ""]
    header = f"{'row':<20}{'op':<8}" + "".join(f"{f'p{p:g}':>10}" for p in PERCENTS)
    lines += [header + f"{'cmds/op':>10}{'local hits':>12}", "-" * (len(header) + 22)]
    left_out = False
    for row in run.rows:
        if row.skipped:
            lines.append(f"{row.row:<20}skipped: {row.skipped}")
            continue
        for action in ("get", "set", "delete"):
            figures = row.latencies_us.get(action) or {}
            names = [f"p{p:g}" for p in PERCENTS]
            left_out = left_out or any(name not in figures for name in names)
            cells = "".join(_cell(figures, name) for name in names)
            extra = ""
            if action == "get":
                extra = f"{row.commands_per_op:>10.2f}{row.hit_ratio:>11.1%} "
            lines.append(f"{row.row if action == 'get' else '':<20}{action:<8}{cells}{extra}")
    if left_out:
        lines += ["", _unsupported_note()]
    if run.delays_ms:
        ordered = sorted(run.delays_ms)
        shown = [p for p in PERCENTS if supported(p, len(ordered))]
        lines += ["", f"Invalidation delay (write returned on host A -> host B reads it or a"
                  f" newer value), {len(ordered)} writes ({run.missed_values} never seen):",
                  "  " + "  ".join(f"p{p:g} {percentile(ordered, p):.2f} ms" for p in shown)]
    return "\n".join(lines)


def to_dict(run: HostsRun) -> dict[str, Any]:
    return {
        "hosts": run.hosts, "processes": run.processes, "workload": run.workload.to_dict(),
        "smoke": run.smoke,
        "rows": [{"row": row.row, "latencies_us": row.latencies_us, "operations": row.operations,
                  "gets": row.gets, "redis_commands": row.redis_commands,
                  "redis_reads": row.redis_reads, "commands_per_op": row.commands_per_op,
                  "hit_ratio": row.hit_ratio, "skipped": row.skipped, "samples": row.samples}
                 for row in run.rows],
        "delays_ms": run.delays_ms, "missed_values": run.missed_values,
    }


def from_dict(data: dict[str, Any]) -> HostsRun:
    """Inverse of `to_dict` (derived figures are recomputed), so that the report and the plot
    can be drawn again from a saved hosts.json."""
    run = HostsRun(int(data["hosts"]), int(data["processes"]), Workload.from_dict(data["workload"]),
                   delays_ms=[float(delay) for delay in data["delays_ms"]],
                   missed_values=int(data["missed_values"]), smoke=bool(data.get("smoke")))
    for row in data["rows"]:
        run.rows.append(RowResult(
            row["row"], row["latencies_us"], int(row["operations"]), int(row["gets"]),
            int(row["redis_commands"]), int(row["redis_reads"]), row.get("skipped"),
            samples=row.get("samples") or {},
        ))
    return run


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


def figure(run: HostsRun) -> Any:
    """The bar chart of hosts.png: per action, each row's p50, p90 and p99 latency, on a log
    axis labelled in µs/ms, the legend below the panels (not over a bar)."""
    from .plots import _pyplot, latency_axis

    plt = _pyplot()
    rows = [row for row in run.rows if not row.skipped]
    names = [f"p{p:g}" for p in PERCENTS[:-1]]
    drawn, axes = plt.subplots(1, 3, figsize=(15, 5))
    width = 0.8 / max(len(rows), 1)
    for axis, action in zip(axes, ("get", "set", "delete")):
        lowest = float("inf")
        for offset, row in enumerate(rows):
            figures = row.latencies_us.get(action) or {}
            # No bar for a percentile left out (too few samples): its height would be made up.
            values = [figures.get(name, 0.0) for name in names]
            lowest = min([lowest, *(value for value in values if value > 0)])
            shift = (offset - (len(rows) - 1) / 2) * width
            axis.bar([index + shift for index in range(len(names))], values, width,
                     label=row.row)
        if lowest != float("inf"):
            # Bars on a log scale start at the axis bottom: well below the shortest bar, so
            # that small differences do not look like large ones.
            axis.set_ylim(bottom=lowest / 4)
        latency_axis(axis)
        axis.set_xticks(list(range(len(names))))
        axis.set_xticklabels(names)
        axis.set_title(f"{action} latency")
        axis.grid(axis="y", which="major", alpha=0.4)
    handles, labels = axes[0].get_legend_handles_labels()
    drawn.legend(handles, labels, loc="lower center", ncol=max(len(labels), 1))
    smoke = " (SMOKE RUN: not a measurement)" if run.smoke else ""
    drawn.suptitle(f"{run.hosts} hosts x {run.processes} processes, one Redis on loopback{smoke}")
    drawn.tight_layout(rect=(0, 0.08, 1, 1))
    return drawn


def _plot(run: HostsRun, path: str) -> str:
    from .plots import _pyplot

    drawn = figure(run)
    drawn.savefig(path, dpi=100)
    _pyplot().close(drawn)
    return path


def main(hosts: int, processes: int, workload: Workload, output: str, plots: bool,
         scratch: Optional[str], rows: Optional[list[str]] = None, smoke: bool = False) -> int:
    if RedisServer.missing_reason() is not None:
        print(f"--hosts needs redis-server: {RedisServer.missing_reason()}", file=sys.stderr)
        return 1
    try:
        import redis  # noqa: F401
    except ImportError:
        print("--hosts needs redis-py: pip install redis", file=sys.stderr)
        return 1
    run = run_hosts(hosts, processes, workload, rows or list(ROWS), scratch, smoke)
    print(text_report(run))
    paths = write_outputs(run, output, plots)
    print(f"results written: {', '.join(paths)}", file=sys.stderr)
    return 0
