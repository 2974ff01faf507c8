"""Integrations with web frameworks: `contrib.django` (a Django cache backend) and
`contrib.flask` (a Flask-Caching backend).

Deliberately empty: importing ``diskcache_core`` or this package never imports Django or Flask;
only importing one of the modules does.
"""
