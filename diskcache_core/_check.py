"""Cache.check: do the database and the value files agree? Optionally repair.

Reports (as warnings, returned in a list) a failed SQLite integrity check, rows naming a
missing, wrong-sized or escaping value file, files and directories no row accounts for, and a
stored size that differs from the sum of the rows. With `fix` it repairs each.
"""

from __future__ import annotations

import os
import os.path as op
import warnings
from typing import TYPE_CHECKING

from . import _reaper
from . import _schema as sql
from ._errors import EmptyDirWarning, UnknownFileWarning, UnsafeValueFileError
from ._memory import VERSION_FILE

if TYPE_CHECKING:
    from ._cache import Cache

__all__ = ["check_cache"]


def check_cache(cache: "Cache", fix: bool = False, retry: bool = False) -> list[warnings.WarningMessage]:
    """Check the database and value files agree; with `fix`, repair; return the warnings.

    Run it when no other process is writing value files: a file written but not yet
    committed by another writer would look unknown and, with `fix`, be removed.
    """
    _reaper.drain()  # files released by committed writes are not "unknown"
    with warnings.catch_warnings(record=True) as found:
        warnings.simplefilter("always")
        rows = cache._read("PRAGMA integrity_check")
        if rows != [("ok",)]:
            for (message,) in rows:
                warnings.warn(f"integrity check: {message}", stacklevel=2)
        if fix:
            cache._write("VACUUM", (), retry)
        real_directory = op.realpath(cache._directory)
        with cache._transaction(retry) as state:
            named = set()
            for rowid, size, filename in state.execute(sql.SELECT_FILES).fetchall():
                try:
                    full_path = cache._disk._checked_path(filename)
                except UnsafeValueFileError as exc:
                    warnings.warn(str(exc), stacklevel=2)
                    if fix:
                        state.execute(sql.DELETE_ROWID, (rowid,))
                    continue
                named.add(full_path)
                if not op.exists(full_path):
                    warnings.warn(f"file not found: {full_path}", stacklevel=2)
                    if fix:
                        state.execute(sql.DELETE_ROWID, (rowid,))
                elif op.getsize(full_path) != size:
                    warnings.warn(f"wrong file size: {full_path}, {op.getsize(full_path)} != {size}", stacklevel=2)
                    if fix:  # a file of the wrong size is damaged: drop the item
                        state.execute(sql.DELETE_ROWID, (rowid,))
            database_files = {
                op.join(real_directory, sql.DBNAME + suffix) for suffix in ("", "-wal", "-shm", "-journal")
            }
            database_files.add(op.join(real_directory, VERSION_FILE))  # the memory tier's
            for dirpath, _, files in os.walk(real_directory):
                for name in files:
                    full_path = op.join(dirpath, name)
                    if full_path in named or full_path in database_files:
                        continue
                    warnings.warn(f"unknown file: {full_path}", UnknownFileWarning, stacklevel=2)
                    if fix:
                        os.remove(full_path)
            for dirpath, _, _ in os.walk(real_directory, topdown=False):
                if dirpath != real_directory and not os.listdir(dirpath):
                    warnings.warn(f"empty directory: {dirpath}", EmptyDirWarning, stacklevel=2)
                    if fix:
                        os.rmdir(dirpath)
            ((stored_size,),) = state.execute("SELECT value FROM Settings WHERE key = 'size'")
            ((actual_size,),) = state.execute("SELECT COALESCE(SUM(size), 0) FROM Cache")
            if stored_size != actual_size:
                warnings.warn(f"Settings.size != SUM(Cache.size); {stored_size} != {actual_size}", stacklevel=2)
                if fix:
                    state.execute("UPDATE Settings SET value = ? WHERE key = 'size'", (actual_size,))
    return found
