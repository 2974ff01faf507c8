"""Fixtures for the micro-benchmarks: every benchmark runs once per (implementation, repeat) in a
fresh cache directory; ``measure`` (see ``measure.py``) times it; ``--micro-quick`` shortens all."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from typing import Any, Callable

import pytest

from benchmarks.micro.implementations import CacheLike, Implementation, implementations
from benchmarks.micro.measure import Measure
from benchmarks.micro.operations import repeats

WARM_UP_SECONDS = 1.0


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    parser.getgroup("micro").addoption(
        "--micro-quick",
        action="store_true",
        default=False,
        help="run every micro-benchmark with a few rounds only (smoke run)",
    )
    if not pluginmanager.has_plugin("timeout"):
        # pyproject.toml sets the test suite's `timeout` (pytest-timeout, in the test extra),
        # which this run reads too; with the bench extra alone pytest would warn "Unknown
        # config option: timeout". The benchmarks need no timeout: register the name only.
        parser.addini("timeout", "the test suite's pytest-timeout limit (unused here)")


def _quick(config: pytest.Config) -> bool:
    return bool(config.getoption("--micro-quick"))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize over (implementation, repeat) in ABBA order: ours, peer, peer, ours, ..."""
    if "implementation" not in metafunc.fixturenames:
        return
    found = implementations()
    runs = [
        (impl, repeat)
        for repeat in range(repeats(_quick(metafunc.config)))
        for impl in (found if repeat % 2 == 0 else found[::-1])
    ]
    ids = [f"{impl.label}-{repeat}" for impl, repeat in runs]
    metafunc.parametrize(("implementation", "repeat"), runs, ids=ids)


@pytest.fixture(scope="session", autouse=True)
def warm_up(request: pytest.FixtureRequest) -> None:
    """Exercise every implementation briefly before the first measurement, so that the first
    benchmark does not pay for imports, cold caches or a CPU still at low clock speed."""
    seconds = WARM_UP_SECONDS / (10 if _quick(request.config) else 1)
    found = implementations()
    with tempfile.TemporaryDirectory(prefix="micro-bench-warm-up-") as root:
        for index, impl in enumerate(found):
            cache = impl.factory(os.path.join(root, str(index)))
            deadline = time.perf_counter() + seconds / len(found)
            count = 0
            while time.perf_counter() < deadline:
                cache.set(f"key-{count % 100}", b"v" * 100)
                cache.get(f"key-{count % 100}")
                count += 1
            cache.close()


@pytest.fixture
def open_cache(implementation: Implementation) -> Iterator[Callable[..., CacheLike]]:
    """Open caches of the implementation under test in a fresh temporary directory."""
    opened: list[CacheLike] = []
    with tempfile.TemporaryDirectory(prefix="micro-bench-") as root:

        def open_(same_as: CacheLike | None = None, **settings: Any) -> CacheLike:
            """A cache in a fresh directory, or another object on ``same_as``'s directory."""
            if same_as is None:
                directory = os.path.join(root, f"cache-{len(opened)}")
            else:
                directory = str(same_as.directory)
            cache = implementation.factory(directory, **settings)
            opened.append(cache)
            return cache

        yield open_
        for cache in opened:
            cache.close()


@pytest.fixture
def measure(
    benchmark: Any, implementation: Implementation, repeat: int, request: pytest.FixtureRequest
) -> Measure:
    return Measure(benchmark, implementation, repeat, _quick(request.config))
