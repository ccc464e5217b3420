"""Priorities across clients of one shared service: another client's HIGH execution preempts a running
LOW one, and connections of one program are one app (by the kernel's word on uid and executable)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from mlts.hal.enums import ErrorStatus, Priority
from mlts.hal.errors import HalError
from mlts.runtime.shared import SharedService
from tests.driver import cfkit
from tests.runtime.servicekit import LONG_ARGS
from tests.runtime.servicekit import shared_request as _shared_request


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    log = tmp_path_factory.mktemp("xqos") / "svc.log"
    # One worker: the HIGH execution can start only by preempting (an extra thread, the LOW one paused).
    svc = SharedService.start(
        "driver.variants:SampleAll", name="sample-all", log_path=str(log), service_args=["--workers", "1"]
    )
    yield svc
    assert svc.stop() == 0


def _high_overtakes_an_endless_low(run_low, run_high, status) -> None:
    """Start `run_low` (a LOW execution of an endless loop) on a thread, wait until the service runs it
    (`status()`, a serviceStatus, shows a busy worker), then `run_high`: the HIGH execution must end
    long before LOW's 1.5 s loop timeout, which ends LOW with MISSED_DEADLINE_TRANSIENT."""
    done: dict[str, float] = {}
    errors: list[HalError] = []

    def low() -> None:
        try:
            run_low()
        except HalError as e:
            errors.append(e)
        done["low"] = time.monotonic()

    thread = threading.Thread(target=low)
    thread.start()
    limit = time.monotonic() + 30
    while status()["execute_pool"]["busy"] == 0:
        assert time.monotonic() < limit and thread.is_alive(), "the LOW execution never started"
        time.sleep(0.001)
    started = time.monotonic()
    run_high()
    done["high"] = time.monotonic()
    thread.join(30)
    assert done["high"] < done["low"] and done["high"] - started < 1.0
    assert [e.status for e in errors] == [ErrorStatus.MISSED_DEADLINE_TRANSIENT]


def test_another_clients_high_execution_preempts_a_running_low_one(service):
    a, b = service.connect(), service.connect()
    try:
        low = a.prepareModel(cfkit.endless_model(), priority=Priority.LOW)
        high = b.prepareModel(cfkit.while_model(), priority=Priority.HIGH)
        low_req, low_pool = _shared_request([np.array([1.0], np.float32)], [4])
        high_req, high_pool = _shared_request(LONG_ARGS, [12, 4])
        # HIGH runs while LOW (an endless loop) is paused.
        _high_overtakes_an_endless_low(
            lambda: low.execute(low_req, loop_timeout_duration=1_500_000_000).result(),
            lambda: high.executeSynchronously(high_req),
            b.service_status,
        )
        low_pool.close()
        high_pool.close()
    finally:
        a.close()
        b.close()


def test_two_connections_of_one_program_are_one_app(service):
    a, b = service.connect(), service.connect()
    try:
        mine_a, mine_b = a.service_status()["you"], b.service_status()["you"]
        assert mine_a["pid"] == mine_b["pid"]
        assert mine_a["app"] == mine_b["app"] > 0
    finally:
        a.close()
        b.close()


def test_a_high_call_is_read_while_its_own_connection_runs_a_low_one(service):
    """One connection, a lone LOW synchronous execution (an endless loop) and then a HIGH one: the
    service reads and runs the HIGH call at once instead of leaving it on the socket behind the LOW
    execution (which a lone call on an idle service would otherwise run on the connection's reader)."""
    a = service.connect()
    try:
        low = a.prepareModel(cfkit.endless_model(), priority=Priority.LOW)
        high = a.prepareModel(cfkit.while_model(), priority=Priority.HIGH)
        low_req, low_pool = _shared_request([np.array([1.0], np.float32)], [4])
        high_req, high_pool = _shared_request(LONG_ARGS, [12, 4])
        with service.connect() as watcher:
            _high_overtakes_an_endless_low(
                lambda: low.executeSynchronously(low_req, loop_timeout_duration=1_500_000_000),
                lambda: high.executeSynchronously(high_req),
                watcher.service_status,
            )
        low_pool.close()
        high_pool.close()
    finally:
        a.close()
