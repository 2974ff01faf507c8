"""The command-line box behind ``python -m diskcache_core`` (the entry point is ``cli``).

``caches`` (finding and opening cache directories, the CLI's own SQL), ``commands`` (one function
per command), ``doctor`` (the read-only report), ``remote`` (the reading commands on a remote's
near cache) and ``output`` (text for people, tagged JSON for programs).
"""
