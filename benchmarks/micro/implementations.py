"""The one list of cache implementations the micro-benchmarks compare.

Every implementation belongs to a family (``Cache``, ``FanoutCache``); the report pairs ours with
python-diskcache's within a family, so adding a family here adds rows to the table and nothing else
needs to change.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Protocol

FANOUT_SHARDS = 8
MEMORY_OFF_FAMILY = "Cache, memory off"


class CacheLike(Protocol):
    """The API shared by both libraries that the benchmarks use."""

    def get(self, key: Any, default: Any = None) -> Any: ...

    def set(self, key: Any, value: Any) -> Any: ...

    def delete(self, key: Any) -> Any: ...

    def incr(self, key: Any, delta: int = 1, default: int = 0) -> int: ...

    def transact(self, retry: bool = False) -> ContextManager[Any]: ...

    def close(self) -> None: ...


#: Opens a cache: ``factory(directory, **settings)``.
CacheFactory = Callable[..., CacheLike]


@dataclass(frozen=True)
class Implementation:
    """A labelled cache factory; ``ours`` is True for diskcache_core, False for the peer.

    ``peer_family`` names the family whose peer a variant of ours is compared with when its own
    family has none (the memory-tier-off variant is compared with python-diskcache's Cache).
    """

    label: str
    family: str
    ours: bool
    factory: CacheFactory
    peer_family: str | None = None


def implementations() -> list[Implementation]:
    """Return the implementations to benchmark, ours before the peer within each family.

    ``FanoutCache`` pairs are included once ``diskcache_core.FanoutCache`` exists.
    """
    import diskcache

    import diskcache_core

    found = [
        Implementation("diskcache_core.Cache", "Cache", True, diskcache_core.Cache),
        Implementation("diskcache.Cache", "Cache", False, diskcache.Cache),
        # The memory tier off: every get goes to SQLite, as before the tier existed.
        Implementation(
            "diskcache_core.Cache(memory off)",
            MEMORY_OFF_FAMILY,
            True,
            functools.partial(diskcache_core.Cache, memory_size_limit=0),
            peer_family="Cache",
        ),
    ]
    core_fanout = getattr(diskcache_core, "FanoutCache", None)
    if core_fanout is not None:
        found += [
            Implementation(
                "diskcache_core.FanoutCache",
                "FanoutCache",
                True,
                functools.partial(core_fanout, shards=FANOUT_SHARDS),
            ),
            Implementation(
                "diskcache.FanoutCache",
                "FanoutCache",
                False,
                functools.partial(diskcache.FanoutCache, shards=FANOUT_SHARDS),
            ),
        ]
    return found
