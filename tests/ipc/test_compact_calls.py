"""Compact execution calls (protocol 1.4): encoding round trips, the per-call fields, hostile bytes."""

from __future__ import annotations

import random
import struct

import pytest

from mlts.hal.enums import MeasureTiming
from mlts.hal.operation_times import OperationTime
from mlts.hal.types import (
    UINT64_MAX,
    DataLocation,
    ExecutionResult,
    OutputShape,
    Request,
    RequestArgument,
    Timing,
)
from mlts.ipc import compact_calls as cc
from mlts.ipc.burst_messages import PoolRef, decode_request


def _request(measure_operations: bool = False) -> Request:
    return Request(
        (
            RequestArgument(False, DataLocation(0, 0, 24), (2, 3)),
            RequestArgument(True, DataLocation(0, 0, 0), ()),
        ),
        (RequestArgument(False, DataLocation(1, 64, 24), ()),),
        ("pool-a", "pool-b"),
        measure_operations,
    )


REFS = (PoolRef.slot(7), PoolRef.token(0xDEADBEEF))


def test_a_call_decodes_to_what_was_encoded():
    made = cc.template(_request(True), REFS)
    body = made.call(cc.FENCED, 41, 9, 1, 123_456_789, 2_000_000_000, 5_000)
    call = cc.CallDecoder().decode(body)
    assert call.method == cc.FENCED and call.id == 41 and call.prepared == 9
    assert call.timeout_after_fence == 5_000
    assert call.measure == MeasureTiming.YES
    assert (call.deadline, call.loop_timeout) == (123_456_789, 2_000_000_000)
    assert call.pools == REFS
    assert call.inputs == _request().inputs and call.outputs == _request().outputs
    assert call.measure_operations is True
    none = cc.CallDecoder().decode(made.call(cc.SYNC, 1, 9, 0, None, None))
    assert (none.deadline, none.loop_timeout, none.timeout_after_fence) == (None, None, None)
    assert none.measure == MeasureTiming.NO


def test_the_head_checks_the_per_call_fields_and_keys_the_stable_part():
    decoder = cc.CallDecoder()
    made = cc.template(_request(), REFS)
    first = decoder.head(made.call(cc.SYNC, 1, 9, 0, None, None))
    again = decoder.head(made.call(cc.ASYNC, 2, 9, 1, 77, 88))
    assert again.key == first.key
    assert (again.method, again.id, again.measure, again.deadline, again.loop_timeout) == (
        cc.ASYNC,
        2,
        MeasureTiming.YES,
        77,
        88,
    )
    # The request itself is the message the prepared model's request cache decodes (when new).
    assert decode_request(again.request).inputs == _request().inputs
    # The measure flag, the deadline and the loop timeout are checked on every call.
    body = bytearray(made.call(cc.SYNC, 3, 9, 0, None, None))
    body[cc.CALL.size + 8] = 2
    with pytest.raises(ValueError, match="measure timing 2"):
        decoder.head(bytes(body))
    body = bytearray(made.call(cc.SYNC, 3, 9, 0, None, None))
    body[cc.CALL.size + 12 : cc.CALL.size + 20] = struct.pack("<q", -5)
    with pytest.raises(ValueError, match="deadline -5 is negative"):
        decoder.head(bytes(body))
    body[cc.CALL.size + 12 : cc.CALL.size + 28] = struct.pack("<qq", -1, -7)
    with pytest.raises(ValueError, match="loop timeout -7 is negative"):
        decoder.head(bytes(body))
    # Another request (operation times asked for: the flags byte) has another key.
    other = cc.template(_request(True), REFS)
    assert decoder.head(other.call(cc.SYNC, 4, 9, 0, None, None)).key != first.key
    third = cc.template(_request(), (PoolRef.slot(8), PoolRef.token(1)))
    assert decoder.head(third.call(cc.SYNC, 5, 9, 0, None, None)).key != first.key


@pytest.mark.parametrize(
    "offset, value, text",
    [
        (0, 9, "method code 9"),
        (8, 0, "is not a handle"),
    ],
)
def test_bad_fixed_fields_are_named(offset, value, text):
    body = bytearray(cc.template(_request(), REFS).call(cc.SYNC, 1, 9, 0, None, None))
    body[offset : offset + 8 if offset == 8 else offset + 1] = value.to_bytes(
        8 if offset == 8 else 1, "little"
    )
    with pytest.raises(ValueError, match=text):
        cc.CallDecoder().decode(bytes(body))


