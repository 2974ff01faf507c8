"""The parent side of a benchmark: servers up, then for each process count and backend a fresh
store, a populate step, N workers released together by a barrier, and their timings merged.

Every child process and server started here is stopped here, on success, error or Ctrl-C, and
every wait is bounded in time.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import tempfile
import time
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from . import environment
from .backends import DIRECTORY, PROCESS_MEMORY, SERVER, BackendSpec
from .catalog import servers_needed, skip_reason
from .progress import Progress
from .results import BackendResult, RunResults
from .servers import SERVERS, Server
from .stats import summarize
from .worker import WorkerResult, WorkerTask, populate_process, worker_process
from .workload import ACTIONS, Workload

_STOP_TIMEOUT = 5.0
_POLL_INTERVAL = 0.2


class RunFailure(Exception):
    """One (backend, process count) run could not complete; the others still run."""


@dataclass
class RunConfig:
    """What to measure: the workload, process counts, backends, and where scratch data lives."""

    workload: Workload = field(default_factory=Workload)
    processes: Sequence[int] = (1, 8)
    backends: Sequence[BackendSpec] = ()
    start_method: Optional[str] = None  #: fork, spawn or forkserver; None: the platform default
    scratch: Optional[str] = None  #: parent directory of the caches' directories
    run_timeout: float = 1800.0  #: seconds one (backend, process count) run may take
    smoke: bool = False  #: a ``--quick`` smoke run: the reports say its figures are no measurement

    def parameters(self, start_method: str) -> dict[str, Any]:
        return {
            **self.workload.to_dict(),
            "processes": list(self.processes),
            "backends": [spec.name for spec in self.backends],
            "start_method": start_method,
            "scratch": self.scratch or tempfile.gettempdir(),
            "smoke": self.smoke,
        }


def _stop_processes(processes: Sequence[Any]) -> None:
    """Terminate whatever still runs, kill what ignores that, and reap everything."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(_STOP_TIMEOUT)
        if process.is_alive():
            process.kill()
            process.join(_STOP_TIMEOUT)


def _wait(processes: Sequence[Any], deadline: float, progress: Progress,
          counters: Optional[Any] = None) -> None:
    """Wait for all processes to exit before ``deadline``, redrawing progress meanwhile."""
    for process in processes:
        while process.is_alive():
            if time.monotonic() > deadline:
                raise RunFailure("timed out; raise --run-timeout or lower --operations")
            process.join(_POLL_INTERVAL)
            if counters is not None:
                progress.update(sum(counters))
    failed = [p for p in processes if p.exitcode != 0]
    if failed:
        codes = ", ".join(f"{p.name} exit code {p.exitcode}" for p in failed)
        raise RunFailure(f"child process failed ({codes}); its traceback is above")


class Runner:
    """Runs every selected backend at every process count and collects ``RunResults``."""

    def __init__(self, config: RunConfig, progress: Optional[Progress] = None) -> None:
        self.config = config
        self.context: Any = multiprocessing.get_context(config.start_method)
        self.progress = progress or Progress(total_runs=0, quiet=True)
        self.servers: dict[str, Server] = {}

    def run(self) -> RunResults:
        """Measure everything; skipped and failed backends are recorded, not raised."""
        config = self.config
        results = RunResults(
            metadata=environment.collect(),
            parameters=config.parameters(self.context.get_start_method()),
        )
        runnable = []
        for spec in config.backends:
            reason = skip_reason(spec)
            if reason is None:
                runnable.append(spec)
            else:
                self._skip(results, spec, reason)
        with contextlib.ExitStack() as stack:
            for name in servers_needed(runnable):
                try:
                    self.servers[name] = stack.enter_context(SERVERS[name]())
                except RuntimeError as exc:
                    for spec in [s for s in runnable if s.server == name]:
                        runnable.remove(spec)
                        self._skip(results, spec, str(exc))
            self.progress.total_runs = len(runnable) * len(config.processes)
            for processes in config.processes:
                for spec in runnable:
                    self._run_and_record(results, spec, processes)
        self.servers = {}
        return results

    def _skip(self, results: RunResults, spec: BackendSpec, reason: str) -> None:
        results.skipped.append({"backend": spec.name, "reason": reason})
        self.progress.note(f"skipping {spec.label}: {reason}")

    def _run_and_record(self, results: RunResults, spec: BackendSpec, processes: int) -> None:
        self.progress.start(spec.label, processes, processes * self.config.workload.operations)
        try:
            result = self.run_one(spec, processes)
        except (RunFailure, OSError, RuntimeError) as exc:
            failure = {"backend": spec.name, "processes": processes, "reason": str(exc)}
            results.failed.append(failure)
            self.progress.finish(f"FAILED: {exc}")
            return
        results.results.append(result)
        recorded = sum(stats.count for stats in result.actions.values())
        self.progress.finish(f"{recorded:,} operations recorded")

    def _location(self, spec: BackendSpec, workdir: str) -> str:
        if spec.storage == DIRECTORY:
            return os.path.join(workdir, "cache")
        if spec.storage == SERVER:
            assert spec.server is not None
            server = self.servers[spec.server]
            server.flush()
            return server.address
        if spec.storage == PROCESS_MEMORY:
            return f"benchmark-{spec.name}"
        raise ValueError(f"unknown storage {spec.storage!r}")

    def run_one(self, spec: BackendSpec, processes: int) -> BackendResult:
        """One backend with ``processes`` workers, on a fresh, fully populated store."""
        workload = self.config.workload
        deadline = time.monotonic() + self.config.run_timeout
        workdir = tempfile.mkdtemp(prefix="dcbench-", dir=self.config.scratch)
        children: list[Any] = []
        try:
            location = self._location(spec, workdir)
            if spec.storage != PROCESS_MEMORY:
                filler = self.context.Process(
                    target=populate_process, args=(spec, location, workload), name="populate"
                )
                children.append(filler)
                filler.start()
                _wait([filler], deadline, self.progress)
            barrier = self.context.Barrier(processes)
            counters = self.context.Array("q", processes, lock=False)
            tasks = [
                WorkerTask(spec, location, workload, index,
                           os.path.join(workdir, f"worker-{index}.result"))
                for index in range(processes)
            ]
            workers = [
                self.context.Process(target=worker_process, args=(task, barrier, counters),
                                     name=f"worker-{task.worker_index}")
                for task in tasks
            ]
            children.extend(workers)
            for worker in workers:
                worker.start()
            _wait(workers, deadline, self.progress, counters)
            return self._merge(spec, processes, [WorkerResult.load(t.result_path) for t in tasks])
        finally:
            _stop_processes(children)
            shutil.rmtree(workdir, ignore_errors=True)

    def _merge(self, spec: BackendSpec, processes: int,
               outcomes: list[WorkerResult]) -> BackendResult:
        actions = {}
        for action in ACTIONS:
            samples = array("q")
            for outcome in outcomes:
                samples.extend(outcome.timings[action])
            misses = sum(outcome.misses[action] for outcome in outcomes)
            actions[action] = summarize(action, samples, misses)
        return BackendResult(
            name=spec.name,
            label=spec.label,
            short=spec.short,
            level=spec.level,
            processes=processes,
            actions=actions,
            elapsed=max(outcome.wall_ns for outcome in outcomes) / 1e9,
            baseline=spec.baseline,
            server=spec.server,
        )
