"""Views of the test project. Each counts its calls in `CALLS`: a response served from the
cache leaves the count unchanged."""

from __future__ import annotations

from collections import Counter

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import cache_page

CALLS: Counter[str] = Counter()


def counter(request: HttpRequest) -> HttpResponse:
    """Uncached by itself: cached only by the site-wide cache middleware."""
    CALLS["counter"] += 1
    return HttpResponse(f"counter {CALLS['counter']}")


@cache_page(60)
def cached(request: HttpRequest) -> HttpResponse:
    """Cached for 60 s per URL by ``cache_page``."""
    CALLS["cached"] += 1
    return HttpResponse(f"cached {CALLS['cached']}")


def fragment(request: HttpRequest) -> HttpResponse:
    """A page rendered every time, with a fragment cached by ``{% cache %}``."""

    def fragment_renders() -> int:  # called by the template only when the fragment is rendered
        CALLS["fragment"] += 1
        return CALLS["fragment"]

    CALLS["page"] += 1
    return render(request, "fragment.html", {"page": CALLS["page"], "renders": fragment_renders})


def visits(request: HttpRequest) -> HttpResponse:
    """Counts the visits of one browser in its session (stored in the cache)."""
    request.session["visits"] = request.session.get("visits", 0) + 1
    return HttpResponse(f"visits {request.session['visits']}")


def metrics(request: HttpRequest) -> HttpResponse:
    """The metrics of every cache of ours in CACHES, for Prometheus to scrape (the example of
    docs/observing.rst)."""
    from django.conf import settings
    from django.core.cache import caches
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

    from diskcache_core.contrib.prometheus import CacheCollector

    ours = {
        alias: caches[alias]
        for alias, entry in settings.CACHES.items()
        if entry["BACKEND"].startswith("diskcache_core.")
    }
    registry = CollectorRegistry()
    registry.register(CacheCollector(ours))
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
