"""DjangoCache's system checks (issue 38): ``manage.py check`` reports, with ids and hints, what
would otherwise fail at first use or not at all, for every alias whose BACKEND is DjangoCache.

``manage.py check`` runs for real in subprocesses of the test project (tests/helpers/django_project, whose
INSTALLED_APPS has DiskCacheCoreConfig); the other cases call the registered check function
under ``override_settings``, and assert the ids it returns.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

import pytest

django = pytest.importorskip("django")

from django.conf import settings

from tests.helpers.django_project import settings as project

if not settings.configured:
    settings.configure(**{name: getattr(project, name) for name in dir(project) if name.isupper()})
django.setup()

from django.core.cache.backends.base import BaseCache
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from diskcache_core import FanoutCache
from diskcache_core.contrib import _django_checks, _django_options
from diskcache_core.contrib import django as django_backend
from diskcache_core.contrib.django import DjangoCache

ROOT = Path(__file__).resolve().parents[2]
BACKEND = "diskcache_core.contrib.django.DjangoCache"
NOBODY = 65534


class OurSubclass(DjangoCache):
    """A project's own subclass: checked as DjangoCache is."""


@pytest.fixture(autouse=True)
def _forget_shared_caches() -> Iterator[None]:
    yield
    for fanout in list(_django_options.SHARED.values()):
        fanout.close()
    _django_options.SHARED.clear()


@pytest.fixture
def location(tmp_path: Path) -> str:
    return str(tmp_path / "cache")


def check_ids(**caches: dict[str, Any]) -> list[str]:
    """The ids the registered check function returns for CACHES `caches` (each entry's BACKEND
    defaults to DjangoCache)."""
    entries = {alias: {"BACKEND": BACKEND, **entry} for alias, entry in caches.items()}
    with override_settings(CACHES=entries):
        return sorted(message.id for message in django_backend._check_caches())


def run_check(location: str) -> subprocess.CompletedProcess[str]:
    """``django-admin check`` (what ``manage.py check`` runs) in the test project, its default
    cache in `location`."""
    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = "tests.helpers.django_project.settings"
    env["DISKCACHE_CORE_DJANGO_LOCATION"] = location
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "django", "check"], cwd=str(ROOT), env=env,
                          capture_output=True, text=True, timeout=120, check=False)


# --- manage.py check, for real ----------------------------------------------------------------


def test_manage_py_check_reports_a_location_that_is_a_file_instead_of_dying(tmp_path):
    path = tmp_path / "a-file"
    path.write_text("not a cache")
    done = run_check(str(path))
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "(diskcache_core.E002) CACHES['default']: LOCATION" in done.stderr
    assert "is a file" in done.stderr and "HINT: Point LOCATION at a directory" in done.stderr
    assert path.read_text() == "not a cache"


def test_manage_py_check_passes_a_good_cache_and_opens_nothing(location):
    done = run_check(location)
    assert done.returncode == 0, done.stderr
    assert "System check identified no issues" in done.stdout
    assert not os.path.exists(location)  # checks look; the first use makes the directory


def test_the_first_use_of_a_location_that_is_a_file_raises_a_clear_error(tmp_path):
    path = tmp_path / "a-file"
    path.write_text("")
    backend = DjangoCache(str(path), {})  # as Django's cache handler builds it: no error yet
    with pytest.raises(ImproperlyConfigured, match="is not a directory"):
        backend.set("key", 1)


# --- each check -------------------------------------------------------------------------------


def test_a_good_entry_has_no_messages_before_and_after_first_use(location):
    entry = {"LOCATION": location, "SHARDS": 4, "OPTIONS": {"size_limit": 2**26}}
    assert check_ids(default=entry) == []
    DjangoCache(location, {"SHARDS": 4}).set("key", 1)
    assert check_ids(default=entry) == []


@pytest.mark.parametrize("entry", [{}, {"LOCATION": ""}, {"LOCATION": 42}])
def test_a_missing_location(entry):
    assert check_ids(default=entry) == ["diskcache_core.E001"]


def test_a_location_that_is_a_file_or_below_a_file(tmp_path):
    (tmp_path / "file").write_text("")
    assert check_ids(
        a={"LOCATION": str(tmp_path / "file")},
        b={"LOCATION": str(tmp_path / "file" / "below" / "deeper")},
    ) == ["diskcache_core.E002", "diskcache_core.E002"]


def _ids_as_nobody(entry: dict[str, Any], sender: Any) -> None:
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    problems = _django_checks.entry_problems(entry)
    sender.send(sorted(_django_checks.CHECK_IDS[problem.kind] for problem in problems))


