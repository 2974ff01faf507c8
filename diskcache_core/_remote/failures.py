"""redis-py's errors as the library's (`translated`, the one place they are translated).

An unreachable server is `RemoteUnavailableError` (a `Timeout`, so FanoutCache reports a give-up
as for a busy shard), anything else `RemoteError`. A write whose request may have reached Redis
before the connection failed (no reply within the timeout, a connection dropped after sending)
is `RemoteOutcomeUnknownError` instead: Redis may still apply it (`request_left`).
"""

from __future__ import annotations

import os

import redis
import redis.exceptions

from .._errors import RemoteError, RemoteOutcomeUnknownError, RemoteUnavailableError
from .._log import REMOTE as _LOG
from .._log import outage_for
from .._urls import safe_url

__all__ = ["REDIS_ERRORS", "outage_name", "request_left", "translated"]

# What redis-py raises: RedisClusterException (a cluster it cannot reach or log in to) is not
# a RedisError.
REDIS_ERRORS = (redis.exceptions.RedisError, redis.exceptions.RedisClusterException)
_CONNECTION_ERRORS = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
_REDIS_PACKAGE = os.path.dirname(os.path.abspath(redis.__file__)) + os.sep
# redis-py's functions that make a connection ready (connect, log in, hand shake, take it from
# the pool: nothing of the request is sent yet), and those that write the request.
_SETTING_UP = frozenset({
    "connect", "connect_check_health", "_connect", "on_connect", "on_connect_check_health",
    "get_connection", "ensure_connection", "make_connection",
})
_SENDING = frozenset({"send_packed_command", "send_command"})


def request_left(exc: BaseException, many: bool) -> bool:
    """Whether the request of a call that failed with `exc` may have reached Redis, and so may
    be applied by it (now or after a stall), although no reply came.

    Told by where redis-py met the connection error: while setting up a connection nothing
    was sent; while writing one command, the command is incomplete and Redis never runs it
    (for a pipeline, `many`, earlier commands may have gone whole); anywhere else (waiting
    for the reply) it left. An error Redis answered (MOVED, CLUSTERDOWN, ...) ran nothing.
    redis-py retries nothing here (the clients are made without retries), so the error is
    that of the one attempt. Anything not recognised counts as sent: never a false "not
    applied".
    """
    seen: set[int] = set()
    error: BaseException | None = exc
    while error is not None and id(error) not in seen:  # the error, and what it was raised in
        seen.add(id(error))
        if isinstance(error, _CONNECTION_ERRORS):
            phases = set()
            trace = error.__traceback__
            while trace is not None:
                code = trace.tb_frame.f_code
                if code.co_filename.startswith(_REDIS_PACKAGE):
                    phases.add(code.co_name)
                trace = trace.tb_next
            if phases & _SETTING_UP:
                return False
            return many or not phases & _SENDING or "read_response" in phases
        error = error.__cause__ or error.__context__
    return False


def translated(exc: Exception, url: str, write: str = "", many: bool = False) -> Exception:
    """The library's error for a redis-py error (the one place they are translated); `write`
    and `many` as `RemoteStore.call` takes them."""
    where = safe_url(url)
    if write and isinstance(exc, (*_CONNECTION_ERRORS, redis.exceptions.RedisClusterException)):
        if request_left(exc, many):
            return RemoteOutcomeUnknownError(
                f"remote {where}: {write} sent, and no reply: Redis may have applied it, or may"
                f" yet ({exc})"
            )
    if isinstance(exc, redis.exceptions.AuthenticationError) or (
        isinstance(exc, redis.exceptions.ResponseError) and "NOAUTH" in str(exc)
    ):
        return RemoteError(f"remote {where}: authentication failed ({exc})")
    if isinstance(exc, _CONNECTION_ERRORS):
        outage_for(_LOG, outage_name(url)).failed(str(exc))
        return RemoteUnavailableError(f"remote {where} unreachable: {exc}")
    if isinstance(exc, redis.exceptions.RedisClusterException) and "auth" in str(exc).lower():
        return RemoteError(f"remote cluster {where}: authentication failed ({exc})")
    if isinstance(exc, (redis.exceptions.ClusterError, redis.exceptions.RedisClusterException)):
        outage_for(_LOG, outage_name(url)).failed(str(exc))
        return RemoteUnavailableError(f"remote cluster {where}: {exc}")
    return RemoteError(f"remote {where}: {exc}")


def outage_name(url: str) -> str:
    """What the log calls a remote (its URL without the password)."""
    return f"remote {safe_url(url)}"
