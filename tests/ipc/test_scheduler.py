"""The service's worker pool: priority order over every client, clients of one priority in turn, preempting
work started at once."""

from __future__ import annotations

import threading
import time

from mlts.ipc.service.scheduler import WorkerPool


def _blocker(started: threading.Event, release: threading.Event):
    def work() -> None:
        started.set()
        release.wait(10)

    return work


def test_priority_orders_every_queue_and_clients_of_one_priority_take_turns():
    pool = WorkerPool("t", 1)
    started, release = threading.Event(), threading.Event()
    order: list[str] = []
    done = threading.Semaphore(0)

    def note(name: str):
        def work() -> None:
            order.append(name)
            done.release()

        return work

    try:
        pool.submit(_blocker(started, release), priority=2, owner=9)
        assert started.wait(5)
        # Client 1 queues LOW, MEDIUM, HIGH; client 2 LOW, HIGH, MEDIUM; client 3 one HIGH.
        pool.submit(note("1-low"), 0, owner=1)
        pool.submit(note("1-medium"), 1, owner=1)
        pool.submit(note("1-high"), 2, owner=1)
        pool.submit(note("2-low"), 0, owner=2)
        pool.submit(note("2-high"), 2, owner=2)
        pool.submit(note("2-medium"), 1, owner=2)
        pool.submit(note("3-high"), 2, owner=3)
        release.set()
        for _ in range(7):
            assert done.acquire(timeout=5)
        # Every HIGH first, the clients in turn; then every MEDIUM in turn; then the LOWs in turn.
        assert order == ["1-high", "2-high", "3-high", "1-medium", "2-medium", "1-low", "2-low"]
    finally:
        release.set()
        assert pool.stop(5)


def test_higher_priority_work_of_any_client_starts_while_workers_are_busy():
    pool = WorkerPool("t", 1)
    started, release = threading.Event(), threading.Event()
    ran = threading.Event()
    try:
        pool.submit(_blocker(started, release), priority=0, owner=1)
        assert started.wait(5)
        pool.submit(ran.set, priority=2, owner=1)  # preempts: runs though the only worker is busy
        assert ran.wait(5)
        end = time.monotonic() + 5
        while pool._extra and time.monotonic() < end:  # the preempting thread is idle again
            time.sleep(0.001)
        other = threading.Event()
        pool.submit(other.set, priority=2, owner=2)  # another client's HIGH preempts as well
        assert other.wait(5)
        same = threading.Event()
        pool.submit(same.set, priority=0, owner=2)  # equal priority: waits for the worker
        assert not same.wait(0.2)
        release.set()
        assert same.wait(5)
    finally:
        release.set()
        assert pool.stop(5)


def test_a_finished_preempting_thread_takes_the_next_preempting_work():
    pool = WorkerPool("t", 1)
    started, release = threading.Event(), threading.Event()
    threads: list[threading.Thread] = []
    done = threading.Semaphore(0)

    def note() -> None:
        threads.append(threading.current_thread())
        done.release()

    try:
        pool.submit(_blocker(started, release), priority=0, owner=1)
        assert started.wait(5)
        for _ in range(3):  # one after the other: each preempts the busy worker's LOW work
            pool.submit(note, priority=2, owner=1)
            assert done.acquire(timeout=5)
            end = time.monotonic() + 5
            while pool._extra and time.monotonic() < end:  # the preempting thread is idle again
                time.sleep(0.001)
        assert len(threads) == 3 and threads[0].name == "t-preempt"
        assert threads[1] is threads[0] and threads[2] is threads[0]
        release.set()
    finally:
        release.set()
        assert pool.stop(5)
    threads[0].join(5)
    assert not threads[0].is_alive()  # an idle preempting thread ends when the pool stops


def test_inline_work_counts_at_its_priority_and_higher_work_preempts_it():
    pool = WorkerPool("t", 1)
    try:
        assert pool.try_inline(owner=1, priority=0)  # a LOW execution on a reader's thread
        ran = threading.Event()
        pool.submit(ran.set, priority=2, owner=2)  # another client's HIGH: an extra thread at once
        assert ran.wait(5)
        end = time.monotonic() + 5
        while pool._extra and time.monotonic() < end:
            time.sleep(0.001)
        pool.end_inline(owner=1, priority=0)
        assert pool._extra == 0 and not pool._running and pool.idle()
    finally:
        assert pool.stop(5)
