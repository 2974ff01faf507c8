"""python-diskcache's ``diskcache.djangocache`` module path (an alias): ``DjangoCache``.

Importing it imports Django; ``BACKEND": "diskcache_core.djangocache.DjangoCache"`` works in
Django settings as ``diskcache_core.contrib.django.DjangoCache`` does.
"""

from django.core.cache.backends.base import DEFAULT_TIMEOUT

from ._disk.disk import ENOVAL
from ._fanout.fanout import FanoutCache
from ._recipes.memokeys import args_to_key
from ._recipes.locks import full_name
from .contrib.django import DjangoCache

__all__ = ["DEFAULT_TIMEOUT", "ENOVAL", "DjangoCache", "FanoutCache", "args_to_key", "full_name"]
