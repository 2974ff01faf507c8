"""Connections pinned to threads: the hot commands of a remote without redis-py's per-command work.

redis-py's ``execute_command`` takes a connection from the pool and gives it back around every
command (the pool's lock, its fork check), wraps the command in its retry helper, and records
observability data, about 140 Python calls a command. A `get` that asks Redis and every write
pay it on top of the round trip: measured on one server, 25 µs of CPU a ``SET`` through
``execute_command`` against 11 µs sent on a connection directly. So a thread keeps one
connection of the client's pool (made by the pool, so with its URL's address, TLS, password and
database) for the commands the tier sends most: ``GET``, ``MGET`` and ``EVALSHA``. The rest
(pipelines, scans, script loads) still go through the client.

What redis-py's wrapper and pool did that matters is kept. Before each command the connection
is checked as the pool checks one it hands out: one the server closed while it was idle is made
again before anything is sent. The connection disconnects itself on any error while sending or
reading (the next command connects again), and the error is the one redis-py raises, so
`_remote.failures.request_left` tells a write's outcome from where it failed exactly as before
(nothing is retried: the clients are made without retries). A forked child
drops its parent's connections unused (redis-py shuts a socket down only in the process that
made it), and a thread's connection is closed when the thread ends. `close_idle` closes the
connections no call is using; a call in flight keeps its connection to its answer. A command
whose thread's connection is busy (a signal handler's get while the thread waited for Redis)
goes through the client, never waits for it. Under gevent or eventlet (`threads_are_real`),
every command goes through the client.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from typing import Any, Callable

import redis.exceptions

from .._errors import RemoteUnavailableError

__all__ = ["PinnedConnections", "threads_are_real"]


class _Held:
    """One thread's connection and the lock a command holds it by (`close_idle` too)."""

    __slots__ = ("connection", "lock", "__weakref__")

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.lock = threading.Lock()


class PinnedConnections:
    """A connection per thread, made by `pool` on the thread's first command; `fallback`
    (the client's ``execute_command``) sends a command while the thread's connection is busy."""

    def __init__(self, pool: Any, fallback: Callable[..., Any]) -> None:
        self._pool = pool
        self._fallback = weakref.WeakMethod(fallback)  # (the client holds this: no cycle)
        self._local = threading.local()
        self._held: weakref.WeakSet[_Held] = weakref.WeakSet()  # (a thread's ends with it)
        self._lock = threading.Lock()  # guards _held
        _all.add(self)

    def command(self, *args: Any) -> Any:
        """Send one command on this thread's connection and return Redis's reply, unparsed
        by any response callback (the tier's commands need none)."""
        try:
            held: _Held = self._local.held
        except AttributeError:
            held = self._hold()
        if not held.lock.acquire(blocking=False):
            # Busy: a command of this thread's that a signal handler (or a finalizer)
            # interrupted, or `close_idle` closing it this instant. Waiting could deadlock,
            # and two commands on one connection would mix their answers: the pool's.
            fallback = self._fallback()
            if fallback is None:  # (the client is gone): nothing was sent, and says so
                raise RemoteUnavailableError("the remote's client was closed: nothing was sent")
            return fallback(*args)
        try:
            connection = held.connection
            if connection._sock is not None and _closed_or_dirty(connection):
                connection.disconnect()  # (sending connects again: nothing was sent on it)
            connection.send_command(*args)
            return connection.read_response()
        finally:
            held.lock.release()

    def _hold(self) -> _Held:
        held = _Held(self._pool.make_connection())
        self._local.held = held
        with self._lock:
            self._held.add(held)
        return held

    def connections(self) -> list[Any]:
        """The connections the threads hold now."""
        with self._lock:
            return [held.connection for held in self._held]

    def in_flight(self) -> int:
        """How many commands are waiting for their answer now."""
        with self._lock:
            return sum(held.lock.locked() for held in self._held)

    def close_idle(self) -> None:
        """Close the connections no command is using (a later command connects again); one
        in flight goes on to its answer."""
        with self._lock:
            helds = list(self._held)
        for held in helds:
            if held.lock.acquire(blocking=False):
                try:
                    held.connection.disconnect()
                finally:
                    held.lock.release()

    def _forget_after_fork(self) -> None:
        """(In a forked child) The parent's connections are the parent's: never used here."""
        self._local = threading.local()
        self._held = weakref.WeakSet()
        self._lock = threading.Lock()


def threads_are_real() -> bool:
    """Whether a thread here is an OS thread: not when gevent or eventlet has patched
    ``threading``, where every greenlet (one per request, in a web server) would make a
    connection of its own and close it when it ends; there the client's pool serves them."""
    gevent_monkey = sys.modules.get("gevent.monkey")
    if gevent_monkey is not None and gevent_monkey.is_module_patched("threading"):
        return False
    eventlet_patcher = sys.modules.get("eventlet.patcher")
    if eventlet_patcher is not None and eventlet_patcher.is_monkey_patched("thread"):
        return False
    return True


def _closed_or_dirty(connection: Any) -> bool:
    """Whether a connected `connection` cannot take a command: the server closed it while it
    was idle (a restart, its idle ``timeout``), or it holds an answer no one read. Looked at
    before each command, as redis-py's pool does when it hands a connection out: else the
    first write after a restart would be sent on a dead socket and its outcome reported
    unknown."""
    try:
        return bool(connection.can_read())
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError):
        return True


_all: weakref.WeakSet[PinnedConnections] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for pinned in list(_all):
        pinned._forget_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
