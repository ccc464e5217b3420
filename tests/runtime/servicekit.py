"""Shared-memory pools and requests for an ADD model of two [2, 3] float32 inputs, and a hook on the session's
retry waits, for the service tests."""

from __future__ import annotations

import numpy as np

from mlts.hal.memory import SharedMemory
from mlts.hal.types import DataLocation, Request, RequestArgument
from mlts.runtime import session
from tests.driver import cfkit


def _pool(a: np.ndarray, b: np.ndarray) -> SharedMemory:
    pool = SharedMemory.create(256)
    np.frombuffer(pool.buffer, np.float32, a.size, 0)[:] = a.ravel()
    np.frombuffer(pool.buffer, np.float32, b.size, 64)[:] = b.ravel()
    return pool


def _request(pool, out_offset: int = 128, shape=(2, 3)) -> Request:
    n = 4 * int(np.prod(shape))
    return Request(
        (
            RequestArgument(False, DataLocation(0, 0, n), shape),
            RequestArgument(False, DataLocation(0, 64, n), shape),
        ),
        (RequestArgument(False, DataLocation(0, out_offset, n), ()),),
        (pool,),
    )


def _out(pool, offset: int = 128) -> np.ndarray:
    return np.frombuffer(pool.buffer, np.float32, 6, offset).reshape(2, 3).copy()


LONG_ARGS = [
    np.full(3, 1e-38, np.float32),
    np.array([0], np.float32),
    np.array([1e38], np.float32),
    np.zeros(3, np.float32),
]


def shared_request(arrays: list[np.ndarray], out_bytes: list[int]) -> tuple[Request, SharedMemory]:
    """cfkit.request's layout in a shared memory pool (what crosses to the service)."""
    host, buf, _ = cfkit.request(arrays, out_bytes)
    pool = SharedMemory.create(len(buf))
    pool.buffer[:] = buf
    return Request(host.inputs, host.outputs, (pool,)), pool


def release_while_waiting(monkeypatch, release) -> list[float]:
    """The session's waits before a retry, recorded; the first one calls `release` (the other client lets
    go while the session waits): the retry then finds the budget free, on any machine, at any load."""
    waits: list[float] = []

    def wait(seconds: float) -> None:
        if not waits:
            release()
        waits.append(seconds)

    real = session.call_with_retries
    monkeypatch.setattr(session, "call_with_retries", lambda *a, **k: real(*a, sleep=wait, **k))
    return waits