def test_truncated_and_mutated_calls_only_ever_raise_value_error():
    body = cc.template(_request(), REFS).call(cc.SYNC, 1, 9, 1, 5, 6)
    for n in range(len(body)):
        with pytest.raises(ValueError):
            cc.CallDecoder().decode(body[:n])
    rng = random.Random(4)
    decoder = cc.CallDecoder()
    for _ in range(3000):
        mutated = bytearray(body)
        for _ in range(rng.randint(1, 4)):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        try:
            call = decoder.decode(bytes(mutated))
        except ValueError:
            continue
        # What decodes is within the format's ranges.
        assert call.method in cc.METHODS and call.prepared > 0
        assert all(p.kind in (0, 1) for p in call.pools)
        assert all(len(a.dimensions) <= 64 for a in (*call.inputs, *call.outputs))


def test_results_round_trip_and_a_repeated_result_reuses_its_shapes():
    times = (OperationTime(0, 1500),)
    result = ExecutionResult((OutputShape((2, 3), True),), Timing(5, 9), times)
    decoder = cc.ResultDecoder()
    body = cc.result_answer(cc.RESULT, 12, result)
    assert cc.answer_head(body) == (cc.RESULT, 12)
    first = decoder.decode(body)
    assert first == result
    second = decoder.decode(
        cc.result_answer(cc.COMPLETE, 13, ExecutionResult(result.output_shapes, Timing(6, 10), times))
    )
    assert second.timing == Timing(6, 10) and second.output_shapes is first.output_shapes
    unmeasured = decoder.decode(cc.result_answer(cc.RESULT, 14, ExecutionResult(result.output_shapes)))
    assert unmeasured.timing == Timing(UINT64_MAX, UINT64_MAX) and unmeasured.operation_times is None
    # A result whose device time exceeds its driver time is malformed, cached shapes or not.
    for _ in range(2):
        with pytest.raises(ValueError, match="exceeds"):
            decoder.decode(
                cc.result_answer(cc.RESULT, 15, ExecutionResult(result.output_shapes, Timing(9, 5)))
            )
    assert cc.fenced_handle(cc.fenced_answer(3, 2**40)) == 2**40
    with pytest.raises(ValueError):
        cc.fenced_handle(cc.launched_answer(3))
    with pytest.raises(ValueError):
        cc.answer_head(b"\x01\x00")


def test_values_beyond_the_format_are_refused_so_the_json_path_is_taken():
    assert cc.fits(None) and cc.fits(0) and cc.fits(2**63 - 1)
    assert not cc.fits(2**63) and not cc.fits(-1)
    big = Request((RequestArgument(False, DataLocation(0, 2**32, 4), (1,)),), (), ("pool",))
    with pytest.raises((ValueError, OverflowError, struct.error)):
        cc.template(big, (PoolRef.slot(1),))


def test_fenced_reports_round_trip():
    from mlts.hal.enums import ErrorStatus

    body = cc.fenced_done_answer(
        8, ErrorStatus.NONE, "", Timing(3, 9), Timing(3, 7), (OperationTime(0, 10), OperationTime(1, 20))
    )
    assert cc.answer_head(body) == (cc.FENCED_DONE, 8)
    info = cc.fenced_done(body)
    assert (info.status, info.timing_launched, info.timing_fenced) == (
        ErrorStatus.NONE,
        Timing(3, 9),
        Timing(3, 7),
    )
    assert info.operation_times == (OperationTime(0, 10), OperationTime(1, 20))
    failed = cc.fenced_done(
        cc.fenced_done_answer(9, ErrorStatus.MISSED_DEADLINE_TRANSIENT, "late", Timing(), Timing(), None)
    )
    assert (failed.status, failed.message, failed.operation_times) == (
        ErrorStatus.MISSED_DEADLINE_TRANSIENT,
        "late",
        None,
    )
    with pytest.raises(ValueError, match="exceeds"):
        cc.fenced_done(cc.fenced_done_answer(9, ErrorStatus.NONE, "", Timing(9, 3), Timing(), None))
    # Cut anywhere: refused, or (cut right before the optional operation times) a report without them.
    for n in range(len(body)):
        try:
            cut = cc.fenced_done(body[:n])
        except ValueError:
            continue
        assert cut.operation_times is None and cut.status == ErrorStatus.NONE
