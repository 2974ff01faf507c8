"""``diskcache-core doctor DIR``: one read-only report of what is wrong with a cache directory
and how to fix it.

Each check returns findings (`Finding`): a severity (``ok``, ``info``, ``warning``, ``error``),
what was found, and the fix. Nothing here writes: the databases are opened read-only (as the
reading commands open them), the files are only stat'ed, the remote's stamp file is read with
``os.pread``, and Redis is sent ``INFO server`` only. A near cache of a remote (a directory with
``cache.db-remote``) is examined the same way: its rows are ordinary rows, whose agreement with
the value files `check_cache` judges as for any cache.
"""

from __future__ import annotations

import argparse
import os
import os.path as op
import stat
import struct
import sys
import time
import zlib
from collections.abc import Iterator
from typing import Any, NamedTuple

from .._cache.check import check_cache, check_layout_leftovers
from .caches import find_shard_directories, shard_prefixes
from .output import Output, Progress, human_size
from .._disk.disk import Disk
from .._errors import DiskCacheError, EmptyDirWarning, UnknownFileWarning
from .._store.opening import open_database
from .._remote.stamps import LEASE_AHEAD, LOCK_FILE, REMOTE_FILE
from .._store.schema import DBNAME, SELECT_COUNTERS
from .._store.store import Store
from .._store.versionfile import VERSION_FILE

__all__ = ["Finding", "Rows", "SEVERITIES", "open_rows", "run_doctor"]

SEVERITIES = ("ok", "info", "warning", "error")
# A WAL this large means checkpoints are starved (a reader that never ends, a checkpoint that
# keeps failing): SQLite's own autocheckpoint keeps it near 4 MiB.
WAL_WARNING = 64 * 2**20
_NAMED = 5  # paths named in one finding; the rest are counted
# The stamp file's header: magic, lease (a time), listener pid, prefix owner.
_HEADER = struct.Struct("=QdQQ")
_MAGIC = 0x31524D5243434B44
_CHECK_FIX = "run `diskcache-core check DIR --fix` while no other process writes to the cache"


class Finding(NamedTuple):
    """One result of the doctor: which check, how bad, what it saw, and what to do."""

    check: str
    severity: str
    message: str
    fix: str = ""


def _named(paths: list[str]) -> str:
    shown = ", ".join(paths[:_NAMED])
    return shown + (f" and {len(paths) - _NAMED} more" if len(paths) > _NAMED else "")


# --- the database: integrity, check's findings, settings ---------------------------------------


class Rows(NamedTuple):
    """A shard's database opened read-only, as rows: its store, Disk and settings."""

    directory: str
    store: Store
    disk: Disk
    settings: dict[str, Any]


def open_rows(directory: str, disk_type: type[Disk], timeout: float,
                allowed: list[type]) -> Rows:
    """One shard's database opened read-only (no Cache: a near cache's rows are read as rows)."""
    code_only: dict[str, Any] = {"read_only": True}
    if allowed:
        code_only["disk_allowed_types"] = list(allowed)
    opened = open_database(directory, timeout, disk_type, {}, code_only)  # (no recreate hook)
    return Rows(directory, Store(opened.pool, timeout, opened.disk), opened.disk,
                  opened.settings.values())


def check_database(shard: Rows) -> Iterator[Finding]:
    """SQLite's quick_check, then `check_cache`'s findings (read-only: it repairs nothing)."""
    problems = [row[0] for row in shard.store.read("PRAGMA quick_check")]
    if problems != ["ok"]:
        yield Finding("integrity", "error",
                      f"{shard.directory}: SQLite's quick_check: {_named(problems)}",
                      "restore the directory from a backup, or remove it (a cache can be refilled);"
                      " `sqlite3 cache.db .recover` may save the rows")
        return
    yield Finding("integrity", "ok", f"{shard.directory}: the database passed quick_check")
    unknown, other = [], []
    for found in check_cache(shard.store, shard.disk, shard.directory):
        message = str(found.message)
        if message.startswith("integrity check:"):
            continue  # reported above
        if issubclass(found.category, (UnknownFileWarning, EmptyDirWarning)):
            unknown.append(message)
        else:
            other.append(message)
    if unknown:
        yield Finding("files", "warning",
                      f"{len(unknown)} file(s) or directories no row accounts for: {_named(unknown)}",
                      _CHECK_FIX + " (it removes them)")
    if other:
        yield Finding("rows", "warning",
                      f"{len(other)} row(s) or counters disagree with the files: {_named(other)}",
                      _CHECK_FIX + " (it drops the damaged rows)")
    if not unknown and not other:
        yield Finding("files", "ok", f"{shard.directory}: rows and value files agree")


