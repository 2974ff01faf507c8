"""The results of a benchmark run and their JSON form (what ``--compare`` and the plots read)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional

from .stats import ActionStats

FORMAT = "diskcache_core-benchmarks/1"


@dataclass
class BackendResult:
    """One backend measured with one number of processes."""

    name: str
    label: str
    short: str
    level: str
    processes: int
    actions: dict[str, ActionStats]
    elapsed: float = 0.0  #: wall-clock seconds of the timed part, all workers together
    baseline: Optional[str] = None
    server: Optional[str] = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "label": self.label,
            "short": self.short,
            "level": self.level,
            "processes": self.processes,
            "elapsed": self.elapsed,
            "baseline": self.baseline,
            "server": self.server,
            "actions": {name: stats.to_dict() for name, stats in self.actions.items()},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BackendResult:
        return cls(
            name=data["name"],
            label=data["label"],
            short=data["short"],
            level=data["level"],
            processes=int(data["processes"]),
            elapsed=float(data.get("elapsed", 0.0)),
            baseline=data.get("baseline"),
            server=data.get("server"),
            actions={k: ActionStats.from_dict(v) for k, v in data["actions"].items()},
        )


@dataclass
class RunResults:
    """Everything one invocation measured, with the machine and the parameters it ran with."""

    metadata: dict[str, Any] = field(default_factory=dict)
    parameters: dict[str, Any] = field(default_factory=dict)
    results: list[BackendResult] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)  #: {"backend", "reason"}
    #: {"backend", "processes", "reason"} of runs that did not complete
    failed: list[dict[str, Any]] = field(default_factory=list)

    def find(self, name: str, processes: int) -> Optional[BackendResult]:
        """The result of a backend at a process count, if it ran."""
        for result in self.results:
            if result.name == name and result.processes == processes:
                return result
        return None

    def levels(self) -> list[str]:
        """The levels present (``cache`` before ``django``)."""
        return sorted({r.level for r in self.results}, key=lambda level: level != "cache")

    def process_counts(self) -> list[int]:
        return sorted({r.processes for r in self.results})

    def select(self, level: str, processes: int) -> list[BackendResult]:
        """Results of one level and process count, in the order they ran."""
        return [r for r in self.results if r.level == level and r.processes == processes]

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "metadata": self.metadata,
            "parameters": self.parameters,
            "results": [result.to_dict() for result in self.results],
            "skipped": self.skipped,
            "failed": self.failed,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunResults:
        if data.get("format") != FORMAT:
            raise ValueError(f"not a benchmark result file (format {data.get('format')!r})")
        return cls(
            metadata=data.get("metadata", {}),
            parameters=data.get("parameters", {}),
            results=[BackendResult.from_dict(r) for r in data.get("results", [])],
            skipped=data.get("skipped", []),
            failed=data.get("failed", []),
        )

    def save(self, path: str, extra: Optional[dict[str, Any]] = None) -> None:
        """Write as indented JSON; ``extra`` adds derived sections that loading ignores."""
        data = self.to_dict()
        data.update(extra or {})
        with open(path, "w", encoding="utf-8") as out:
            json.dump(data, out, indent=1, ensure_ascii=False)
            out.write("\n")

    @classmethod
    def load(cls, path: str) -> RunResults:
        with open(path, encoding="utf-8") as source:
            return cls.from_dict(json.load(source))
