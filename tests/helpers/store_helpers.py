"""Helpers shared by the store tests.

Raw access to a cache directory (the SQLite index and the value files beside it), a holder for
the database write lock, self-verifying values, and the worker functions of the multiprocess
tests. Workers are top-level functions of this importable module so that they run under the
``spawn`` start method as well as ``fork``.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import io
import json
import os
import random
import sqlite3
import struct
import sys
import threading
import time
import traceback

DB_NAME = 'cache.db'

# ---------------------------------------------------------------------------------------------
# The cache directory seen from outside the library
# ---------------------------------------------------------------------------------------------


def db_path(directory: str) -> str:
    return os.path.join(str(directory), DB_NAME)


def connect(directory: str, timeout: float = 10.0) -> sqlite3.Connection:
    """A raw sqlite3 connection to the cache database (autocommit)."""
    return sqlite3.connect(db_path(directory), timeout=timeout, isolation_level=None)


def item_table(con: sqlite3.Connection) -> str:
    """Name of the table holding one row per item (the one with filename/access columns)."""
    tables = [name for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    for name in tables:
        columns = {row[1] for row in con.execute('PRAGMA table_info("%s")' % name)}
        if {'filename', 'access_time', 'access_count'} <= columns:
            return name
    raise AssertionError('no item table with filename/access_time/access_count columns in %r' % tables)


def item_rows(directory: str, columns: str = '*') -> list:
    """All rows of the item table, selected columns only."""
    with contextlib.closing(connect(directory)) as con:
        table = item_table(con)
        return con.execute('SELECT %s FROM "%s"' % (columns, table)).fetchall()


def db_filenames(directory: str) -> set:
    """Value-file names (normalised relative paths) that rows of the database name."""
    names = set()
    for (filename,) in item_rows(directory, 'filename'):
        if filename is not None:
            names.add(os.path.normpath(filename))
    return names


def is_db_file(relative_path: str) -> bool:
    """True for the SQLite database and its journal files at the top of the directory."""
    return os.sep not in relative_path and relative_path.startswith(DB_NAME)


def all_files(directory: str) -> set:
    """Every file under `directory`, as normalised paths relative to it."""
    found = set()
    for dirpath, _dirs, files in os.walk(str(directory)):
        for name in files:
            full = os.path.join(dirpath, name)
            found.add(os.path.normpath(os.path.relpath(full, str(directory))))
    return found


def value_files(directory: str) -> set:
    """Every file under `directory` except the database and its journals."""
    return {path for path in all_files(directory) if not is_db_file(path)}


def unnamed_files(directory: str) -> set:
    """Files that are neither the database nor named by a row: orphans, temporaries, junk."""
    return value_files(directory) - db_filenames(directory)


def wait_until(condition, timeout: float = 30.0, interval: float = 0.01) -> bool:
    """Poll `condition` until it is true or `timeout` seconds pass; return its last result.

    Value files released by a single-item removal may be unlinked just after the call returns
    (off the caller's path); tests that expect them gone wait a bounded time. It returns as
    soon as the condition holds, so the bound is generous: a loaded machine may be slow.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result or time.monotonic() >= deadline:
            return result
        time.sleep(interval)


def files_settle_to(directory: str, expected: set, timeout: float = 30.0) -> set:
    """The value files of `directory` once they equal `expected` (or after `timeout`)."""
    wait_until(lambda: value_files(directory) == expected, timeout)
    return value_files(directory)


def sha256_file(path: str) -> str:
    with open(path, 'rb') as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except FileNotFoundError:
        return 0


def stored_value_bytes(directory: str) -> int:
    """Bytes that values occupy: value files plus inline values in the item table."""
    total = sum(os.path.getsize(os.path.join(str(directory), p)) for p in value_files(directory))
    for (length,) in item_rows(directory, 'COALESCE(LENGTH(value), 0)'):
        total += length
    return total


def warning_text(warns) -> list:
    """Readable form of the list `Cache.check()` returns."""
    return ['%s: %s' % (category_of(w).__name__, getattr(w, 'message', w)) for w in warns]


def category_of(warning) -> type:
    category = getattr(warning, 'category', None)
    return category if category is not None else type(warning)


class WriteLockHolder:
    """Hold ``BEGIN IMMEDIATE`` on a cache database from a raw connection in another thread.

    Use as a context manager; the lock is held from ``__enter__`` until ``__exit__`` (or
    :meth:`release`). While held, no other connection can start a write transaction, but
    readers in WAL mode proceed.
    """

    def __init__(self, directory: str, max_hold: float = 60.0) -> None:
        self._directory = str(directory)
        self._max_hold = max_hold
        self._acquired = threading.Event()
        self._release = threading.Event()
        self._error: list = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            con = connect(self._directory)
            try:
                con.execute('BEGIN IMMEDIATE')
                self._acquired.set()
                self._release.wait(self._max_hold)
                con.execute('ROLLBACK')
            finally:
                con.close()
        except BaseException as exc:  # reported to the test thread
            self._error.append(exc)
            self._acquired.set()

    def __enter__(self) -> WriteLockHolder:
        self._thread.start()
        assert self._acquired.wait(30), 'could not take the write lock'
        if self._error:
            raise self._error[0]
        return self

    def release(self) -> None:
        self._release.set()
        self._thread.join(30)

    def release_after(self, delay: float) -> threading.Timer:
        timer = threading.Timer(delay, self._release.set)
        timer.daemon = True
        timer.start()
        return timer

    def __exit__(self, *exc_info) -> None:
        self.release()


# ---------------------------------------------------------------------------------------------
# Self-verifying values: magic, length, SHA-256 of the body, body
# ---------------------------------------------------------------------------------------------

MAGIC = b'DCTV'
HEADER = struct.Struct('>4sQ32s')


def make_value(seed: int, size: int) -> bytes:
    """A value of about `size` bytes that carries its own length and hash."""
    body = random.Random(seed).randbytes(max(0, size - HEADER.size))
    return HEADER.pack(MAGIC, len(body), hashlib.sha256(body).digest()) + body


def value_problem(blob) -> str | None:
    """None when `blob` is a complete self-verifying value, else what is wrong with it."""
    if not isinstance(blob, (bytes, bytearray)):
        return 'not bytes: %r' % type(blob)
    if len(blob) < HEADER.size:
        return 'short value: %d bytes' % len(blob)
    magic, length, digest = HEADER.unpack_from(blob)
    body = bytes(blob[HEADER.size:])
    if magic != MAGIC:
        return 'bad magic %r' % magic
    if len(body) != length:
        return 'partial value: %d of %d bytes' % (len(body), length)
    if hashlib.sha256(body).digest() != digest:
        return 'hash mismatch'
    return None


# ---------------------------------------------------------------------------------------------
# Worker functions for child processes (spawn-safe: importable, arguments picklable)
# ---------------------------------------------------------------------------------------------


def _cache_module():
    import diskcache_core

    return diskcache_core


def _report_and_exit(code: int, message: str = '') -> None:
    if message:
        sys.stderr.write(message + '\n')
        sys.stderr.flush()
    os._exit(code)


def incr_worker(directory: str, keys: list, iterations: int, start) -> None:
    """Increment every key in `keys` `iterations` times (after `start` is set)."""
    dc = _cache_module()
    cache = dc.Cache(directory)
    start.wait(30)
    for _ in range(iterations):
        for key in keys:
            cache.incr(key, retry=True)
    cache.close()


def add_race_worker(directory: str, worker_id: int, keys: list, start, result_path: str) -> None:
    """Try to `add` every key; record the keys this worker won in `result_path` (JSON)."""
    dc = _cache_module()
    cache = dc.Cache(directory)
    start.wait(30)
    won = [key for key in keys if cache.add(key, worker_id, retry=True)]
    cache.close()
    with open(result_path, 'w') as handle:
        json.dump(won, handle)


def mixed_worker(directory: str, seed: int, operations: int, key_count: int) -> None:
    """Random set/get/delete of self-verifying values, inline and file-sized.

    Exits with status 1 and a description on stderr if any read returns a damaged value.
    """
    dc = _cache_module()
    rng = random.Random(seed)
    cache = dc.Cache(directory)
    try:
        for number in range(operations):
            key = 'key-%d' % rng.randrange(key_count)
            action = rng.random()
            if action < 0.45:
                size = rng.choice([64, 300, 2000, 40_000, 150_000, 400_000])
                cache.set(key, make_value(seed * 100_000 + number, size), retry=True)
            elif action < 0.85:
                value = cache.get(key, retry=True)
                if value is not None:
                    problem = value_problem(value)
                    if problem:
                        _report_and_exit(1, 'get(%r): %s' % (key, problem))
            else:
                cache.delete(key, retry=True)
        cache.close()
    except BaseException:
        _report_and_exit(2, traceback.format_exc())


def crash_writer(directory: str, seed: int, ready) -> None:
    """Write large self-verifying values forever (until SIGKILL, or a bound of 120 s).

    Uses plain bytes values, streamed values (``read=True``), pickled containers holding a
    value, and transactions that write the same value under two keys (``pair-a``/``pair-b``).
    """
    dc = _cache_module()
    rng = random.Random(seed)
    # Made up front, so that the loop spends its time writing (where a kill hurts most).
    values = [make_value(seed * 100 + n, rng.randrange(1 << 20, 4 << 20)) for n in range(5)]
    cache = dc.Cache(directory, size_limit=2**40)
    ready.set()
    deadline = time.monotonic() + 120
    number = 0
    while time.monotonic() < deadline:
        number += 1
        value = values[number % len(values)]
        kind = rng.randrange(5)
        key = 'crash-%d' % rng.randrange(6)
        if kind == 0:
            cache.set(key, value, retry=True)
        elif kind == 1:
            cache.set(key, io.BytesIO(value), read=True, retry=True)
        elif kind == 2:
            cache.set('pickled-%d' % rng.randrange(3), {'number': number, 'value': value}, retry=True)
        elif kind == 3:
            with cache.transact(retry=True):
                cache.set('pair-a', value, retry=True)
                cache.set('pair-b', value, retry=True)
        else:
            cache.delete(key, retry=True)


def visibility_writer(directory: str, key: str, value) -> None:
    """Set one item and exit: the parent checks it sees the write at once."""
    dc = _cache_module()
    with dc.Cache(directory) as cache:
        cache.set(key, value)


def fork_context_worker(cache, key: str, value) -> None:
    """Run in a process started with the 'fork' method, using the parent's Cache object."""
    try:
        cache.set(key, value)
        ok = cache.get(key) == value and cache.get('parent') == 'parent-value'
        gc.collect()
    except BaseException:
        _report_and_exit(3, traceback.format_exc())
    _report_and_exit(0 if ok else 4, '' if ok else 'child read wrong values')


def transaction_holder(directory: str, ready) -> None:
    """Open a transaction, write inside it, signal `ready`, then wait (to be SIGKILLed)."""
    dc = _cache_module()
    cache = dc.Cache(directory)
    with cache.transact():
        cache.set('uncommitted', b'u' * 300_000)
        cache.set('uncommitted-small', 1)
        ready.set()
        time.sleep(60)