def check_leftovers(directory: str) -> Iterator[Finding]:
    """A FanoutCache directory's temporary layout files (`check_layout_leftovers`)."""
    found = [str(item.message) for item in check_layout_leftovers(directory, fix=False)]
    if found:
        yield Finding("files", "warning", f"layout leftovers: {_named(found)}", _CHECK_FIX)


def check_wal(directory: str) -> Iterator[Finding]:
    """The size of the database's write-ahead log."""
    try:
        size = os.lstat(op.join(directory, DBNAME + "-wal")).st_size
    except OSError:
        return
    if size > WAL_WARNING:
        yield Finding("wal", "warning",
                      f"{directory}: the write-ahead log holds {human_size(size)}: checkpoints"
                      " cannot finish (a process keeps a read open, or they keep failing)",
                      "find the process holding a long read (a leaked iterator, a transaction"
                      " left open) and end it; the log shrinks at the next checkpoint")
    else:
        yield Finding("wal", "ok", f"{directory}: write-ahead log of {human_size(size)}")


def check_space(directory: str, shards: list[Rows]) -> Iterator[Finding]:
    """Free space on the directory's file system against what the size limit may still add."""
    try:
        info = os.statvfs(directory)
    except (OSError, AttributeError):  # (no statvfs on Windows)
        return
    free = info.f_bavail * info.f_frsize
    limit = sum(int(shard.settings.get("size_limit", 0)) for shard in shards)
    size = sum(int(dict(shard.store.read(SELECT_COUNTERS)).get("size") or 0) for shard in shards)
    room = max(limit - size, 0)
    if free < room:
        yield Finding("space", "warning",
                      f"{human_size(free)} free on the file system, but the size limit"
                      f" ({human_size(limit)}) lets the value files grow by {human_size(room)}:"
                      " writes will fail with a full disk before eviction starts",
                      "free space, or lower the limit: `diskcache-core settings DIR size_limit N`")
    else:
        yield Finding("space", "ok", f"{human_size(free)} free, room for the size limit"
                      f" ({human_size(limit)})")


# --- files: owner and permissions --------------------------------------------------------------


def _walk(directory: str) -> Iterator[tuple[str, os.stat_result]]:
    """Every entry under `directory` (itself included), lstat'ed; links are not followed."""
    try:
        yield directory, os.lstat(directory)
    except OSError:
        return
    for dirpath, dirnames, filenames in os.walk(directory):
        for name in dirnames + filenames:
            path = op.join(dirpath, name)
            try:
                yield path, os.lstat(path)
            except OSError:
                continue


