"""A small, real Django project whose cache is diskcache_core's DjangoCache (see test_django)."""