def ids_without_write_access(entry: dict[str, Any], directory: Path) -> list[str]:
    """The ids of `entry`'s problems for a process that may read `directory` but not write it:
    a child dropped to ``nobody`` under root (root may write anything), else after a chmod."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        directory.chmod(0o555)
        try:
            return sorted(_django_checks.CHECK_IDS[problem.kind]
                          for problem in _django_checks.entry_problems(entry))
        finally:
            directory.chmod(0o755)
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_ids_as_nobody, args=(entry, sender))
    child.start()
    try:
        assert receiver.poll(60), "the child sent nothing"
        ids: list[str] = receiver.recv()
    finally:
        child.join(60)
    assert child.exitcode == 0
    return ids


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory every user may traverse and read, only its owner write."""
    base = Path(tempfile.mkdtemp(prefix="dc-django-checks-"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        import shutil

        shutil.rmtree(base, ignore_errors=True)


def test_a_location_this_process_cannot_write(shared_dir):
    cache_dir = shared_dir / "cache"
    DjangoCache(str(cache_dir), {"SHARDS": 2}).set("key", 1)
    for path in [cache_dir, *cache_dir.rglob("*")]:  # readable by all, writable by its owner
        path.chmod(0o755 if path.is_dir() else 0o644)
    assert check_ids(default={"LOCATION": str(cache_dir), "SHARDS": 2}) == []  # (the owner)
    assert ids_without_write_access({"LOCATION": str(cache_dir), "SHARDS": 2}, cache_dir) == [
        "diskcache_core.E003"
    ]
    missing = {"LOCATION": str(shared_dir / "not-yet" / "cache")}  # to be made in shared_dir
    assert ids_without_write_access(missing, shared_dir) == ["diskcache_core.E003"]
    read_only = {"LOCATION": str(cache_dir), "SHARDS": 2, "OPTIONS": {"read_only": True}}
    assert ids_without_write_access(read_only, cache_dir) == []


@pytest.mark.parametrize(
    "options",
    [
        {"colour": "blue"},
        {"size_limt": 2**20},
        {"shards": 4},  # FanoutCache's own argument: the entry's SHARDS
        {"directory": "/elsewhere"},
    ],
)
def test_an_unknown_options_key(location, options):
    assert check_ids(default={"LOCATION": location, "OPTIONS": options}) == ["diskcache_core.E004"]


def test_an_unknown_key_is_named_and_a_near_name_suggested(location):
    entry = {"BACKEND": BACKEND, "LOCATION": location, "OPTIONS": {"size_limt": 2**20}}
    with override_settings(CACHES={"default": entry}):
        [message] = django_backend._check_caches()
    assert message.msg == "CACHES['default']: unknown setting 'size_limt' in OPTIONS"
    assert message.hint == "Did you mean 'size_limit'?"


@pytest.mark.parametrize(
    "entry",
    [
        {"OPTIONS": {"size_limit": -1}},
        {"OPTIONS": {"MAX_ENTRIES": 0}},
        {"OPTIONS": {"CULL_FREQUENCY": "often"}},
        {"OPTIONS": {"disk": "no_such_module.Disk"}},
        {"OPTIONS": {"disk": "diskcache_core.Cache"}},
        {"OPTIONS": ["size_limit"]},
        {"SHARDS": "8"},
        {"SHARDS": 0},
        {"DATABASE_TIMEOUT": -1},
    ],
)
def test_a_bad_value(location, entry):
    assert check_ids(default={"LOCATION": location, **entry}) == ["diskcache_core.E005"]


def test_every_problem_of_an_entry_is_reported_at_once(tmp_path):
    (tmp_path / "file").write_text("")
    entry = {"LOCATION": str(tmp_path / "file"), "SHARDS": "8",
             "OPTIONS": {"colour": "blue", "size_limit": -1}}
    assert check_ids(default=entry) == [
        "diskcache_core.E002", "diskcache_core.E004", "diskcache_core.E005", "diskcache_core.E005"
    ]


def test_shards_that_disagree_with_the_directorys_layout(location):
    FanoutCache(location, shards=4).close()
    assert check_ids(default={"LOCATION": location, "SHARDS": 4}) == []
    assert check_ids(default={"LOCATION": location, "SHARDS": 2}) == ["diskcache_core.E006"]
    assert check_ids(default={"LOCATION": location}) == ["diskcache_core.E006"]  # (default 8)
    entry = {"BACKEND": BACKEND, "LOCATION": location, "SHARDS": 2}
    with override_settings(CACHES={"default": entry}):
        [message] = django_backend._check_caches()
    assert "created with shards=4" in message.msg
    assert message.hint.startswith("Set SHARDS to the count the directory was created with")


def test_shards_that_disagree_with_a_python_diskcache_directory(location):
    for number in range(3):  # python-diskcache's layout: shard directories, no layout file
        os.makedirs(os.path.join(location, f"{number:03d}"))
    assert check_ids(default={"LOCATION": location, "SHARDS": 3}) == []
    assert check_ids(default={"LOCATION": location, "SHARDS": 8}) == ["diskcache_core.E006"]


@pytest.fixture
def listening() -> Iterator[tuple[str, socket.socket]]:
    """A remote URL naming a port that listens: any connection made to it can be seen."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    try:
        yield f"redis://127.0.0.1:{server.getsockname()[1]}/0", server
    finally:
        server.close()


def assert_never_connected(server: socket.socket) -> None:
    with pytest.raises(BlockingIOError):
        server.accept()


def test_max_entries_or_cull_frequency_with_a_remote(location, listening):
    url, server = listening
    assert check_ids(default={"LOCATION": location, "OPTIONS": {"remote": url}}) == []
    assert check_ids(
        a={"LOCATION": location, "OPTIONS": {"remote": url, "MAX_ENTRIES": 100}},
        b={"LOCATION": location, "OPTIONS": {"remote": url, "CULL_FREQUENCY": 2}},
        c={"LOCATION": location, "OPTIONS": {"remote": url, "MAX_ENTRIES": 9, "CULL_FREQUENCY": 2}},
    ) == ["diskcache_core.E007", "diskcache_core.E007", "diskcache_core.W002"]
    assert_never_connected(server)


@pytest.mark.parametrize(
    "url",
    ["http://localhost:6379", "redis://localhost:port/0", "redis:///0", "redis://h/zero",
     "redis://h/0?cluster=maybe", 6379],
)
def test_a_remote_url_that_does_not_parse(location, url):
    assert check_ids(default={"LOCATION": location, "OPTIONS": {"remote": url}}) == [
        "diskcache_core.E008"
    ]


def test_a_remote_without_its_client_library(location, listening, monkeypatch):
    url, server = listening
    monkeypatch.setitem(sys.modules, "redis", None)  # (import redis: ImportError)
    entry = {"LOCATION": location, "OPTIONS": {"remote": url}}
    assert check_ids(default=entry) == ["diskcache_core.E009"]
    with pytest.raises(ImproperlyConfigured, match="needs the Redis client library"):
        DjangoCache(location, {"OPTIONS": {"remote": url}}).get("key")  # and so does first use
    assert_never_connected(server)
    assert not os.path.exists(location)


def test_a_location_on_a_network_filesystem_is_warned_about(tmp_path, monkeypatch):
    share = tmp_path / "mnt with space"
    share.mkdir()
    mounts = tmp_path / "mounts"
    escaped = str(share).replace(" ", "\\040")
    mounts.write_text(
        "/dev/vda1 / ext4 rw 0 0\n"
        f"server:/export {escaped} nfs4 rw,relatime 0 0\n"
    )
    monkeypatch.setattr(_django_checks, "MOUNTS", str(mounts))
    below = str(share / "project" / "cache")  # not made yet: its nearest parent's filesystem
    assert check_ids(default={"LOCATION": below}) == ["diskcache_core.W001"]
    assert check_ids(default={"LOCATION": str(tmp_path / "local")}) == []
    # A filesystem mounted later on the same point hides the first.
    mounts.write_text(mounts.read_text() + f"tmpfs {escaped} tmpfs rw 0 0\n")
    assert check_ids(default={"LOCATION": below}) == []


def test_filesystem_type_reads_the_longest_mount_point(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "/dev/vda1 / ext4 rw 0 0\n"
        "server:/a /zz-dc/srv nfs rw 0 0\n"
        "/dev/vdb /zz-dc/srv/local xfs rw 0 0\n"
        "/dev/vdc /zz-dc/srvother btrfs rw 0 0\n"
        "broken line\n"
    )
    table = str(mounts)
    kind = _django_checks.filesystem_type
    assert kind("/zz-dc/srv", table) == "nfs"
    assert kind("/zz-dc/srv/x/y", table) == "nfs"
    assert kind("/zz-dc/srv/local/y", table) == "xfs"
    assert kind("/zz-dc/srvother/x", table) == "btrfs"
    assert kind("/zz-dc/srvo", table) == "ext4"  # a prefix of a name is not a parent
    assert kind("/", table) == "ext4"
    assert kind("/", str(tmp_path / "no-table")) is None


def test_every_path_to_the_backend_and_its_subclasses_are_checked_and_others_not(tmp_path):
    (tmp_path / "file").write_text("")
    file = str(tmp_path / "file")
    assert check_ids(
        real={"LOCATION": file},
        alias={"BACKEND": "diskcache_core.djangocache.DjangoCache", "LOCATION": file},
        sub={"BACKEND": f"{__name__}.OurSubclass", "LOCATION": file},
        other={"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": file},
        missing={"BACKEND": "no_such_package.Cache", "LOCATION": file},
    ) == ["diskcache_core.E002"] * 3
    assert issubclass(OurSubclass, BaseCache)


def test_the_check_is_registered_by_the_app_under_the_caches_tag(location):
    from django.apps import apps
    from django.core import checks

    if not apps.is_installed("diskcache_core.contrib.django"):
        pytest.skip("Django was configured without the test project's INSTALLED_APPS")
    assert django_backend._check_caches in checks.registry.registry.get_checks()
    entry = {"BACKEND": BACKEND, "LOCATION": location, "OPTIONS": {"colour": "blue"}}
    with override_settings(CACHES={"default": entry}):
        ids = [message.id for message in checks.run_checks(tags=[checks.Tags.caches])]
    assert ids == ["diskcache_core.E004"]
