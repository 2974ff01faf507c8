"""python-diskcache's module paths (diskcache.core, .fanout, .persistent, .recipes,
.djangocache) and ``from diskcache_core import DjangoCache`` work, and Django is imported only
when DjangoCache is used."""

import subprocess
import sys

import diskcache_core


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_python_diskcache_module_paths_name_the_same_objects():
    from diskcache_core.core import DEFAULT_SETTINGS, ENOVAL, EVICTION_POLICY, Cache, Disk, Timeout
    from diskcache_core.fanout import FanoutCache
    from diskcache_core.persistent import Deque, Index
    from diskcache_core.recipes import Averager, Lock, RLock, barrier, memoize_stampede, throttle

    assert Cache is diskcache_core.Cache and Disk is diskcache_core.Disk
    assert ENOVAL is diskcache_core.ENOVAL and Timeout is diskcache_core.Timeout
    assert DEFAULT_SETTINGS is diskcache_core.DEFAULT_SETTINGS
    assert EVICTION_POLICY is diskcache_core.EVICTION_POLICY
    assert FanoutCache is diskcache_core.FanoutCache
    assert (Deque, Index) == (diskcache_core.Deque, diskcache_core.Index)
    assert (Lock, RLock, Averager) == (diskcache_core.Lock, diskcache_core.RLock, diskcache_core.Averager)
    assert (barrier, throttle) == (diskcache_core.barrier, diskcache_core.throttle)
    assert memoize_stampede is diskcache_core.memoize_stampede


def test_django_is_imported_only_when_djangocache_is_used():
    out = _run(
        "import sys, diskcache_core, diskcache_core.core, diskcache_core.fanout,"
        " diskcache_core.persistent, diskcache_core.recipes\n"
        "print('django' in sys.modules)\n"
        "from diskcache_core import DjangoCache\n"
        "from diskcache_core.djangocache import DjangoCache as Alias\n"
        "from diskcache_core.contrib.django import DjangoCache as Real\n"
        "print('django' in sys.modules, DjangoCache is Alias is Real)\n"
    )
    assert out.splitlines() == ["False", "True True"]


def test_unknown_attribute_is_an_attribute_error():
    try:
        diskcache_core.NoSuchThing  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("expected AttributeError")


def test_python_diskcache_submodules_names_are_all_importable_here():
    # `import diskcache_core as diskcache` users import these from python-diskcache's module
    # paths (many are that module's own imports: code relies on them all the same).
    wanted = {
        "core": ["Constant", "METADATA", "DBNAME", "UNKNOWN", "args_to_key", "full_name"],
        "fanout": ["DEFAULT_SETTINGS", "ENOVAL", "Cache", "Disk", "Timeout", "Deque", "Index"],
        "persistent": ["ENOVAL", "Cache", "Deque", "Index"],
        "recipes": ["ENOVAL", "args_to_key", "full_name"],
        "djangocache": ["DEFAULT_TIMEOUT", "ENOVAL", "FanoutCache", "args_to_key", "full_name"],
    }
    import importlib

    for module, names in wanted.items():
        ours = importlib.import_module("diskcache_core." + module)
        assert [name for name in names if not hasattr(ours, name)] == [], module
        assert sorted(ours.__all__) == sorted(set(ours.__all__))
    from diskcache_core.core import METADATA, Constant

    assert METADATA == {"count": 0, "size": 0, "hits": 0, "misses": 0}
    assert Constant("ENOVAL") == diskcache_core.ENOVAL
