"""``python -m benchmarks``: see ``benchmarks.cli``."""

from benchmarks.cli import main

# The guard matters: under the spawn and forkserver start methods, children import this module.
if __name__ == "__main__":
    raise SystemExit(main())
