"""Concurrent executions on one driver service: N threads x M models give bit-identical results to sequential runs."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from mlts.runtime.discovery import discover, open_device
from mlts.runtime.session import Session
from mlts.runtime.shared import SharedService
from tests.runtime.partitionkit import chain_inputs, chain_model

THREADS = 3
RUNS = 4


def _models():
    """Two models that share no state: the conv/quant chain, and its relaxed twin."""
    return [chain_model(), chain_model(relax=True)]


def _feeds(n: int) -> list[list[np.ndarray]]:
    base = chain_inputs()
    return [[(x * (1 + 0.25 * k)).astype(np.float32) for x in base] for k in range(n)]


def _run_concurrently(devices, models, feeds, mode: str) -> dict:
    """Every (thread, model) pair runs every feed; returns {(thread, model, feed): outputs}."""
    out: dict = {}
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(THREADS * len(models))

    def worker(t: int, m: int) -> None:
        try:
            with Session(devices[t % len(devices)], models[m], mode=mode) as session:
                start.wait(30)
                for f, feed in enumerate(feeds):
                    outputs, _ = session.run(feed)
                    with lock:
                        out[(t, m, f)] = outputs
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [
        threading.Thread(target=worker, args=(t, m)) for t in range(THREADS) for m in range(len(models))
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not errors, errors
    return out


@pytest.mark.parametrize("where", ["private", "shared"])
def test_concurrent_results_are_bit_identical_to_sequential(tmp_path, where):
    spec = discover()["sample-all"]
    models = _models()
    feeds = _feeds(RUNS)
    service = None
    if where == "shared":
        service = SharedService.start(spec.factory, name="sample-all", log_path=str(tmp_path / "svc.log"))
        devices = [service.connect() for _ in range(THREADS)]  # one client per thread
    else:
        devices = [
            open_device(spec, log_path=str(tmp_path / "drv.log"))
        ]  # one client, calls from all threads
    try:
        expected = {}
        for m, model in enumerate(models):
            with Session(devices[0], model) as session:
                for f, feed in enumerate(feeds):
                    expected[(m, f)] = session.run(feed)[0]
        for mode in ("sync", "async", "fenced"):
            got = _run_concurrently(devices, models, feeds, mode)
            assert len(got) == THREADS * len(models) * RUNS
            for (t, m, f), outputs in got.items():
                for a, b in zip(outputs, expected[(m, f)], strict=True):
                    assert a.dtype == b.dtype and a.shape == b.shape
                    assert a.tobytes() == b.tobytes(), (where, mode, t, m, f)
        if service is not None:
            status = devices[0].service_status()
            assert status["clients"] == THREADS
            assert status["execute_pool"]["workers"] == 2
    finally:
        for d in devices:
            d.close()
        if service is not None:
            assert service.stop() == 0


def test_in_process_paths_agree():
    """The generic async and fenced paths of an in-process driver give the synchronous results."""
    spec = discover()["sample-all"]
    device = open_device(spec, in_process=True)
    model = chain_model()
    feed = chain_inputs()
    with Session(device, model) as sync:
        expected = sync.run(feed)[0]
    for mode in ("async", "fenced"):
        with Session(device, model, mode=mode) as session:
            got = session.run(feed)[0]
        for a, b in zip(got, expected, strict=True):
            assert a.tobytes() == b.tobytes()
    device.close()
