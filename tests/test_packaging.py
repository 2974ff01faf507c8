"""Packaging, checked from outside the checkout: an editable install that type checkers can see,
and an sdist and wheel that carry what they should.

Everything runs without the network: the build backend (hatchling) and ``build`` come from the
test extra, so builds and installs use ``--no-build-isolation``/``--no-isolation``, and the
installed package needs nothing (``--no-deps``).

The README, the package's long description, is checked here too: it renders, its example runs,
and its test command is the one CI runs.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import site
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = 'diskcache_core'

USER_CODE = '''\
import diskcache_core

cache = diskcache_core.Cache()
count: int = cache.incr("visits")
reveal_type(diskcache_core.Cache.incr)
'''


def clean_env() -> dict[str, str]:
    """The environment without anything that would let a child find the checkout by itself."""
    env = {name: value for name, value in os.environ.items()
           if name not in ('PYTHONPATH', 'MYPYPATH', 'PYTHONHOME', 'VIRTUAL_ENV')}
    env['PIP_DISABLE_PIP_VERSION_CHECK'] = '1'
    return env


def run(args: list[str | Path], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(arg) for arg in args], cwd=cwd, env=clean_env(),
                            capture_output=True, text=True, check=False, timeout=timeout)
    assert result.returncode == 0, (
        f'{" ".join(map(str, args))} failed ({result.returncode}):\n{result.stdout}{result.stderr}'
    )
    return result


def copy_project(target: Path) -> Path:
    """What the build backend needs of the checkout, in a directory of its own: a package found
    there can only have come from the install under test (not from an install of the checkout
    the surrounding environment may have)."""
    target.mkdir()
    for name in ('pyproject.toml', 'README.rst', 'LICENSE'):
        shutil.copy2(ROOT / name, target / name)
    shutil.copytree(ROOT / PACKAGE, target / PACKAGE,
                    ignore=shutil.ignore_patterns('__pycache__', '*.pyc'))
    return target


def venv_python(directory: Path) -> Path:
    return directory / ('Scripts' if os.name == 'nt' else 'bin') / 'python'


def make_venv(directory: Path) -> Path:
    """A new virtual environment that also sees this one's packages (for hatchling and mypy
    without the network), after its own; returns its interpreter.

    Through a .pth of plain paths, sorted after the editable install's: unlike
    ``--system-site-packages`` it works from inside a virtual environment (tox) too, and it does
    not run this environment's .pth files, so an editable install of the checkout made here is
    not seen there.
    """
    venv.EnvBuilder(with_pip=True).create(directory)
    python = venv_python(directory)
    purelib = run([python, '-c', 'import sysconfig; print(sysconfig.get_path("purelib"))'],
                  cwd=directory).stdout.strip()
    ours = [*site.getsitepackages(), *([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])]
    Path(purelib, 'zz_test_packaging_outer.pth').write_text(
        ''.join(f'{path}\n' for path in ours if os.path.isdir(path)), encoding='utf-8')
    return python


@pytest.fixture(scope='module')
def build_backend() -> None:
    pytest.importorskip('hatchling', reason='the build backend is not installed (pip install -e .[test])')


@pytest.mark.slow
def test_an_editable_install_is_visible_to_type_checkers(tmp_path, build_backend):
    """`pip install -e .` (README's command) gives a static path entry that mypy (and pyright,
    which reads the same .pth paths) follows: no import hook that only the interpreter sees."""
    pytest.importorskip('mypy', reason='mypy is not installed (pip install -e .[test])')
    project = copy_project(tmp_path / 'project')
    python = make_venv(tmp_path / 'venv')
    outside = tmp_path / 'elsewhere'
    outside.mkdir()
    run([python, '-m', 'pip', 'install', '-q', '--no-deps', '--no-build-isolation', '--no-index',
         '-e', project], cwd=outside)

    imported = run([python, '-c', f'import {PACKAGE}; print({PACKAGE}.__file__)'], cwd=outside)
    assert Path(imported.stdout.strip()) == project / PACKAGE / '__init__.py'

    (outside / 'user.py').write_text(USER_CODE)
    checked = run([python, '-m', 'mypy', '--strict', '--verbose', '--cache-dir',
                   tmp_path / 'mypy_cache', 'user.py'], cwd=outside)
    output = checked.stdout + checked.stderr
    # (incr is Cache's through its counters part, _cache.counters.AtomicChanges)
    assert 'Revealed type is "def (self: diskcache_core._cache.counters.AtomicChanges, key: Any' in output, output
    parsed = re.findall(r'Parsing (\S+) \(diskcache_core\)', output)
    assert parsed and Path(parsed[0]) == project / PACKAGE / '__init__.py', output


def imported_top_names(path: Path) -> set[str]:
    """The top-level names of every absolute import in `path`."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding='utf-8'))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split('.')[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split('.')[0])
    return names


@pytest.fixture(scope='module')
def dists(tmp_path_factory, build_backend) -> tuple[Path, Path]:
    """The sdist, and the wheel built from it (as `python -m build` does)."""
    pytest.importorskip('build', reason='build is not installed (pip install -e .[test])')
    output = tmp_path_factory.mktemp('dist')
    run([sys.executable, '-m', 'build', '--no-isolation', '--outdir', output, ROOT], cwd=output)
    (sdist,) = output.glob('*.tar.gz')
    (wheel,) = output.glob('*.whl')
    return sdist, wheel


