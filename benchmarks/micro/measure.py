"""``Measure``: times one cache operation with pytest-benchmark, one call per round."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from benchmarks.micro.implementations import Implementation
from benchmarks.micro.operations import OPERATIONS_BY_NAME

#: Returns the positional and keyword arguments of the next timed call (pytest-benchmark's
#: pedantic ``setup``); it runs outside the timed region.
Setup = Callable[[], tuple[tuple[Any, ...], dict[str, Any]]]


@dataclass
class Measure:
    """Times an operation with pytest-benchmark, one call per round, and labels the result."""

    benchmark: Any
    implementation: Implementation
    repeat: int
    quick: bool

    def calls(self, operation: str) -> int:
        """Total calls (warm-up and timed) that measuring ``operation`` will make."""
        rounds, warmup = OPERATIONS_BY_NAME[operation].rounds_per_repeat(self.quick)
        return rounds + warmup

    def __call__(self, operation: str, target: Callable[..., Any], setup: Setup) -> Any:
        """Benchmark ``target(*args)`` with arguments from ``setup``; return the last result."""
        spec = OPERATIONS_BY_NAME[operation]
        rounds, warmup = spec.rounds_per_repeat(self.quick)
        impl = self.implementation
        self.benchmark.group = f"{spec.name} ({impl.family})"
        self.benchmark.extra_info.update(
            operation=spec.name,
            implementation=impl.label,
            family=impl.family,
            peer_family=impl.peer_family or impl.family,
            ours=impl.ours,
            library=impl.library,
            repeat=self.repeat,
        )
        return self.benchmark.pedantic(
            target, setup=setup, rounds=rounds, warmup_rounds=warmup, iterations=1
        )
