"""The memory tier under real concurrency: no process ever reads a value older than one whose
write had returned (in any process) before the read started — also while writers are SIGKILLed
at random points, including between a commit and the version publish that follows it.

Writers log each set's start and end, readers each get's start, end and value, all on
CLOCK_MONOTONIC (``time.monotonic_ns``), which is system-wide on Linux, so times from different
processes compare. `violations` then checks every read: if some set of the same key started
after the set whose value the read returned had ended, and itself ended before the read began,
the read was stale.
"""

from __future__ import annotations

import bisect
import multiprocessing
import os
import pickle
import random
import signal
import sqlite3
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

import diskcache_core as dc

pytestmark = pytest.mark.skipif(
    not hasattr(os, 'fork') or not hasattr(time, 'monotonic_ns'), reason='needs fork'
)

KEYS = ('text', 'bytes', 'number', 'pickled')
_context = multiprocessing.get_context('fork') if hasattr(os, 'fork') else None


def _value(key: str, ident: str) -> Any:
    """The value a writer stores under `key` for the write `ident` (one type per key: inline
    text and bytes kept as they are, a float, a pickled mutable object decoded on each hit)."""
    if key == 'text':
        return ident
    if key == 'bytes':
        return ident.encode() * 20
    if key == 'number':
        writer, generation, sequence = ident.split('.')
        return float(int(writer) * 10**12 + int(generation) * 10**8 + int(sequence))
    return {'ident': ident, 'payload': [1, 2, 3]}


