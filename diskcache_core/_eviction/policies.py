"""The eviction policies: their names, the index each needs, what the access log refreshes, and
the SQL that picks victims (the statements are the eviction box's; the Store runs them).

Built-in policies are `POLICIES`; `EVICTION_POLICY` shows them in python-diskcache's format,
where a user may add one (python-diskcache's way), which `policy_of` then reads.
"""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = [
    "DELETE_BY_POLICY", "EVICTION_POLICY", "POLICIES", "REFRESH_COLUMN", "Policy",
    "delete_by_policy", "policy_of",
]


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


def delete_by_policy(name: str) -> str | None:
    """The statement removing ``?`` victims of policy `name` in its order (None: it has none)."""
    statement = DELETE_BY_POLICY.get(name)
    if statement is None and name not in POLICIES:
        cull = policy_of(name).cull
        statement = None if cull is None else "DELETE FROM Cache WHERE rowid IN (" + cull + ")"
    return statement


DELETE_BY_POLICY = {
    name: "DELETE FROM Cache WHERE rowid IN (" + policy.cull + ")"
    for name, policy in POLICIES.items()
    if policy.cull is not None
}

# The access log's batched refreshes (see _access), per column a policy orders by. A time only
# moves forward, so a late batch never undoes a newer one.
REFRESH_COLUMN = {
    "store_time": "UPDATE Cache SET store_time = ?1 WHERE key = ?2 AND raw = ?3 AND store_time < ?1",
    "access_time": (
        "UPDATE Cache SET access_time = ?1 WHERE key = ?2 AND raw = ?3 AND access_time < ?1"
    ),
    "access_count": (
        "UPDATE Cache SET access_count = access_count + ?1"
        " WHERE key = ?2 AND raw = ?3 AND store_time <= ?4"
    ),
}
