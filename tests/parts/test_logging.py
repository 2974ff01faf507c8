"""The library's logging (docs/cache.rst, "Logging"): outages of a real redis-server, the
listener's lease and takeover, value files left behind, check's findings. One line per event,
never one per operation."""

from __future__ import annotations

import logging
import os
import re
import time
import uuid

import pytest

from diskcache_core import Cache, Disk, FanoutCache, RemoteUnavailableError
from diskcache_core import _log
from diskcache_core._store import reaper as _reaper

from redis_servers import RedisTestServer, needs_redis


WAIT = 60.0  # seconds any condition below is waited for, at most
# The listener's lease lapsed after a grant (not: none yet, "... after it started").
LEASE_LAPSED = re.compile(r"has no lease( for [0-9.]+ s)?: ")


def records(caplog, logger, level):
    return [r for r in caplog.records if r.name == logger and r.levelno == level]


def wait_for(check, what):
    limit = time.monotonic() + WAIT
    while time.monotonic() < limit:
        if check():
            return
        time.sleep(0.02)
    raise AssertionError(f"never: {what}")


def test_the_package_logger_has_a_null_handler():
    handlers = logging.getLogger("diskcache_core").handlers
    assert any(isinstance(handler, logging.NullHandler) for handler in handlers)


@needs_redis
def test_a_stopped_and_restarted_redis_is_one_warning_and_one_info_with_the_downtime(
    tmp_path, caplog, capfd
):
    """Whatever the number of calls, caches and shards that fail in the outage."""
    caplog.set_level(logging.INFO, logger="diskcache_core")
    mine = repr(str(tmp_path / "c"))  # the Cache's directory, as its listener's lines name it
    with RedisTestServer() as server:  # its own: it is killed
        cache = Cache(
            str(tmp_path / "c"), remote=server.url, remote_prefix=f"log-{uuid.uuid4().hex}:",
            remote_timeout=1.0,
        )
        fanout = FanoutCache(
            str(tmp_path / "f"), shards=3, remote=server.url, remote_timeout=1.0,
            remote_prefix=f"log-{uuid.uuid4().hex}:", remote_refresh=False,
        )
        try:
            assert fanout.set("f", 1) is True
            assert cache.set("k", "v") is True
            wait_for(
                lambda: records(caplog, "diskcache_core.listener", logging.INFO),
                "the takeover is logged",
            )
            words = cache._remote._words  # noqa: SLF001 - the lease the listener grants
            held = []  # consecutive samples of a valid lease: long enough for the watch to see

            def lease_held() -> bool:
                held.append(1) if words.lease_valid() else held.clear()
                time.sleep(0.05)
                return len(held) >= 10

            wait_for(lease_held, "the listener holds its lease")
            assert cache.get("k") == "v"
            server.kill()
            first_failure_began = time.monotonic()
            with pytest.raises(RemoteUnavailableError):
                cache.get("missing")
            first_failure_ended = time.monotonic()
            for number in range(20):  # every operation fails; one line says so
                with pytest.raises(RemoteUnavailableError):
                    cache.set(f"key{number}", number)
                with pytest.raises(RemoteUnavailableError):
                    cache.get(f"key{number}")
                assert fanout.set(number, number) is False  # (a give-up)
                assert fanout.get(number, "gone") == "gone"
            # The listener's side: its lease lapses, and the elected process says so once.
            wait_for(
                lambda: any(
                    LEASE_LAPSED.search(r.getMessage()) and mine in r.getMessage()
                    for r in records(caplog, "diskcache_core.listener", logging.WARNING)
                ),
                "the lapsed lease is logged",
            )
            server.restart(keep_data=False)
            success_began = time.monotonic()
            assert cache.set("k", "back") is True
            success_ended = time.monotonic()
            wait_for(
                lambda: any(
                    "has its lease again" in r.getMessage() and mine in r.getMessage()
                    for r in records(caplog, "diskcache_core.listener", logging.INFO)
                ),
                "the lease's return is logged",
            )
            assert fanout.set("f", 2) is True and fanout.get("f") == 2  # (restarted empty)
        finally:
            cache.close()
            fanout.close()

    warnings = records(caplog, "diskcache_core.remote", logging.WARNING)
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "unreachable" in warnings[0].getMessage()
    assert server.url.split("//")[1] in warnings[0].getMessage()
    infos = records(caplog, "diskcache_core.remote", logging.INFO)
    assert len(infos) == 1, [r.getMessage() for r in infos]
    match = re.search(r"reachable again after ([0-9.]+) s", infos[0].getMessage())
    assert match, infos[0].getMessage()
    downtime = float(match.group(1))
    # From the first failed call to the first successful one (to the 0.1 s the line shows).
    assert success_began - first_failure_ended - 0.05 <= downtime
    assert downtime <= success_ended - first_failure_began + 0.05

    # The Cache's listener (a FanoutCache's shards are directories of their own, each with
    # its listener, reported apart).
    lease_lost = [
        r for r in records(caplog, "diskcache_core.listener", logging.WARNING)
        if LEASE_LAPSED.search(r.getMessage()) and mine in r.getMessage()
    ]
    assert len(lease_lost) == 1, [r.getMessage() for r in lease_lost]
    lease_back = [
        r for r in records(caplog, "diskcache_core.listener", logging.INFO)
        if "has its lease again" in r.getMessage() and mine in r.getMessage()
    ]
    assert len(lease_back) == 1
    takeovers = [
        r for r in records(caplog, "diskcache_core.listener", logging.INFO)
        if "takes over the listener" in r.getMessage() and mine in r.getMessage()
    ]
    assert len(takeovers) == 1 and str(os.getpid()) in takeovers[0].getMessage()
    # The listener processes wrote nothing on the application's standard error.
    assert capfd.readouterr().err == ""