def _ident(key: str, value: Any) -> str | None:
    if value is None:
        return None
    if key == 'text':
        return value
    if key == 'bytes':
        return value[: len(value) // 20].decode()
    if key == 'number':
        number = int(value)
        return f'{number // 10**12}.{number // 10**8 % 10**4}.{number % 10**8}'
    return value['ident']


# --- the processes -----------------------------------------------------------------------------------


def _writer(directory: str, number: int, generation: int, log_path: str, stop: Any,
            seed: int, own_key: bool = False) -> None:  # fmt: skip
    """Sets random keys, pausing between sets, until ``stop[0]`` (set by the test); with
    `own_key`, sets only its own key, as fast as it can (then a kill often lands between a
    commit and its publish, and nobody else writes the key until the replacement writer
    starts: a stale entry would show)."""
    cache = dc.Cache(directory)
    rng = random.Random(seed)
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    sequence = 0
    keys = (KEYS[number % len(KEYS)],) if own_key else KEYS
    while time.monotonic_ns() < stop[0]:
        key = rng.choice(keys)
        sequence += 1
        ident = f'{number}.{generation}.{sequence}'
        value = _value(key, ident)
        start = time.monotonic_ns()
        os.write(log, f'B {key} {ident} {start}\n'.encode())
        if rng.random() < 0.1:
            with cache.transact():
                cache.set(key, value)
        else:
            cache.set(key, value)
        end = time.monotonic_ns()
        os.write(log, f'E {key} {ident} {start} {end}\n'.encode())
        if not own_key:
            time.sleep(rng.random() * 0.002)  # leave the readers clean buckets to hit
    os.close(log)
    os._exit(0)


def _foreign_writer(directory: str, number: int, generation: int, log_path: str, stop: Any,
                    seed: int, own_key: bool = False) -> None:  # fmt: skip
    """Writes straight into SQLite, without the triggers: the memory tier is not told."""
    con = sqlite3.connect(os.path.join(directory, 'cache.db'), isolation_level=None, timeout=30)
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    sequence = 0
    while time.monotonic_ns() < stop[0]:
        sequence += 1
        ident = f'{number}.{generation}.{sequence}'
        start = time.monotonic_ns()
        os.write(log, f'B text {ident} {start}\n'.encode())
        con.execute("UPDATE Cache SET value = ? WHERE key = 'text'", (ident,))
        end = time.monotonic_ns()
        os.write(log, f'E text {ident} {start} {end}\n'.encode())
        time.sleep(0.005)
    os._exit(0)


def _reader(directory: str, result_path: str, stop: Any, counts: Any, index: int, seed: int,
            settings: dict) -> None:  # fmt: skip
    """Gets random keys until ``stop[1]`` (set by the test), counting them in ``counts[index]``."""
    cache = dc.Cache(directory, **settings)
    rng = random.Random(seed)
    reads = []
    monotonic_ns = time.monotonic_ns
    while True:
        key = rng.choice(KEYS)
        start = monotonic_ns()
        if start >= stop[1]:
            break
        value = cache.get(key)
        end = monotonic_ns()
        reads.append((key, start, end, _ident(key, value)))
        counts[index] += 1
    with open(result_path, 'wb') as result:
        pickle.dump((reads, tuple(cache.memory_stats())), result)
    os._exit(0)


# --- running and checking ----------------------------------------------------------------------------


@dataclass
class Write:
    key: str
    start: int
    end: int | None = None
    killed: bool = False  # its writer died before logging the end: `end` is the death time


@dataclass
class Run:
    writes: dict[str, Write] = field(default_factory=dict)
    reads: list[tuple[str, int, int, str | None]] = field(default_factory=list)
    # Reads of a reader with no memory tier: when a write cut short by a kill became visible.
    witness_reads: list[tuple[str, int, int, str | None]] = field(default_factory=list)
    memory_hits: int = 0
    kills: int = 0


def _read_writer_log(path: str, death_ns: int | None, run: Run) -> None:
    """Sets from one writer's log. A set begun but not logged as ended was cut short by a kill:
    if it committed, it ended before the writer's death was seen (`death_ns`)."""
    begun = []
    with open(path) as log:
        for line in log:
            parts = line.split()
            if len(parts) < 4 or (parts[0] == 'E' and len(parts) < 5):
                continue  # a line cut short by the kill
            if parts[0] == 'B':
                run.writes[parts[2]] = write = Write(parts[1], int(parts[3]))
                begun.append(write)
            else:
                run.writes[parts[2]].end = int(parts[4])
    for write in begun:
        if write.end is None and death_ns is not None:
            write.end, write.killed = death_ns, True


def violations(run: Run, committed: set[str]) -> list[str]:
    """Every read that returned a value older than one whose set had returned before the read
    started (or a value never written, or one from a set that started after the read ended)."""
    # A set cut short by a kill never returned. If it committed, it bounds reads from the moment
    # SQLite itself showed it: the end of the witness's first read of it (a reader with no memory
    # tier). Not from the kill: a kill inside SQLite's commit can leave the commit frame in the
    # WAL but not yet in the WAL index, and the write becomes visible only later, at recovery.
    seen_by_witness: dict[str, int] = {}
    for _, _, end, ident in run.witness_reads:
        if ident is not None and (ident not in seen_by_witness or end < seen_by_witness[ident]):
            seen_by_witness[ident] = end
    by_key: dict[str, list[tuple[int, int]]] = {}
    for ident, write in run.writes.items():
        end = write.end
        if write.killed:
            end = seen_by_witness.get(ident) if ident in committed else None
        if end is None:
            continue  # still running, or killed and never seen: it never returned
        by_key.setdefault(write.key, []).append((end, write.start))
    ends: dict[str, list[int]] = {}
    latest_start: dict[str, list[int]] = {}  # among sets ended by ends[i], the latest start
    for key, writes in by_key.items():
        writes.sort()
        ends[key] = [end for end, _ in writes]
        running, starts = -1, []
        for _, start in writes:
            running = max(running, start)
            starts.append(running)
        latest_start[key] = starts
    found = []
    for key, start, end, ident in run.reads:
        source = run.writes.get(ident) if ident is not None else None
        if source is None or source.key != key:
            found.append(f'{key}: read {ident!r}, which no set wrote')
            continue
        if end < source.start:
            found.append(f'{key}: read {ident!r} before its set started')
            continue
        position = bisect.bisect_left(ends[key], start)  # sets that ended before the read began
        if position and latest_start[key][position - 1] > source.end:
            found.append(
                f'{key}: read {ident!r} (set ended at {source.end}) at {start}, after a later set'
                f' had returned (it started at {latest_start[key][position - 1]})'
            )
    return found


MIN_READS = 1001  # `_check` wants more than 1000 reads
MAX_SECONDS = 180.0  # a run that has not reached its counts by then fails (it never hangs)


def run_workload(
    directory: str,
    tmp_path: Any,
    seconds: float,
    writers: int = 3,
    readers: int = 4,
    kill_every: float | None = None,
    kills: int = 0,
    min_reads: int = MIN_READS,
    max_seconds: float = MAX_SECONDS,
    writer_target: Any = _writer,
    reader_settings: dict | None = None,
) -> tuple[Run, set[str]]:
    """Writers and readers on the same keys for at least `seconds`, and then on until the
    readers have made `min_reads` reads and `kills` writers have been killed: with
    `kill_every`, a random writer is SIGKILLed about that often (seconds) and replaced, and in
    the end every writer is killed. A loaded machine makes the run longer, not the counts
    smaller; a run that has not reached its counts after `max_seconds` fails the test.
    Readers go on for a while after the writers stop, so that a write left unpublished by a
    kill would be caught being stale."""
    assert not kills or kill_every is not None, 'kills needs kill_every'
    run = Run()
    setup = dc.Cache(directory)
    for number, key in enumerate(KEYS):
        ident = f'9.0.{number}'
        begin = time.monotonic_ns()
        setup.set(key, _value(key, ident))
        run.writes[ident] = Write(key, begin, time.monotonic_ns())
    setup.close()
    start = time.monotonic_ns()
    cap = start + int(max_seconds * 1e9)
    # When the writers (stop[0]) and the readers (stop[1]) stop: the cap until the counts are
    # reached, so that no child outlives a test that dies; then set to "now" below.
    stop = _context.RawArray('q', [cap, cap + int(0.5e9)])
    counts = _context.RawArray('q', readers + 1)  # reads so far, per reader (last: the witness)
    # Writers are killed from 0.3 s before the minimum time is up, as they always were.
    minimum = start + int(seconds * 1e9) - (int(0.3e9) if kill_every is not None else 0)
    logs: list[tuple[str, Any]] = []  # (log path, process)
    rng = random.Random(1)

    def spawn(number: int, generation: int) -> Any:
        log_path = str(tmp_path / f'writer-{number}-{generation}.log')
        process = _context.Process(
            target=writer_target,
            args=(directory, number, generation, log_path, stop, rng.getrandbits(32),
                  kill_every is not None),
        )
        process.start()
        logs.append((log_path, process))
        return process

    def enough() -> bool:
        # The final round kills `writers` more; `kills` counts those too.
        return (
            time.monotonic_ns() >= minimum
            and sum(counts[:readers]) >= min_reads
            and (kill_every is None or run.kills + writers >= kills)
        )

    reader_processes = []
    for number in range(readers):
        path = str(tmp_path / f'reader-{number}.pickle')
        process = _context.Process(
            target=_reader,
            args=(directory, path, stop, counts, number, rng.getrandbits(32), reader_settings or {}),
        )
        process.start()
        reader_processes.append((path, process, False))
    witness_path = str(tmp_path / 'witness.pickle')
    witness = _context.Process(
        target=_reader,
        args=(directory, witness_path, stop, counts, readers, rng.getrandbits(32),
              {'memory_size_limit': 0}),
    )  # fmt: skip
    witness.start()
    reader_processes.append((witness_path, witness, True))
    generations = [0] * writers
    live = [spawn(number, 0) for number in range(writers)]
    deaths: dict[int, int] = {}  # id(process) -> when its death was seen
    try:
        while not enough():
            if time.monotonic_ns() >= cap:
                pytest.fail(
                    f'the workload did not reach its counts in {max_seconds:.0f} s: '
                    f'{run.kills} of {kills} kills, {sum(counts[:readers])} of {min_reads} reads'
                )
            if kill_every is None:
                time.sleep(0.01)
                continue
            time.sleep(rng.uniform(0.2, 1.8) * kill_every)
            victim = rng.randrange(writers)
            process = live[victim]
            if not process.is_alive():
                continue
            os.kill(process.pid, signal.SIGKILL)
            process.join(30)
            deaths[id(process)] = time.monotonic_ns()
            run.kills += 1
            generations[victim] += 1
            live[victim] = spawn(victim, generations[victim])
        if kill_every is not None:
            # The last writers die at random points too, so that the quiet period after them
            # checks that no unpublished write is served stale for ever.
            for process in live:
                time.sleep(rng.random() * 0.05)
                if process.is_alive():
                    run.kills += 1
                    os.kill(process.pid, signal.SIGKILL)
                    process.join(30)
                    deaths[id(process)] = time.monotonic_ns()
        now = time.monotonic_ns()
        stop[0], stop[1] = now, now + int(0.5e9)
    except BaseException:
        stop[0] = stop[1] = 0
        for _, process in logs + [(path, process) for path, process, _ in reader_processes]:
            if process.is_alive():
                process.kill()
            process.join(30)
        raise
    for _, process in logs:
        process.join(60)
        assert process.exitcode in (0, -signal.SIGKILL), process.exitcode
    for path, process, is_witness in reader_processes:
        process.join(120)
        assert process.exitcode == 0, f'reader exit code {process.exitcode}'
        with open(path, 'rb') as result:
            reads, stats = pickle.load(result)
        if is_witness:
            run.witness_reads.extend(reads)
        else:
            run.reads.extend(reads)
            run.memory_hits += stats[0]
    for log_path, process in logs:
        if os.path.exists(log_path):
            _read_writer_log(log_path, deaths.get(id(process)), run)
    final = dc.Cache(directory, memory_size_limit=0)
    committed = {ident for _, _, _, ident in run.reads + run.witness_reads if ident is not None}
    committed |= {_ident(key, final.get(key)) for key in KEYS}
    final.close()
    return run, committed


def _check(run: Run, committed: set[str]) -> None:
    found = violations(run, committed)
    assert not found, f'{len(found)} stale reads of {len(run.reads)}, e.g. {found[:5]}'
    assert len(run.reads) > 1000
    # The tier must actually have answered: otherwise this proves nothing about it.
    assert run.memory_hits > len(run.reads) // 10, (run.memory_hits, len(run.reads))


# --- the tests -----------------------------------------------------------------------------------------


def test_the_checker_finds_a_stale_read():
    run = Run()
    run.writes = {'a': Write('k', 0, 10), 'b': Write('k', 20, 30), 'c': Write('k', 5, 40)}
    # 'b' and 'c' overlap, so either may be read after both returned; 'a' may not be read once
    # 'b' (which started after 'a' ended) has returned.
    run.reads = [('k', 35, 36, 'b'), ('k', 41, 42, 'c'), ('k', 50, 51, 'b'), ('k', 15, 16, 'a'),
                 ('k', 31, 32, 'a'), ('k', 45, 46, 'a'), ('k', 1, 2, 'b'), ('k', 3, 4, 'zz')]
    found = violations(run, set())
    assert len(found) == 4
    assert sum("read 'a'" in line for line in found) == 2
    assert any('before its set started' in line for line in found)
    assert any('which no set wrote' in line for line in found)


def test_no_stale_reads(tmp_path):
    run, committed = run_workload(str(tmp_path / 'cache'), tmp_path, seconds=2.0)
    _check(run, committed)


def test_no_stale_reads_while_writers_are_killed(tmp_path):
    run, committed = run_workload(
        str(tmp_path / 'cache'), tmp_path, seconds=3.0, kill_every=0.1, kills=5
    )
    assert run.kills >= 5
    _check(run, committed)


def test_the_check_catches_a_writer_that_ignores_the_protocol(tmp_path):
    """The proof that the check above can fail: a writer going straight to SQLite (as
    python-diskcache or the sqlite3 shell would) is not seen by the memory tier."""
    run, committed = run_workload(
        str(tmp_path / 'cache'), tmp_path, seconds=1.0, writers=1, readers=2,
        writer_target=_foreign_writer,
    )  # fmt: skip
    assert violations(run, committed)
    run, committed = run_workload(
        str(tmp_path / 'off'), tmp_path, seconds=1.0, writers=1, readers=2,
        writer_target=_foreign_writer, reader_settings={'memory_size_limit': 0},
    )  # fmt: skip
    assert violations(run, committed) == []  # SQLite alone is never stale


@pytest.mark.slow
def test_no_stale_reads_long(tmp_path):
    run, committed = run_workload(str(tmp_path / 'cache'), tmp_path, seconds=10.0)
    _check(run, committed)


@pytest.mark.slow
def test_no_stale_reads_while_writers_are_killed_long(tmp_path):
    run, committed = run_workload(
        str(tmp_path / 'cache'), tmp_path, seconds=10.0, kill_every=0.05, kills=50
    )
    assert run.kills >= 50
    _check(run, committed)


def test_memory_stays_within_its_bound_under_large_values(tmp_path):
    directory = str(tmp_path / 'large')
    limit = 256 * 1024
    processes = []
    for number in range(4):
        process = _context.Process(target=_large_values, args=(directory, number, limit))
        processes.append(process)
    dc.Cache(directory).close()
    for process in processes:
        process.start()
    for process in processes:
        process.join(120)
        assert process.exitcode == 0


def _large_values(directory: str, number: int, limit: int) -> None:
    cache = dc.Cache(directory, memory_size_limit=limit)
    rng = random.Random(number)
    sizes = (2_000, 20_000, 31_000, 60_000)
    ok = True
    for step in range(600):
        key = rng.randrange(60)
        if rng.random() < 0.2:
            cache.set(key, os.urandom(rng.choice(sizes)))
        else:
            cache.get(key)
        stats = cache.memory_stats()
        ok = ok and stats.size <= limit
    ok = ok and cache.memory_stats().hits > 0
    os._exit(0 if ok else 1)
