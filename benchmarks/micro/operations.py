"""The operations measured, their round counts and their speed targets, in table order."""

from __future__ import annotations

from dataclasses import dataclass

#: Each benchmark runs as this many separate pytest-benchmark tests per implementation, in ABBA
#: order (ours, peer, peer, ours, ...), and the report pools their samples. Alternating spreads
#: slow drifts of a noisy machine (CPU frequency, page cache, neighbours) evenly over both sides.
FULL_REPEATS = 10
QUICK_REPEATS = 2


def repeats(quick: bool) -> int:
    return QUICK_REPEATS if quick else FULL_REPEATS


@dataclass(frozen=True)
class Operation:
    """One measured cache operation.

    ``target`` is the largest acceptable ratio of medians, ours / python-diskcache's.
    ``rounds`` and ``quick_rounds`` count the timed calls per implementation over all repeats
    (one call per round, so that every call is a sample for the percentiles).
    """

    name: str
    title: str
    target: float
    rounds: int
    quick_rounds: int = 60

    def rounds_per_repeat(self, quick: bool) -> tuple[int, int]:
        """Return ``(rounds, warmup_rounds)`` for one repeat; warm-up calls are not timed."""
        total = self.quick_rounds if quick else self.rounds
        rounds = -(-total // repeats(quick))
        return rounds, max(1, rounds // 10)


OPERATIONS: tuple[Operation, ...] = (
    Operation("get_hit_100b", "get hit 100 B", 0.85, 40_000),
    Operation("get_hit_10kb", "get hit 10 KB", 0.85, 40_000),
    Operation("get_miss", "get miss", 0.85, 40_000),
    # Gets the memory tier cannot answer: each key read once, misses of keys never read before,
    # uniform reads over more items than the tier holds.
    Operation("get_cold_100b", "get 100 B, each key read once", 0.85, 20_000),
    Operation("get_miss_new", "get miss, key never read", 0.85, 20_000),
    # Keys written through another Cache object on the same directory (another process, in
    # practice), each read once: no tier holds them, every get reads SQLite (and the 10 KB one
    # its value), as a reader that did not write them.
    Operation("get_other_100b", "get 100 B, read once (another Cache object)", 0.85, 20_000),
    Operation("get_other_10kb", "get 10 KB, read once (another Cache object)", 0.85, 20_000),
    Operation("get_uniform_1kb", "get 1 KB, uniform over 200k items", 0.85, 20_000, quick_rounds=40),
    Operation("set_new_100b", "set 100 B new key", 0.6, 20_000),
    Operation("set_overwrite_100b", "set 100 B overwrite", 0.6, 20_000),
    Operation("set_10kb", "set 10 KB new key", 0.6, 20_000),
    Operation("set_1mb", "set 1 MB overwrite (file)", 0.8, 1_500, quick_rounds=20),
    Operation("delete", "delete existing key", 0.6, 20_000),
    Operation("incr", "incr", 0.6, 20_000),
    Operation("get_lru", "get hit 100 B, LRU policy", 0.3, 40_000),
)

OPERATIONS_BY_NAME: dict[str, Operation] = {op.name: op for op in OPERATIONS}
