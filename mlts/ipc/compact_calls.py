"""Compact execution calls (protocol 1.4): the three socket execution paths as binary messages.

A client that repeats an execution (a Session does) pays, on the JSON path,
for encoding, parsing and checking a JSON request on both sides every time.
A compact call carries the same request in the burst message format
(`mlts.ipc.burst_messages`, docs/burst-protocol.md): fixed-width integers,
the pools named by the client's memory ids or by driver buffer tokens. The
service reads and checks the fixed fields of every call (`CallDecoder.head`:
method, handle, timing, deadline, loop timeout) and decodes the request itself
only when its prepared model's request cache does not know it yet
(mlts.ipc.service.request_cache). Successful answers are compact too; every error stays a
JSON reply or notify, exactly as in 1.3. docs/wire-protocol.md has the layout.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from mlts.hal import codec
from mlts.hal.deadlines import TimePoint
from mlts.hal.enums import ErrorStatus, MeasureTiming
from mlts.hal.errors import HalError, invalid
from mlts.hal.execution import FencedExecutionInfo
from mlts.hal.operation_times import OperationTimes
from mlts.hal.types import UINT64_MAX, ExecutionResult, Request, RequestArgument, Timing
from mlts.ipc.burst_messages import (
    KIND_EXECUTE,
    KIND_RESULT,
    NO_TIME,
    BurstRequest,
    BurstResult,
    PoolRef,
    decode_request,
    decode_result,
    encode_request,
    encode_result,
)

#: Method codes of a compact call.
SYNC = 1
ASYNC = 2
FENCED = 3
METHODS = {SYNC: "executeSynchronously", ASYNC: "execute", FENCED: "executeFenced"}

#: Tags of the service's compact answers.
RESULT = 1  # the result of executeSynchronously
LAUNCHED = 2  # execute started (its completion follows)
COMPLETE = 3  # the successful completion of execute
FENCED_LAUNCHED = 4  # executeFenced started: the execution's handle; its fence is fd 0
FENCED_DONE = 5  # executeFenced ended: what getExecutionInfo would report (sent before the fence signals)

#: method, call id, prepared-model handle, timeout after fence (ns, -1 none); a burst request follows.
CALL = struct.Struct("<BxxxIQq")
#: tag, call id; a burst result message (RESULT, COMPLETE) or a u64 handle (FENCED_LAUNCHED) follows.
ANSWER = struct.Struct("<BxxxI")
_HANDLE = struct.Struct("<Q")
#: timingLaunched and timingFenced of a FENCED_DONE answer (time on device, time in driver each).
_TIMINGS = struct.Struct("<QQQQ")
#: The fixed part of a burst result (docs/burst-protocol.md): kind, seq, status, shapes, two times.
_RESULT_HEAD = struct.Struct("<IIiIQQ")
#: The fixed part of a burst request (docs/burst-protocol.md): kind, seq, measure, flags, deadline,
#: loop timeout, pools, inputs, outputs.
REQUEST_HEAD = struct.Struct("<IIBBxxqqIII")
#: Where the counts start: the request's bytes from here on (with its flags) do not change per call.
_STABLE = 28
_FLAGS = 9

MAX_U32 = (1 << 32) - 1
_MAX_I64 = (1 << 63) - 1
_MEASURE = (MeasureTiming.NO, MeasureTiming.YES)

#: What keys a request in the service's request cache: the message from its counts on (pools,
#: arguments), with its flags byte when that is not 0 (a tuple never equals bytes, so the two forms
#: never collide). Equal for messages equal but for their per-call fields (kind, sequence number,
#: measure byte, deadline, loop timeout).
RequestKey = bytes | tuple[int, bytes]


class CompactCall(NamedTuple):
    """A compact call's fixed fields, checked, and its request message (decoded by the service's
    request cache only when its stable part is new: mlts.ipc.service.request_cache)."""

    method: int
    id: int
    prepared: int
    timeout_after_fence: int | None
    measure: MeasureTiming
    deadline: TimePoint | None
    loop_timeout: int | None
    #: Equal for calls whose request (pools, arguments, flags) is the same byte for byte.
    key: RequestKey
    #: The burst request message (docs/burst-protocol.md) the call carries.
    request: bytes


class DecodedCall(NamedTuple):
    """A compact call decoded whole (for relays that read its pools and arguments)."""

    method: int
    id: int
    prepared: int
    timeout_after_fence: int | None
    measure: MeasureTiming
    deadline: TimePoint | None
    loop_timeout: int | None
    key: RequestKey
    request: bytes
    pools: tuple[PoolRef, ...]
    inputs: tuple[RequestArgument, ...]
    outputs: tuple[RequestArgument, ...]
    measure_operations: bool


def request_head(request: bytes) -> tuple[int, MeasureTiming, TimePoint | None, int | None, RequestKey]:
    """(sequence number, measure, deadline, loop timeout, key) of an execute request message: the
    per-call fields, checked as `decode_request` checks them, and the key of its stable part
    (`RequestKey`). ValueError naming what is wrong. The rest of the message is checked when it is
    decoded (`decode_request`)."""
    if len(request) < REQUEST_HEAD.size:
        decode_request(request)  # raises, naming where the message ends
    kind, seq, measure, flags, deadline, loop, _np, _ni, _no = REQUEST_HEAD.unpack_from(request)
    if kind != KIND_EXECUTE or measure > 1 or deadline < NO_TIME or loop < NO_TIME:
        if kind != KIND_EXECUTE:
            raise ValueError(f"request kind {kind} is not {KIND_EXECUTE} (execute)")
        if measure > 1:
            raise ValueError(f"measure timing {measure} is not 0 or 1")
        if deadline < NO_TIME:
            raise ValueError(f"deadline {deadline} is negative")
        raise ValueError(f"loop timeout {loop} is negative")
    return (
        seq,
        _MEASURE[measure],
        None if deadline == NO_TIME else TimePoint(deadline),
        None if loop == NO_TIME else loop,
        request[_STABLE:] if flags == 0 else (flags, request[_STABLE:]),
    )


class CallDecoder:
    """Reads a connection's compact calls: `head` for the service (the request itself is decoded by
    the prepared model's request cache), `decode` for a relay that needs every field."""

    def head(self, body: bytes) -> CompactCall:
        """The call in `body`, its fixed fields checked; ValueError naming what is wrong."""
        if len(body) < CALL.size + REQUEST_HEAD.size:
            raise ValueError(f"a compact call of {len(body)} bytes is shorter than its fixed part")
        method, call_id, prepared, after_fence = CALL.unpack_from(body)
        if method not in METHODS:
            raise ValueError(f"method code {method} is not 1, 2 or 3")
        if not 0 < prepared <= _MAX_I64:
            raise ValueError(f"prepared-model handle {prepared} is not a handle")
        if after_fence < NO_TIME:
            raise ValueError(f"timeout after fence {after_fence} is negative")
        request = body[CALL.size :]
        _seq, measure, deadline, loop, key = request_head(request)
        return CompactCall(
            method,
            call_id,
            prepared,
            None if after_fence == NO_TIME else after_fence,
            measure,
            deadline,
            loop,
            key,
            request,
        )

    def decode(self, body: bytes) -> DecodedCall:
        """The call in `body` decoded whole; ValueError naming what is wrong."""
        call = self.head(body)
        decoded = decode_request(call.request)  # every count, length and flag checked
        return DecodedCall(*call, decoded.pools, decoded.inputs, decoded.outputs, decoded.measure_operations)


