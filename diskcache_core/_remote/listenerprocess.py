"""The listener process: ``python -m diskcache_core._remote.listenerprocess``, started by the elected
`ListenerThread` of a host directory (_remote/listener.py), its configuration on standard input.

It runs the `Listener` (stamps and lease). Unless ``remote_refresh`` is off, it first forks a
refresher process, which renews the host's copies of the items the listener heard change
(`RemoteTier.refresh`) through a cache of its own on the directory, one that takes no part in
the election. The listener hands it the changed names through a pipe it never waits on: a full
pipe drops names, which are then only invalidated (a read from Redis later, never a stale one).

Why a process apart: the listener runs ahead of the application (a higher priority), so that
invalidations are applied at once; the refresher is background work (a lower priority) that must
not take the CPU from the application's requests, and as a thread of the listener it would also
hold up the listener's loop on the GIL.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import struct
import sys
import time
from collections.abc import Iterator
from typing import Any, Callable

from .._cache.cache import Cache
from .._errors import DiskCacheError, Timeout
from .listener import Listener, stop_electing
from .listenerlog import forward_logs_to_parent
from .client import RemoteStore
from .stamps import Member, StampSet
from .tier import RemoteTier

__all__ = ["RefreshPipe", "main", "refresh_batch"]

_BATCH = 256  # names per refresh: one round trip to Redis, one transaction
_GATHER = 0.002  # seconds the refresher pauses after a refresh (see _refresher)
_TRIES = 5  # refreshes of one batch while the host's write lock stays busy
_RECORD = struct.Struct(">H")  # a name's length, before it
_PIPE_BUF = 4096  # writes up to this size are atomic on a pipe: whole records only
_LISTENER_PRIORITY = -5
_REFRESHER_PRIORITY = 10  # below the application: renewing copies is background work


class RefreshPipe:
    """The listener's end: changed names, as length-prefixed records, never blocking."""

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self._fd = fd

    def send(self, names: list[bytes]) -> None:
        chunk = bytearray()
        for name in names:
            record = _RECORD.size + len(name)
            if record > _PIPE_BUF:
                continue  # a name this long is only invalidated
            if len(chunk) + record > _PIPE_BUF:
                self._write(bytes(chunk))
                chunk.clear()
            chunk += _RECORD.pack(len(name))
            chunk += name
        if chunk:
            self._write(bytes(chunk))

    def _write(self, chunk: bytes) -> None:
        try:
            os.write(self._fd, chunk)
        except BlockingIOError:
            pass  # the refresher is behind: these copies stay invalidated
        except OSError:
            pass  # the refresher died: the listener goes on without it


def _records(fd: int) -> Iterator[list[bytes]]:
    """The names read from the refresher's end, as lists of at most `_BATCH`, until EOF."""
    pending = b""
    while True:
        data = os.read(fd, 65536)
        if not data:
            return
        pending += data
        names: list[bytes] = []
        offset = 0
        while offset + _RECORD.size <= len(pending):
            (length,) = _RECORD.unpack_from(pending, offset)
            end = offset + _RECORD.size + length
            if end > len(pending):
                break
            names.append(pending[offset + _RECORD.size:end])
            offset = end
        pending = pending[offset:]
        for start in range(0, len(names), _BATCH):
            yield names[start:start + _BATCH]


