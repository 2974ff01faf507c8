"""``python -m diskcache_core``: the command-line tool (see diskcache_core.cli)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
