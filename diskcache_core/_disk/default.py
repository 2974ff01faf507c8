"""The process-wide default Disk type: the one a Cache, FanoutCache, Deque, Index or DjangoCache
made without ``disk=`` uses, so that caches created inside other libraries can be switched to
SafeDisk without changing them. diskcache-community's `configure` and its environment variables
(``DISKCACHE_DISK``, ``DISKCACHE_SAFE_TYPES``, ``DISKCACHE_SAFE_MODULES``), with the same
meaning. The choice is never stored in a cache directory.
"""

from __future__ import annotations

import functools
import importlib
import os
from typing import Any

from .disk import Disk, check_disk_class
from .safedisk import SafeDisk

__all__ = [
    "ENV_DISK",
    "ENV_SAFE_MODULES",
    "ENV_SAFE_TYPES",
    "configure",
    "default_disk",
    "disk_type",
]

ENV_DISK = "DISKCACHE_DISK"
ENV_SAFE_TYPES = "DISKCACHE_SAFE_TYPES"
ENV_SAFE_MODULES = "DISKCACHE_SAFE_MODULES"

_configured: type[Disk] | None = None


def _check(disk: Any, source: str) -> type[Disk]:
    if not (isinstance(disk, type) and issubclass(disk, Disk)):
        raise ValueError(f"{source} must be a subclass of diskcache_core.Disk, not {disk!r}")
    return disk


def configure(disk: type[Disk] | None) -> type[Disk] | None:
    """Set the Disk type of the caches this process creates from now on without ``disk=``;
    return the one set before. ``configure(None)`` removes it: the environment variables
    apply again (`default_disk`). A ``disk=`` given always wins; open caches keep theirs.

    :raises ValueError: `disk` is not a Disk subclass
    """
    global _configured
    previous, _configured = _configured, None if disk is None else _check(disk, "disk")
    return previous


def default_disk() -> type[Disk]:
    """The Disk type of a cache created without ``disk=``: the one `configure` set, else the
    one the environment selects, else `Disk`.

    ``DISKCACHE_DISK`` is empty or ``default`` for Disk, ``safe`` for SafeDisk, or the import
    path of a Disk subclass (``myapp.cache:AppDisk`` or ``myapp.cache.AppDisk``). With ``safe``,
    ``DISKCACHE_SAFE_TYPES`` (import paths of classes) and ``DISKCACHE_SAFE_MODULES`` (module
    names), comma-separated, are what `SafeDisk.with_types` adds.

    :raises ValueError: an environment variable names nothing usable
    """
    if _configured is not None:
        return _configured
    environ = os.environ
    return _from_environment(
        environ.get(ENV_DISK, ""), environ.get(ENV_SAFE_TYPES, ""), environ.get(ENV_SAFE_MODULES, "")
    )


def _entries(value: str) -> list[str]:
    return [entry.strip() for entry in value.split(",") if entry.strip()]


def _import(path: str, source: str) -> Any:
    """The object at `path` (``module:name`` or ``module.name``)."""
    module, _, name = path.partition(":") if ":" in path else path.rpartition(".")
    try:
        if not module or not name:
            raise ImportError(f"not an import path: {path!r}")
        found: Any = importlib.import_module(module)
        for part in name.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"{source}: cannot import {path!r}: {exc}") from None
    return found


@functools.lru_cache(maxsize=16)
def _from_environment(name: str, types: str, modules: str) -> type[Disk]:
    """The Disk type these values of the environment variables select (imported once)."""
    keyword = name.strip().lower()
    if keyword == "safe":
        classes = [_import(entry, ENV_SAFE_TYPES) for entry in _entries(types)]
        prefixes = _entries(modules)
        return SafeDisk.with_types(*classes, modules=prefixes) if classes or prefixes else SafeDisk
    if types.strip() or modules.strip():
        raise ValueError(f"{ENV_SAFE_TYPES} and {ENV_SAFE_MODULES} apply only with {ENV_DISK}=safe")
    if keyword in ("", "default"):
        return Disk
    return _check(_import(name.strip(), ENV_DISK), ENV_DISK)


def disk_type(disk: Any) -> type[Disk]:
    """A cache's ``disk=`` argument checked (a Disk subclass, not an instance), or
    `default_disk()` for None."""
    if disk is None:
        return default_disk()
    check_disk_class(disk)
    return disk  # type: ignore[no-any-return]
