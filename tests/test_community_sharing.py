"""diskcache-community 5.8 and diskcache_core on one cache directory, both ways (a move to us,
a move back): each reads everything the other wrote, and neither's counters go wrong."""

import subprocess
import sys

import pytest
from test_peer_sharing import _expected, _value_bytes, _write

import diskcache_core as dc

community = pytest.importorskip("diskcache_community")


@pytest.mark.parametrize("first", ["peer", "ours"])
def test_both_libraries_share_a_directory_back_and_forth(tmp_path, first):
    directory = str(tmp_path / "cache")
    order = ["peer", "ours", "peer", "ours"] if first == "peer" else ["ours", "peer", "ours", "peer"]
    expected = {}
    for step, who in enumerate(order):
        if who == "peer":
            cache = community.Cache(directory)
        else:
            cache = dc.Cache(directory, memory_size_limit=0)
        with cache:
            for key, value in expected.items():
                assert cache.get(key) == value, (who, step, key)
            _write(cache, f"{who}{step}-")
            expected.update(_expected(f"{who}{step}-"))
            cache.delete(f"{who}{step}-'text'")
            del expected[f"{who}{step}-'text'"]
    with dc.Cache(directory) as ours:
        assert len(ours) == len(expected)
        assert ours.check() == []
        assert ours.reset("size") == _value_bytes(directory)
        assert {key: ours[key] for key in expected} == expected
    with community.Cache(directory) as peer:
        assert peer.check() == []
        assert peer.reset("size") == _value_bytes(directory)
        assert {key: peer[key] for key in expected} == expected
        assert len(peer) == len(expected)


_PEER_PROCESS = """
import sys
import diskcache_community
with diskcache_community.Cache(sys.argv[1]) as cache:
    assert cache.get("ours") == {"written": "ours"}, cache.get("ours")
    cache.set("peer", [1, 2], tag="from-peer")
    cache.set("big", b"y" * 100_000)
"""


def test_a_peer_process_and_ours_use_one_directory_at_once(tmp_path):
    directory = str(tmp_path / "cache")
    with dc.Cache(directory, memory_size_limit=0) as ours:  # open while the peer writes
        ours.set("ours", {"written": "ours"})
        subprocess.run([sys.executable, "-c", _PEER_PROCESS, directory], check=True, timeout=120)
        assert ours.get("peer", tag=True) == ([1, 2], "from-peer")
        assert ours.get("big") == b"y" * 100_000
        assert len(ours) == 3 and ours.check() == []
