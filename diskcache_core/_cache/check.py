"""Cache.check: do the database and the value files agree? Optionally repair.

Reports (as warnings, returned in a list) a failed SQLite integrity check, damaged rows (see
`_rows`), rows naming a missing, wrong-sized or unsafe value file, files, symbolic links and
directories no row accounts for, a stored size or item count that differs from the rows, and
tag entries that name no item.
With `fix` it repairs each (a damaged row is dropped, with its value file).

What a repair may touch: a row whose name is not a value file's (the database, its journals, the
version or layout file, ``..``, an absolute path, a path through a link; see
``_disk.valuefiles.split_value_name``) is dropped and the file it names left alone. Symbolic links are
removed themselves, never followed, and never their targets. The database files and the layout
file are never removed, and a subdirectory holding its own ``cache.db`` (another cache, such as a
FanoutCache shard) is not swept.
"""

from __future__ import annotations

import contextlib
import os
import os.path as op
import stat
import warnings
from typing import TYPE_CHECKING, Any, Iterator

from .._disk import valuefiles as _valuefiles
from .._store import reaper as _reaper
from .._store import schema as sql
from .._store import tags as tsql
from .._store.connections import FetchedRows
from .._errors import EmptyDirWarning, ReadOnlyError, UnknownFileWarning, UnsafeValueFileError
from .._log import CHECK as _LOG
from .._store.rows import SELECT_SUSPECTS, describe_row, judges_modes, row_damage

if TYPE_CHECKING:
    from .._store.connections import ThreadState
    from .._disk.disk import Disk
    from .._store.store import Store

__all__ = ["check_cache", "check_layout_leftovers"]

_FILE_ATTRIBUTE_DIRECTORY = 0x10  # Windows: a link to a directory is removed with rmdir


def check_cache(
    store: "Store", disk: "Disk", directory: str, fix: bool = False, retry: bool = False
) -> list[warnings.WarningMessage]:
    """Check the database and value files of the cache in `directory` agree; with `fix`,
    repair; return the warnings.

    Run it when no other process is writing value files: a file written but not yet
    committed by another writer would look unknown and, with `fix`, be removed.
    """
    _reaper.drain()  # files released by committed writes are not "unknown"
    with warnings.catch_warnings(record=True) as found:
        warnings.simplefilter("always")
        rows = store.read(sql.INTEGRITY_CHECK)
        if rows != [("ok",)]:
            for (message,) in rows:
                warnings.warn(f"integrity check: {message}", stacklevel=2)
        real_directory = op.realpath(directory)
        with _consistent_view(store, fix, retry) as state:
            damaged, named = _check_rows(state, disk, store.pool.path, real_directory, fix)
            for rowid, size, filename in state.execute(sql.SELECT_FILES).fetchall():
                if rowid in damaged:
                    continue
                try:
                    full_path = disk._checked_path(filename, real_directory)
                except UnsafeValueFileError as exc:
                    warnings.warn(str(exc), stacklevel=2)
                    if fix:
                        _drop_row(state, rowid, keep_file=True)
                    continue
                try:
                    status = os.lstat(full_path)
                except FileNotFoundError:
                    warnings.warn(f"file not found: {full_path}", stacklevel=2)
                    if fix:
                        _drop_row(state, rowid, keep_file=False)
                    continue
                except OSError as exc:  # not readable here (EACCES): reported, the item kept
                    warnings.warn(f"cannot check value file {full_path}: {exc}", stacklevel=2)
                    named.add(full_path)  # (and its file, which the sweep must not take)
                    continue
                if not stat.S_ISREG(status.st_mode):
                    warnings.warn(f"not a regular file: {full_path}", stacklevel=2)
                    if fix:
                        _drop_row(state, rowid, keep_file=True)
                    continue
                named.add(full_path)
                if status.st_size != size:
                    warnings.warn(f"wrong file size: {full_path}, {status.st_size} != {size}", stacklevel=2)
                    if fix:  # a file of the wrong size is damaged: drop the item (and the file)
                        _drop_row(state, rowid, keep_file=False)
            _Sweep(named, sql.LAYOUT_FILE, fix).run(real_directory)
            _check_counters(state, fix)
            _check_tag_entries(state, fix)
        if fix:  # last: rewriting the database needs room, which removing unknown files may free
            store.write(sql.VACUUM, (), retry)
    findings = _own_findings(found)
    _log_found(directory, findings, fix)
    return findings


