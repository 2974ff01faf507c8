"""``diskcache-core doctor``, the reading commands' ``--remote``, and progress on a terminal:
real directories, a real redis-server, a pseudo-terminal."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import diskcache_core as dc
from diskcache_core import cli
from diskcache_core._cli import doctor as _cli_doctor

from redis_servers import RedisTestServer, needs_redis
from test_cli import ROOT, run

WAIT = 60.0  # seconds a condition below is waited for, at most
posix_only = pytest.mark.skipif(sys.platform == "win32", reason="POSIX modes, /proc, ptys")


def doctor(*args: str) -> tuple[int, dict]:
    result = run("doctor", *args, "--json")
    assert result.returncode in (0, 1, 3), result.stderr
    return result.returncode, json.loads(result.stdout)


def by_check(document: dict, check: str) -> list[dict]:
    return [found for found in document["findings"] if found["check"] == check]


def severities(document: dict, check: str) -> set[str]:
    return {found["severity"] for found in by_check(document, check)}


def every_file(path: Path) -> dict:
    """Every file below `path` (the -wal, -shm and -remote files included), hashed."""
    return {
        str(item.relative_to(path)): hashlib.sha256(item.read_bytes()).hexdigest()
        for item in sorted(path.rglob("*")) if item.is_file()
    }


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "cache"
    with dc.Cache(directory) as cache:
        for number in range(20):
            cache.set(number, str(number))
        cache.set("big", b"x" * 100_000)
    os.chmod(directory, 0o700)
    return directory


def test_a_healthy_cache_is_ok_with_status_0(cache_dir):
    status, document = doctor(cache_dir)
    assert status == 0
    assert document["status"] == "ok"
    assert {"integrity", "files", "space", "permissions", "owner", "peers"} <= {
        found["check"] for found in document["findings"]
    }
    assert all(found["severity"] in ("ok", "info") for found in document["findings"])
    text = run("doctor", cache_dir)
    assert text.returncode == 0
    assert text.stdout.splitlines()[-1] == "0 error(s), 0 warning(s)"


@posix_only
def test_unknown_files_and_files_others_may_write_are_warnings_with_fixes(cache_dir):
    stray = cache_dir / "ab" / "stray.val"
    stray.parent.mkdir()
    stray.write_bytes(b"orphan")
    os.chmod(stray, 0o666)
    before = every_file(cache_dir)
    status, document = doctor(cache_dir)
    assert status == 1 and document["status"] == "warning"
    (unknown,) = [found for found in by_check(document, "files") if found["severity"] == "warning"]
    assert str(stray) in unknown["message"] and "check DIR --fix" in unknown["fix"]
    (writable,) = by_check(document, "permissions")
    assert writable["severity"] == "warning" and str(stray) in writable["message"]
    assert "go-w" in writable["fix"]
    assert every_file(cache_dir) == before  # reported, not repaired
    text = run("doctor", cache_dir)
    assert text.returncode == 1
    assert "fix: run `diskcache-core check DIR --fix`" in text.stdout


def test_a_size_limit_the_disk_cannot_hold_is_a_warning(cache_dir):
    assert run("settings", cache_dir, "size_limit", str(2**62)).returncode == 0
    status, document = doctor(cache_dir)
    assert status == 1
    (space,) = by_check(document, "space")
    assert space["severity"] == "warning" and "size_limit" in space["fix"]


def test_a_damaged_database_is_an_integrity_error_with_status_3(tmp_path):
    directory = tmp_path / "damaged"
    with dc.Cache(directory) as cache:
        for number in range(3000):
            cache.set(f"key-{number}", number)
    database = directory / "cache.db"
    data = bytearray(database.read_bytes())
    page = 4096
    for start in range(4 * page, len(data) - page, 7 * page):  # damage b-tree pages, not page 1
        data[start + 8:start + 200] = os.urandom(192)
    database.write_bytes(bytes(data))
    status, document = doctor(directory)
    assert status == 3, document
    (integrity,) = by_check(document, "integrity")
    assert integrity["severity"] == "error" and "quick_check" in integrity["message"]


def test_a_database_that_cannot_be_opened_is_an_error_finding_and_the_rest_still_runs(tmp_path):
    directory = tmp_path / "unopenable"
    with dc.Cache(directory) as cache:
        for number in range(3000):
            cache.set(f"key-{number}", number)
    database = directory / "cache.db"
    data = bytearray(database.read_bytes())
    page = data.find(b"size_limit", 4096) // 4096 * 4096  # the Settings table's page
    data[page:page + 100] = os.urandom(100)
    database.write_bytes(bytes(data))
    status, document = doctor(directory)
    assert status == 3
    (integrity,) = by_check(document, "integrity")
    assert integrity["severity"] == "error" and "cannot open the database" in integrity["message"]
    assert by_check(document, "permissions") and not by_check(document, "space")


def test_a_large_write_ahead_log_is_a_warning(cache_dir, monkeypatch, capsys):
    with dc.Cache(cache_dir) as cache:  # open: its -wal stays while it is
        cache.set("more", "x" * 10_000)
        monkeypatch.setattr(_cli_doctor, "WAL_WARNING", 0)
        assert cli.main(["doctor", str(cache_dir), "--json"]) == 1
    (wal,) = by_check(json.loads(capsys.readouterr().out), "wal")
    assert wal["severity"] == "warning" and "checkpoint" in wal["message"]


HOLD = """
import sys
{imports}
cache = {opener}
cache.get("x")
print("ready", flush=True)
sys.stdin.read()
"""


def _hold(directory: Path, library: str) -> subprocess.Popen:
    """A process of `library` holding the cache open until its stdin closes."""
    if library == "python-diskcache":
        code = HOLD.format(imports="import diskcache", opener=f"diskcache.Cache({str(directory)!r})")
    else:
        code = HOLD.format(imports="import diskcache_core",
                           opener=f"diskcache_core.Cache({str(directory)!r})")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    process = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, env=env, text=True)
    assert process.stdout.readline() == "ready\n"
    return process


@posix_only
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc")
def test_a_python_diskcache_process_sharing_the_directory_is_named_and_ours_are_not(cache_dir):
    pytest.importorskip("diskcache")
    ours = _hold(cache_dir, "diskcache_core")
    try:
        status, document = doctor(cache_dir)
        (peers,) = by_check(document, "peers")
        assert status == 0 and peers["severity"] == "ok", peers
        theirs = _hold(cache_dir, "python-diskcache")
        try:
            status, document = doctor(cache_dir)
        finally:
            theirs.stdin.close()
            theirs.wait(timeout=WAIT)
    finally:
        ours.stdin.close()
        ours.wait(timeout=WAIT)
    (peers,) = by_check(document, "peers")
    assert status == 1 and peers["severity"] == "warning"
    assert str(theirs.pid) in peers["message"] and str(ours.pid) not in peers["message"]
    assert "memory_size_limit=0" in peers["fix"]


def test_doctor_on_what_is_no_cache_is_a_usage_error(tmp_path):
    result = run("doctor", tmp_path / "missing")
    assert result.returncode == 2 and "no such directory" in result.stderr
    assert not (tmp_path / "missing").exists()


# --- with a remote ------------------------------------------------------------------------------


@pytest.fixture
def near(tmp_path, server):
    """A closed near cache of a remote holding three items, and its options."""
    options = {"remote": server.url, "remote_prefix": f"doctor-{uuid.uuid4().hex}:"}
    directory = tmp_path / "near"
    with dc.Cache(directory, **options) as cache:
        cache.set("text", "hello", tag="greeting")
        cache.set(7, b"seven")
        cache.set("big", b"x" * 100_000)
        assert cache.get("text") == "hello"  # (a copy on this host)
    return directory, options


def _remote_args(options: dict) -> list[str]:
    return ["--remote", options["remote"], "--remote-prefix", options["remote_prefix"]]


@needs_redis
def test_reading_commands_on_a_near_cache_say_how_and_read_redis_with_remote(near):
    directory, options = near
    refused = run("stats", directory)
    assert refused.returncode == 2
    assert "pass --remote URL" in refused.stderr and "Traceback" not in refused.stderr
    changing = run("delete", directory, "text")
    assert changing.returncode == 2 and "remote=URL" in changing.stderr
    settings = run("settings", directory)
    assert settings.returncode == 2 and "stats DIR --remote URL" in settings.stderr
    before = every_file(directory)
    stats = run("stats", directory, *_remote_args(options), "--json")
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["count"] == 3
    keys = run("keys", directory, *_remote_args(options))
    assert sorted(keys.stdout.splitlines()) == sorted(["'text'", "7", "'big'"])
    tagged = run("keys", directory, *_remote_args(options), "--tag", "greeting")
    assert tagged.stdout.splitlines() == ["'text'"]
    assert run("get", directory, "text", *_remote_args(options)).stdout == "hello\n"
    assert run("get", directory, "7", "--int", *_remote_args(options)).stdout == "b'seven'\n"
    missing = run("get", directory, "nope", *_remote_args(options))
    assert missing.returncode == 1 and "key not found" in missing.stderr
    check = run("check", directory, *_remote_args(options))
    assert check.returncode == 0, check.stderr
    assert "no problems found" in check.stdout
    status, document = doctor(directory, *_remote_args(options))
    assert status == 0, document
    (redis_found,) = by_check(document, "redis")
    assert redis_found["severity"] == "ok" and "answers" in redis_found["message"]
    assert every_file(directory) == before  # not a byte, not the stamp file's either


@needs_redis
def test_remote_reading_spans_a_fanout_caches_shards(tmp_path, server):
    options = {"remote": server.url, "remote_prefix": f"fan-{uuid.uuid4().hex}:"}
    directory = tmp_path / "fan"
    with dc.FanoutCache(directory, shards=3, **options) as fanout:
        for number in range(12):
            fanout.set(number, f"v{number}")
    before = every_file(directory)
    keys = run("keys", directory, *_remote_args(options))
    assert keys.returncode == 0, keys.stderr
    assert sorted(keys.stdout.splitlines(), key=int) == [str(number) for number in range(12)]
    assert run("keys", directory, *_remote_args(options), "--limit", "5").stdout.count("\n") == 5
    for number in (0, 5, 11):
        got = run("get", directory, str(number), "--int", *_remote_args(options))
        assert got.stdout == f"v{number}\n", got.stderr
    stats = run("stats", directory, *_remote_args(options), "--json")
    assert json.loads(stats.stdout)["count"] == 12 and json.loads(stats.stdout)["shards"] == 3
    status, document = doctor(directory, *_remote_args(options))
    assert status == 0, document
    assert len(by_check(document, "integrity")) == 3
    assert every_file(directory) == before


@needs_redis
def test_doctor_reports_the_listeners_lease_while_the_cache_is_open(near):
    directory, options = near
    with dc.Cache(directory, **options) as cache:
        cache.get("text")
        deadline = time.monotonic() + WAIT
        while True:  # the listener takes its lease once it has connected
            status, document = doctor(directory, *_remote_args(options))
            if severities(document, "listener") == {"ok"} or time.monotonic() > deadline:
                break
        assert status == 0
        (listener,) = by_check(document, "listener")
        assert listener["severity"] == "ok" and "holds its lease" in listener["message"]
    _, document = doctor(directory, *_remote_args(options))
    assert severities(document, "listener") == {"info"}  # none running: normal


@needs_redis
def test_doctor_without_remote_on_a_near_cache_says_redis_was_not_asked(near):
    directory, _ = near
    status, document = doctor(directory)
    assert status == 0
    (redis_found,) = by_check(document, "redis")
    assert redis_found["severity"] == "info" and "--remote URL" in redis_found["fix"]


@needs_redis
def test_an_unreachable_redis_is_an_error_with_status_3(near):
    from benchmarks.servers import free_port

    directory, options = near
    args = ["--remote", f"redis://127.0.0.1:{free_port()}", "--remote-prefix",
            options["remote_prefix"], "--timeout", "2"]
    status, document = doctor(directory, *args)
    assert status == 3
    (redis_found,) = by_check(document, "redis")
    assert redis_found["severity"] == "error" and "does not answer" in redis_found["message"]


def test_redis_before_6_2_is_an_error(monkeypatch):
    import diskcache_core._remote.client as remote

    class Old:
        url = "redis://old"
        cluster = False
        client = type("C", (), {"info": lambda self, section: {"redis_version": "6.0.16"}})()

        def __init__(self, *args):
            pass

        def call(self, function):
            return function()

        def close(self):
            pass

    monkeypatch.setattr(remote, "RemoteStore", Old)
    (found,) = _cli_doctor.check_redis("redis://old", "p:", 1.0)
    assert found.severity == "error" and "6.2" in found.message


# --- progress on a terminal ---------------------------------------------------------------------


def run_with_stderr_on_terminal(*args: str) -> tuple[int, str, bytes]:
    """Run the tool with stderr on a pseudo-terminal: status, stdout (a pipe), the terminal's."""
    import pty
    import select

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    master, slave = pty.openpty()
    try:
        process = subprocess.Popen([sys.executable, "-m", "diskcache_core", *map(str, args)],
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=slave, env=env)
        os.close(slave)
        slave = -1
        shown = bytearray()
        for _ in range(6000):  # at most 60 s of 10 ms waits
            if select.select([master], [], [], 0.01)[0]:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the last writer closed the terminal
                    break
                if not chunk:
                    break
                shown += chunk
            elif process.poll() is not None and not select.select([master], [], [], 0.05)[0]:
                break
        stdout = process.stdout.read().decode()
        process.stdout.close()
        return process.wait(timeout=60), stdout, bytes(shown)
    finally:
        if slave != -1:
            os.close(slave)
        os.close(master)


