"""The docs and the package's docstrings and comments name only files and modules that exist.

Modules and tests move (issue 36 put the flat modules into subpackages and the tests into
folders by kind); a page or a comment that still says ``_listenerchild.py`` or
``tests/test_remote.py`` sends its reader nowhere. Checked here, in docs/ (pages and conf.py),
README.rst, pyproject.toml's comments and every file of the package:

- a file name ending in ``.py``: with a folder (``tests/parts/test_cli.py``,
  ``_remote/listenerprocess.py``) it must be a path from the repository's root, from the
  package, or from the folder of the file that names it; without one, a file of that name must
  exist somewhere in the repository (``test_crash.py``);
- a private module spelled as a ``literal``, a `role` or ``diskcache_core._x``: some dotted
  prefix of it must be a module or package of diskcache_core (``_store.schema.PLAIN_VARIANT``),
  or a sibling's name (``_django_checks`` in contrib).

Names of other projects' files and privates that the text is about are listed in `EXTERNAL`.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = 'diskcache_core'

# Other projects' names the docs and comments speak of, not files or modules of this one.
EXTERNAL = {
    'manage.py': "Django's project script",
    'runtests.py': "Django's test runner (in its sdist)",
    'test_init.py': "diskcache-community's test of its __init__ (in its sdist)",
    '_sql': "python-diskcache's private Cache._sql, which we keep",
    '_local': "python-diskcache's private thread-local",
    '_transact': "python-diskcache's private transaction method",
    '_triggers_stale': "diskcache-community's private",
    '_module.Name': 'the pattern of a private path, in docs/conf.py',
    '_total': "Prometheus's suffix of a counter's name",
}

_PATH = re.compile(r'(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.py)\b')
_MODULE = re.compile(
    r'``(_[a-z]\w*(?:\.\w+)*)``|(?<!`)`(_[a-z]\w*(?:\.\w+)+)`|\b' + PACKAGE + r'\.(_[a-z]\w*(?:\.\w+)*)'
)


def repository_files() -> list[str]:
    """The repository's files (tracked, and new ones not ignored), as root-relative paths."""
    listed = subprocess.run(['git', 'ls-files', '--cached', '--others', '--exclude-standard'],
                            cwd=ROOT, capture_output=True, text=True, check=False)
    if listed.returncode != 0:
        pytest.skip('not a git checkout: ' + listed.stderr.strip())
    return [name for name in listed.stdout.splitlines() if (ROOT / name).exists()]


def modules(files: list[str]) -> set[str]:
    """The dotted names of diskcache_core's modules and packages, relative to it."""
    found = set()
    for name in files:
        path = PurePosixPath(name)
        if path.parts[0] == PACKAGE and path.suffix == '.py':
            parts = list(path.with_suffix('').parts[1:])
            if parts[-1] == '__init__':
                parts.pop()
            found.update('.'.join(parts[:end]) for end in range(1, len(parts) + 1))
    return found


def checked_files(files: list[str]) -> list[str]:
    return sorted(name for name in files if (
        (name.startswith('docs/') and name.endswith(('.rst', '.py')))
        or (name.startswith(PACKAGE + '/') and name.endswith('.py'))
        or name in ('README.rst', 'pyproject.toml')
    ))


def broken_references(name: str, text: str, files: list[str], known: set[str]) -> list[str]:
    """`name:line: reference` for every file or module `text` names that does not exist."""
    paths = set(files)
    basenames = {PurePosixPath(path).name for path in files}
    folder = PurePosixPath(name).parent
    broken = []
    for number, line in enumerate(text.splitlines(), 1):
        for match in _PATH.finditer(line):
            path = match.group(1)
            if path in EXTERNAL:
                continue
            if '/' in path:
                found = any(str(PurePosixPath(base, path)) in paths
                            for base in ('.', PACKAGE, str(folder)))
            else:
                found = path in basenames
            if not found:
                broken.append(f'{name}:{number}: {path}')
        for match in _MODULE.finditer(line):
            module = next(group for group in match.groups() if group)
            if module in EXTERNAL:
                continue
            parts = module.split('.')
            prefixes = {'.'.join(parts[:end]) for end in range(1, len(parts) + 1)}
            if not (prefixes & known or any(other.endswith('.' + parts[0]) for other in known)):
                broken.append(f'{name}:{number}: {module}')
    return broken


def test_docs_and_docstrings_name_only_files_and_modules_that_exist():
    files = repository_files()
    known = modules(files)
    broken = []
    for name in checked_files(files):
        broken += broken_references(name, (ROOT / name).read_text(encoding='utf-8'), files, known)
    assert not broken, 'references to files or modules that do not exist:\n  ' + '\n  '.join(broken)


def test_the_check_finds_moved_files_and_modules():
    files = ['diskcache_core/_remote/listenerprocess.py', 'diskcache_core/_store/schema.py',
             'tests/parts/test_cli.py', 'docs/remote.rst']
    known = modules(files)
    text = '\n'.join([
        'the refresher (_listenerchild.py), the process (_remote/listenerprocess.py)',
        '``tests/test_cli.py`` and ``tests/parts/test_cli.py`` and ``test_cli.py``',
        '``_schema.PLAIN_VARIANT``, ``_store.schema.PLAIN_VARIANT``, `_store.gone`',
        'diskcache_core._remote.listenerprocess and diskcache_core._listener',
        "Django's manage.py and python-diskcache's ``_sql``",
    ])
    assert broken_references('docs/remote.rst', text, files, known) == [
        'docs/remote.rst:1: _listenerchild.py',
        'docs/remote.rst:2: tests/test_cli.py',
        'docs/remote.rst:3: _schema.PLAIN_VARIANT',
        'docs/remote.rst:4: _listener',
    ]
