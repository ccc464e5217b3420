"""Per-operation times (mlts.hal.operation_times): the record's checks, its JSON and burst encodings."""

from __future__ import annotations

import struct

import pytest

from mlts.hal import codec
from mlts.hal.enums import ErrorStatus, MeasureTiming
from mlts.hal.errors import HalError
from mlts.hal.memory import HostMemory
from mlts.hal.operation_times import (
    MAX_DURATION_NS,
    MAX_OPERATION_TIMES,
    OperationTime,
    check_operation_times,
    check_result_times,
    from_list,
    from_pairs,
)
from mlts.hal.types import (
    UINT64_MAX,
    DataLocation,
    ExecutionResult,
    OutputShape,
    Request,
    RequestArgument,
    Timing,
)
from mlts.ipc import burst_messages as msg

T = OperationTime


def test_well_formed_record_is_kept_in_order():
    record = from_pairs([(2, 10), (0, 5), (1, 0)])
    assert check_operation_times(record, 3) == (T(2, 10), T(0, 5), T(1, 0))
    assert check_operation_times((), 0) == ()  # a driver that ran nothing it could time


@pytest.mark.parametrize(
    "record, n, message",
    [
        ((T(0, 1), T(1, 1), T(2, 1)), 2, "3 entries, more than the 2 operations"),
        ((T(0, 1), T(0, 2)), 5, "operation 0 is reported twice"),
        ((T(5, 1),), 5, "operation index 5 is not an operation of the model"),
        ((T(-1, 1),), 5, "operation index -1"),
        ((T(0, -3),), 5, "duration -3 ns of operation 0 is not in"),
        ((T(0, MAX_DURATION_NS + 1),), 5, "is not in [0,"),
        ((T(0, 1.5),), 5, "duration 1.5 ns"),  # type: ignore[arg-type]
        ((T(True, 1),), 5, "operation index True"),  # type: ignore[arg-type]
        (((0, 1),), 5, "tuple is not an OperationTime"),
    ],
)
def test_malformed_records_are_refused_naming_the_problem(record, n, message):
    with pytest.raises(HalError) as e:
        check_operation_times(record, n)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    assert message in e.value.message


def test_client_check_bounds_each_duration_by_the_time_in_driver():
    ok = (T(0, 2_000_000),)
    assert check_result_times(ok, 1, 2_000, "d") == ok
    assert check_result_times(ok, 1, UINT64_MAX, "d") == ok  # no Timing: only the day-long bound
    with pytest.raises(HalError) as e:
        check_result_times((T(0, 5_000_000),), 1, 2_000, "bad-driver")
    assert e.value.status == ErrorStatus.GENERAL_FAILURE
    assert e.value.message.startswith("driver 'bad-driver' returned malformed operation times[0]: duration")


@pytest.mark.parametrize(
    "value, message",
    [
        ({"0": 1}, "expected a list of [operation, duration_ns] pairs, got dict"),
        ([[0, 1, 2]], "expected [operation, duration_ns] (two ints)"),
        ([[0, "1"]], "two ints"),
        ([[0, 1.0]], "two ints"),
        ([[0, True]], "two ints"),
        ([[0, 1], [0, 2]], "reported twice"),
        ([[0, -1]], "duration -1 ns"),
        ([[0, 1]] * (MAX_OPERATION_TIMES + 1), f"more than {MAX_OPERATION_TIMES}"),
    ],
)
def test_hostile_wire_records(value, message):
    with pytest.raises(HalError) as e:
        from_list(value, "result.operationTimes")
    assert message in e.value.message


def _request(flag: bool) -> Request:
    arg = RequestArgument(False, DataLocation(0, 0, 4), (1,))
    return Request((arg,), (arg,), (HostMemory(bytearray(4)),), flag)


def test_request_flag_travels_only_when_set():
    plain = codec.request_to_dict(_request(False))
    assert "measureOperations" not in plain  # what a 1.2 service reads unchanged
    asked = codec.request_to_dict(_request(True))
    assert asked["measureOperations"] is True
    pools = _request(True).pools
    assert codec.request_from_dict(asked, pools).measure_operations is True
    assert codec.request_from_dict(plain, pools).measure_operations is False
    with pytest.raises(HalError, match="measureOperations"):
        codec.request_from_dict({**asked, "measureOperations": 1}, pools)


def test_result_record_is_optional_on_the_wire():
    bare = ExecutionResult((OutputShape((1,)),), Timing(5, 9))
    d = codec.execution_result_to_dict(bare)
    assert "operationTimes" not in d
    assert codec.execution_result_from_dict(d) == bare
    timed = ExecutionResult((OutputShape((1,)),), Timing(5, 9), (T(0, 4000), T(1, 1000)))
    d = codec.execution_result_to_dict(timed)
    assert d["operationTimes"] == [[0, 4000], [1, 1000]]
    assert codec.execution_result_from_dict(d) == timed
    with pytest.raises(HalError, match="unknown key"):
        codec.execution_result_from_dict({**d, "extra": 1})


def test_a_drivers_malformed_record_is_never_encoded():
    bad = ExecutionResult((), Timing(), (T(0, 1), T(0, 1)))
    with pytest.raises(HalError) as e:
        codec.execution_result_to_dict(bad)
    assert e.value.status == ErrorStatus.GENERAL_FAILURE
    assert (
        "the driver returned malformed operation times[1]: operation 0 is reported twice" in e.value.message
    )


def test_burst_request_flag_and_result_record_round_trip():
    for flag in (False, True):
        request = msg.BurstRequest(
            3, (msg.PoolRef.slot(1),), (), (), MeasureTiming.YES, measure_operations=flag
        )
        assert msg.decode_request(msg.encode_request(request)) == request
    plain = msg.BurstResult(3, ErrorStatus.NONE, (OutputShape((2,)),), Timing(1, 2))
    encoded = msg.encode_result(plain)
    assert msg.decode_result(encoded) == plain  # no record: the 1.2 layout, byte for byte
    timed = msg.BurstResult(3, ErrorStatus.NONE, (OutputShape((2,)),), Timing(1, 2), "", (T(0, 7), T(1, 9)))
    data = msg.encode_result(timed)
    assert len(data) == len(encoded) + 4 + 2 * 12
    assert msg.decode_result(data) == timed


def test_hostile_burst_records_are_refused():
    head = msg.encode_result(msg.BurstResult(3, ErrorStatus.NONE, (), Timing()))
    with pytest.raises(ValueError, match="do not fit"):
        msg.decode_result(head + struct.pack("<I", 1_000_000))  # a count far past the message
    with pytest.raises(ValueError, match="do not fit"):
        msg.decode_result(head + struct.pack("<I", 2) + struct.pack("<IQ", 0, 1))
    with pytest.raises(ValueError, match="reported twice"):
        msg.decode_result(head + struct.pack("<I", 2) + struct.pack("<IQ", 0, 1) * 2)
    with pytest.raises(ValueError, match="bytes follow"):
        msg.decode_result(head + struct.pack("<I", 0) + b"x")
    request = bytearray(msg.encode_request(msg.BurstRequest(3, (), (), ())))
    request[9] = 0x82  # the flags byte: unknown bits
    with pytest.raises(ValueError, match="request flags 0x82"):
        msg.decode_request(bytes(request))
