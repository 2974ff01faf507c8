"""Processes sharing one Deque directory: producers and consumers, every item consumed once.

Workers are top-level functions of this module so that they run under ``spawn``.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from collections import Counter

import pytest

from diskcache_core._collections.persistent import Deque, Index

SPAWN = multiprocessing.get_context('spawn')
PRODUCERS = 4
CONSUMERS = 4
ITEMS_EACH = 500
DEADLINE = 60.0  # seconds any worker may run


def produce(directory: str, producer: int, start, results: str) -> None:
    deque = Deque(directory=directory)
    start.wait(DEADLINE)
    for number in range(ITEMS_EACH):
        # Every fourth item goes in at the front: both ends are contended.
        item = f'{producer}-{number}'
        if number % 4 == 3:
            deque.appendleft(item)
        else:
            deque.append(item)
    with open(os.path.join(results, f'producer-{producer}.done'), 'w'):
        pass


def consume(directory: str, consumer: int, start, producers_done, results: str) -> None:
    deque = Deque(directory=directory)
    consumed = []
    start.wait(DEADLINE)
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        try:
            consumed.append(deque.pop() if consumer % 2 else deque.popleft())
        except IndexError:
            if producers_done.is_set():
                # Producers finished before this pop found the deque empty: nothing is left.
                break
            time.sleep(0.001)
    with open(os.path.join(results, f'consumer-{consumer}.json'), 'w') as output:
        json.dump(consumed, output)


@pytest.mark.slow
def test_producers_and_consumers_share_one_deque(tmp_path):
    directory = str(tmp_path / 'deque')
    results = tmp_path / 'results'
    results.mkdir()
    Deque(directory=directory).cache.close()  # created once, before the workers race to open it
    start = SPAWN.Event()
    producers_done = SPAWN.Event()
    producers = [
        SPAWN.Process(target=produce, args=(directory, number, start, str(results)))
        for number in range(PRODUCERS)
    ]
    consumers = [
        SPAWN.Process(target=consume, args=(directory, number, start, producers_done, str(results)))
        for number in range(CONSUMERS)
    ]
    workers = producers + consumers
    try:
        for worker in workers:
            worker.start()
        start.set()
        for worker in producers:
            worker.join(DEADLINE + 30)
        producers_done.set()
        for worker in consumers:
            worker.join(DEADLINE + 30)
        assert not any(worker.is_alive() for worker in workers), 'a worker hung'
    finally:
        for worker in workers:
            if worker.is_alive():
                worker.kill()
                worker.join()
    assert [worker.exitcode for worker in workers] == [0] * len(workers)
    assert sorted(path.name for path in results.glob('*.done')) == [
        f'producer-{number}.done' for number in range(PRODUCERS)
    ]

    consumed = Counter()
    for number in range(CONSUMERS):
        consumed.update(json.loads((results / f'consumer-{number}.json').read_text()))
    produced = Counter(f'{p}-{n}' for p in range(PRODUCERS) for n in range(ITEMS_EACH))
    duplicates = {item: count for item, count in consumed.items() if count > 1}
    assert duplicates == {}
    assert consumed == produced
    assert len(Deque(directory=directory)) == 0


def rotate_and_count(directory: str, index_directory: str, rounds: int, start) -> None:
    deque = Deque(directory=directory)
    index = Index(index_directory)
    start.wait(DEADLINE)
    for number in range(rounds):
        deque.rotate(3 if number % 2 else -2)
        if number % 5 == 0:
            deque.reverse()
        with index.transact():
            index['rounds'] = index.get('rounds', 0) + 1


@pytest.mark.slow
def test_rotate_and_reverse_are_atomic_across_processes(tmp_path):
    """Concurrent rotations never lose or duplicate an item, and Index.transact serializes
    read-modify-write."""
    directory, index_directory = str(tmp_path / 'deque'), str(tmp_path / 'index')
    Deque(range(20), directory).cache.close()
    Index(index_directory).cache.close()
    start = SPAWN.Event()
    workers = [
        SPAWN.Process(target=rotate_and_count, args=(directory, index_directory, 30, start))
        for _ in range(3)
    ]
    try:
        for worker in workers:
            worker.start()
        start.set()
        for worker in workers:
            worker.join(DEADLINE + 30)
    finally:
        for worker in workers:
            if worker.is_alive():
                worker.kill()
                worker.join()
    assert [worker.exitcode for worker in workers] == [0, 0, 0]
    items = list(Deque(directory=directory))
    assert sorted(items) == list(range(20))
    # Rotations and reversals keep the cyclic order (or its mirror image) of 0..19.
    position = items.index(0)
    cycle = items[position:] + items[:position]
    assert cycle in (list(range(20)), [0] + list(range(19, 0, -1)))
    assert Index(index_directory)['rounds'] == 90


def push_and_pop_at_one_end(directory: str, front: bool, cycles: int, start) -> None:
    deque = Deque(directory=directory)
    start.wait(DEADLINE)
    for _ in range(cycles):
        if front:
            deque.appendleft('Z')
            deque.popleft()
        else:
            deque.append('D')
            deque.pop()


@pytest.mark.parametrize('front', [False, True], ids=['back', 'front'])
def test_an_index_reads_the_item_at_that_index_while_another_process_pushes_and_pops(tmp_path, front):
    # d[i] read the length and then walked from the nearer end in separate statements: with
    # the length stale, it walked from the wrong end and returned another index's item.
    directory = str(tmp_path / 'deque')
    deque = Deque(['A', 'B', 'C'], directory=directory)
    start = SPAWN.Event()
    writer = SPAWN.Process(target=push_and_pop_at_one_end, args=(directory, front, 3000, start))
    writer.start()
    try:
        start.set()
        seen = Counter()
        reads = 0
        while writer.is_alive() or reads < 1000:  # for as long as the writer runs (a count)
            seen[deque[-2] if front else deque[1]] += 1
            reads += 1
        writer.join(DEADLINE)
        assert writer.exitcode == 0
    finally:
        if writer.is_alive():
            writer.kill()
    assert seen == {'B': reads}
    assert list(deque) == ['A', 'B', 'C']
