"""A small Flask application cached by diskcache_core's Flask-Caching backend (see test_flask).

``create_app(cache_dir, **config)`` builds the app, its ``flask_caching.Cache`` and a counter
of how often each view and function really ran: a response served from the cache leaves it
unchanged. Subprocesses import this module too, so keys match across processes.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from flask import Flask
from flask_caching import Cache


def create_app(cache_dir: str, **config: Any) -> tuple[Flask, Cache, Counter[str]]:
    app = Flask(__name__)
    app.config.update(
        CACHE_TYPE="diskcache_core.contrib.flask.DiskCache",
        CACHE_DIR=cache_dir,
        CACHE_DEFAULT_TIMEOUT=300,
    )
    app.config.update(config)
    cache = Cache(app)
    calls: Counter[str] = Counter()

    @app.route("/page")
    @cache.cached(timeout=60)
    def page() -> str:
        calls["page"] += 1
        return f"page {calls['page']}"

    @cache.memoize(timeout=60)
    def add(a: int, b: int) -> int:
        calls["add"] += 1
        return a + b

    @app.route("/add/<int:a>/<int:b>")
    def add_view(a: int, b: int) -> str:
        return f"{a} + {b} = {add(a, b)}"

    app.extensions["test_functions"] = {"add": add}
    return app, cache, calls
