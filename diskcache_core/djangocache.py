"""python-diskcache's ``diskcache.djangocache`` module path (an alias): ``DjangoCache``.

Importing it imports Django; ``BACKEND": "diskcache_core.djangocache.DjangoCache"`` works in
Django settings as ``diskcache_core.contrib.django.DjangoCache`` does.
"""

from .contrib.django import DjangoCache

__all__ = ["DjangoCache"]