@pytest.mark.slow
def test_the_sdist_ships_what_its_tests_import(dists, tmp_path):
    sdist, _ = dists
    safe = {'filter': 'data'} if hasattr(tarfile, 'data_filter') else {}
    with tarfile.open(sdist) as archive:
        archive.extractall(tmp_path, **safe)  # type: ignore[arg-type]
    (unpacked,) = tmp_path.iterdir()
    # Every module or package of the checkout that a test imports (the benchmark harness,
    # the tests' helpers) is in the sdist.
    local = {path.stem for path in ROOT.iterdir() if (path / '__init__.py').exists()}
    local |= {path.stem for path in (ROOT / 'tests').rglob('*.py')}
    imported = set().union(*(imported_top_names(path) for path in (ROOT / 'tests').rglob('*.py')))
    for name in sorted(imported & local):
        shipped = (unpacked / name).is_dir() or any((unpacked / 'tests').rglob(f'{name}.py'))
        assert shipped, f'the tests import {name!r}, which the sdist does not ship'
    for name in ('LICENSE', 'README.rst', 'pyproject.toml', 'scripts/test.sh'):
        assert (unpacked / name).is_file(), f'the sdist lacks {name}'
    # And they all import: pytest collects the sdist's whole suite without an error.
    collected = run([sys.executable, '-m', 'pytest', '--collect-only', '-q', '-p', 'no:cacheprovider',
                     'tests'], cwd=unpacked, timeout=600)
    assert re.search(r'^\d+ tests collected in ', collected.stdout, re.MULTILINE), collected.stdout


@pytest.mark.slow
def test_the_wheel_declares_its_license_and_no_placeholder_urls(dists):
    _, wheel = dists
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (metadata_name,) = [name for name in names if name.endswith('.dist-info/METADATA')]
        metadata = archive.read(metadata_name).decode('utf-8')
        license_names = [name for name in names if name.endswith('.dist-info/licenses/LICENSE')]
        assert license_names, names
        assert b'Apache License' in archive.read(license_names[0])
    assert f'{PACKAGE}/py.typed' in names
    assert not [name for name in names if name.startswith(('tests/', 'benchmarks/'))]
    assert 'License-Expression: Apache-2.0' in metadata
    assert 'License-File: LICENSE' in metadata
    # The project has no public home yet: no made-up address is declared.
    assert not re.search(r'^Project-URL:', metadata, re.MULTILINE), metadata


# --- the README ------------------------------------------------------------------------------


def readme_literal_blocks() -> list[tuple[str, str]]:
    """The README's code blocks and literal blocks as (language, text); rendering it as PyPI does
    (docutils, no Sphinx) must give no warning."""
    docutils_core = pytest.importorskip('docutils.core')
    from docutils import nodes

    document = docutils_core.publish_doctree(
        (ROOT / 'README.rst').read_text(encoding='utf-8'),
        settings_overrides={'halt_level': 2, 'report_level': 2},  # a warning raises
    )
    blocks = []
    for block in document.findall(nodes.literal_block):
        classes = block.get('classes', [])
        blocks.append((classes[1] if classes[:1] == ['code'] and len(classes) > 1 else '',
                       block.astext()))
    return blocks


def test_the_readme_example_runs(tmp_path):
    code = [text for language, text in readme_literal_blocks() if language == 'python']
    assert code, 'README.rst opens with a Python example'
    example = code[0]
    assert len([line for line in example.splitlines() if line.strip()]) <= 6, example
    directory = tmp_path / 'cache'
    script = example.replace('"/tmp/mycache"', repr(str(directory)))
    assert script != example, 'the example opens its cache at "/tmp/mycache"'
    run([sys.executable, '-c', f'{script}\ncache.close()'], cwd=ROOT)  # (-c: imports from cwd)
    assert (directory / 'cache.db').exists()


def test_the_readme_gives_the_commands_ci_and_benchmarks_run():
    commands = [text.strip() for language, text in readme_literal_blocks() if not language]
    assert "python3 -m pip install -e '.[bench]' && python3 -m benchmarks" in commands
    assert 'bash scripts/test.sh' in commands
    ci = (ROOT / '.ci' / 'run')
    if ci.exists():  # (an sdist does not ship CI's entry point)
        assert re.search(r'^exec bash scripts/test\.sh\b', ci.read_text(), re.MULTILINE)
    assert re.search(r"pip install .*-e '\.\[test\]'", (ROOT / 'scripts' / 'test.sh').read_text())


def test_the_readme_installs_from_a_checkout_first():
    """The package is not on PyPI yet: the README's first install command installs the checkout,
    and where it names the PyPI package it says that it is not published."""
    commands = [text.strip() for language, text in readme_literal_blocks() if not language]
    installs = [command for command in commands if 'pip install' in command]
    assert installs, commands
    assert re.fullmatch(r'python3 -m pip install (-e )?\.', installs[0]), installs[0]
    text = ' '.join((ROOT / 'README.rst').read_text(encoding='utf-8').split())
    for match in re.finditer(r'pip install [\'"]?diskcache-core\b', text):
        sentence_start = text.rfind('. ', 0, match.start()) + 1
        assert 'not published' in text[sentence_start:match.end()], text[sentence_start:match.end()]


def test_the_project_declares_no_placeholder_urls():
    """No made-up home page in the metadata (the wheel's is checked by the slow test above)."""
    tomllib = pytest.importorskip('tomllib')
    project = tomllib.loads((ROOT / 'pyproject.toml').read_text(encoding='utf-8'))['project']
    assert 'urls' not in project, project.get('urls')