def check_permissions(directory: str) -> Iterator[Finding]:
    """Files anyone may write (a hostile directory), or the group where the database is not
    group-writable, and files owned by someone else than the invoking user (for root: than the
    database's owner)."""
    try:
        database = os.stat(op.join(directory, DBNAME)) if op.exists(op.join(directory, DBNAME)) \
            else os.stat(directory)
    except OSError:
        return
    group_shared = bool(database.st_mode & stat.S_IWGRP)
    uid = os.geteuid() if hasattr(os, "geteuid") else None
    if uid == 0:
        uid = database.st_uid
    writable, foreign = [], []
    for path, info in _walk(directory):
        if stat.S_ISLNK(info.st_mode):
            continue  # (check reports links; their own mode means nothing)
        if info.st_mode & stat.S_IWOTH or (info.st_mode & stat.S_IWGRP and not group_shared):
            writable.append(path)
        if uid is not None and info.st_uid != uid:
            foreign.append(f"{path} (uid {info.st_uid})")
    if writable:
        yield Finding("permissions", "warning",
                      f"{len(writable)} file(s) or directories are writable by other users"
                      f" than the cache's: {_named(writable)}; whoever can write them can plant"
                      " values (and pickles: code) for every process of the cache",
                      "`chmod -R go-w DIR` (or `g-w` only where the group should not share it)")
    else:
        yield Finding("permissions", "ok", f"{directory}: no file writable by other users")
    if foreign:
        yield Finding("owner", "warning",
                      f"{len(foreign)} file(s) are owned by another user: {_named(foreign)}; the"
                      " cache's processes may be unable to replace or remove them",
                      "run the cache's processes as one user, then `chown -R USER DIR`")
    elif uid is not None:
        yield Finding("owner", "ok", f"{directory}: every file has one owner")


# --- other processes: python-diskcache sharing the directory -----------------------------------


def _holders(databases: dict[str, str]) -> Iterator[tuple[int, str]]:
    """(pid, shard directory) of the other processes holding one of `databases` (real path:
    directory) open, seen through ``/proc/PID/fd``: this user's processes (any, for root)."""
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return
    for pid in pids:
        if pid == os.getpid():
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:  # another user's process, or gone
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target in databases:
                yield pid, databases[target]
                break


def _read_proc(pid: int, name: str) -> bytes:
    try:
        with open(f"/proc/{pid}/{name}", "rb") as file:
            return file.read()
    except OSError:
        return b""


def foreign_holder(pid: int, directory: str) -> str | None:
    """What process `pid`, which holds `directory`'s database open, is, when it is not
    diskcache_core: its command line; None for diskcache_core. A writing diskcache_core process
    maps the directory's version file (``cache.db-versions``), python-diskcache never does; a
    command line naming diskcache_core (a read-only open maps nothing) counts as ours."""
    versions = op.realpath(op.join(directory, VERSION_FILE)).encode()
    if versions in _read_proc(pid, "maps"):
        return None
    command = _read_proc(pid, "cmdline").replace(b"\0", b" ").strip()
    if b"diskcache_core" in command or b"diskcache-core" in command:
        return None
    return command.decode("utf-8", "replace")[:80] or "?"


def check_peers(shard_directories: list[str]) -> Iterator[Finding]:
    """A python-diskcache process sharing the directory (best effort, and says so: only the
    processes whose /proc this user may read are seen, and a python-diskcache process is told
    from ours by what it maps, not by asking it)."""
    if not op.isdir("/proc"):
        yield Finding("peers", "info", "other processes cannot be listed here (no /proc)")
        return
    databases = {op.realpath(op.join(directory, DBNAME)): directory
                 for directory in shard_directories}
    holders = sorted(set(_holders(databases)))
    peers = sorted({f"{pid} ({command})" for pid, directory in holders
                    if (command := foreign_holder(pid, directory)) is not None})
    if peers:
        yield Finding("peers", "warning",
                      f"process(es) with the database open that are not diskcache_core (python-"
                      f"diskcache, or another SQLite program): {_named(peers)}; diskcache_core's"
                      " memory tier does not hear of their writes, and python-diskcache cannot"
                      " read compressed values",
                      "while both libraries use the directory, open it in diskcache_core with"
                      " memory_size_limit=0 and leave disk_compress off (docs: Migrating)")
    else:
        yield Finding("peers", "ok",
                      f"{len({pid for pid, _ in holders})} other process(es) have the cache open,"
                      " all diskcache_core (best effort: only processes whose /proc this user"
                      " can read are seen)")


# --- the remote: the listener's lease, Redis ----------------------------------------------------