class RequestTemplate(NamedTuple):
    """A client's request in compact form, made once per request object; `call` makes each call."""

    stable: bytes  # the burst request from its counts on
    flags: int

    def call(
        self,
        method: int,
        call_id: int,
        prepared: int,
        measure: int,
        deadline: int | None,
        loop_timeout: int | None,
        timeout_after_fence: int | None = None,
    ) -> bytes:
        return b"".join(
            (
                CALL.pack(
                    method, call_id, prepared, NO_TIME if timeout_after_fence is None else timeout_after_fence
                ),
                REQUEST_HEAD.pack(
                    KIND_EXECUTE,
                    call_id,
                    measure,
                    self.flags,
                    NO_TIME if deadline is None else deadline,
                    NO_TIME if loop_timeout is None else loop_timeout,
                    0,
                    0,
                    0,
                )[:_STABLE],
                self.stable,
            )
        )


def template(request: Request, pools: tuple[PoolRef, ...]) -> RequestTemplate:
    """The compact form of `request` with its pools named by `pools`; ValueError or struct.error
    when a field does not fit the format (that request then takes the JSON path)."""
    message = encode_request(
        BurstRequest(
            0,
            pools,
            request.inputs,
            request.outputs,
            MeasureTiming.NO,
            None,
            None,
            request.measure_operations,
        )
    )
    return RequestTemplate(message[_STABLE:], message[_FLAGS])


