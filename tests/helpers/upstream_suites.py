"""Other projects' own test suites, run against diskcache_core: their tests downloaded once
from their source distributions on PyPI, and pytest run on them in a subprocess.

Without access to the package index a suite is skipped, except under CI (``CI=true``), where
it fails instead: a suite that silently stops running proves nothing.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import NoReturn

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]


def unavailable(reason: str) -> NoReturn:
    """Skip (fail under CI): the suite could not be obtained."""
    if os.environ.get("CI"):
        pytest.fail(f"an upstream test suite could not be obtained under CI: {reason}")
    pytest.skip(f"an upstream test suite could not be obtained: {reason}")


def installed_version(project: str) -> str:
    """The installed version of `project` (the test extra installs every one used here)."""
    try:
        return importlib.metadata.version(project)
    except importlib.metadata.PackageNotFoundError:
        unavailable(f"{project} is not installed (the test extra installs it)")


def sdist_tests(project: str, version: str, marker: str) -> Path:
    """The top-level ``tests/`` directory of `project` `version`'s sdist, downloaded and
    extracted once under ``~/.cache``; `marker` is a file it must hold (relative to it)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    root = Path(base) / "diskcache_core-tests" / f"{project}-{version}"
    found = sorted(root.glob(f"*/tests/{marker}"))
    if found:
        return found[0].parents[len(Path(marker).parts) - 1]
    root.mkdir(parents=True, exist_ok=True)
    download = subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
         f"{project}=={version}", "--no-binary", ":all:", "--no-deps", "-d", str(root)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    archives = sorted(root.glob("*.tar.gz"))
    if download.returncode != 0 or not archives:
        unavailable(f"pip download of {project}=={version} failed: {download.stderr[-500:]}")
    with tarfile.open(archives[0]) as archive:
        members = [m for m in archive.getmembers() if m.name.split("/")[1:2] == ["tests"]]
        kwargs = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        archive.extractall(root, members=members, **kwargs)
    found = sorted(root.glob(f"*/tests/{marker}"))
    if not found:
        unavailable(f"{archives[0].name} holds no tests/{marker}")
    return found[0].parents[len(Path(marker).parts) - 1]


def environment(tmp_path: Path, first: Path | None = None) -> dict[str, str]:
    """The subprocess's environment: this repository importable (after `first`, a directory
    of import shims), temporary files in tmp_path."""
    env = dict(os.environ)
    paths = [str(first) if first else "", str(REPOSITORY), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
    env["TMPDIR"] = str(tmp_path)  # the caches' directories, removed with tmp_path
    return env


def run_pytest(
    run: Path, files: list[str], tmp_path: Path, shims: Path | None = None
) -> tuple[Path, str]:
    """Runs pytest on `files` in directory `run` (none of our options: an empty pytest.ini);
    returns its JUnit XML report and its output.

    `shims` is put first on the subprocess's import path (and its subprocesses').
    A failing test is run up to twice more (pytest-rerunfailures), and only its last run
    counts: some upstream tests assume a thread starts, or an item is read back, within 0.1 s,
    which a loaded machine may not give. A test that fails on every run is reported.
    """
    (run / "pytest.ini").write_text("[pytest]\n")
    report = tmp_path / "report.xml"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         f"--junitxml={report}", "--timeout=300", "--reruns=2", *files],
        cwd=run, env=environment(tmp_path, shims), capture_output=True, text=True, timeout=1500,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert report.is_file(), output[-5000:]
    return report, output


def outcome(case: ElementTree.Element) -> str:
    """passed, failed or skipped: one test case of a JUnit XML report (a test run again has a
    case per run; the last is its outcome)."""
    kinds = {child.tag for child in case}
    if kinds & {"failure", "error"}:
        return "failed"
    return "skipped" if "skipped" in kinds else "passed"


def check_failures(
    outcomes: dict[str, str], expected: dict[str, str], output: str, all_ran: bool = True
) -> None:
    """Exactly the `expected` tests failed: no other, and none of them passed (nor, with
    `all_ran`, went missing), so the list stays true."""
    failed = {name for name, result in outcomes.items() if result == "failed"}
    unexpected = failed - expected.keys()
    assert not unexpected, f"new failures: {sorted(unexpected)}\n{output[-20000:]}"
    now_passing = {name for name in expected if outcomes.get(name) == "passed"}
    assert not now_passing, f"listed as failing but passed: {sorted(now_passing)}"
    if all_ran:
        missing = expected.keys() - outcomes.keys()
        assert not missing, f"listed tests that did not run: {sorted(missing)}"
