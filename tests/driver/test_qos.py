"""Quality of service in the sample driver: priority preemption, deadlines, the memory budget."""

from __future__ import annotations

import ctypes
import sys
import threading
import time

import numpy as np
import pytest

from driver.variants import SampleAll
from mlts.hal import qos, switch_interval
from mlts.hal.enums import ErrorStatus, Priority
from mlts.hal.errors import HalError
from tests.driver import cachekit, cfkit

ENDLESS_IN = [np.array([1.0], np.float32)]
# while_model from 1e-38 doubling to 1e38: about 250 iterations, long enough to be interrupted.
LONG_ARGS = [
    np.full(3, 1e-38, np.float32),
    np.array([0], np.float32),
    np.array([1e38], np.float32),
    np.zeros(3, np.float32),
]


def _run(prepared, arrays, out_bytes, **kw):
    req, _, _ = cfkit.request(arrays, out_bytes)
    return prepared.executeSynchronously(req, **kw)


def _while_args(limit: float):
    step = np.array([0.1, 0.2, 0.3], np.float32)
    return [np.array([1, 0, 0.5], np.float32), np.array([0], np.float32), np.array([limit], np.float32), step]


# ------------------------------------------------------------ priority


def _low_then_high(high_client: int, device: SampleAll | None = None) -> tuple[SampleAll, dict[str, float]]:
    """A LOW execution (an endless loop ended by its 1.5 s loop timeout) runs; HIGH is submitted meanwhile."""
    device = device or SampleAll()
    low = device.prepareModel(cfkit.endless_model(), priority=Priority.LOW)
    high = device.prepareModel(cfkit.while_model(), priority=Priority.HIGH)
    done: dict[str, float] = {}

    def run_low() -> None:
        with qos.serving_client(1):
            with pytest.raises(HalError):
                _run(low, ENDLESS_IN, [4], loop_timeout_duration=1_500_000_000)
        done["low"] = time.monotonic()

    # HIGH takes a few ms: switch threads often enough that LOW reaches a checkpoint while it runs.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0002)
    thread = threading.Thread(target=run_low)
    thread.start()
    try:
        while device.gate.running_count() == 0:
            time.sleep(0.001)
        with qos.serving_client(high_client):
            _run(high, LONG_ARGS, [12, 4])
        done["high"] = time.monotonic()
    finally:
        thread.join(30)
        sys.setswitchinterval(interval)
    return device, done


def test_high_execution_preempts_a_running_low_one_of_its_client() -> None:
    device, done = _low_then_high(high_client=1)
    assert done["high"] < done["low"]
    assert device.gate.pauses >= 1  # the LOW execution waited at a checkpoint


def test_another_clients_high_execution_preempts_a_running_low_one() -> None:
    device, done = _low_then_high(high_client=2)
    assert done["high"] < done["low"]
    assert device.gate.pauses >= 1


def test_a_gate_scoped_to_each_client_leaves_other_clients_running() -> None:
    device = SampleAll()
    device.gate = qos.PriorityGate(qos.SCOPE_CLIENT)
    device, done = _low_then_high(high_client=2, device=device)
    assert done["high"] < done["low"]
    assert device.gate.pauses == 0


def test_gate_pauses_lower_priorities_of_every_client_and_not_equal_ones() -> None:
    gate = qos.PriorityGate()
    low = gate.enter(Priority.LOW, client=1)
    medium = gate.enter(Priority.MEDIUM, client=1)
    other = gate.enter(Priority.LOW, client=2)
    high = gate.enter(Priority.HIGH, client=1)
    peer = gate.enter(Priority.HIGH, client=3)  # equal priorities never pause each other
    deadline = time.monotonic_ns() + 20_000_000
    for ticket in (low, medium, other):
        with pytest.raises(HalError) as info:
            gate.wait_turn(ticket, deadline, 3)
        assert info.value.status == ErrorStatus.MISSED_DEADLINE_TRANSIENT
        assert "higher-priority execution" in info.value.message
    gate.wait_turn(high, deadline, 3)
    gate.wait_turn(peer, deadline, 3)
    gate.leave(high)
    gate.leave(peer)
    gate.leave(medium)
    gate.wait_turn(low, time.monotonic_ns() - 1, 3)  # resumes: nothing outranks it now
    gate.wait_turn(other, time.monotonic_ns() - 1, 3)
    assert gate.pauses == 3


