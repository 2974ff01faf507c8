"""The standard workload: which operations a worker performs, on which keys, with which values.

Keys are ``str(randrange(key_range)).encode()``; a set's value is ``str(i).encode()`` repeated
``randrange(*value_sizes)`` times, ``i`` being the operation's index. Each operation is a get, a set
or a delete, drawn with the weights of ``mix``. The whole plan is drawn before the clock starts, so
the timed loop only calls the cache.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any, Optional

ACTIONS: tuple[str, ...] = ("get", "set", "delete")
GET, SET, DELETE = range(3)

#: One planned operation: (index into ACTIONS, key, value or None).
Operation = tuple[int, bytes, Optional[bytes]]


@dataclass(frozen=True)
class Workload:
    """Parameters of one worker's run; a plain, picklable value handed to every worker."""

    operations: int = 100_000
    key_range: int = 100
    warmup: int = 1_000
    value_sizes: tuple[int, int] = (1, 100)
    mix: tuple[int, int, int] = (90, 9, 1)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.operations < 1:
            raise ValueError("operations must be at least 1")
        if self.key_range < 1:
            raise ValueError("key_range must be at least 1")
        if not 0 <= self.warmup < self.operations:
            raise ValueError("warmup must be at least 0 and less than operations")
        low, high = self.value_sizes
        if not 1 <= low < high:
            raise ValueError("value_sizes must be MIN,MAX with 1 <= MIN < MAX (randrange bounds)")
        if len(self.mix) != len(ACTIONS) or min(self.mix) < 0 or sum(self.mix) <= 0:
            raise ValueError("mix needs three get,set,delete weights >= 0 with a positive sum")

    @property
    def recorded(self) -> int:
        """Operations per worker whose timings are kept (all but the warmup)."""
        return self.operations - self.warmup

    def to_dict(self) -> dict[str, Any]:
        """The parameters as JSON-ready values."""
        return {**asdict(self), "value_sizes": list(self.value_sizes), "mix": list(self.mix)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Workload:
        """Inverse of ``to_dict``."""
        return cls(
            operations=data["operations"],
            key_range=data["key_range"],
            warmup=data["warmup"],
            value_sizes=tuple(data["value_sizes"]),  # type: ignore[arg-type]
            mix=tuple(data["mix"]),  # type: ignore[arg-type]
            seed=data["seed"],
        )


def worker_rng(workload: Workload, worker_index: int) -> random.Random:
    """A generator of its own per worker, so runs repeat exactly for a given seed."""
    return random.Random(workload.seed * 1_000_003 + worker_index)


def plan_operations(workload: Workload, worker_index: int) -> list[Operation]:
    """Draw the full list of operations one worker performs, warmup included."""
    rng = worker_rng(workload, worker_index)
    cumulative = []
    total = 0
    for weight in workload.mix:
        total += weight
        cumulative.append(total)
    low, high = workload.value_sizes
    plan: list[Operation] = []
    for index in range(workload.operations):
        draw = rng.random() * total
        action = next(code for code, bound in enumerate(cumulative) if draw < bound)
        key = str(rng.randrange(workload.key_range)).encode()
        value = str(index).encode() * rng.randrange(low, high) if action == SET else None
        plan.append((action, key, value))
    return plan


def initial_items(workload: Workload) -> Iterator[tuple[bytes, bytes]]:
    """Every key of the range with a value, stored before the workers start."""
    rng = random.Random(workload.seed)
    low, high = workload.value_sizes
    for number in range(workload.key_range):
        key = str(number).encode()
        yield key, key * rng.randrange(low, high)