def _refresher(config: dict[str, Any], fd: int, parent: int) -> None:
    """The refresher process's body: renew copies of the names the listener sends, each
    through the cache (of the listener's members: a FanoutCache's shards) whose prefix it has."""
    _die_with(parent)
    try:
        os.setpriority(os.PRIO_PROCESS, 0, _REFRESHER_PRIORITY)
    except (OSError, AttributeError):
        pass
    stop_electing()
    members = _members(config)
    group = (config["directory"], tuple(members))
    refreshers: list[tuple[bytes, Callable[[list[bytes]], int]]] = []
    for directory, prefix in members:
        try:
            cache = Cache(
                directory, remote=config["url"], remote_prefix=prefix,
                remote_timeout=float(config["timeout"]), remote_group=group,
                max_staleness=float(config["max_staleness"]), memory_size_limit=0,
            )
        except (DiskCacheError, OSError, ValueError):
            continue  # a directory this process cannot write: invalidation only
        tier: RemoteTier | None = getattr(cache, "_remote", None)  # (its RemoteCache's)
        if tier is not None:
            refreshers.append((prefix.encode("utf-8"), tier.refresh))
    refreshers.sort(key=lambda member: -len(member[0]))  # (as StampSet.heard matches them)
    if not refreshers:
        return
    for names in _records(fd):
        for heard, refresh in refreshers:
            mine = [name[len(heard):] for name in names if name.startswith(heard)]
            if mine:
                refresh_batch(refresh, mine)
                names = [name for name in names if not name.startswith(heard)]
        # Let the next changes gather in the pipe: a refresh is a round trip and a transaction
        # (about 250 us of CPU for eight names, 30 us a name), so batches are worth a short
        # wait. Short: every write of the host's own is renewed here too (its echo is a
        # change like any other), and a reader asks Redis until then. Measured (2 hosts x 1
        # process, 90/9/1 on 100 keys): 83 % local hits with 5 ms, 90-91 % with 2 ms or 1 ms.
        time.sleep(_GATHER)


def refresh_batch(refresh: Callable[[list[bytes]], int], names: list[bytes]) -> None:
    """``refresh(names)``, again after a pause while it times out (the host's write lock stayed
    busy, or Redis did not answer in time), `_TRIES` times at most. When it gives up, or on
    another error (a foreign value), these copies stay invalidated: the next reader asks Redis."""
    for _ in range(_TRIES):
        try:
            refresh(names)
            return
        except Timeout:
            time.sleep(_GATHER)
        except (DiskCacheError, OSError, ValueError):
            return


def _die_with(parent: int) -> None:
    """SIGTERM when `parent` dies (Linux); exit now if it already has."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:
        os._exit(0)


def _members(config: dict[str, Any]) -> list[Member]:
    """The near caches the listener serves: (directory, remote prefix) each."""
    return [(str(directory), str(prefix)) for directory, prefix in config["members"]]


def _read_config() -> dict[str, Any] | None:
    """The settings on standard input; None when they are not all there."""
    try:
        config = json.loads(sys.stdin.buffer.read())
        int(config["parent"])
        _members(config)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return config if isinstance(config, dict) else None


def main() -> int:
    """The listener process. It ends with its parent: SIGTERM on the parent's death (Linux),
    else when it sees it has gone."""
    config = _read_config()
    if config is None:
        # The electing process left before handing over its settings (an os._exit right
        # after opening the cache): nothing to do; the next elected process starts another.
        return 0
    parent = int(config["parent"])
    _die_with(parent)
    forward_logs_to_parent()
    changed: Callable[[list[bytes]], None] | None = None
    if config.get("refresh", True):
        read_end, write_end = os.pipe()
        me = os.getpid()
        if os.fork() == 0:  # before any thread or connection exists in this process
            os.close(write_end)
            try:
                _refresher(config, read_end, me)
            finally:
                os._exit(0)
        os.close(read_end)
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # a refresher that ends is reaped
        changed = RefreshPipe(write_end).send
    try:
        # Ahead of the busy processes it serves, where allowed (root, or CAP_SYS_NICE): a
        # listener kept off the CPU past its lease makes every process of the host read Redis.
        os.setpriority(os.PRIO_PROCESS, 0, _LISTENER_PRIORITY)
    except (OSError, AttributeError):
        pass
    members = _members(config)
    # (The members' common prefix, for the log: the listener hears each member's own.)
    prefix = os.path.commonprefix([member for _, member in members]).encode("utf-8")
    max_staleness = float(config["max_staleness"])
    # No cluster client: the listener asks the nodes for the topology itself (_remote/listener.py).
    remote = RemoteStore(config["url"], prefix, float(config["timeout"]), connect=False)
    words = StampSet(members)
    nodes = [(str(host), int(port)) for host, port in config.get("nodes", [])]
    Listener(
        remote, words, max_staleness, lambda: os.getppid() != parent, changed, nodes
    ).run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
