"""Remote URLs, checked and shown without their password; no redis import (see _remote.py)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

__all__ = ["check_remote_url", "safe_url"]

_SCHEMES = ("redis", "rediss", "unix")


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
