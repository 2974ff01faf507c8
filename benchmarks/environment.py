"""What machine and software a run measured, recorded beside its numbers."""

from __future__ import annotations

import datetime
import importlib
import os
import platform
import sqlite3
import sys
from importlib import metadata
from typing import Any, Optional

from .servers import SERVERS

#: Distribution name -> importable module name, for every package a backend can use.
PACKAGES: dict[str, str] = {
    "diskcache-core": "diskcache_core",
    "diskcache": "diskcache",
    "pylibmc": "pylibmc",
    "redis": "redis",
    "Django": "django",
    "matplotlib": "matplotlib",
}


def package_version(distribution: str, module: str) -> Optional[str]:
    """Installed version of a package, or its ``__version__`` when run from a source tree."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        pass
    try:
        imported = importlib.import_module(module)
    except Exception:  # missing, or broken on this Python: the backend is skipped with the reason
        return None
    version = getattr(imported, "__version__", None)
    return str(version) if version is not None else None


def _cpu_count() -> Optional[int]:
    try:
        return len(os.sched_getaffinity(0))  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        return os.cpu_count()


def collect() -> dict[str, Any]:
    """Python, SQLite, OS, CPUs, load, package and server versions, and a UTC timestamp."""
    packages = {name: package_version(name, module) for name, module in PACKAGES.items()}
    try:
        import pylibmc

        packages["libmemcached"] = str(pylibmc.libmemcached_version)
    except ImportError:
        packages["libmemcached"] = None
    try:
        load = list(os.getloadavg())
    except (AttributeError, OSError):
        load = None
    return {
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "sqlite": sqlite3.sqlite_version,
        "os": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": _cpu_count(),
        "load_average": load,
        "packages": packages,
        "servers": {name: server.version() for name, server in SERVERS.items()},
    }