def encoding_error(method: str, request: Request) -> HalError:
    """The INVALID_ARGUMENT for a request `template` cannot encode, naming the field as the service's
    check of a JSON request would (NNAPI's offsets, lengths and pool indexes are uint32)."""
    for side, arguments in (("inputs", request.inputs), ("outputs", request.outputs)):
        for i, a in enumerate(arguments):
            try:
                codec.argument_from_dict(codec.argument_to_dict(a), f"request.{side}[{i}]")
            except HalError as e:
                return invalid(f"{method}: {e.message}")
            except (TypeError, ValueError) as e:
                return invalid(f"{method}: request.{side}[{i}]: {e}")
    return invalid(f"{method}: the request does not fit the binary execution format")


def call_ns(method: str, key: str, value: int | None) -> int | None:
    """A deadline or duration as a binary call carries it (protocol 1.6): a value of 2**63 ns or more
    is beyond any clock (a deadline or a timeout after the fence: none; WHILE's loop timeout: the most
    the format carries, which the driver clamps as it would the larger one); one outside [0, 2**64) is
    INVALID_ARGUMENT with the service's own text."""
    if value is None or 0 <= value <= _MAX_I64:
        return value
    if type(value) is not int or not 0 <= value < 1 << 64:
        raise invalid(f"{method}: {key}={value} must be a nanosecond count in [0, 2**64)")
    return _MAX_I64 if key == "loop_timeout" else None


def fits(value: int | None) -> bool:
    """Whether a deadline or duration fits the compact format (else the call takes the JSON path)."""
    return value is None or 0 <= value <= _MAX_I64


# ------------------------------------------------------------ answers


def result_answer(tag: int, call_id: int, result: ExecutionResult) -> bytes:
    """A RESULT or COMPLETE answer: a successful execution's shapes, timing and operation times."""
    shapes = result.output_shapes
    timing = result.timing
    last = _last_answer
    if result.operation_times is None and last[0] == shapes:
        # Only the id and the timing differ from the last answer: pack those, reuse the rest.
        head = _RESULT_HEAD.pack(
            KIND_RESULT, call_id, 0, len(shapes), timing.time_on_device, timing.time_in_driver
        )
        return b"".join((ANSWER.pack(tag, call_id), head, last[1]))
    message = encode_result(
        BurstResult(call_id, ErrorStatus.NONE, shapes, timing, "", result.operation_times)
    )
    if result.operation_times is None:
        _remember_answer(shapes, message[_RESULT_HEAD.size :])
    return ANSWER.pack(tag, call_id) + message


#: The shapes of the last answer without operation times and its bytes after the fixed part (one
#: tuple, replaced whole, so threads answering at once never see a torn pair).
_last_answer: tuple[object, bytes] = (None, b"")


def _remember_answer(shapes: object, tail: bytes) -> None:
    global _last_answer
    _last_answer = (shapes, tail)


