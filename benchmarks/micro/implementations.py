"""The one list of cache implementations the micro-benchmarks compare.

Every implementation belongs to a family (``Cache``, ``FanoutCache``) and a library; the report
pairs ours with python-diskcache's within a family (the speed targets), and shows the other peers'
medians beside them with the ratio to the best of all peers, so adding a family here adds rows to
the table and nothing else needs to change. A peer library that is not installed is left out of
the run and reported missing (``missing_peers``), never given a figure.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Protocol

FANOUT_SHARDS = 8
MEMORY_OFF_FAMILY = "Cache, memory off"

OURS = "diskcache_core"
#: The peer of the speed targets (``Operation.target``): the library we are a drop-in for.
REFERENCE_PEER = "python-diskcache"
#: Further peers (the ``bench`` extra installs them), their importable module, in column order:
#: the maintained fork, and a Rust rewrite with one SQLite table and no triggers.
OTHER_PEERS: dict[str, str] = {
    "diskcache-community": "diskcache_community",
    "diskcache-rs": "diskcache_rs",
}
#: Settings that make a peer hold what the others hold: diskcache-rs evicts past 100,000 items by
#: default (the uniform-read row keeps 200,000); the others have no count limit.
PEER_SETTINGS: dict[str, dict[str, Any]] = {"diskcache-rs": {"count_limit": 2**31}}


class CacheLike(Protocol):
    """The API shared by both libraries that the benchmarks use."""

    def get(self, key: Any, default: Any = None) -> Any: ...

    def set(self, key: Any, value: Any) -> Any: ...

    def delete(self, key: Any) -> Any: ...

    def incr(self, key: Any, delta: int = 1, default: int = 0) -> int: ...

    def transact(self, retry: bool = False) -> ContextManager[Any]: ...

    def close(self) -> None: ...

    def __len__(self) -> int: ...

    @property
    def directory(self) -> Any: ...  # a str, or a pathlib.Path (diskcache-rs)


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
    library: str = ""

    def __post_init__(self) -> None:
        if not self.library:
            object.__setattr__(self, "library", OURS if self.ours else REFERENCE_PEER)


def _other_peer_modules() -> dict[str, Any]:
    """The other peers' modules that import, by library name."""
    found = {}
    for library, module in OTHER_PEERS.items():
        try:
            found[library] = importlib.import_module(module)
        except ImportError:
            continue
    return found


def missing_peers() -> list[str]:
    """The other peers that are not installed: their columns read n/a, and the verdict says why."""
    found = _other_peer_modules()
    return [library for library in OTHER_PEERS if library not in found]


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
    # The other peers, in the Cache family only: single-process rows of the issue-39 table.
    for library, module in _other_peer_modules().items():
        factory = functools.partial(module.Cache, **PEER_SETTINGS.get(library, {}))
        label = f"{module.__name__}.Cache"
        found.append(Implementation(label, "Cache", False, factory, library=library))
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
