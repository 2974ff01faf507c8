"""What the memory tier adds to a write (docs/design.rst, "What the memory tier costs where it
does not answer"): a delete marks the key's entry "absent" in place, lock-free; a kept set looks
its key up in the map once; a delete with no batched bookkeeping pending skips the access log.
Counted (calls, stores, lookups), never timed."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any

import diskcache_core as dc
from diskcache_core._memory.hitpath import ABSENT, Entry


class _CountingLock:
    """Stands in for the tier's lock: counts acquisitions (``with`` or ``acquire``)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.taken = 0

    def acquire(self, *args: Any) -> bool:
        self.taken += 1
        return self.lock.acquire(*args)

    def release(self) -> None:
        self.lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


class _RecordingEntry:
    """An entry that records which of its fields are stored, in order."""

    def __init__(self, entry: Entry) -> None:
        object.__setattr__(self, 'stores', [])
        for name in Entry.__slots__:
            object.__setattr__(self, name, getattr(entry, name))

    def __setattr__(self, name: str, value: Any) -> None:
        self.stores.append(name)
        object.__setattr__(self, name, value)


def _hits(cache: dc.Cache) -> int:
    return cache.memory_stats().hits


def test_a_delete_marks_the_kept_entry_absent_in_place_without_the_lock(make_store):
    cache = make_store()
    cache.set('key', b'value' * 20)
    memory = cache._memory
    entry = memory.entries['key']
    size, items = memory.size, len(memory.entries)
    counting = memory.lock = _CountingLock()
    assert cache.delete('key') is True
    assert counting.taken == 0  # no new entry: the map and its byte count are left alone
    assert memory.entries['key'] is entry and entry.fetch_mode is ABSENT
    assert entry.tag == memory.words[entry.word]  # valid under the delete's own version
    # The tier counts what it holds: the old value stays on the entry (see `after_delete`).
    assert (memory.size, len(memory.entries)) == (size, items)
    before = _hits(cache)
    assert cache.get('key', 'default') == 'default'
    assert _hits(cache) == before + 1  # "absent", answered from memory
    assert 'key' not in cache
    cache.set('key', 'again')  # a later write replaces the mark with its value
    assert cache.get('key') == 'again' and memory.entries['key'] is not entry


def test_the_absent_mark_stores_the_tag_last_and_keeps_the_value(make_store):
    # A get validates the tag, then reads the expiry, the mode and the value: the tag is stored
    # last, so a get that sees it sees the rest; the value is never cleared, so a get that read
    # the old mode (before the delete began) still finds the old value, not None.
    cache = make_store()
    cache.set('key', 'value', expire=60)
    memory = cache._memory
    recording = _RecordingEntry(memory.entries['key'])
    memory.entries['key'] = recording
    assert cache.delete('key') is True
    assert recording.stores[-1] == 'tag' and 'stored' not in recording.stores
    assert recording.fetch_mode is ABSENT and recording.stored == 'value'
    # Nor is the expiry changed: a get that validated the old tag and read the expiry after
    # the delete began, then the old mode, would judge the old value by another's expiry.
    assert 'expire_time' not in recording.stores and recording.expire_time > time.time() + 50


def test_a_delete_another_writer_overtook_forgets_the_entry(make_store, monkeypatch):
    # The mark is kept only while ``pre`` still holds the delete's version (the rule of every
    # write-through): when a later writer has started, the entry goes.
    cache = make_store()
    cache.set('key', 'value')
    memory = cache._memory
    entry = memory.entries['key']
    publish = cache._store._after_commit

    def overtaken(*args: Any) -> Any:
        published = publish(*args)
        memory.words[entry.word] = 12345  # another writer's nonce, stored after our commit
        return published

    monkeypatch.setattr(cache._store, '_after_commit', overtaken)
    assert cache.delete('key') is True
    assert 'key' not in memory.entries
    monkeypatch.undo()
    assert cache.get('key') is None