def launched_answer(call_id: int) -> bytes:
    return ANSWER.pack(LAUNCHED, call_id)


def fenced_answer(call_id: int, execution: int) -> bytes:
    return ANSWER.pack(FENCED_LAUNCHED, call_id) + _HANDLE.pack(execution)


def fenced_done_answer(
    call_id: int,
    status: ErrorStatus,
    message: str,
    launched: Timing,
    fenced: Timing,
    times: OperationTimes | None,
) -> bytes:
    """A FENCED_DONE answer: a fenced execution's status, message, timings and operation times."""
    report = encode_result(BurstResult(call_id, status, (), Timing(), message, times))
    return b"".join(
        (
            ANSWER.pack(FENCED_DONE, call_id),
            _TIMINGS.pack(
                launched.time_on_device, launched.time_in_driver, fenced.time_on_device, fenced.time_in_driver
            ),
            report,
        )
    )


def fenced_done(body: bytes) -> FencedExecutionInfo:
    """The report in a FENCED_DONE answer; ValueError when it is malformed."""
    if len(body) < ANSWER.size + _TIMINGS.size:
        raise ValueError(f"a fenced execution report of {len(body)} bytes is shorter than its timings")
    on_l, in_l, on_f, in_f = _TIMINGS.unpack_from(body, ANSWER.size)
    report = decode_result(body[ANSWER.size + _TIMINGS.size :])
    if report.output_shapes:
        raise ValueError("a fenced execution report has output shapes")
    for on_device, in_driver in ((on_l, in_l), (on_f, in_f)):
        if on_device != UINT64_MAX and in_driver != UINT64_MAX and on_device > in_driver:
            raise ValueError("timeOnDevice exceeds timeInDriver")
    return FencedExecutionInfo(
        report.status, Timing(on_l, in_l), Timing(on_f, in_f), report.message, report.operation_times
    )


def answer_head(body: bytes) -> tuple[int, int]:
    """(tag, call id) of a compact answer; ValueError when it is too short."""
    if len(body) < ANSWER.size:
        raise ValueError(f"a compact answer of {len(body)} bytes is shorter than its head")
    tag, call_id = ANSWER.unpack_from(body)
    return tag, call_id


def fenced_handle(body: bytes) -> int:
    """The execution handle of a FENCED_LAUNCHED answer."""
    if len(body) != ANSWER.size + _HANDLE.size:
        raise ValueError(f"a fenced launch answer must be {ANSWER.size + _HANDLE.size} bytes")
    return int(_HANDLE.unpack_from(body, ANSWER.size)[0])


class ResultDecoder:
    """Decodes RESULT and COMPLETE answers; the shapes and the rest of a message equal to the last
    one after its timing are reused, not decoded again. Thread-safe (the last entry is one object)."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: tuple[bytes, ExecutionResult] | None = None

    def decode(self, body: bytes) -> ExecutionResult:
        """The result in answer `body`; ValueError when it is malformed or not a success."""
        data = body[ANSWER.size :]
        tail = data[_RESULT_HEAD.size :]
        last = self._last
        if last is not None and len(data) >= _RESULT_HEAD.size and last[0] == tail:
            kind, _seq, status, n_shapes, on_device, in_driver = _RESULT_HEAD.unpack_from(data)
            if kind == KIND_RESULT and status == 0 and n_shapes == len(last[1].output_shapes):
                if on_device != UINT64_MAX and in_driver != UINT64_MAX and on_device > in_driver:
                    raise ValueError("timeOnDevice exceeds timeInDriver")
                return ExecutionResult(
                    last[1].output_shapes, Timing(on_device, in_driver), last[1].operation_times
                )
        decoded = decode_result(data)
        if decoded.status != ErrorStatus.NONE:
            raise ValueError(f"a compact result has status {decoded.status.name}, not NONE")
        result = ExecutionResult(decoded.output_shapes, decoded.timing, decoded.operation_times)
        self._last = (tail, result)
        return result
