"""Django's own cache test suite, run against diskcache_core's Django backend.

Django's wheel ships no tests; its source distribution on PyPI does. This test downloads the
sdist of exactly the installed Django version once (kept under ``~/.cache``), extracts its
``tests/`` tree, adds ``tests/django_suite/tests_diskcache_core.py`` (ours: it subclasses
Django's ``BaseCacheTests`` and its middleware and utility tests with our backend configured)
to Django's ``cache`` test package, and runs it with Django's own ``runtests.py``.

Without access to the package index the test is skipped, except under CI (``CI=true``), where
it fails instead: a suite that silently stops running proves nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

django = pytest.importorskip("django")

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
OURS = HERE / "django_suite" / "tests_diskcache_core.py"
MODULE = "tests_diskcache_core"
# Django's BaseCacheTests (54 in Django 5.2) plus its middleware, utility and i18n tests.
MINIMUM_TESTS = 90


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "diskcache_core-tests" / f"django-{django.__version__}"


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"Django's test suite could not be obtained under CI: {reason}")
    pytest.skip(f"Django's test suite could not be obtained: {reason}")


def _django_tests_tree() -> Path:
    """The ``tests/`` directory of the installed Django version's source, downloaded once."""
    root = _cache_root()
    tree = root / f"django-{django.__version__}" / "tests"
    if (tree / "runtests.py").is_file() and (tree / "cache" / "tests.py").is_file():
        return tree
    root.mkdir(parents=True, exist_ok=True)
    download = subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
         f"django=={django.__version__}", "--no-binary", ":all:", "--no-deps", "-d", str(root)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    archives = sorted(root.glob(f"[Dd]jango-{django.__version__}.tar.gz"))
    if download.returncode != 0 or not archives:
        _unavailable(f"pip download failed: {download.stderr.strip()[-500:]}")
    prefix = f"django-{django.__version__}/tests/"
    with tarfile.open(archives[0]) as archive:
        members = [m for m in archive.getmembers() if m.name.lower().startswith(prefix.lower())]
        if not members:
            _unavailable(f"{archives[0].name} holds no tests/ directory")
        kwargs = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        archive.extractall(root, members=members, **kwargs)
    extracted = [p for p in root.iterdir() if p.name.lower() == f"django-{django.__version__}"]
    return extracted[0] / "tests"


def test_djangos_cache_suite_passes_on_our_backend(tmp_path):
    tree = _django_tests_tree()
    shutil.copyfile(OURS, tree / "cache" / f"{MODULE}.py")
    env = dict(os.environ)
    repository = str(HERE.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [repository, env.get("PYTHONPATH")]))
    env["TMPDIR"] = str(tmp_path)  # the caches' directories, removed with tmp_path
    result = subprocess.run(
        [sys.executable, "runtests.py", f"cache.{MODULE}", "--parallel", "1", "-v", "2"],
        cwd=tree, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-20000:]
    ran = re.search(r"^Ran (\d+) tests?", output, re.MULTILINE)
    assert ran is not None, output[-5000:]
    assert int(ran.group(1)) >= MINIMUM_TESTS, output[-5000:]
    assert re.search(r"^OK\b", output, re.MULTILINE), output[-5000:]
    assert "skipped" not in output.split("Ran ")[-1], output[-5000:]  # nothing skipped
