"""The pipe between the listener and its refresher (diskcache_core/_remote/listenerprocess.py): whole
names arrive, in order and in batches; the listener never blocks on it, and drops what a full
pipe cannot take (those copies are only invalidated)."""

from __future__ import annotations

import os
import threading

import pytest

pytest.importorskip("redis")

import diskcache_core as dc  # noqa: E402
from diskcache_core._remote.listenerprocess import (  # noqa: E402
    _BATCH,
    _PIPE_BUF,
    _TRIES,
    RefreshPipe,
    _records,
    refresh_batch,
)


def _pipe():
    read_end, write_end = os.pipe()
    return read_end, RefreshPipe(write_end), write_end


def test_names_arrive_whole_in_order_and_in_batches():
    read_end, pipe, write_end = _pipe()
    names = [b"s" + str(number).encode() * (number % 7 + 1) for number in range(1000)]
    names.append(b"")  # an empty name is still a name
    received: list[list[bytes]] = []
    reader = threading.Thread(target=lambda: received.extend(_records(read_end)))
    reader.start()
    try:
        for start in range(0, len(names), 37):
            pipe.send(names[start:start + 37])
    finally:
        os.close(write_end)  # EOF ends the reader
    reader.join(30)
    assert not reader.is_alive()
    os.close(read_end)
    assert [name for batch in received for name in batch] == names
    assert all(0 < len(batch) <= _BATCH for batch in received)


def test_a_name_longer_than_an_atomic_write_is_skipped():
    read_end, pipe, write_end = _pipe()
    pipe.send([b"a", b"x" * _PIPE_BUF, b"b"])
    os.close(write_end)
    assert [name for batch in _records(read_end) for name in batch] == [b"a", b"b"]
    os.close(read_end)


def test_a_full_pipe_drops_names_without_blocking_or_tearing_records():
    read_end, pipe, write_end = _pipe()
    names = [b"k%06d" % number for number in range(200_000)]  # far more than a pipe holds
    pipe.send(names)  # returns: never waits for the reader
    os.close(write_end)
    received = [name for batch in _records(read_end) for name in batch]
    os.close(read_end)
    assert 0 < len(received) < len(names)
    positions = {name: number for number, name in enumerate(names)}
    order = [positions[name] for name in received]  # KeyError: a torn record
    assert order == sorted(set(order))  # in order, none twice


def test_a_dead_refresher_does_not_break_the_listener():
    read_end, pipe, write_end = _pipe()
    os.close(read_end)
    pipe.send([b"a", b"b"])  # EPIPE is swallowed: the listener goes on
    os.close(write_end)


def _refresh_failing(errors):
    """A refresh that raises each of `errors` in turn, then succeeds; and its calls."""
    calls = []

    def refresh(names):
        calls.append(list(names))
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return len(names)

    return refresh, calls


def test_a_batch_the_busy_lock_held_off_is_refreshed_again():
    refresh, calls = _refresh_failing([dc.Timeout("busy"), dc.Timeout("busy")])
    refresh_batch(refresh, [b"a", b"b"])
    assert calls == [[b"a", b"b"]] * 3


def test_a_batch_is_given_up_after_its_tries_or_on_another_error():
    refresh, calls = _refresh_failing([dc.Timeout("busy")] * (_TRIES + 1))
    refresh_batch(refresh, [b"a"])
    assert len(calls) == _TRIES
    refresh, calls = _refresh_failing([ValueError("foreign value"), dc.Timeout("busy")])
    refresh_batch(refresh, [b"a"])
    assert len(calls) == 1


@pytest.mark.parametrize("settings", [b"", b'{"directory": "/nonexistent", "url": "redis://'])
def test_the_listener_process_without_its_settings_ends_quietly(settings):
    """Its electing process left before writing them all: no traceback, a clean exit."""
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    ended = subprocess.run(
        [sys.executable, "-m", "diskcache_core._remote.listenerprocess"], input=settings,
        capture_output=True, env=env, timeout=60,
    )
    assert (ended.returncode, ended.stderr) == (0, b"")
