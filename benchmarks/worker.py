"""Code that runs inside the benchmark's child processes.

Everything a worker needs arrives as explicit, picklable arguments (``WorkerTask``), so the same
code is correct under the fork, spawn and forkserver start methods. A worker writes its timings
to a result file named in its task; the parent reads it after the worker has exited, which avoids
pushing megabytes through a pipe that must be drained before ``join``.
"""

from __future__ import annotations

import os
import pickle
import time
from array import array
from dataclasses import dataclass
from typing import Any, Callable, Optional

from .backends import Adapter, BackendSpec
from .catalog import open_adapter
from .workload import ACTIONS, Workload, initial_items, plan_operations

BARRIER_TIMEOUT = 120.0
_PROGRESS_EVERY = 1024  # operations between two updates of the shared progress counter


@dataclass(frozen=True)
class WorkerTask:
    """Everything one worker process needs, passed explicitly to the child."""

    spec: BackendSpec
    location: str  #: directory, ``127.0.0.1:port`` or a name, by the backend's storage
    workload: Workload
    worker_index: int
    result_path: str


@dataclass
class WorkerResult:
    """Recorded timings (ns) and miss counts of one worker, per action name."""

    timings: dict[str, array]
    misses: dict[str, int]
    wall_ns: int = 0  #: wall-clock time of the whole timed loop, warmup included

    def save(self, path: str) -> None:
        """Write atomically: a half-written file is never taken for a result."""
        partial = f"{path}.partial"
        with open(partial, "wb") as out:
            pickle.dump(self, out, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(partial, path)

    @staticmethod
    def load(path: str) -> WorkerResult:
        with open(path, "rb") as source:
            result = pickle.load(source)
        if not isinstance(result, WorkerResult):
            raise TypeError(f"{path} does not hold a worker result")
        return result


def populate(adapter: Adapter, workload: Workload) -> None:
    """Store every key of the range, so gets find something from the first operation on."""
    for key, value in initial_items(workload):
        adapter.set(key.decode() if adapter.key_type is str else key, value)


def populate_process(spec: BackendSpec, location: str, workload: Workload) -> None:
    """Child process entry point: fill a shared backend once before the workers start."""
    adapter = open_adapter(spec, location)
    try:
        populate(adapter, workload)
    finally:
        adapter.close()


def _convert_keys(plan: list[Any], key_type: type) -> list[Any]:
    if key_type is bytes:
        return plan
    return [(action, key.decode(), value) for action, key, value in plan]


def timed_loop(
    adapter: Adapter, workload: Workload, plan: list[Any], progress: Optional[Any], slot: int
) -> WorkerResult:
    """Run the plan, timing each call with ``perf_counter_ns``; warmup operations are not kept."""
    calls: tuple[Callable[..., Any], ...] = (adapter.get, adapter.set, adapter.delete)
    missed = adapter.missed
    timings = [array("q") for _ in ACTIONS]
    misses = [0 for _ in ACTIONS]
    warmup = workload.warmup
    clock = time.perf_counter_ns
    began = clock()
    for index, (action, key, value) in enumerate(plan):
        call = calls[action]
        if value is None:
            start = clock()
            result = call(key)
            end = clock()
        else:
            start = clock()
            result = call(key, value)
            end = clock()
        if index >= warmup:
            timings[action].append(end - start)
            if missed(action, result):
                misses[action] += 1
        if progress is not None and index % _PROGRESS_EVERY == 0:
            progress[slot] = index
    if progress is not None:
        progress[slot] = len(plan)
    return WorkerResult(
        timings=dict(zip(ACTIONS, timings)),
        misses=dict(zip(ACTIONS, misses)),
        wall_ns=clock() - began,
    )


def worker_process(task: WorkerTask, barrier: Any, progress: Optional[Any] = None) -> None:
    """Child process entry point: open the backend, wait for the others, run, save timings."""
    try:
        _run_worker(task, barrier, progress)
    except KeyboardInterrupt:
        # Ctrl-C reaches every process of the terminal's group; the parent reports it once.
        raise SystemExit(130) from None


def _run_worker(task: WorkerTask, barrier: Any, progress: Optional[Any]) -> None:
    try:
        adapter = open_adapter(task.spec, task.location)
    except BaseException:
        barrier.abort()  # release the other workers at once instead of at the barrier timeout
        raise
    try:
        if adapter.process_local:
            populate(adapter, task.workload)
        plan = _convert_keys(plan_operations(task.workload, task.worker_index), adapter.key_type)
        barrier.wait(BARRIER_TIMEOUT)
        result = timed_loop(adapter, task.workload, plan, progress, task.worker_index)
    except BaseException:
        barrier.abort()
        raise
    finally:
        adapter.close()
    result.save(task.result_path)
