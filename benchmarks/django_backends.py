"""Django-level backends: the same workload through ``django.core.cache``.

Each worker process configures Django's settings in code with one ``default`` cache, the backend
under test, and then uses ``django.core.cache.cache``. Keys become str, as Django's API expects.
"""

from __future__ import annotations

from typing import Any

from .backends import DIRECTORY, PROCESS_MEMORY, PYLIBMC_HINT, SERVER, Adapter, BackendSpec

_DJANGO_HINT = "pip install django"


def cache_settings(spec: BackendSpec, location: str) -> dict[str, Any]:
    """The ``CACHES['default']`` entry for a backend; items never expire during a run."""
    prefix = spec.options.get("location_prefix", "")
    return {"BACKEND": spec.options["backend"], "LOCATION": prefix + location, "TIMEOUT": None}


def _django_cache(config: dict[str, Any]) -> Any:
    """Configure Django for this process (if nobody did) and return the backend instance."""
    from django.conf import settings

    if not settings.configured:
        settings.configure(CACHES={"default": config})
        from django.core.cache import cache

        return cache
    # The host process (a test suite, say) configured Django before forking us: build the
    # backend exactly as django.core.cache's handler does, without touching its settings.
    from django.utils.module_loading import import_string

    params = dict(config)
    backend_class = import_string(params.pop("BACKEND"))
    return backend_class(params.pop("LOCATION", ""), params)


class DjangoAdapter(Adapter):
    """A Django cache backend: get None is a miss, set returning False (diskcache's DjangoCache
    on a timeout; Django's own backends return None) is a miss, delete returning False is a miss.
    """

    key_type = str

    def __init__(self, client: Any, process_local: bool = False) -> None:
        super().__init__(client)
        self.process_local = process_local

    @classmethod
    def open(cls, spec: BackendSpec, location: str) -> DjangoAdapter:
        client = _django_cache(cache_settings(spec, location))
        return cls(client, process_local=spec.storage == PROCESS_MEMORY)


def _spec(
    name: str,
    label: str,
    short: str,
    backend: str,
    storage: str,
    requires: tuple[tuple[str, str], ...] = (),
    **extra: Any,
) -> BackendSpec:
    options: dict[str, Any] = {"backend": backend}
    if "location_prefix" in extra:
        options["location_prefix"] = extra.pop("location_prefix")
    return BackendSpec(
        name=name,
        label=label,
        short=short,
        level="django",
        adapter="django",
        storage=storage,
        options=options,
        requires=(("django", _DJANGO_HINT), *requires),
        **extra,
    )


DJANGO_BACKENDS: tuple[BackendSpec, ...] = (
    _spec(
        "django-core",
        "diskcache_core DjangoCache",
        "core DjangoCache",
        "diskcache_core.contrib.django.DjangoCache",
        DIRECTORY,
        (("diskcache_core.contrib.django", "pip install -e . (from the repository root)"),),
        baseline="django-diskcache",
    ),
    _spec(
        "django-diskcache",
        "diskcache DjangoCache",
        "diskcache DjangoCache",
        "diskcache.DjangoCache",
        DIRECTORY,
        (("diskcache", "pip install 'diskcache==5.6.3'"),),
    ),
    _spec(
        "django-locmem",
        "Django LocMemCache",
        "LocMem",
        "django.core.cache.backends.locmem.LocMemCache",
        PROCESS_MEMORY,
    ),
    _spec(
        "django-memcached",
        "Django PyLibMCCache + Memcached",
        "Memcached",
        "django.core.cache.backends.memcached.PyLibMCCache",
        SERVER,
        (("pylibmc", PYLIBMC_HINT),),
        server="memcached",
    ),
    _spec(
        "django-redis",
        "Django RedisCache + Redis",
        "Redis",
        "django.core.cache.backends.redis.RedisCache",
        SERVER,
        (("redis", "pip install redis"),),
        server="redis",
        location_prefix="redis://",
    ),
    _spec(
        "django-filebased",
        "Django FileBasedCache",
        "FileBased",
        "django.core.cache.backends.filebased.FileBasedCache",
        DIRECTORY,
    ),
)