@posix_only
@pytest.mark.parametrize("command", [["keys"], ["check"], ["check", "--fix"], ["evict", "t"],
                                     ["clear", "--yes"], ["doctor"]], ids=" ".join)
def test_progress_goes_to_a_terminals_stderr_only(cache_dir, command):
    piped = run(command[0], cache_dir, *command[1:])
    assert piped.returncode in (0, 1) and piped.stderr == ""  # a pipe: no progress
    status, stdout, shown = run_with_stderr_on_terminal(command[0], cache_dir, *command[1:])
    assert status == piped.returncode
    label = {"keys": b"keys: 1 keys", "doctor": b"doctor: shard 1 of 1"}.get(
        command[0], f"{' '.join(command[:2]) if command[0] == 'check' else command[0]}: shard 1 of 1".encode()
    )
    assert label in shown, shown
    assert shown.endswith(b"\r\x1b[K")  # the line is cleared at the end
    if command[0] == "keys":
        assert stdout.splitlines() == piped.stdout.splitlines()  # the output itself is unchanged


@needs_redis
def test_doctor_sees_a_fanout_caches_one_listener_for_every_shard(tmp_path):
    """A FanoutCache's listener is elected in its own directory (not per shard): the doctor
    finds it there, so a listener that runs without a lease (Redis gone) is a warning for
    every shard, not "no listener running"."""

    directory = tmp_path / "fanout"
    with RedisTestServer() as temporary:
        options = {"remote": temporary.url, "remote_prefix": f"doctor-{uuid.uuid4().hex}:",
                   "max_staleness": 0.2}
        cache = dc.FanoutCache(directory, shards=3, **options)
        try:
            cache.set("k", "v")
            deadline = time.monotonic() + WAIT
            while True:
                _, document = doctor(str(directory))
                if severities(document, "listener") == {"ok"} or time.monotonic() > deadline:
                    break
            listeners = by_check(document, "listener")
            assert len(listeners) == 3 and severities(document, "listener") == {"ok"}
            assert all(f"pid {os.getpid()}" in found["message"] for found in listeners)
            temporary.stop()
            deadline = time.monotonic() + WAIT
            while True:  # the listener clears its lease once its connections fail
                _, document = doctor(str(directory))
                if severities(document, "listener") == {"warning"} or time.monotonic() > deadline:
                    break
            assert severities(document, "listener") == {"warning"}
            assert all("runs" in found["message"] or "cleared" in found["message"]
                       for found in by_check(document, "listener"))
        finally:
            cache.close()
