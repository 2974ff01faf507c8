"""The package type-checks under ``mypy --strict`` (with pyproject.toml's [tool.mypy] settings).

The package ships ``py.typed``, so its annotations are its users' types: an error here is one
their type checker may report in their code. Optional third-party modules without type
information are listed in [tool.mypy.overrides]; tests/test_packaging.py checks that a type
checker finds the package in an editable install.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip('mypy', reason='mypy is not installed (pip install -e .[test])')

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_strict_finds_no_error(tmp_path):
    result = subprocess.run(
        [sys.executable, '-m', 'mypy', '--strict', '--config-file', str(ROOT / 'pyproject.toml'),
         '--cache-dir', str(tmp_path / 'mypy_cache'), 'diskcache_core'],
        cwd=ROOT, capture_output=True, text=True, check=False, timeout=600,
    )
    assert result.returncode == 0, (
        f'mypy --strict diskcache_core found errors:\n{result.stdout}{result.stderr}'
    )


def test_the_mypy_settings_are_strict():
    """`python -m mypy` alone (an editor, a pre-commit hook) checks what this test checks."""
    tomllib = pytest.importorskip('tomllib')  # Python 3.11+
    settings = tomllib.loads((ROOT / 'pyproject.toml').read_text(encoding='utf-8'))['tool']['mypy']
    assert settings['strict'] is True
    assert settings['files'] == ['diskcache_core']


# `get`'s tuple forms as a type checker sees them (they were all Any): each ``# E:`` line must
# draw that error, and the correct file none.
GET_MISTAKES = '''
from diskcache_core import Cache, FanoutCache


def mistakes(cache: Cache, fanout: FanoutCache) -> None:
    pair: str = cache.get("k", expire_time=True)  # E: assignment
    value, tag, extra = cache.get("k", tag=True)  # E: misc
    value, expires = cache.get("k", expire_time=True, tag=True)  # E: misc
    when: str = fanout.get("k", expire_time=True)[1]  # E: assignment
    stored: int = fanout.get("k", tag=True, store_time=True)[2]  # E: assignment
    cache.incr("n", delta="x")  # E: arg-type
    fanout.incr("n", default="zero")  # E: arg-type

    @cache.memoize
    def square(number: int) -> int:
        return number * number

    square("3")  # E: arg-type
    text: str = square(3)  # E: assignment
'''

GET_CORRECT = '''
from typing import Any, assert_type

from diskcache_core import Cache, FanoutCache, Index


def forms(cache: Cache, fanout: FanoutCache, index: Index[str, int], asked: bool) -> None:
    number: int = cache.get("k")  # the value alone: Any, as the cache holds any value
    assert_type(cache.get("k", default=0, read=False, retry=True), Any)
    assert_type(cache.get("k", expire_time=True), tuple[Any, float | None])
    assert_type(cache.get("k", tag=True), tuple[Any, Any])
    assert_type(cache.get("k", expire_time=True, tag=True), tuple[Any, float | None, Any])
    assert_type(cache.get("k", store_time=True), tuple[Any, float | None])
    assert_type(
        fanout.get("k", expire_time=True, tag=True, store_time=True),
        tuple[Any, float | None, Any, float | None],
    )
    assert_type(fanout.get("k", None, False, asked), Any)  # a flag not known: Any
    total = cache.incr("n", 2) + cache.decr("f", 0.5, default=None) + fanout.incr("n")

    @cache.memoize  # bare, and with parentheses: the function's own signature either way
    def square(number: int) -> int:
        return number * number

    @fanout.memoize(expire=60)
    async def fetch(url: str) -> bytes:
        return url.encode()

    @index.memoize
    def halve(number: float) -> float:
        return number / 2

    assert_type(square(3), int)
    async def use() -> None:
        assert_type(await fetch("u"), bytes)

    assert_type(halve(1), float)
    key: str = square.__cache_key__(3)
'''


def test_get_tuple_forms_incr_delta_and_bare_memoize_are_typed(tmp_path):
    from test_async_typing import expected_errors, mypy_errors

    files = {"user_get_mistakes.py": GET_MISTAKES, "user_get_correct.py": GET_CORRECT}
    reported, output = mypy_errors(tmp_path, files)
    assert reported["user_get_correct.py"] == set(), output
    assert reported["user_get_mistakes.py"] == expected_errors(GET_MISTAKES), output
