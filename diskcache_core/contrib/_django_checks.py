"""Django system checks of the CACHES entries DjangoCache serves: ``manage.py check`` reports,
with ids and hints, what would otherwise fail at first use, or not at all.

The entry's keys go through the rules the backend applies on first use (`read_entry`); the
directory is looked at without changing anything in it: a file where the directory should be,
no write access, a network filesystem (read from the mount table: no ``statfs`` type codes, no
network access), a shard count its layout file disagrees with. Django's check registry takes
these through `diskcache_core.contrib.django.DiskCacheCoreConfig` (see docs/django.rst,
"System checks").
"""

from __future__ import annotations

import os
import os.path as op
import re
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core import checks
from django.utils.module_loading import import_string

from .._errors import DatabaseError, DiskCacheError
from .._fanout.layout import check_shard_count, read_layout, shard_name
from .._store.schema import DBNAME
from ._django_options import Problem, given_shards, location, read_entry

__all__ = ["CHECK_IDS", "MOUNTS", "NETWORK_FILESYSTEMS", "check_caches", "filesystem_type"]

# Each kind of problem's id (E: Django refuses to run the cache; W: it runs, not as meant).
CHECK_IDS = {
    "location": "diskcache_core.E001",
    "not_a_directory": "diskcache_core.E002",
    "not_writable": "diskcache_core.E003",
    "unknown_option": "diskcache_core.E004",
    "bad_value": "diskcache_core.E005",
    "layout": "diskcache_core.E006",
    "limit_with_remote": "diskcache_core.E007",
    "remote_url": "diskcache_core.E008",
    "remote_client": "diskcache_core.E009",
    "network_filesystem": "diskcache_core.W001",
    "cull_with_remote": "diskcache_core.W002",
}

# The mount table (Linux; elsewhere it is missing and the filesystem check says nothing).
MOUNTS = "/proc/self/mounts"

# Filesystems whose locks SQLite cannot rely on: network and host-shared filesystems
# (python-diskcache issues 164, 249 and 345: a cache on NFS loses items or is damaged).
NETWORK_FILESYSTEMS = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb",
        "smb2",
        "smb3",
        "smbfs",
        "ncpfs",
        "afs",
        "9p",
        "ceph",
        "glusterfs",
        "lustre",
        "gpfs",
        "beegfs",
        "davfs",
        "vboxsf",
        "vmhgfs",
        "prl_fs",
        "sshfs",
        "fuse.sshfs",
        "fuse.glusterfs",
        "fuse.cephfs",
        "fuse.s3fs",
        "fuse.rclone",
        "fuse.gcsfuse",
        "fuse.davfs",
        "fuse.vmhgfs-fuse",
        "fuse.juicefs",
        "fuse.mountpoint-s3",
        "drvfs",
    }
)

_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


def check_caches(backend: type) -> list[checks.CheckMessage]:
    """The messages for every CACHES alias whose BACKEND is `backend` or a subclass of it."""
    messages: list[checks.CheckMessage] = []
    for alias, entry in settings.CACHES.items():
        if isinstance(entry, Mapping) and _serves(entry.get("BACKEND"), backend):
            for problem in entry_problems(dict(entry)):
                messages.append(_message(alias, problem))
    return messages


def entry_problems(entry: dict[str, Any]) -> list[Problem]:
    """Every problem of a CACHES entry: its keys (as the backend checks them on first use),
    then its directory."""
    params = dict(entry)
    directory = params.pop("LOCATION", "")  # (as Django's cache handler hands it over)
    _, problems = read_entry(directory, params)
    if any(problem.kind == "location" for problem in problems):
        return problems
    options = params.get("OPTIONS")
    read_only = isinstance(options, dict) and bool(options.get("read_only"))
    try:
        shards: int | None = check_shard_count(given_shards(params))
    except (TypeError, ValueError):
        shards = None  # (reported with the entry's keys)
    return problems + directory_problems(location(directory), shards, read_only)