def _own_findings(found: list[warnings.WarningMessage]) -> list[warnings.WarningMessage]:
    """The check's findings among the warnings recorded while it ran (all UserWarnings); the
    others, warned meanwhile by unrelated code (a ResourceWarning of a connection the garbage
    collector closed, a library's DeprecationWarning), are warned again as they came."""
    findings = []
    for item in found:
        if issubclass(item.category, UserWarning):
            findings.append(item)
        else:
            warnings.warn_explicit(item.message, item.category, item.filename, item.lineno,
                                   source=item.source)
    return findings


def _log_found(directory: str, found: list[warnings.WarningMessage], fix: bool) -> None:
    """One WARNING for a check that found problems (its warnings are the details)."""
    if found:
        _LOG.warning(
            "check of %r found %d problem%s%s, the first: %s", directory, len(found),
            "" if len(found) == 1 else "s", " (repaired)" if fix else "", found[0].message,
        )


def _check_rows(
    state: Any, disk: "Disk", database: str, real_directory: str, fix: bool
) -> tuple[set[int], set[str]]:
    """Report the rows of `database` that break `_rows`' rules (with `fix`, drop them, and the
    value files they name); return their rowids and those value files (not unknown ones)."""
    library_modes = judges_modes(disk)
    damaged = [
        (row[0], row[1], row[7], reason)
        for row in state.execute(SELECT_SUSPECTS)
        if (reason := row_damage(row, library_modes)) is not None
    ]
    rowids: set[int] = set()
    named: set[str] = set()
    for rowid, key, filename, reason in damaged:
        row = f"row {rowid}" if key is None else describe_row(rowid, key)  # (NULL: the reason)
        warnings.warn(f"{row} in {database} is damaged: {reason}", stacklevel=3)
        rowids.add(rowid)
        path = None
        if type(filename) is str:
            try:  # only a value-file name (not through a link) is the row's to take along
                path = disk._checked_path(filename, real_directory)
            except UnsafeValueFileError:
                pass
        if path is not None:
            named.add(path)  # (a dropped row's goes once the drop has committed, as any file)
        if fix:
            _drop_row(state, rowid, keep_file=path is None)
    return rowids, named


def _check_counters(state: Any, fix: bool) -> None:
    """The counter rows of the Settings table: the byte total and item count must agree with
    the rows, hits and misses must be numbers; a missing row (a hand edit) is reported too."""
    stored = dict(state.execute(sql.SELECT_COUNTERS).fetchall())
    ((actual_size,),) = state.execute(sql.SELECT_ACTUAL_SIZE)
    ((actual_count,),) = state.execute(sql.COUNT)
    # The count row is kept only where the count triggers are (not an old schema read-only).
    counted = state.execute(sql.COUNT_TRIGGER_EXISTS).fetchone() is not None
    expected = {"size": actual_size, "count": actual_count}
    of_rows = {"size": "SUM(Cache.size)", "count": "COUNT(*)"}
    for name in ("size", "count", "hits", "misses"):
        if name == "count" and not counted:
            continue
        if name not in stored:
            warnings.warn(f"Settings has no {name!r} row", stacklevel=3)
        elif name in expected and stored[name] != expected[name]:
            warnings.warn(
                f"Settings.{name} != {of_rows[name]}; {stored[name]} != {expected[name]}",
                stacklevel=3,
            )
        elif name not in expected and (type(stored[name]) is not int or stored[name] < 0):
            warnings.warn(f"Settings.{name} is not a count: {stored[name]!r}", stacklevel=3)
        else:
            continue
        if fix:
            state.execute(sql.STORE_SETTING, (name, expected.get(name, 0)))


