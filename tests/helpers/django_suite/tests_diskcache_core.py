"""Django's own cache tests (``BaseCacheTests`` of Django's test suite), run against
diskcache_core's Django backend.

This module is copied into the ``cache`` test package of the Django source tree that
``tests/peers/test_django_suite.py`` downloads, and run there by Django's ``runtests.py``: it configures
the backend the way Django's own file-based backend tests configure theirs (every alias on one
cache directory, made afresh for each test).
"""

import shutil
import tempfile

from django.conf import settings
from django.core.cache import caches
from django.test import TestCase, override_settings
from django.test.signals import setting_changed

from . import tests
from .tests import BaseCacheTests, caches_setting_for_tests


@override_settings(
    CACHES=caches_setting_for_tests(BACKEND="diskcache_core.contrib.django.DjangoCache")
)
class DiskcacheCoreCacheTests(BaseCacheTests, TestCase):
    """Every test Django's cache backends must pass, on diskcache_core's DjangoCache."""

    def setUp(self):
        super().setUp()
        self.dirname = tempfile.mkdtemp()
        for cache_params in settings.CACHES.values():
            cache_params["LOCATION"] = self.dirname
        setting_changed.send(self.__class__, setting="CACHES", enter=False)

    def tearDown(self):
        super().tearDown()
        for alias in settings.CACHES:
            caches[alias].close()
        shutil.rmtree(self.dirname)


# Django's tests of the cache middleware, cache_page, the cache utilities and i18n-aware keys run
# on the local-memory backend; here they run again with diskcache_core's backend underneath.
_ROOT = tempfile.mkdtemp(prefix="diskcache-core-django-")
_BACKEND = "diskcache_core.contrib.django.DjangoCache"


def _ours(name, **params):
    return {"BACKEND": _BACKEND, "LOCATION": f"{_ROOT}/{name}", **params}


def tearDownModule():
    for alias in list(caches.all(initialized_only=True)):
        alias.close()
    shutil.rmtree(_ROOT, ignore_errors=True)


class _OnOurBackend:
    """Checks that the override took: the test really runs on diskcache_core's backend."""

    def setUp(self):
        super().setUp()
        assert type(caches["default"]).__module__.startswith("diskcache_core"), caches["default"]


@override_settings(CACHES={"default": _ours("utils")})
class DiskcacheCoreCacheUtils(_OnOurBackend, tests.CacheUtils):
    pass


@override_settings(CACHES={"default": _ours("prefixed-utils", KEY_PREFIX="cacheprefix")})
class DiskcacheCorePrefixedCacheUtils(_OnOurBackend, tests.CacheUtils):
    pass


@override_settings(CACHES={"default": _ours("head")})
class DiskcacheCoreCacheHEADTest(_OnOurBackend, tests.CacheHEADTest):
    pass


@override_settings(CACHES={"default": _ours("i18n")})
class DiskcacheCoreCacheI18nTest(_OnOurBackend, tests.CacheI18nTest):
    pass


@override_settings(
    CACHES={"default": _ours("middleware"), "other": _ours("middleware-other", TIMEOUT="1")}
)
class DiskcacheCoreCacheMiddlewareTest(_OnOurBackend, tests.CacheMiddlewareTest):
    pass


@override_settings(CACHES={"default": _ours("template-response")})
class DiskcacheCoreTestWithTemplateResponse(_OnOurBackend, tests.TestWithTemplateResponse):
    pass
