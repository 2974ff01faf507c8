"""The memory box: the memory tier, recently used items of one cache kept in this process.

``tier`` (MemoryTier: its map, fills under a version check, write-through, and the hit path that
reads the shared version words so a hit is never stale). See docs/memory.rst.
"""
