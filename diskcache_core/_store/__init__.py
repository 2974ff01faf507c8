"""The store box: one SQLite database per cache directory.

``schema`` (the statements), ``creation`` (the schema: tables, indexes, triggers; its creation
and migration), ``opening`` (creating or reading a database, writing nothing when nothing
changed), ``dbfile`` (the database file checked before SQLite opens it), ``connections`` (one
connection per thread), ``forks`` (their fate across ``fork()``), ``readonly`` (reads of a
database this process may not write), ``store`` (Store: statements, transactions, the
after-commit hook), ``handoff`` (a waiting writer woken when the write lock is released),
``versionfile`` (the version words every process of a directory shares), ``versions`` (the
writer side of the version protocol: what a write does to those words), ``mapwatch`` (the
watcher of mapped files), ``rows`` (what a row must hold), ``checkpointer``, ``reaper`` and
``workers`` (background work kept off the writers' path).
"""
