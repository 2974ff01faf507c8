"""python-diskcache's ``diskcache.core`` module path: ``from diskcache_core.core import Cache``.

An alias for code that imports python-diskcache's modules by path; new code imports from
``diskcache_core`` itself.
"""

from ._cache.cache import Cache
from ._disk.disk import (
    ENOVAL,
    MODE_BINARY,
    MODE_NONE,
    MODE_PICKLE,
    MODE_RAW,
    MODE_TEXT,
    UNKNOWN,
    Constant,
    Disk,
    JSONDisk,
)
from ._errors import EmptyDirWarning, Timeout, UnknownFileWarning
from ._recipes.memokeys import args_to_key
from ._recipes.locks import full_name
from ._policies import EVICTION_POLICY
from ._settings import METADATA
from ._store.schema import DBNAME
from ._settings import DEFAULT_SETTINGS


__all__ = [
    "DBNAME",
    "DEFAULT_SETTINGS",
    "ENOVAL",
    "EVICTION_POLICY",
    "METADATA",
    "MODE_BINARY",
    "MODE_NONE",
    "MODE_PICKLE",
    "MODE_RAW",
    "MODE_TEXT",
    "UNKNOWN",
    "Cache",
    "Constant",
    "Disk",
    "EmptyDirWarning",
    "JSONDisk",
    "Timeout",
    "UnknownFileWarning",
    "args_to_key",
    "full_name",
]
