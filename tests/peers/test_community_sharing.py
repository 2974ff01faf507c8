"""diskcache-community 5.8 and diskcache_core on one cache directory at once (a move to us or
back, both ways, is tests/peers/test_peer_sharing.py's, run with each peer library)."""

import subprocess
import sys

import pytest

import diskcache_core as dc

community = pytest.importorskip("diskcache_community")


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
