"""Reprs that say which cache and item an object works on, read from what the object holds
(no I/O): ``Lock(cache='/tmp/c', key='report', expire=60)``."""

from __future__ import annotations

from typing import Any

from ._urls import safe_url

__all__ = ["ItemRepr", "cache_label", "opened_as"]


def opened_as(remote: str | None, read_only: bool) -> str:
    """How a cache was opened, for its repr: ``", remote='redis://:***@host/0', read_only=True"``
    where set (the URL without its password), else nothing."""
    text = "" if remote is None else f", remote={safe_url(remote)!r}"
    return text + ", read_only=True" if read_only else text


def cache_label(cache: Any) -> Any:
    """What names `cache` in a repr: its directory where the object holds it (a Cache, a
    FanoutCache: no property that might open anything is read), else the object itself."""
    directory = getattr(cache, "__dict__", {}).get("_directory")
    return directory if isinstance(directory, str) else cache


class ItemRepr:
    """The repr of a recipe on one item of a cache: class, cache directory, key, and those of
    its settings (`_value`, `_expire`, `_tag`) it has, unless None."""

    __slots__ = ()
    _cache: Any
    _key: Any

    def __repr__(self) -> str:
        parts = [f"cache={cache_label(self._cache)!r}", f"key={self._key!r}"]
        for name in ("value", "expire", "tag"):
            value = getattr(self, "_" + name, None)
            if value is not None:
                parts.append(f"{name}={value!r}")
        return f"{type(self).__name__}({', '.join(parts)})"