def directory_problems(path: str, shards: int | None, read_only: bool) -> list[Problem]:
    """What is wrong with the cache directory `path` (absolute), looked at, never changed."""
    existing = _nearest_existing(path)
    if not op.isdir(existing):
        what = "is a file" if op.isfile(existing) else "is not a directory"
        where = f"LOCATION {path!r} {what}" if existing == path else (
            f"LOCATION {path!r} cannot be made: {existing!r} {what}")
        return [Problem(
            "not_a_directory", where,
            "Point LOCATION at a directory (it is created when missing), or move the file away.",
        )]
    problems = []
    if not read_only:
        refused = _not_writable(path, existing)
        if refused is not None:
            problems.append(Problem(
                "not_writable", refused,
                f"Give the user running Django (uid {os.geteuid()}) write access to it, or point"
                " LOCATION elsewhere; OPTIONS {'read_only': True} reads a cache without writing."
                if hasattr(os, "geteuid") else
                "Give the user running Django write access to it, or point LOCATION elsewhere.",
            ))
    kind = filesystem_type(existing)
    if kind in NETWORK_FILESYSTEMS:
        problems.append(Problem(
            "network_filesystem",
            f"LOCATION {path!r} is on a {kind} filesystem, whose locks SQLite cannot rely on:"
            " processes sharing it may lose items or damage the database",
            "Put LOCATION on a local disk (a directory per host), and share items between hosts"
            " with OPTIONS['remote'] (a Redis server).",
            warning=True,
        ))
    if shards is not None and existing == path:
        problems.extend(_layout_problems(path, shards))
    return problems


def filesystem_type(path: str, mounts: str | None = None) -> str | None:
    """The type of the filesystem holding `path` (an existing path), from the mount table: the
    last-mounted of the longest mount points containing it. None without a readable table."""
    try:
        with open(mounts or MOUNTS, encoding="utf-8", errors="surrogateescape") as table:
            lines = table.read().splitlines()
    except OSError:
        return None
    real = op.realpath(path)
    best, found = "", None
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = _OCTAL_ESCAPE.sub(lambda match: chr(int(match.group(1), 8)), fields[1])
        inside = point == "/" or real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):  # (a later mount on the same point hides the first)
            best, found = point, fields[2]
    return found


def _serves(path: Any, backend: type) -> bool:
    """True when the BACKEND dotted `path` names `backend` or a subclass (through any alias)."""
    if not isinstance(path, str):
        return False
    try:
        named = import_string(path)
    except ImportError:
        return False  # (another backend's business: Django reports it when it builds the cache)
    return isinstance(named, type) and issubclass(named, backend)


def _nearest_existing(path: str) -> str:
    """`path` if it exists, else its nearest parent that does."""
    while not op.lexists(path):
        parent = op.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def _not_writable(path: str, existing: str) -> str | None:
    """What this process could not write of the cache directory (the directory, or the parent
    it would be made in; each shard directory and database), or None."""
    if existing != path:
        if not os.access(existing, os.W_OK | os.X_OK):
            return f"LOCATION {path!r} cannot be made: {existing!r} is not writable"
        return None
    places = [path]
    for number in range(1000):
        shard = op.join(path, shard_name(number))
        if not op.isdir(shard):
            break
        places.append(shard)
        if op.lexists(op.join(shard, DBNAME)):
            places.append(op.join(shard, DBNAME))
    for place in places:
        mode = os.W_OK | (os.X_OK if op.isdir(place) else 0)
        if not os.access(place, mode):
            return f"LOCATION {path!r} is not writable: {place!r} refuses this process"
    return None


def _layout_problems(path: str, shards: int) -> list[Problem]:
    """SHARDS against the shard count the directory was laid out for (its layout file)."""
    try:
        read_layout(path, shards, read_only=True)
    except DatabaseError:
        return []  # no cache there yet: the first use lays it out
    except PermissionError:
        return []  # (a directory this process may not read: reported as not writable)
    except (ValueError, DiskCacheError, OSError) as exc:
        return [Problem(
            "layout", f"LOCATION {path!r}: {exc}",
            "Set SHARDS to the count the directory was created with, or point LOCATION at a new"
            " directory: a cache cannot change its shard count (every key would move).",
        )]
    return []


def _message(alias: str, problem: Problem) -> checks.CheckMessage:
    level = checks.Warning if problem.warning else checks.Error
    text = f"CACHES[{alias!r}]: {problem.message}"
    message: checks.CheckMessage = level(text, hint=problem.hint, id=CHECK_IDS[problem.kind])
    return message
