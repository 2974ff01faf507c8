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
