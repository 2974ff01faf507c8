"""Reprs say what an object is on: class, cache directory, key and main settings; no I/O."""

from __future__ import annotations

import shutil
from pathlib import Path

import diskcache
import pytest

import diskcache_core as dc


def test_recipe_reprs_name_cache_key_and_settings(tmp_path: Path) -> None:
    cache = dc.Cache(str(tmp_path / "c"))
    fanout = dc.FanoutCache(str(tmp_path / "f"), shards=2)
    path, fanout_path = cache.directory, fanout.directory
    assert repr(dc.Lock(cache, "report", expire=60)) == f"Lock(cache={path!r}, key='report', expire=60.0)"
    assert repr(dc.RLock(fanout, ("job", 1))) == f"RLock(cache={fanout_path!r}, key=('job', 1))"
    assert repr(dc.BoundedSemaphore(cache, "s", value=3, tag="t")) == (
        f"BoundedSemaphore(cache={path!r}, key='s', value=3, tag='t')"
    )
    assert repr(dc.Averager(cache, "latency", expire=5)) == (
        f"Averager(cache={path!r}, key='latency', expire=5.0)"
    )
    cache.close()
    fanout.close()
    # Read from what the objects hold: with the directories gone, nothing is opened or made.
    shutil.rmtree(tmp_path / "c")
    shutil.rmtree(tmp_path / "f")
    assert repr(dc.Lock(cache, "k")) == f"Lock(cache={path!r}, key='k')"
    assert repr(cache) == f"Cache({path!r})"
    assert repr(fanout) == f"FanoutCache({fanout_path!r}, shards=2)"
    assert not (tmp_path / "c").exists() and not (tmp_path / "f").exists()


def test_a_recipe_on_another_cache_object_shows_that_object() -> None:
    class Elsewhere:
        def __repr__(self) -> str:
            return "<elsewhere>"

    assert repr(dc.Lock(Elsewhere(), "k")) == "Lock(cache=<elsewhere>, key='k')"


@pytest.mark.parametrize("opener", [dc.Cache, dc.FanoutCache])
def test_cache_repr_shows_read_only_and_remote_without_password(tmp_path: Path, opener) -> None:
    directory = str(tmp_path / "c")
    shards = ", shards=8" if opener is dc.FanoutCache else ""
    with opener(directory) as cache:
        assert repr(cache) == f"{opener.__name__}({directory!r}{shards})"
    with opener(directory, read_only=True) as cache:
        assert repr(cache) == f"{opener.__name__}({directory!r}{shards}, read_only=True)"
    # Opening a remote cache connects to nothing: no server needed to see its repr.
    remote = opener(str(tmp_path / "r"), remote="redis://user:s3cret@127.0.0.1:1/0")
    try:
        text = repr(remote)
    finally:
        remote.close()
    assert "s3cret" not in text
    assert text.endswith(", remote='redis://user:***@127.0.0.1:1/0')")


def test_deque_repr_adds_maxlen_to_python_diskcaches_form(tmp_path: Path) -> None:
    unbounded = dc.Deque(directory=str(tmp_path / "a"))
    peer = diskcache.Deque(directory=str(tmp_path / "p"))
    assert repr(unbounded) == f"Deque(directory={unbounded.directory!r})"
    assert repr(peer) == f"Deque(directory={peer.directory!r})"  # the same form
    bounded = dc.Deque(directory=str(tmp_path / "b"), maxlen=5)
    assert repr(bounded) == f"Deque(directory={bounded.directory!r}, maxlen=5)"


def test_flask_backend_repr(tmp_path: Path) -> None:
    flask = pytest.importorskip("diskcache_core.contrib.flask")
    backend = flask.DiskCache(str(tmp_path / "fl"), threshold=100, default_timeout=60)
    try:
        assert repr(backend) == (
            f"DiskCache({backend.directory!r}, threshold=100, default_timeout=60)"
        )
    finally:
        backend.cache.close()