def test_a_kept_set_of_a_new_key_looks_the_map_up_once(make_store):
    class Counting(OrderedDict):  # type: ignore[type-arg]
        gets = 0

        def get(self, *args: Any) -> Any:
            Counting.gets += 1
            return super().get(*args)

    cache = make_store()
    memory = cache._memory
    memory.entries = Counting()
    memory.build_hit_path()
    counting = memory.lock = _CountingLock()
    assert cache.set('new', 'value') is True
    assert Counting.gets == 1  # the write-through's check; the insert is one `setdefault`
    assert counting.taken == 1
    assert list(memory.entries) == ['new'] and memory.size == memory.entries['new'].nbytes
    assert cache.get('new') == 'value' and _hits(cache) == 1


def test_a_set_over_a_kept_key_replaces_its_entry_and_keeps_the_count(make_store):
    cache = make_store()
    memory = cache._memory
    cache.set('a', 'x')
    cache.set('b', 'y')
    cache.set('a', 'x' * 1000)
    assert list(memory.entries) == ['b', 'a']  # the overwrite is the most recently used
    assert memory.size == sum(entry.nbytes for entry in memory.entries.values())
    assert cache.get('a') == 'x' * 1000 and _hits(cache) == 1


def test_a_delete_with_nothing_pending_leaves_the_access_log_alone(make_store, monkeypatch):
    cache = make_store()  # least-recently-stored: an overwrite's store time is batched
    access = cache._evictor.access
    forgotten: list[Any] = []
    forget = access.forget
    monkeypatch.setattr(access, 'forget', lambda *key: forgotten.append(key) or forget(*key))
    cache.set('key', 1)
    cache.flush_access_log()
    assert not access.pending
    assert cache.delete('key') is True
    assert forgotten == []  # nothing pending: no lookup of the key in the batch
    cache.set('other', 1)
    cache.set('other', 2)  # an overwrite: its refresh waits in the batch
    assert access.pending
    assert cache.delete('other') is True
    assert forgotten == [('other', 1)] and ('other', 1) not in access.pending



def test_a_kept_entry_counts_sys_getsizeof_of_its_value_and_key(make_store):
    # The tier sizes an entry by ``__sizeof__`` (sys.getsizeof parses its arguments, a sixth of
    # a kept set's cost): the same bytes for every type it keeps, none of which the garbage
    # collector tracks.
    import sys

    from diskcache_core._memory.tier import ENTRY_OVERHEAD

    cache = make_store()
    values = [b'bytes' * 30, 'text \u00e9\U0001f600', 10**300, 2.5, True, None, 3 + 4j, -7]
    for number, value in enumerate(values):
        cache.set(f'key-{number}', value)
        cache.set(number * 1000, value)
        cache.set(('tuple', number), value)  # a pickled key: kept by its bytes
    cache.set('mutable', {'a': [1, 2]})  # kept as its serialized form
    entries = list(cache._memory.entries.values())
    assert len(entries) == 3 * len(values) + 1
    for entry in entries:
        expected = ENTRY_OVERHEAD + sys.getsizeof(entry.stored) + sys.getsizeof(entry.db_key)
        assert entry.nbytes == expected, (entry.db_key, entry.stored)
    assert cache.memory_stats().size == sum(entry.nbytes for entry in entries)


def test_a_fill_the_hit_path_allowed_does_not_ask_the_admission_again(make_store, monkeypatch):
    # The second read of a key: the hit path found it seen lately (FILL); `begin_fill` keeps it
    # without looking it up in the "seen" set a second time. A get the hit path cannot answer
    # (one asking for the expiry) still asks.
    cache = make_store()
    with cache.transact():  # written inside a transaction: no entry kept
        cache.set('key', 'value')
        cache.set('other', 'value')
    memory = cache._memory
    asked: list[Any] = []
    seen_lately = memory.admission.seen_lately
    monkeypatch.setattr(
        memory.admission, 'seen_lately', lambda key: asked.append(key) or seen_lately(key)
    )
    assert cache.get('key') == 'value'  # the first read notes the key (the hit path, inline)
    assert 'key' not in memory.entries
    assert cache.get('key') == 'value'  # the second keeps it
    assert asked == [] and 'key' in memory.entries
    before = _hits(cache)
    assert cache.get('key') == 'value' and _hits(cache) == before + 1
    assert cache.get('other', expire_time=True) == ('value', None)
    assert asked == ['other']
