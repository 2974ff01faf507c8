"""The eviction policies: per name, the index it needs, what reads and overwrites refresh, and
the statement that picks its victims; python-diskcache's ``EVICTION_POLICY`` table of them, to
which a user may add one by name (its way). Below the settings, which validate policy names
against it; the Evictor and the access log (`_eviction`) run the SQL.
"""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = ["EVICTION_POLICY", "POLICIES", "Policy", "policy_of"]


class Policy(NamedTuple):
    """An eviction policy: the index it needs, what the access log refreshes, and the statement
    that picks victims (None: the policy never evicts)."""

    create_index: str | None  # CREATE INDEX statement
    index_name: str | None
    read_column: str | None  # refreshed by a get (batched, see _access)
    write_column: str | None  # refreshed by an overwrite (batched likewise)
    cull: str | None  # SELECT rowid ... LIMIT ?: the victims, in order
    # A policy added to EVICTION_POLICY by the user (python-diskcache's way): the UPDATE its
    # "get" clause makes, run per key read (?1 the time of its latest read, ?2/?3 the key).
    refresh: str | None = None


def _policy(column: str | None, read: bool, write: bool) -> Policy:
    if column is None:
        return Policy(None, None, None, None, None)
    name = f"Cache_{column}"
    return Policy(
        f"CREATE INDEX IF NOT EXISTS {name} ON Cache ({column})",
        name,
        column if read else None,
        column if write else None,
        f"SELECT rowid FROM Cache ORDER BY {column} LIMIT ?",
    )


POLICIES: dict[str, Policy] = {
    "none": _policy(None, False, False),
    "least-recently-stored": _policy("store_time", False, True),
    "least-recently-used": _policy("access_time", True, True),
    "least-frequently-used": _policy("access_count", True, False),
}

#: The eviction policies in python-diskcache's format: per name, the index it needs (``init``),
#: the assignment a read makes (``get``) and the victims' query (``cull``; ``{fields}`` is the
#: selected columns). A policy added here, python-diskcache's way, can be used by name.
EVICTION_POLICY: dict[str, dict[str, str | None]] = {
    "none": {"init": None, "get": None, "cull": None},
    "least-recently-stored": {
        "init": POLICIES["least-recently-stored"].create_index,
        "get": None,
        "cull": "SELECT {fields} FROM Cache ORDER BY store_time LIMIT ?",
    },
    "least-recently-used": {
        "init": POLICIES["least-recently-used"].create_index,
        "get": "access_time = {now}",
        "cull": "SELECT {fields} FROM Cache ORDER BY access_time LIMIT ?",
    },
    "least-frequently-used": {
        "init": POLICIES["least-frequently-used"].create_index,
        "get": "access_count = access_count + 1",
        "cull": "SELECT {fields} FROM Cache ORDER BY access_count LIMIT ?",
    },
}
_INDEX_NAME = re.compile(r"CREATE\s+(?:UNIQUE\s+)?INDEX\s+(?:IF\s+NOT\s+EXISTS\s+)?([\w.]+)", re.I)


# The current time in seconds since the epoch, as SQL: what ``{now}`` stands for in a user-added
# policy's cull query (python-diskcache puts the time of the call there).
_SQL_NOW = "((julianday('now') - 2440587.5) * 86400.0)"


def policy_of(name: str) -> Policy:
    """The policy called `name`: a built-in one, or one added to EVICTION_POLICY. KeyError for
    an unknown name."""
    policy = POLICIES.get(name)
    if policy is not None:
        return policy
    spec = EVICTION_POLICY[name]
    init, get, cull = spec.get("init"), spec.get("get"), spec.get("cull")
    found = _INDEX_NAME.match(init or "")
    return Policy(
        init,
        found.group(1) if found else None,
        "custom" if get else None,
        None,
        None if cull is None else cull.format(fields="rowid", now=_SQL_NOW),
        None if get is None else (
            "UPDATE Cache SET " + get.format(now="?1") + " WHERE key = ?2 AND raw = ?3"
        ),
    )
