"""Cache-level backends: what each one is (``BackendSpec``) and the adapter that drives it.

An adapter exposes ``get``, ``set`` and ``delete`` bound straight to the client's own methods (so
the timed call is the client's call and nothing else) and a ``missed`` rule that judges the
returned value after the clock has stopped. Adapters are opened inside the worker process, never
before a fork.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Optional

from .workload import GET, SET

#: Where a backend keeps its data, which tells the runner what to prepare for it.
DIRECTORY, SERVER, PROCESS_MEMORY = "directory", "server", "process-memory"

# pylibmc ships wheels (with libmemcached inside) up to Python 3.11 only; on a newer Python pip
# builds it from source, which needs libmemcached's headers (pyproject.toml leaves it out there).
PYLIBMC_HINT = (
    "pip install pylibmc" if sys.version_info < (3, 12)
    else "apt-get install libmemcached-dev, then pip install pylibmc (no wheel for this Python)"
)


@dataclass(frozen=True)
class BackendSpec:
    """A benchmarked backend: a plain value the runner hands to every worker process."""

    name: str  #: selection id on the command line, e.g. ``core-fanout8``
    label: str  #: full name shown in tables, e.g. ``diskcache_core.FanoutCache(shards=8, ...)``
    short: str  #: compact name for plot axes and legends
    level: str  #: ``cache`` (the client API) or ``django`` (through ``django.core.cache``)
    adapter: str  #: key into the adapter registry of ``catalog``
    storage: str  #: DIRECTORY, SERVER or PROCESS_MEMORY
    options: dict[str, Any] = field(default_factory=dict)
    #: Python modules needed, each with the command that installs it.
    requires: tuple[tuple[str, str], ...] = ()
    server: Optional[str] = None  #: ``memcached`` or ``redis`` when a server must run
    baseline: Optional[str] = None  #: name of the python-diskcache backend to compare with


class Adapter:
    """Runs get/set/delete on one client and says whether a result counts as a miss."""

    #: Keys are handed over as bytes; Django's cache API wants str.
    key_type: ClassVar[type] = bytes
    #: True when every process has its own copy of the data (then each worker populates it).
    process_local: bool = False

    get: Callable[[Any], Any]
    set: Callable[[Any, bytes], Any]
    delete: Callable[[Any], Any]

    def __init__(self, client: Any) -> None:
        self.client = client
        self.get = client.get
        self.set = client.set
        self.delete = client.delete

    @classmethod
    def open(cls, spec: BackendSpec, location: str) -> Adapter:
        """Connect to (or open) the backend described by ``spec`` at ``location``."""
        raise NotImplementedError

    @staticmethod
    def missed(action: int, result: Any) -> bool:
        """A get that found nothing, a set that was refused, a delete of a missing key."""
        if action == GET:
            return result is None
        if action == SET:
            return result is False
        return not result

    def close(self) -> None:
        """Release the client's connections or files."""
        close = getattr(self.client, "close", None)
        if close is not None:
            close()


class DiskCacheAdapter(Adapter):
    """``Cache`` or ``FanoutCache`` of diskcache_core or python-diskcache, on a directory.

    Misses: ``get`` returns None for a missing key (or, in FanoutCache, on a timeout); ``set``
    returns False when FanoutCache gives up after its timeout; ``delete`` returns False when the
    key was missing (or on a FanoutCache timeout).
    """

    @classmethod
    def open(cls, spec: BackendSpec, location: str) -> DiskCacheAdapter:
        module = importlib.import_module(spec.options["module"])
        cache_class = getattr(module, spec.options["class"])
        return cls(cache_class(location, **spec.options.get("kwargs", {})))


class MemcachedAdapter(Adapter):
    """pylibmc talking to Memcached: get None, set False and delete False are misses."""

    @classmethod
    def open(cls, spec: BackendSpec, location: str) -> MemcachedAdapter:
        import pylibmc

        return cls(pylibmc.Client([location], behaviors={"tcp_nodelay": True}))

    def close(self) -> None:
        self.client.disconnect_all()


class RedisAdapter(Adapter):
    """redis-py talking to Redis: get None is a miss, and so is a delete that removed 0 keys."""

    @staticmethod
    def missed(action: int, result: Any) -> bool:
        if action == GET:
            return result is None
        if action == SET:
            return not result
        return result == 0

    @classmethod
    def open(cls, spec: BackendSpec, location: str) -> RedisAdapter:
        import redis

        host, port = location.rsplit(":", 1)
        return cls(redis.Redis(host=host, port=int(port)))


ADAPTERS: dict[str, type[Adapter]] = {
    "diskcache": DiskCacheAdapter,
    "memcached": MemcachedAdapter,
    "redis": RedisAdapter,
}

_CORE_HINT = "pip install -e . (from the repository root)"
_DISKCACHE_HINT = "pip install 'diskcache==5.6.3'"

#: The three embedded configurations, named as python-diskcache's own benchmark names them.
_EMBEDDED_CONFIGS: tuple[tuple[str, str, str, dict[str, Any]], ...] = (
    ("cache", "Cache", "Cache", {}),
    ("fanout4", "FanoutCache(shards=4, timeout=1.0)", "Fanout(4)", {"shards": 4, "timeout": 1.0}),
    (
        "fanout8",
        "FanoutCache(shards=8, timeout=0.010)",
        "Fanout(8, 10ms)",
        {"shards": 8, "timeout": 0.010},
    ),
)


def _embedded(prefix: str, module: str, hint: str, baseline: bool) -> list[BackendSpec]:
    specs = []
    for suffix, signature, short, kwargs in _EMBEDDED_CONFIGS:
        specs.append(
            BackendSpec(
                name=f"{prefix}-{suffix}",
                label=f"{module}.{signature}",
                short=f"{prefix} {short}",
                level="cache",
                adapter="diskcache",
                storage=DIRECTORY,
                options={"module": module, "class": signature.split("(")[0], "kwargs": kwargs},
                requires=((module, hint),),
                baseline=f"diskcache-{suffix}" if baseline else None,
            )
        )
    return specs


CACHE_BACKENDS: tuple[BackendSpec, ...] = (
    *_embedded("core", "diskcache_core", _CORE_HINT, baseline=True),
    *_embedded("diskcache", "diskcache", _DISKCACHE_HINT, baseline=False),
    BackendSpec(
        name="memcached",
        label="pylibmc + Memcached",
        short="Memcached",
        level="cache",
        adapter="memcached",
        storage=SERVER,
        requires=(("pylibmc", PYLIBMC_HINT),),
        server="memcached",
    ),
    BackendSpec(
        name="redis",
        label="redis-py + Redis",
        short="Redis",
        level="cache",
        adapter="redis",
        storage=SERVER,
        requires=(("redis", "pip install redis"),),
        server="redis",
    ),
)
