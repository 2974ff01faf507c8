"""Remote URLs, checked and shown without their password; no redis import (see _remote/client.py)."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

__all__ = ["CLUSTER_WORDS", "check_remote_url", "safe_url"]

_SCHEMES = ("redis", "rediss", "unix")


# redis-py options the library sets itself: a timed-out write resent by redis-py may be applied
# twice (an add that stored its item reports it lost; a pop loses the item).
_LIBRARY_OPTIONS = frozenset(
    {"retry_on_timeout", "retry_on_error", "socket_timeout", "socket_connect_timeout"}
)

# What ``?cluster=`` may say: a yes (the first four) or a no.
CLUSTER_WORDS = ("1", "true", "yes", "on", "0", "false", "no", "off")


def check_remote_url(url: Any) -> str:
    """The URL, checked before anything connects: TypeError or ValueError names the problem."""
    if not isinstance(url, str):
        raise TypeError(f"remote must be a redis:// URL string, not {type(url).__name__}")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:
        raise ValueError(f"remote URL {safe_url(url)!r} is malformed: {exc}") from None
    if parts.scheme not in _SCHEMES:
        raise ValueError(
            f"remote must be a redis://, rediss:// or unix:// URL, got {safe_url(url)!r}"
        )
    if parts.scheme != "unix" and not parts.hostname:
        raise ValueError(f"remote URL {safe_url(url)!r} names no host")
    if parts.scheme == "unix" and not parts.path:
        raise ValueError(f"remote URL {safe_url(url)!r} names no socket path")
    database = parts.path.strip("/") if parts.scheme != "unix" else ""
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    database = query.get("db", database)
    if database and not (database.isascii() and database.isdigit()):  # redis-py: database 0
        raise ValueError(f"remote URL {safe_url(url)!r}: the database must be a number")
    if query.get("cluster", "false").lower() not in CLUSTER_WORDS:
        raise ValueError(f"remote URL {safe_url(url)!r}: cluster must be true or false")
    if query.get("protocol", "2") not in ("2", "3"):
        raise ValueError(f"remote URL {safe_url(url)!r}: protocol must be 2 or 3")
    refused = sorted(_LIBRARY_OPTIONS.intersection(query))
    if refused:
        raise ValueError(
            f"remote URL {safe_url(url)!r}: {', '.join(refused)} not taken (the wait is"
            " remote_timeout; a command is never sent twice, so no write is applied twice)"
        )
    return url


def safe_url(url: str) -> str:
    """The URL without its password, for messages."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return "<malformed URL>"
    if password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit(parts._replace(netloc=user + host))
