"""The documentation: builds without a warning, its examples run, and it covers the public API."""

from __future__ import annotations

import doctest
import os
import re
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

import diskcache_core
from diskcache_core import cli

pytest.importorskip('sphinx', reason='Sphinx is not installed (pip install -e .[docs])')

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / 'docs'
PAGES_WITH_EXAMPLES = sorted(path.name for path in DOCS.glob('*.rst') if '>>>' in path.read_text())

# A 1x1 PNG, standing in for the benchmark harness's plots.
_PNG = bytes.fromhex(
    '89504e470d0a1a0a0000000d4948445200000001000000010806000000'
    '1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082'
)


def build(output: Path, results: Path | None = None) -> subprocess.CompletedProcess:
    """sphinx-build with warnings as errors; `results` stands in for benchmarks/results."""
    env = dict(os.environ)
    if results is not None:
        env['DISKCACHE_CORE_BENCHMARK_RESULTS'] = str(results)
    return subprocess.run(
        [sys.executable, '-m', 'sphinx', '-W', '--keep-going', '-q', '-b', 'html',
         '-d', str(output / '.doctrees'), str(DOCS), str(output)],
        # ~40 s on a loaded machine: the bound only keeps a hung build from running for ever.
        check=False, capture_output=True, text=True, env=env, timeout=480,
    )


@pytest.fixture(scope='module')
def html(tmp_path_factory) -> Path:
    output = tmp_path_factory.mktemp('html')
    result = build(output)
    assert result.returncode == 0, result.stdout + result.stderr
    return output


def test_build_has_no_warnings(html):
    assert (html / 'index.html').exists()
    assert (html / 'tutorial.html').exists()


def documented_objects(html: Path) -> set[str]:
    """Python object names in Sphinx's objects.inv (format 2: four header lines, then zlib)."""
    data = (html / 'objects.inv').read_bytes()
    header_end = 0
    for _ in range(4):
        header_end = data.index(b'\n', header_end) + 1
    names = set()
    for line in zlib.decompress(data[header_end:]).decode('utf-8').splitlines():
        name, role = line.split(' ', 2)[:2]
        if role.startswith('py:'):
            names.add(name)
    return names


def test_every_public_name_is_in_the_api_reference(html):
    documented = documented_objects(html)
    missing = [name for name in diskcache_core.__all__ if f'diskcache_core.{name}' not in documented]
    assert missing == [], f'add these to docs/api.rst: {missing}'


def test_the_api_reference_names_public_paths_only(html):
    """No private module on the API page: not in its text (docstrings), nor in a link's title
    (signatures, base classes), nor as a file name."""
    page = (html / 'api.html').read_text(encoding='utf-8')
    private_path = r'diskcache_core\._[a-z]\w*(?:\.\w+)*|\b_[a-z]\w*\.py\b'
    private = sorted(set(re.findall(private_path, page)))
    assert private == [], private
    assert 'title="diskcache_core.Cache"' in page  # references still resolve, to public paths
    assert 'all options are described in' in page and 'href="memoize.html"' in page


def test_the_theme_fits_wide_tables(html):
    """Furo with a wider column (docs/_static/wide.css), not alabaster's narrow one."""
    page = (html / 'benchmarks.html').read_text(encoding='utf-8')
    assert 'furo' in page and 'alabaster' not in page
    assert (html / '_static' / 'wide.css').exists() and '_static/wide.css' in page


def test_every_setting_is_described():
    page = (DOCS / 'cache.rst').read_text()
    missing = [name for name in diskcache_core.DEFAULT_SETTINGS if f'``{name}``' not in page]
    assert missing == [], f'add these settings to docs/cache.rst: {missing}'


def test_every_cli_command_is_described():
    page = (DOCS / 'cli.rst').read_text()
    missing = [name for name in cli.COMMANDS if f'``{name} DIR' not in page]
    assert missing == [], f'add these commands to docs/cli.rst: {missing}'


@pytest.mark.parametrize('page', PAGES_WITH_EXAMPLES)
def test_examples_run(page):
    assert 'tutorial.rst' in PAGES_WITH_EXAMPLES
    failures, attempts = doctest.testfile(
        str(DOCS / page), module_relative=False, verbose=False, report=True,
        optionflags=doctest.REPORT_NDIFF,
    )
    assert attempts > 0
    assert failures == 0, f'{failures} example(s) of docs/{page} failed; see the output above'


def test_benchmark_results_are_included(tmp_path):
    results = tmp_path / 'results'
    results.mkdir()
    (results / 'cache-bars-1.png').write_bytes(_PNG)
    (results / 'results.rst').write_text(
        'Benchmark results\n=================\n\n'
        'Standard workload, 1 process\n----------------------------\n\n'
        '====== ======\naction median\n====== ======\nget    1.0 us\n====== ======\n\n'
        '.. image:: cache-bars-1.png\n   :alt: cache-bars-1.png\n'
    )
    output = tmp_path / 'html'
    result = build(output, results)
    assert result.returncode == 0, result.stdout + result.stderr
    page = (output / 'benchmarks.html').read_text()
    assert 'Standard workload, 1 process' in page
    assert 'cache-bars-1.png' in page
    assert (output / '_images' / 'cache-bars-1.png').exists()


def test_missing_benchmark_results_are_explained(tmp_path):
    output = tmp_path / 'html'
    result = build(output, tmp_path / 'no-results')
    assert result.returncode == 0, result.stdout + result.stderr
    assert 'No results have been recorded' in (output / 'benchmarks.html').read_text()
