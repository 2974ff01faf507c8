"""Multiprocess latency comparison of diskcache_core with python-diskcache, Memcached and Redis.

Run ``python -m benchmarks --help``. Modules, one concept each: ``workload`` (what a worker does),
``backends``/``django_backends`` (adapters), ``catalog`` (selection, skipping, opening),
``servers`` (Memcached/Redis on loopback), ``worker`` (child-process side), ``runner`` (parent),
``stats`` (percentiles), ``results`` (data model and JSON), ``environment`` (machine metadata),
``summary`` (ratios), ``report`` (text and rst), ``plots`` (PNG), ``output`` (files),
``compare`` (two result files), ``progress`` (stderr display), ``cli``.
"""