def read_stamp_header(directory: str) -> tuple[int, float, int, int] | None:
    """(magic, lease, listener pid, prefix owner) of `directory`'s stamp file, read without
    mapping or changing it; None when there is no such file (or it is shorter than a header)."""
    path = op.join(directory, REMOTE_FILE)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        data = os.pread(fd, _HEADER.size, 0)
    finally:
        os.close(fd)
    if len(data) < _HEADER.size:
        return None
    magic, lease, pid, owner = _HEADER.unpack(data)
    return magic, lease, pid, owner


def election_holder(directory: str) -> int | None:
    """The pid holding the listener election's lock of `directory` (its ``flock``, as
    ``/proc/locks`` lists it: read, not taken), 0 when none holds it; None when that cannot be
    seen here (no /proc/locks, no lock file)."""
    try:
        inode = os.lstat(op.join(directory, LOCK_FILE)).st_ino
        with open("/proc/locks", encoding="ascii", errors="replace") as file:
            lines = file.read().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF" (blocked waiters: "1: -> FLOCK ...")
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5].rsplit(":", 1)[-1] == str(inode):
            return int(fields[4]) if fields[4].isdigit() else None
    return 0


def check_lease(directory: str, prefix: str | None, top: str | None = None) -> Iterator[Finding]:
    """The listener's lease and last contact, from the stamp file (read-only). `top`: the
    directory a FanoutCache's listener is elected in, for a shard of it (its lock is there)."""
    header = read_stamp_header(directory)
    if header is None:
        if prefix is not None:
            yield Finding("listener", "info", f"{directory}: no {REMOTE_FILE}: no process has"
                          " opened this directory with a remote yet")
        return
    magic, lease, pid, owner = header
    if magic != _MAGIC:
        yield Finding("listener", "warning", f"{REMOTE_FILE} has no valid header (never used,"
                      " or damaged)", "it is rewritten by the next process that opens the cache"
                      " with its remote; if that fails, remove the file while no process has it open")
        return
    if prefix is not None and owner and owner != (zlib.crc32(prefix.encode()) << 1) | 1:
        yield Finding("listener", "error",
                      f"the directory is the near cache of another remote_prefix than {prefix!r}",
                      "pass the prefix the cache's processes use (--remote-prefix)")
    now = time.time()
    holder = election_holder(top) if top is not None else None
    if holder is None:  # a Cache's own; or a shard of an earlier version's FanoutCache
        holder = election_holder(directory)
    running = holder is not None and holder != 0
    pid = holder or pid
    if 0.0 < lease - now <= LEASE_AHEAD:
        yield Finding("listener", "ok", f"the listener (pid {pid}) holds its lease; last contact"
                      " with Redis under 0.1 s ago")
    elif lease == 0.0:
        yield Finding("listener", "info" if not running else "warning",
                      f"no lease (the listener, pid {pid or 'none'}, cleared it or never held one):"
                      " copies are not served, reads go to Redis",
                      "" if not running else "see the listener's log ('diskcache_core.listener')"
                      " for why it cannot reach Redis")
    elif lease - now > LEASE_AHEAD:
        yield Finding("listener", "warning", "the lease lies in the future: the clock was set"
                      " back; copies are not served until it catches up or the listener renews it")
    else:
        ago = now - lease
        if running:
            yield Finding("listener", "warning",
                          f"the listener (pid {pid}) runs but its lease lapsed {ago:.1f} s ago:"
                          " it is not hearing Redis; reads go to Redis",
                          "check Redis's reachability (--remote URL) and the listener's log"
                          " ('diskcache_core.listener')")
        else:
            yield Finding("listener", "info",
                          f"no listener running; the last one's lease lapsed {ago:.1f} s ago"
                          " (normal while no process uses the cache)")


REDIS_TRACKING = (6, 2)  # client tracking (the listener's invalidations) came with Redis 6.2