def test_an_outage_is_reported_once_and_flapping_once_per_interval(caplog):
    caplog.set_level(logging.INFO, logger="diskcache_core")
    log = logging.getLogger("diskcache_core.test")
    outage = _log.Outage(log, "thing", interval=3600.0)
    for _ in range(3):  # three outages of many failures each, in one interval
        for _ in range(10):
            outage.failed("refused")
        outage.recovered()
        outage.recovered()
    messages = [r.getMessage() for r in caplog.records if r.name == "diskcache_core.test"]
    assert len(messages) == 2, messages
    assert messages[0] == "thing unreachable: refused"
    assert re.fullmatch(r"thing reachable again after [0-9.]+ s", messages[1])


def test_a_rate_limited_outage_that_lasts_is_reported_when_its_interval_ends(caplog):
    caplog.set_level(logging.INFO, logger="diskcache_core")
    log = logging.getLogger("diskcache_core.test")
    outage = _log.Outage(log, "thing", interval=0.2)
    outage.failed("refused")
    outage.recovered()
    outage.failed("refused briefly")  # within the interval: counted, not said
    outage.recovered()  # (nor its end)
    outage.failed("refused again")
    assert len([r for r in caplog.records if r.name == log.name]) == 2
    time.sleep(0.25)
    outage.failed("refused again")  # still down after the interval: said, with the count
    messages = [r.getMessage() for r in caplog.records if r.name == log.name]
    assert len(messages) == 3, messages
    assert messages[2].startswith("thing unreachable for ")
    assert messages[2].endswith("refused again (1 shorter outages not reported before it)")


class _StuckDisk(Disk):
    """A Disk whose value files cannot be removed (a read-only mount, say)."""

    def remove(self, file_path: str) -> None:
        raise PermissionError(13, "Permission denied", file_path)


def test_value_files_that_cannot_be_removed_are_one_warning(tmp_path, caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger="diskcache_core")
    monkeypatch.setattr(_reaper, "_TRIES", 1)  # reported at the first failure
    monkeypatch.setattr(_reaper, "_NOT_REMOVED", _log.RateLimit())
    with Cache(str(tmp_path / "c"), disk=_StuckDisk, disk_min_file_size=0) as cache:
        for number in range(5):
            cache.set(number, b"x" * 100)
        with pytest.warns(RuntimeWarning, match="was not removed"):
            for number in range(5):
                assert cache.delete(number)
            _reaper.drain()
    lines = records(caplog, "diskcache_core.disk", logging.WARNING)
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert "could not be removed" in lines[0].getMessage()
    assert "check(fix=True)" in lines[0].getMessage()


def test_check_that_finds_problems_logs_one_warning(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="diskcache_core")
    with Cache(str(tmp_path / "c"), disk_min_file_size=0) as cache:
        cache.set("a", b"x" * 100)
        cache.set("b", b"y" * 100)
        assert cache.check() == []
        assert records(caplog, "diskcache_core.check", logging.WARNING) == []
        for (name,) in cache._sql("SELECT filename FROM Cache"):  # noqa: SLF001
            os.remove(os.path.join(cache.directory, name))
        found = cache.check()
    assert len(found) >= 2  # the two files (and the directories they leave empty)
    lines = records(caplog, "diskcache_core.check", logging.WARNING)
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert f"found {len(found)} problems" in lines[0].getMessage()
    assert "file not found" in lines[0].getMessage()