def test_a_client_scoped_gate_pauses_only_the_same_clients_lower_priorities() -> None:
    gate = qos.PriorityGate(qos.SCOPE_CLIENT)
    low = gate.enter(Priority.LOW, client=1)
    other = gate.enter(Priority.LOW, client=2)
    high = gate.enter(Priority.HIGH, client=1)
    deadline = time.monotonic_ns() + 20_000_000
    with pytest.raises(HalError):
        gate.wait_turn(low, deadline, 3)
    gate.wait_turn(other, deadline, 3)  # client 2 is not held up by client 1's HIGH
    gate.leave(high)
    gate.leave(low)
    gate.leave(other)
    assert gate.running_count() == 0 and gate.pauses == 1
    with pytest.raises(ValueError, match="scope"):
        qos.PriorityGate("app")


def _word(ticket: qos.Ticket) -> int:
    return ctypes.c_int64.from_address(ticket.word_address).value


def test_each_tickets_word_holds_the_highest_priority_running_in_its_scope() -> None:
    gate = qos.PriorityGate()
    low = gate.enter(Priority.LOW, client=1)
    assert _word(low) == Priority.LOW
    high = gate.enter(Priority.HIGH, client=2)
    assert high.word_address == low.word_address and _word(low) == Priority.HIGH
    assert qos.watch(low) == (low.word_address, int(Priority.LOW), -1)
    gate.leave(high)
    assert _word(low) == Priority.LOW
    gate.leave(low)
    assert ctypes.c_int64.from_address(low.word_address).value == qos.NOTHING_RUNNING
    scoped = qos.PriorityGate(qos.SCOPE_CLIENT)
    a, b = scoped.enter(Priority.LOW, client=1), scoped.enter(Priority.HIGH, client=2)
    assert a.word_address != b.word_address and (_word(a), _word(b)) == (Priority.LOW, Priority.HIGH)
    scoped.leave(a)
    scoped.leave(b)


def test_what_compiled_code_may_watch_of_each_checkpoint() -> None:
    gate = qos.PriorityGate()
    ticket = gate.enter(Priority.MEDIUM)
    check = qos.checkpoint(12345, gate, ticket)
    assert qos.watch(check) == (ticket.word_address, int(Priority.MEDIUM), 12345)
    assert qos.watch(qos.checkpoint(7, None, None)) == (0, 0, 7)
    assert qos.watch(lambda index: None) is None  # not a checkpoint of mlts.hal.qos: called instead
    gate.enabled = False
    assert qos.watch(ticket) is None
    assert qos.watch(qos.checkpoint(9, gate, ticket)) == (0, 0, 9)
    gate.leave(ticket)


def test_the_service_names_both_the_connection_and_the_app() -> None:
    assert (qos.current_client(), qos.current_app()) == (0, 0)
    with qos.serving_client(4, 2):
        assert (qos.current_client(), qos.current_app()) == (4, 2)
        with qos.serving_client(5):
            assert (qos.current_client(), qos.current_app()) == (5, 5)
    assert (qos.current_client(), qos.current_app()) == (0, 0)


def test_a_held_ticket_keeps_lower_ones_paused_until_the_block_ends() -> None:
    gate = qos.PriorityGate()
    low = gate.enter(Priority.LOW, client=1)
    high = gate.enter(Priority.HIGH, client=1)
    medium = gate.enter(Priority.MEDIUM, client=1)
    resumed = threading.Event()

    def low_checkpoint() -> None:
        gate.wait_turn(low, None, 0)
        resumed.set()

    waiter = threading.Thread(target=low_checkpoint, daemon=True)
    waiter.start()
    with qos.holding_tickets():
        gate.leave(high)  # e.g. the execution returned, its reply is being sent
        assert not resumed.wait(0.1)
        assert gate.running_count() == 3
    # Left now; MEDIUM is still running, so LOW stays paused until it leaves too.
    assert gate.running_count() == 2 and not resumed.wait(0.1)
    gate.leave(medium)
    assert resumed.wait(5)
    waiter.join(5)
    gate.leave(low)
    assert gate.running_count() == 0 and gate.pauses == 1


def test_priority_survives_the_compilation_cache(tmp_path) -> None:
    device = SampleAll()
    for priority in Priority:
        paths = [tmp_path / f"{priority.name}.model", tmp_path / f"{priority.name}.data"]
        fds = cachekit.open_fds(paths, 0o2 | 0o100 | 0o1000)  # O_RDWR | O_CREAT | O_TRUNC
        try:
            device.prepareModel(
                cfkit.if_model(),
                priority=priority,
                model_cache=fds[:1],
                data_cache=fds[1:],
                token=cachekit.TOKEN,
            ).close()
        finally:
            cachekit.close_fds(fds)
        assert cachekit.load(device, *paths).priority == priority


