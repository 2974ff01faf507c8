"""Many tags per item through the Django backend (issue 37, docs/tags.rst): ``set``, ``add``,
``get_or_set`` and ``set_many`` take ``tags=``, ``get(tags=True)`` returns them, ``evict_tags``
and the awaitable twins do the same; a bad tag in ``set_many`` stores none of the items."""

from __future__ import annotations

import asyncio

import pytest

django = pytest.importorskip("django")

from django.conf import settings  # noqa: E402

from tests.helpers.django_project import settings as project  # noqa: E402

if not settings.configured:
    settings.configure(**{name: getattr(project, name) for name in dir(project) if name.isupper()})
django.setup()

from diskcache_core.contrib import _django_options  # noqa: E402
from diskcache_core.contrib.django import DjangoCache  # noqa: E402


@pytest.fixture
def backend(tmp_path):
    cache = DjangoCache(str(tmp_path / "django-cache"), {})
    yield cache
    for fanout in list(_django_options.SHARED.values()):
        fanout.close()
    _django_options.SHARED.clear()


def test_set_add_get_or_set_and_set_many_store_tags(backend):
    assert backend.set("a", 1, tags=["t1", "t2"]) is True
    assert backend.add("b", 2, tags=["t2", "t3"]) is True
    assert backend.add("b", 9, tags=["t9", "t8"]) is False
    assert backend.get_or_set("c", lambda: 3, tags=["t3", "t4"]) == 3
    assert backend.get_or_set("c", 99, tags=["t9", "t8"]) == 3
    assert backend.set_many({"d": 4, "e": 5}, tags=["t4", "t5"]) == []
    assert backend.get("a", tags=True) == (1, frozenset({"t1", "t2"}))
    assert backend.get("b", tag=True, tags=True) == (2, "t2", frozenset({"t2", "t3"}))
    assert backend.get("c", tags=True) == (3, frozenset({"t3", "t4"}))
    assert backend.get("e", tags=True) == (5, frozenset({"t4", "t5"}))
    assert backend.evict_tags(["t9"]) == 0
    assert backend.evict_tags(["t3", "t5"]) == 4  # b, c, d, e
    assert backend.get("a") == 1 and backend.get("b") is None and backend.get("d") is None
    assert backend.evict("t2") == 1


def test_a_bad_tag_in_set_many_stores_none_of_the_items(backend):
    with pytest.raises(TypeError, match="tags"):
        backend.set_many({f"k{n}": n for n in range(20)}, tags=["ok", object()])
    assert backend.get_many([f"k{n}" for n in range(20)]) == {}


def test_the_awaitable_twins_take_tags(backend):
    async def main():
        assert await backend.aset("a", 1, tags=["x", "y"]) is True
        assert await backend.aadd("b", 2, tags=["y", "z"]) is True
        assert await backend.aset_many({"c": 3}, tags=["z", "w"]) == []
        assert await backend.aget("a", tags=True) == (1, frozenset({"x", "y"}))
        assert await backend.aget_or_set("d", lambda: 4, tags=["w"]) == 4
        assert await backend.aget_or_set("d", 5, tags=["v"]) == 4  # there: its tags stay
        assert await backend.aget("d", tags=True) == (4, frozenset({"w"}))
        return await backend.aevict_tags(["z", "w"])

    assert asyncio.run(main()) == 3  # b, c and d
