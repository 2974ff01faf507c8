"""The awaitable twins as a type checker sees them: each has its sync method's signature.

Runs ``mypy --strict`` on two user files, one with mistakes a user makes with the twins (each
line marked with the error code mypy must report there) and one that uses them correctly and
must pass. Before the twins were typed, every mistake below passed silently.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import diskcache_core

pytest.importorskip("mypy")

# Every line with a ``# E: code`` comment must draw exactly that error; no other line any.
MISTAKES = '''
from diskcache_core import Cache, FanoutCache
from diskcache_core.contrib.django import DjangoCache


async def cache_mistakes(cache: Cache) -> None:
    await cache.aget("k", defualt=1)  # E: call-overload
    await cache.aset("k")  # E: call-arg
    await cache.aadd("k", 1, expire="soon")  # E: arg-type
    await cache.aincr("k", 1, 0, False, "extra")  # E: call-arg
    await cache.aincr("n", delta="x")  # E: arg-type
    await cache.adecr("n", default="zero")  # E: arg-type
    cache.incr("n", "x")  # E: arg-type
    pair: str = await cache.aget("k", expire_time=True)  # E: assignment
    value, expires, tag = await cache.aget("k", tag=True)  # E: misc
    await cache.apop()  # E: call-arg
    await cache.apush(prefix="q")  # E: call-arg
    await cache.apull(prefix="q", sid="back")  # E: call-arg
    stored: str = await cache.aset("k", 1)  # E: assignment
    removed: str = await cache.aexpire()  # E: assignment


async def fanout_mistakes(fanout: FanoutCache) -> None:
    await fanout.aget("k", defualt=1)  # E: call-overload
    await fanout.aset("k")  # E: call-arg
    await fanout.atouch("k", expire="soon")  # E: arg-type
    await fanout.adelete("k", retyr=True)  # E: call-arg
    await fanout.aincr("n", delta="x")  # E: arg-type
    fanout.decr("n", delta=b"1")  # E: arg-type
    stored_at: str = (await fanout.aget("k", store_time=True))[1]  # E: assignment
    count: str = await fanout.aclear()  # E: assignment
    given_up: str = (await fanout.astats()).timeouts  # E: assignment


async def django_mistakes(backend: DjangoCache) -> None:
    await backend.aget("k", defualt=1)  # E: call-arg
    await backend.aset("k")  # E: call-arg
    await backend.aincr_version("k", versoin=2)  # E: call-arg
    await backend.aincr("n", delta="x")  # E: arg-type
    failed: int = await backend.aset_many({"k": 1})  # E: assignment
'''

CORRECT = '''
import io
import warnings
from typing import Any, assert_type

from diskcache_core import Cache, FanoutCache
from diskcache_core.contrib.django import DjangoCache


async def use_cache(cache: Cache) -> None:
    stored: bool = await cache.aset("k", 1, expire=60, tag="t", retry=True)
    added: bool = await cache.aadd("n", 0)
    await cache.aget("k", default=None, read=False, expire_time=True, tag=True, retry=False)
    counted = await cache.aincr("n", delta=2, default=0) + await cache.adecr("n")
    present: bool = await cache.acontains("k")
    touched: bool = await cache.atouch("k", expire=None)
    await cache.aset("file", io.BytesIO(b"data"), read=True)
    await cache.aread("file")
    await cache.apop("k", "default", expire_time=True)
    deleted: bool = await cache.adelete("n", retry=True)
    removed: int = await cache.aexpire(now=None) + await cache.aevict("t") + await cache.acull()
    warned: list[warnings.WarningMessage] = await cache.acheck(fix=False)
    hits, misses = await cache.astats(enable=True, reset=False)
    size: int = await cache.avolume() + await cache.aclear(retry=True)
    key = await cache.apush("job", prefix="q", side="back")
    await cache.apeek(prefix="q")
    await cache.apull(prefix="q", side="front", expire_time=False, tag=False)
    await cache.apeekitem(last=False)
    assert_type(await cache.aget("k", expire_time=True), tuple[Any, float | None])
    assert_type(await cache.aget("k", tag=True, store_time=True), tuple[Any, Any, float | None])
    value, expires, tag = await cache.aget("k", expire_time=True, tag=True)
    floats = await cache.aincr("f", 0.5) + await cache.adecr("f", delta=2, default=None)


async def use_fanout(fanout: FanoutCache) -> None:
    stored: bool = await fanout.aset("k", 1, 60.0, False, None, False)
    await fanout.aget("k", "default")
    value, expires, tag, stored_at = await fanout.aget(
        "k", expire_time=True, tag=True, store_time=True
    )
    assert_type(stored_at, float | None)
    given_up: int = (await fanout.astats()).timeouts
    deleted: bool = await fanout.adelete("k")


async def use_django(backend: DjangoCache) -> None:
    stored: bool = await backend.aset("k", 1, timeout=60, version=2)
    await backend.aget("k", default=0, version=2)
    failed: list[str] = await backend.aset_many({"k": 1}, timeout=None)
    version: int = await backend.aincr_version("k", version=2) + await backend.adecr_version("k")
    present: bool = await backend.ahas_key("k")
'''

_ERROR = re.compile(r"^(?P<file>[\w.]+\.py):(?P<line>\d+): error: .*\[(?P<code>[\w-]+)\]$")


def expected_errors(source: str) -> set[tuple[int, str]]:
    return {
        (number, marker.group(1))
        for number, line in enumerate(source.splitlines(), 1)
        if (marker := re.search(r"# E: ([\w-]+)$", line))
    }


def mypy_errors(tmp_path: Path, sources: dict[str, str]) -> tuple[dict[str, set[tuple[int, str]]], str]:
    """``mypy --strict`` on user files (name: source), none of the project's settings: the
    (line, code) of each error per file, and mypy's output."""
    for name, source in sources.items():
        (tmp_path / name).write_text(source)
    (tmp_path / "mypy.ini").write_text("[mypy]\n")  # none of the project's settings
    package_root = str(Path(diskcache_core.__file__).parent.parent)  # the tree under test
    result = subprocess.run(
        [
            sys.executable, "-m", "mypy", "--strict",
            # Judge the user files only: Django has no type information, and the library's
            # own modules are checked on their own.
            "--follow-imports=silent", "--no-warn-unused-ignores",
            "--cache-dir", str(tmp_path / ".mypy_cache"), "--config-file", "mypy.ini",
            "--show-error-codes", "--no-pretty", "--no-error-summary", *sources,
        ],
        check=False,
        cwd=tmp_path,
        env={**os.environ, "MYPYPATH": package_root},
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = result.stdout + result.stderr
    reported: dict[str, set[tuple[int, str]]] = {name: set() for name in sources}
    for line in output.splitlines():
        found = _ERROR.match(line)
        if found:
            reported.setdefault(found["file"], set()).add((int(found["line"]), found["code"]))
    return reported, output


def test_mypy_strict_reports_misused_twins_and_passes_correct_use(tmp_path: Path) -> None:
    mistakes, correct = textwrap.dedent(MISTAKES), textwrap.dedent(CORRECT)
    files = {"user_mistakes.py": mistakes, "user_correct.py": correct}
    reported, output = mypy_errors(tmp_path, files)
    assert reported["user_correct.py"] == set(), output
    assert reported["user_mistakes.py"] == expected_errors(mistakes), output
    assert set(reported) == set(files), output
