"""The listener's reading of a Redis Cluster's topology (diskcache_core/_remote/topology.py): which
nodes it must listen on before it grants a lease, and which it may. (tests/processes/test_remote_cluster.py
runs the listener against a real cluster whose topology changes.)"""

from __future__ import annotations

from diskcache_core._remote.topology import Topology

# Node ids shortened; the fields as Redis 7 writes them.
STEADY = b"""\
a1 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460
a2 127.0.0.1:7002@17002 master - 0 1 2 connected 5461-10922
a3 127.0.0.1:7003@17003 master - 0 1 3 connected 10923-16383
r1 127.0.0.1:7004@17004 slave a1 0 1 1 connected
r2 127.0.0.1:7005@17005 slave a2 0 1 2 connected
r3 127.0.0.1:7006@17006,host-6 slave a3 0 1 3 connected
"""


def _addresses(*ports):
    return {("127.0.0.1", port) for port in ports}


def test_primaries_are_required_and_every_healthy_node_wanted():
    view = Topology()
    view.add(STEADY)
    assert view.required() == _addresses(7001, 7002, 7003)
    assert view.wanted() == _addresses(*range(7001, 7007))
    assert view.known() == sorted(_addresses(*range(7001, 7007)))


def test_a_failed_primary_with_slots_stays_required_and_a_replaced_one_does_not():
    down = Topology()
    down.add(STEADY.replace(b"master - 0 1 2 connected", b"master,fail - 0 1 2 disconnected"))
    assert ("127.0.0.1", 7002) in down.required()
    replaced = Topology()
    replaced.add(b"""\
a1 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460
a2 127.0.0.1:7002@17002 master,fail - 0 1 2 disconnected
r2 127.0.0.1:7005@17005 master - 0 1 7 connected 5461-10922
""")
    assert replaced.required() == _addresses(7001, 7005)
    assert replaced.wanted() == _addresses(7001, 7005)


def test_a_lagging_view_cannot_hide_a_primary():
    """Merged views: a slot served in any of them is required (a node that has not heard of a
    failover yet still names the old primary, the others the new one)."""
    view = Topology()
    view.add(STEADY)
    view.add(b"r2 127.0.0.1:7005@17005 myself,master - 0 0 7 connected 5461-10922\n")
    assert view.required() == _addresses(7001, 7002, 7003, 7005)


def test_the_target_of_a_moving_slot_is_required_before_it_owns_it():
    view = Topology()
    view.add(STEADY.replace(b"connected 0-5460", b"connected 0-5460 [42->-n7]") + (
        b"n7 127.0.0.1:7007@17007 master - 0 1 0 connected\n"
    ))
    assert ("127.0.0.1", 7007) in view.required()
    importing = Topology()
    importing.add(b"n7 127.0.0.1:7007@17007 myself,master - 0 0 0 connected [42-<-a1]\n")
    assert importing.required() == _addresses(7007)


def test_nodes_without_an_address_or_in_handshake_are_not_wanted():
    view = Topology()
    view.add(b"""\
a1 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-16383
h1 127.0.0.1:7008@17008 handshake - 0 0 0 connected
n1 :0@0 master,noaddr - 0 0 0 disconnected
""")
    assert view.wanted() == _addresses(7001)
    view.add(b"n1 :0@0 master,noaddr - 0 0 0 disconnected 100-200\n")
    assert view.required() == {("127.0.0.1", 7001), "n1"}  # no lease: n1 cannot be reached
