"""python-diskcache's ``diskcache.fanout`` module path (an alias): ``FanoutCache``."""

from ._fanout import FanoutCache

__all__ = ["FanoutCache"]
