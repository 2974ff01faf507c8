"""A Redis Cluster's topology as the listener sees it: which nodes it must listen on, and which
it may.

Built from ``CLUSTER NODES`` replies, the listener's own and fresh each time (redis-py's view is
refreshed only by the commands a client sends, and the listener sends none on items). Several
nodes' replies are merged, so that a node whose view lags (one just restarted, still taking
itself for a primary; one that has not heard of a failover yet) cannot hide a primary:

- *required*: every node that some view says serves a slot, or is importing one (a slot being
  moved: ``ASK`` sends writes to the importing node before it owns the slot). The listener
  grants no lease unless it listens on each of them.
- *wanted*: every node that some view reports healthy (no ``fail``, ``fail?``, ``handshake`` or
  ``noaddr`` flag, its link connected), replicas included: Redis keeps a connection's tracking
  when its node is promoted, so a listener already on a replica misses nothing at a failover.
  (A replica sends no invalidation for what it applies from its primary: listening on it costs
  two idle connections.)
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["Address", "Topology"]

Address = tuple[str, int]
_UNHEALTHY = frozenset({"fail", "fail?", "handshake", "noaddr"})


class _Line(NamedTuple):
    """One line of a ``CLUSTER NODES`` reply."""

    node_id: str
    address: Address | None  # None: no address known yet
    healthy: bool
    serves: bool  # serves a slot, or imports one
    migrating_to: tuple[str, ...]  # ids of the nodes it is moving slots to


def _parse_line(line: str) -> _Line | None:
    fields = line.split()
    if len(fields) < 8:
        return None
    node_id, where, flags = fields[0], fields[1], set(fields[2].split(","))
    host, _, port = where.split("@")[0].rpartition(":")
    address = (host.strip("[]"), int(port)) if host and port.isdigit() and port != "0" else None
    slots = fields[8:]
    serves = any(not entry.startswith("[") or "-<-" in entry for entry in slots)
    migrating = tuple(entry[:-1].split("->-")[1] for entry in slots if "->-" in entry)
    healthy = address is not None and not flags & _UNHEALTHY and fields[7] == "connected"
    return _Line(node_id, address, healthy, serves, migrating)


class Topology:
    """The merge of some nodes' ``CLUSTER NODES`` replies."""

    def __init__(self) -> None:
        self._addresses: dict[str, Address] = {}
        self._serving: set[str] = set()
        self._healthy: set[str] = set()

    def add(self, reply: Any) -> None:
        """Merge one node's reply (bytes or str)."""
        text = reply.decode("utf-8", "replace") if isinstance(reply, bytes) else str(reply)
        for raw in text.splitlines():
            line = _parse_line(raw)
            if line is None:
                continue
            if line.address is not None:
                self._addresses[line.node_id] = line.address
            if line.serves:
                self._serving.add(line.node_id)
            self._serving.update(line.migrating_to)
            if line.healthy:
                self._healthy.add(line.node_id)

    def required(self) -> set[Address | str]:
        """The nodes the listener must listen on: an address, or the id of a node whose address
        no view gave (such a node cannot be listened on: no lease)."""
        return {self._addresses.get(node_id, node_id) for node_id in self._serving}

    def wanted(self) -> set[Address]:
        """The nodes worth listening on: the required ones, and every healthy node."""
        ids = self._serving | self._healthy
        return {self._addresses[node_id] for node_id in ids if node_id in self._addresses}

    def known(self) -> list[Address]:
        """Every node address seen (to ask for the topology next time)."""
        return sorted(set(self._addresses.values()))