# ------------------------------------------------------------ deadlines


def test_deadlines_before_the_work_are_persistent() -> None:
    device = SampleAll()
    past = time.monotonic_ns() - 1
    with pytest.raises(HalError) as info:
        device.prepareModel(cfkit.if_model(), deadline=past)
    assert info.value.status == ErrorStatus.MISSED_DEADLINE_PERSISTENT
    prepared = device.prepareModel(cfkit.while_model())
    held = device.budget.used  # the model's constants
    with pytest.raises(HalError) as info:
        _run(prepared, _while_args(100), [12, 4], deadline=past)
    assert info.value.status == ErrorStatus.MISSED_DEADLINE_PERSISTENT
    assert device.budget.used == held and device.gate.running_count() == 0


def test_deadline_passing_during_the_work_is_transient_and_frees_everything() -> None:
    device = SampleAll(max_memory_mb="1")
    prepared = device.prepareModel(cfkit.endless_model())
    held = device.budget.used
    with pytest.raises(HalError) as info:
        _run(prepared, ENDLESS_IN, [4], deadline=time.monotonic_ns() + 30_000_000)
    assert info.value.status == ErrorStatus.MISSED_DEADLINE_TRANSIENT
    assert "deadline passed before operation" in info.value.message
    assert device.budget.used == held and device.gate.running_count() == 0


def test_deadline_shorter_than_the_fastest_run_is_refused_up_front() -> None:
    device = SampleAll()
    prepared = device.prepareModel(cfkit.while_model())
    _run(prepared, LONG_ARGS, [12, 4])  # measured: the model's fastest run so far
    fastest = prepared._fastest_ns
    with pytest.raises(HalError) as info:
        _run(prepared, LONG_ARGS, [12, 4], deadline=time.monotonic_ns() + fastest // 2)
    assert info.value.status == ErrorStatus.MISSED_DEADLINE_PERSISTENT
    assert "fastest execution so far" in info.value.message


# ------------------------------------------------------------ memory budget


def test_model_that_can_never_fit_is_persistent() -> None:
    device = SampleAll(max_memory_mb="0.00001")  # 10 bytes
    with pytest.raises(HalError) as info:
        device.prepareModel(cfkit.while_model())
    assert info.value.status == ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT


def test_work_that_fits_but_not_now_is_transient() -> None:
    from driver.budget import constant_bytes, working_bytes

    model = cfkit.while_model()
    need = constant_bytes(model) + working_bytes(model)
    device = SampleAll(max_memory_mb=str(need * 1.5 / 2**20))
    first = device.prepareModel(model)
    device.budget.reserve(int(need * 0.9), "another client's work")  # what others hold now
    with pytest.raises(HalError) as info:
        _run(first, _while_args(100), [12, 4])
    assert info.value.status == ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT
    device.budget.release(int(need * 0.9))
    _run(first, _while_args(100), [12, 4])  # the same call succeeds once the memory is free
    first.close()
    assert device.budget.used == 0


@pytest.mark.parametrize("text", ["0", "-1", "lots", "1e9"])
def test_bad_memory_budget_is_a_one_line_error(text: str) -> None:
    with pytest.raises(ValueError, match=r"^sample-all: option max_memory_mb must be a number"):
        SampleAll(max_memory_mb=text)


def test_the_switch_interval_is_short_while_executions_of_two_priorities_run() -> None:
    before = sys.getswitchinterval()
    gate = qos.PriorityGate()
    low = gate.enter(Priority.LOW, client=1)
    other_low = gate.enter(Priority.LOW, client=2)
    assert sys.getswitchinterval() == before  # one priority: nothing to hurry
    high = gate.enter(Priority.HIGH, client=3)
    assert sys.getswitchinterval() == pytest.approx(min(before, switch_interval.SHORT_S))
    gate.leave(low)
    assert sys.getswitchinterval() == pytest.approx(min(before, switch_interval.SHORT_S))
    gate.leave(other_low)  # HIGH alone now
    assert sys.getswitchinterval() == before
    gate.leave(high)
    disabled = qos.PriorityGate()
    disabled.enabled = False  # a driver that never preempts hurries nothing either
    tickets = [disabled.enter(p) for p in (Priority.LOW, Priority.HIGH)]
    assert sys.getswitchinterval() == before
    for ticket in tickets:
        disabled.leave(ticket)
    assert sys.getswitchinterval() == before
