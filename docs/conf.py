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

# --- public paths only -----------------------------------------------------------------------
# The reference documents the names of diskcache_core's namespace; the modules behind them
# (diskcache_core._cache.cache, ...) are private, and no page may name them (tests/test_docs.py).
# autodoc names a class in a signature or a base list by the private module it is defined in
# (diskcache_core._cache.cache.Cache): `_public_targets` points such references at the public path.
PUBLIC_NAMES = frozenset(diskcache_core.__all__)
_PRIVATE_TARGET = re.compile(r"^diskcache_core\._[a-z_]+(?:\.[a-z_]+)*\.([A-Za-z]\w*)$")


def _public_targets(app, doctree) -> None:
    """Cross-references to ``diskcache_core._module.Name`` target ``diskcache_core.Name`` when
    that name is public: the link is the same, its title names the public path."""
    from sphinx.addnodes import pending_xref

    for node in doctree.findall(pending_xref):
        match = _PRIVATE_TARGET.match(node.get("reftarget", ""))
        if match and match.group(1) in PUBLIC_NAMES:
            node["reftarget"] = f"diskcache_core.{match.group(1)}"


extensions = ["sphinx.ext.autodoc"]
exclude_patterns = ["_build"]
templates_path: list[str] = []
# Furo (the docs extra installs it): a code block or table wider than the column scrolls on its
# own, and _static/wide.css widens the column where the window has room, so that the harness's
# reports (~110 characters) fit at 1280 px; alabaster's fixed narrow column cut them off.
html_theme = "furo"
html_title = f"diskcache_core {release}"
html_static_path = ["_static"]
html_css_files = ["wide.css"]

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
    app.connect("doctree-read", _public_targets)
    return {"parallel_read_safe": True}
