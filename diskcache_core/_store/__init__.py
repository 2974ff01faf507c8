"""The store box: one SQLite database per cache directory.

``schema`` (the SQL text, schema creation and migration), ``opening`` (creating or reading a
database, writing nothing when nothing changed), ``dbfile`` (the database file checked before
SQLite opens it), ``connections`` (one connection per thread, safe across fork), ``readonly``
(reads of a database this process may not write), ``store`` (Store: statements, transactions, the
after-commit hook), ``handoff`` (a waiting writer woken when the write lock is released),
``versionfile`` (the version words every process of a directory shares), ``mapwatch`` (the
watcher of mapped files), ``rows`` (what a row must hold), ``checkpointer``, ``reaper`` and
``workers`` (background work kept off the writers' path).
"""
