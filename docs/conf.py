"""Sphinx configuration of the diskcache_core documentation.

Build: ``sphinx-build -W --keep-going -b html docs docs/_build/html`` (warnings are errors).
"""

from __future__ import annotations

import os
import re
import sys

DOCS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(DOCS)
sys.path.insert(0, ROOT)

import diskcache_core

project = "diskcache_core"
author = "diskcache_core authors"
copyright = "diskcache_core authors"
version = release = diskcache_core.__version__

extensions = ["sphinx.ext.autodoc"]
exclude_patterns = ["_build"]
templates_path: list[str] = []
html_theme = "alabaster"
html_static_path: list[str] = []
html_theme_options = {"description": "Disk and memory cache for Python", "fixed_sidebar": True}

default_role = "code"
highlight_language = "python3"
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
add_module_names = False

# --- benchmark results --------------------------------------------------------------------
# `python -m benchmarks --output benchmarks/results` writes results.rst (tables, and image
# directives naming the PNG plots beside it), titled "Benchmark results" with "=" underlines.
# When that file exists it replaces the marker at the end of benchmarks.rst, with image paths
# made relative to the docs; when it does not, a section of the same title says how to produce
# it. DISKCACHE_CORE_BENCHMARK_RESULTS names another results folder.

BENCHMARK_RESULTS = os.environ.get(
    "DISKCACHE_CORE_BENCHMARK_RESULTS", os.path.join(ROOT, "benchmarks", "results")
)
_RESULTS_MARKER = ".. benchmark-results::"
_IMAGE = re.compile(r"^(\s*\.\. (?:image|figure):: )(?!/)(\S+)$", re.MULTILINE)


def _benchmark_results() -> str:
    path = os.path.join(BENCHMARK_RESULTS, "results.rst")
    if not os.path.isfile(path):
        return (
            "Benchmark results\n=================\n\n"
            ".. note::\n\n   No results have been recorded in ``benchmarks/results`` yet; see\n"
            "   :ref:`benchmark-running` to produce them.\n"
        )
    with open(path, encoding="utf-8") as results:
        text = results.read()
    # Image paths in results.rst are relative to its folder; Sphinx resolves "/path" against
    # the docs folder.
    folder = os.path.relpath(BENCHMARK_RESULTS, DOCS).replace(os.sep, "/")
    return _IMAGE.sub(lambda match: f"{match.group(1)}/{folder}/{match.group(2)}", text)


def _insert_results(app, docname: str, source: list[str]) -> None:
    if docname == "benchmarks" and _RESULTS_MARKER in source[0]:
        source[0] = source[0].replace(_RESULTS_MARKER, _benchmark_results())


def _always_reread_benchmarks(app, env, added, changed, removed) -> list[str]:
    return ["benchmarks"] if "benchmarks" in env.found_docs else []


def setup(app):
    app.connect("source-read", _insert_results)
    app.connect("env-get-outdated", _always_reread_benchmarks)
    return {"parallel_read_safe": True}
