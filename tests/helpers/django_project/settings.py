"""Settings of the test project: DjangoCache as the default cache, cached sessions.

The cache directory comes from ``DISKCACHE_CORE_DJANGO_LOCATION`` (so that several processes can
share one), else a directory under the system's temporary folder. The test suite overrides
CACHES per test with `caches` and a fresh directory.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

BASE_DIR = Path(__file__).resolve().parent

SECRET_KEY = "diskcache_core-test-project-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1"]
USE_TZ = True

# DiskCacheCoreConfig: DjangoCache's system checks in ``manage.py check``.
INSTALLED_APPS = ["django.contrib.sessions", "diskcache_core.contrib.django.DiskCacheCoreConfig"]
ROOT_URLCONF = "tests.helpers.django_project.urls"

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
]
# The same stack with Django's site-wide cache around it (update first, fetch last).
SITE_CACHE_MIDDLEWARE = [
    "django.middleware.cache.UpdateCacheMiddleware",
    *MIDDLEWARE,
    "django.middleware.cache.FetchFromCacheMiddleware",
]
CACHE_MIDDLEWARE_SECONDS = 60
CACHE_MIDDLEWARE_KEY_PREFIX = "site"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": False,
        "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
    }
]

SESSION_ENGINE = "django.contrib.sessions.backends.cache"
SESSION_CACHE_ALIAS = "default"


def caches(location: str, **entry: Any) -> dict[str, Any]:
    """CACHES with DjangoCache in `location`; `entry` adds or replaces keys of its entry."""
    default = {
        "BACKEND": "diskcache_core.contrib.django.DjangoCache",
        "LOCATION": location,
        "TIMEOUT": 300,
        "SHARDS": 4,
        "DATABASE_TIMEOUT": 0.010,
        "OPTIONS": {"size_limit": 2**28},
    }
    default.update(entry)
    return {"default": default}


CACHES = caches(
    os.environ.get("DISKCACHE_CORE_DJANGO_LOCATION")
    or os.path.join(tempfile.gettempdir(), "diskcache_core-django-project")
)