def check_redis(url: str, prefix: str, timeout: float) -> Iterator[Finding]:
    """Whether Redis answers at `url`, and whether its version has client tracking."""
    from .._remote.client import RemoteStore  # imports redis: only with --remote

    try:
        remote = RemoteStore(url, prefix.encode("utf-8"), timeout)
    except ValueError as exc:
        yield Finding("redis", "error", str(exc), "give a redis://, rediss:// or unix:// URL")
        return
    try:
        info = remote.call(lambda: remote.client.info("server"))
    except DiskCacheError as exc:
        yield Finding("redis", "error", f"Redis at {remote.url} does not answer: {exc}",
                      "start it, or check the URL, the network and the credentials")
        return
    finally:
        remote.close()
    if remote.cluster:  # one answer per node
        info = next(iter(info.values()), {}) if isinstance(info, dict) and info and \
            all(isinstance(value, dict) for value in info.values()) else info
    version = str(info.get("redis_version", "0"))
    numbers = tuple(int(part) for part in version.split(".")[:2] if part.isdigit())
    if numbers < REDIS_TRACKING:
        yield Finding("redis", "error", f"Redis {version} at {remote.url}: the listener needs"
                      " client tracking, which came with Redis 6.2", "upgrade Redis to 6.2 or later")
    else:
        yield Finding("redis", "ok", f"Redis {version} answers at {remote.url}")


# --- the report ---------------------------------------------------------------------------------


def run_doctor(args: argparse.Namespace, disk_type: type[Disk], out: Output) -> int:
    """Run every check on the cache in ``args.directory``; print the report; the exit status:
    0 nothing wrong, 1 warnings, 3 errors (2, a usage error, is raised by the caller's parser
    and `find_shard_directories`)."""
    shard_directories = find_shard_directories(args.directory)
    progress = Progress("doctor", sys.stderr)
    findings: list[Finding] = []
    shards: list[Rows] = []
    try:
        for number, directory in enumerate(shard_directories):
            progress.step(f"shard {number + 1} of {len(shard_directories)}")
            findings += check_wal(directory)
            try:
                shard = open_rows(directory, disk_type, args.timeout, args.allow_type)
            except DiskCacheError as exc:  # (a damaged first page, a database locked past
                # --timeout): a finding; the checks that need no database still run
                findings.append(Finding("integrity", "error",
                                        f"{directory}: cannot open the database: {exc}",
                                        "if it is damaged: restore a backup or remove the"
                                        " directory; if it is locked: try again"))
                continue
            shards.append(shard)
            findings += check_database(shard)
        if len(shard_directories) > 1:
            findings += check_leftovers(args.directory)
        if shards:
            findings += check_space(args.directory, shards)
        progress.step("permissions")
        findings += check_permissions(args.directory)
        progress.step("processes")
        findings += check_peers(shard_directories)
        prefixes = shard_prefixes(args.remote_prefix, len(shard_directories))
        for directory, prefix in zip(shard_directories, prefixes):
            top = args.directory if directory != args.directory else None
            findings += check_lease(directory, prefix if args.remote else None, top)
        near = any(op.exists(op.join(directory, REMOTE_FILE)) for directory in shard_directories)
        if not args.remote and near:
            findings.append(Finding("redis", "info", "a near cache of a remote: Redis was not"
                                    " asked", "pass --remote URL to check it"))
        if args.remote:
            progress.step("redis")
            findings += check_redis(args.remote, args.remote_prefix, min(args.timeout, 5.0))
    finally:
        progress.done()
        for shard in shards:
            shard.store.pool.close_all()
    return report(args.directory, findings, out)


def report(directory: str, findings: list[Finding], out: Output) -> int:
    """Print `findings` (text or JSON); the exit status of the worst."""
    worst = max((SEVERITIES.index(found.severity) for found in findings), default=0)
    status = {0: 0, 1: 0, 2: 1, 3: 3}[worst]
    if out.as_json:
        out.json({"directory": directory, "status": SEVERITIES[worst],
                  "findings": [found._asdict() for found in findings]})
        return status
    for found in findings:
        out.line(f"{found.severity:<8} {found.check}: {found.message}")
        if found.fix and found.severity in ("warning", "error"):
            out.line(f"         fix: {found.fix}")
    counts = {name: sum(found.severity == name for found in findings) for name in SEVERITIES}
    out.line(f"{counts['error']} error(s), {counts['warning']} warning(s)")
    return status

