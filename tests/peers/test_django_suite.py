"""Django's own cache test suite, run against diskcache_core's Django backend.

Django's wheel ships no tests; its source distribution on PyPI does. This test downloads the
sdist of exactly the installed Django version once (see ``upstream_suites.py``), extracts its
``tests/`` tree, adds ``tests/helpers/django_suite/tests_diskcache_core.py`` (ours: it subclasses
Django's ``BaseCacheTests`` and its middleware and utility tests with our backend configured)
to Django's ``cache`` test package, and runs it with Django's own ``runtests.py``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from upstream_suites import environment, sdist_tests

django = pytest.importorskip("django")

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
OURS = HERE.parent / "helpers" / "django_suite" / "tests_diskcache_core.py"
MODULE = "tests_diskcache_core"
# Django's BaseCacheTests (54 in Django 5.2) plus its middleware, utility and i18n tests.
MINIMUM_TESTS = 90


def test_djangos_cache_suite_passes_on_our_backend(tmp_path):
    tree = sdist_tests("django", django.__version__, "cache/tests.py")
    shutil.copyfile(OURS, tree / "cache" / f"{MODULE}.py")
    result = subprocess.run(
        [sys.executable, "runtests.py", f"cache.{MODULE}", "--parallel", "1", "-v", "2"],
        cwd=tree, env=environment(tmp_path), capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-20000:]
    ran = re.search(r"^Ran (\d+) tests?", output, re.MULTILINE)
    assert ran is not None, output[-5000:]
    assert int(ran.group(1)) >= MINIMUM_TESTS, output[-5000:]
    assert re.search(r"^OK\b", output, re.MULTILINE), output[-5000:]
    assert "skipped" not in output.split("Ran ")[-1], output[-5000:]  # nothing skipped