def _check_tag_entries(state: Any, fix: bool) -> None:
    """The tag table (``_store.tags``), where there is one: an entry must name an item (the
    triggers remove an item's entries with it; one written around them points nowhere), and
    the triggers must be there; with `fix`, dangling entries go and the triggers are made."""
    if not state.execute(tsql.TAG_TABLE_EXISTS).fetchall():
        return
    orphans = state.execute(tsql.ORPHAN_TAGS).fetchall()
    for tag, item in orphans[:10]:
        warnings.warn(f"tag entry {tag!r} names no item (rowid {item})", stacklevel=3)
    if len(orphans) > 10:
        warnings.warn(f"{len(orphans) - 10} more tag entries name no item", stacklevel=3)
    names = {name for (name,) in state.execute(tsql.SELECT_TAG_TRIGGERS).fetchall()}
    missing = sorted(set(tsql.TAG_TRIGGERS) - names)
    if missing:
        warnings.warn(f"tag table triggers missing: {', '.join(missing)}", stacklevel=3)
    if fix and (orphans or missing):
        for statement in tsql.CREATE_TAG_SCHEMA:
            state.execute(statement)
        state.execute(tsql.DELETE_ORPHAN_TAGS)


def check_layout_leftovers(directory: str, fix: bool) -> list[warnings.WarningMessage]:
    """Report (and with `fix` remove) the temporary layout files a FanoutCache opener killed
    before it linked its layout into place left in the top directory `directory`."""
    with warnings.catch_warnings(record=True) as found:
        warnings.simplefilter("always")
        try:
            names = os.listdir(directory)
        except OSError:
            names = []
        for name in names:
            if not (name.startswith(sql.LAYOUT_TEMP_PREFIX) and name.endswith(".tmp")):
                continue
            full_path = op.join(directory, name)
            try:
                if not stat.S_ISREG(os.lstat(full_path).st_mode):
                    continue
                warnings.warn(f"unknown file: {full_path}", UnknownFileWarning, stacklevel=2)
                if fix:
                    os.unlink(full_path)
            except FileNotFoundError:
                continue
    findings = _own_findings(found)
    _log_found(directory, findings, fix)
    return findings


@contextlib.contextmanager
def _consistent_view(store: "Store", fix: bool, retry: bool) -> Iterator[Any]:
    """A write transaction (one consistent view, and repairs); where the cache may only be read,
    the statements run as plain reads (nothing to repair then)."""
    if not store.pool.read_only:
        with store.transaction(retry) as state:
            yield state
        return
    if fix:
        raise ReadOnlyError(f"{store.pool.path!r} is opened read-only: check cannot fix it")
    yield _Reads(store)


class _Reads:
    """Runs check's statements as reads on a read-only cache."""

    def __init__(self, store: "Store") -> None:
        self._store = store

    def execute(self, statement: str, params: Any = ()) -> FetchedRows:
        return FetchedRows(self._store.read(statement, params))


def _drop_row(state: "ThreadState", rowid: int, keep_file: bool) -> None:
    """Delete row `rowid`; with `keep_file`, take back the removal its trigger queued, so a file
    the row should never have named is not touched."""
    mark = len(state.txn.released)
    state.execute(sql.DELETE_ROWID, (rowid,))
    if keep_file:
        del state.txn.released[mark:]


# Value files are two levels down, a named sub-collection's a few more; deeper is someone else's.
_MAX_DEPTH = 32


