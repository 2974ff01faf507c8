"""Two edges of a cache with a remote, against a real redis-server: tags compare as SQLite
compares them in every tier (docs/expiry-and-tags.rst), and a call in flight when the
application closes the cache is no outage (docs/remote.rst)."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from diskcache_core import Cache

from redis_servers import needs_redis

pytestmark = needs_redis

WAIT = 60.0  # seconds any condition below is waited for, at most
PAUSE_MS = 4000  # Redis holds the call in flight this long (long enough to close meanwhile)


@pytest.fixture(params=["local", "remote"])
def cache(request, tmp_path):
    options = {}
    if request.param == "remote":
        server = request.getfixturevalue("server")
        options = {"remote": server.url, "remote_prefix": f"edge-{uuid.uuid4().hex}:"}
    opened = Cache(str(tmp_path / "c"), **options)
    yield opened
    opened.close()


# Tags, each with the keys stored under it: SQLite's comparison makes 1, 1.0 and True one tag
# (an INTEGER and a REAL compare by value, True is stored as 1), 0, 0.0 and -0.0 another; text,
# bytes and numbers of other values stay apart.
TAGGED = [
    ("int", 1), ("float", 1.0), ("bool", True), ("text", "1"), ("bytes", b"1"), ("two", 2),
    ("half", 1.5), ("zero", 0), ("zero-float", 0.0), ("minus-zero", -0.0),
    ("2**53+1", 2**53 + 1), ("2.0**53", 2.0**53), ("int64-max", 2**63 - 1), ("2.0**63", 2.0**63),
]


def _store_all(cache):
    for key, tag in TAGGED:
        assert cache.set(key, key, tag=tag) is True


@pytest.mark.parametrize(
    "tag, evicted",
    [
        (1, {"int", "float", "bool"}),
        (1.0, {"int", "float", "bool"}),
        (True, {"int", "float", "bool"}),
        ("1", {"text"}),
        (b"1", {"bytes"}),
        (0, {"zero", "zero-float", "minus-zero"}),
        (-0.0, {"zero", "zero-float", "minus-zero"}),
        (2**53, {"2.0**53"}),
        (2**53 + 1, {"2**53+1"}),
        (2.0**63, {"2.0**63"}),
        (2**63 - 1, {"int64-max"}),
        (1.5, {"half"}),
    ],
)
def test_evict_finds_the_tags_sqlite_finds_equal(cache, tag, evicted):
    _store_all(cache)
    assert cache.evict(tag) == len(evicted)
    left = {key for key, _ in TAGGED if cache.get(key) is not None}
    assert left == {key for key, _ in TAGGED} - evicted


def test_a_tag_reads_back_as_stored(cache):
    _store_all(cache)
    for key, tag in TAGGED:
        value, stored = cache.get(key, tag=True)
        expected = 1 if tag is True else tag  # True is stored as the integer 1
        assert value == key
        assert type(stored) is type(expected) and stored == expected, (key, stored)
        if type(tag) is float:
            assert repr(stored) == repr(tag)  # -0.0 stays -0.0, 1.0 stays 1.0


# --- close() while a call is in flight -----------------------------------------------------------


def _wait_for(check, what):
    limit = time.monotonic() + WAIT
    while time.monotonic() < limit:
        if check():
            return
        time.sleep(0.005)
    raise AssertionError(f"never: {what}")


@pytest.mark.parametrize("operation", ["set", "get"])
def test_a_call_in_flight_at_close_gets_its_answer(server, tmp_path, operation):
    """Redis is up but holds the call (CLIENT PAUSE); the application closes the cache; the
    call is answered when Redis releases it: no RemoteUnavailableError for the application's
    own close, and a write's outcome is known."""
    prefix = f"edge-{uuid.uuid4().hex}:"
    cache = Cache(str(tmp_path / "c"), remote=server.url, remote_prefix=prefix, remote_timeout=30)
    admin = server.client()
    results: list[object] = []
    try:
        assert cache.set("there", "v") is True
        pinned = cache._remote._remote.client.pinned  # noqa: SLF001 - in-flight count
        call = (
            (lambda: cache.set("k", "new")) if operation == "set" else (lambda: cache.get("there"))
        )

        def run() -> None:
            try:
                results.append(call())
            except Exception as exc:  # noqa: BLE001 - what the test looks at
                results.append(exc)

        # Held for PAUSE_MS, then answered (UNPAUSE would be held too).
        admin.execute_command("CLIENT", "PAUSE", PAUSE_MS, "ALL")
        thread = threading.Thread(target=run)
        thread.start()
        _wait_for(lambda: pinned.in_flight() == 1, "the call is in flight")
        cache.close()
        assert results == [] and thread.is_alive(), "the call was not in flight at close()"
        thread.join(WAIT)
        assert not thread.is_alive()
        assert results == ([True] if operation == "set" else ["v"]), results
        assert cache.get("k" if operation == "set" else "there") == (
            "new" if operation == "set" else "v"
        )
    finally:
        cache.close()
