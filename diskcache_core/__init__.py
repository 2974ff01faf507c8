"""diskcache_core: an embeddable disk-and-memory cache with python-diskcache's API.

One SQLite database indexes every item; small values live inline, large ones in value files
beside it. Safe across threads and processes, with no server to run.
"""

import importlib as _importlib
import typing as _typing

from ._cache.cache import Cache
from ._disk.disk import ENOVAL, UNKNOWN, Disk, JSONDisk
from ._disk.safedisk import SafeDisk
from ._disk.default import configure, default_disk
from ._fanout.fanout import FanoutCache, FanoutStats
from ._errors import (
    DatabaseError,
    DiskCacheError,
    DiskFullError,
    EmptyDirWarning,
    FloatOverflowError,
    ReadOnlyCacheWarning,
    ReadOnlyError,
    RemoteError,
    RemoteOutcomeUnknownError,
    RemoteUnavailableError,
    RemoteUnsupportedError,
    StoredSettingWarning,
    Timeout,
    UnknownFileWarning,
    UnsafePickleError,
    UnsafeValueFileError,
)
from ._recipes.memo import Memoized, memoize_stampede
from ._memory.tier import MemoryStats
from ._metrics import (
    CacheMetrics, Evictions, Gets, HostCounts, MemoryMetrics, RemoteMetrics, Writes,
)
from ._collections.persistent import Deque, Index
from ._recipes.ratelimit import Averager, throttle
from ._recipes.locks import BoundedSemaphore, Lock, RLock, barrier
from ._policies import EVICTION_POLICY
from ._settings import DEFAULT_SETTINGS

if _typing.TYPE_CHECKING:
    from .contrib.django import DjangoCache

__version__ = "0.1.0"

__all__ = [
    "Averager",
    "BoundedSemaphore",
    "Cache",
    "CacheMetrics",
    "DEFAULT_SETTINGS",
    "DatabaseError",
    "Deque",
    "Disk",
    "DiskCacheError",
    "DiskFullError",
    "ENOVAL",
    "EVICTION_POLICY",
    "EmptyDirWarning",
    "Evictions",
    "FanoutCache",
    "FanoutStats",
    "FloatOverflowError",
    "Gets",
    "HostCounts",
    "Index",
    "JSONDisk",
    "Lock",
    "Memoized",
    "MemoryMetrics",
    "MemoryStats",
    "RLock",
    "ReadOnlyCacheWarning",
    "ReadOnlyError",
    "RemoteError",
    "RemoteMetrics",
    "RemoteOutcomeUnknownError",
    "RemoteUnavailableError",
    "RemoteUnsupportedError",
    "SafeDisk",
    "StoredSettingWarning",
    "Timeout",
    "UNKNOWN",
    "UnknownFileWarning",
    "UnsafePickleError",
    "UnsafeValueFileError",
    "Writes",
    "__version__",
    "barrier",
    "configure",
    "default_disk",
    "memoize_stampede",
    "throttle",
]


# python-diskcache's modules, reached as attributes of the package (``diskcache.core.ENOVAL``)
# by code that imports it under our name; each imported on first use.
_PEER_MODULES = frozenset({"core", "djangocache", "fanout", "persistent", "recipes"})


def __getattr__(name: str) -> _typing.Any:
    """``DjangoCache``, imported on first use (python-diskcache's README imports it from the
    package): Django is imported only by code that uses it. Likewise python-diskcache's module
    names (`_PEER_MODULES`)."""
    if name == "DjangoCache":
        from .contrib.django import DjangoCache

        return DjangoCache
    if name in _PEER_MODULES:
        return _importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public names: `__all__`, the lazy ``DjangoCache`` and python-diskcache's module
    names, and the module's dunders (not its helpers, nor its private submodules)."""
    dunders = [name for name in globals() if name.startswith("__") and name.endswith("__")]
    return sorted({*dunders, *__all__, "DjangoCache", "cli", "contrib", *_PEER_MODULES})