class _Sweep:
    """The walk for files, links and directories no row accounts for.

    Levels are opened relative to their parent without following links (dir_fd, like the
    value-file paths), so a link swapped in during the walk is not entered either; without
    dir_fd (Windows) the walk goes by path and lstat.
    """

    def __init__(self, named: set[str], layout_file: str, fix: bool) -> None:
        self.named = named
        self.layout_file = layout_file
        self.fix = fix
        self.use_fd = _valuefiles.USE_DIR_FD and os.listdir in os.supports_fd

    def run(self, directory: str) -> None:
        """Sweep the cache directory `directory` (itself possibly reached through a link)."""
        if not self.use_fd:
            self._level(None, directory, 0)
            return
        fd = os.open(directory, _valuefiles.ROOT_FLAGS)
        try:
            self._level(fd, directory, 0)
        finally:
            os.close(fd)

    def _protected(self, name: str) -> bool:
        # cache.db and its -wal, -shm, -journal and -versions files; the FanoutCache layout file.
        return name.startswith(sql.DBNAME) or name == self.layout_file

    def _level(self, fd: int | None, path: str, depth: int) -> bool:
        """Sweep one directory, `depth` levels below the cache's; True when it is (now) empty."""
        names = sorted(os.listdir(path if fd is None else fd))
        if depth and sql.DBNAME in names:
            return False  # another cache's directory: not ours to sweep
        left = len(names)
        for name in names:
            full_path = op.join(path, name)
            try:
                if fd is None:
                    status = os.lstat(full_path)
                else:
                    status = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                left -= 1
                continue
            if _valuefiles.is_link(status):
                target = self._target(fd, full_path, name)
                warnings.warn(
                    f"symbolic link in the cache directory: {full_path} -> {target} (links are"
                    " never followed; check(fix=True) removes the link, not its target)",
                    UnknownFileWarning,
                    stacklevel=4,
                )
                if self.fix:
                    self._remove_link(fd, full_path, name, status)
                    left -= 1
            elif stat.S_ISDIR(status.st_mode):
                if self._directory(fd, full_path, name, depth + 1):
                    left -= 1
            elif full_path in self.named or self._protected(name):
                continue
            else:
                warnings.warn(f"unknown file: {full_path}", UnknownFileWarning, stacklevel=4)
                if self.fix:
                    if fd is None:
                        os.unlink(full_path)
                    else:
                        os.unlink(name, dir_fd=fd)
                    left -= 1
        return left == 0

    def _directory(self, fd: int | None, full_path: str, name: str, depth: int) -> bool:
        """Sweep subdirectory `name`; report it when empty; True when `fix` removed it."""
        if depth > _MAX_DEPTH:  # no cache makes these: reported, not walked (nor recursed into)
            warnings.warn(
                f"directory nested over {_MAX_DEPTH} levels deep, not swept: {full_path}",
                UnknownFileWarning,
                stacklevel=5,
            )
            return False
        if fd is None:
            empty = self._level(None, full_path, depth)
        else:
            try:
                child = os.open(name, _valuefiles.DIR_FLAGS, dir_fd=fd)
            except OSError:
                return False  # gone or swapped for a link since the listing: the next check sees it
            try:
                empty = self._level(child, full_path, depth)
            finally:
                os.close(child)
        if not empty:
            return False
        warnings.warn(f"empty directory: {full_path}", EmptyDirWarning, stacklevel=5)
        if not self.fix:
            return False
        try:
            if fd is None:
                os.rmdir(full_path)
            else:
                os.rmdir(name, dir_fd=fd)
        except OSError:
            return False  # filled again meanwhile
        return True

    @staticmethod
    def _target(fd: int | None, full_path: str, name: str) -> str:
        try:
            return os.readlink(full_path) if fd is None else os.readlink(name, dir_fd=fd)
        except OSError:
            return "?"

    @staticmethod
    def _remove_link(fd: int | None, full_path: str, name: str, status: os.stat_result) -> None:
        """Remove the link `name` itself (unlink never follows one), not its target."""
        try:
            if fd is not None:
                os.unlink(name, dir_fd=fd)
            elif getattr(status, "st_file_attributes", 0) & _FILE_ATTRIBUTE_DIRECTORY:
                os.rmdir(full_path)  # Windows: a directory link or junction, not its contents
            else:
                os.unlink(full_path)
        except FileNotFoundError:
            pass
