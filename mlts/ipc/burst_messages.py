"""Burst messages: the plain-data encoding of requests and results carried by the burst rings.

Every field is a fixed-size little-endian integer; there are no pointers and
no fds (a memory pool is named by a slot id, a driver-managed buffer by its
token). Decoding checks every count and
length against the message before reading, so a hostile message gives a
ValueError, never an out-of-range read. The format is in docs/burst-protocol.md.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

from mlts.hal.deadlines import TimePoint
from mlts.hal.enums import ErrorStatus, MeasureTiming
from mlts.hal.errors import HalError
from mlts.hal.operation_times import (
    MAX_OPERATION_TIMES,
    OperationTime,
    OperationTimes,
    check_operation_times,
    checked_by_service,
)
from mlts.hal.types import (
    UINT64_MAX,
    DataLocation,
    ExecutionResult,
    OutputShape,
    RequestArgument,
    Timing,
)

# Request ring
KIND_EXECUTE = 1
# Result ring
KIND_RESULT = 1
KIND_GET_MEMORIES = 2

# Pool kinds
POOL_SLOT = 0
POOL_TOKEN = 1

#: Limits a decoder enforces (a message bigger than these is refused, not allocated).
MAX_POOLS = 1024
MAX_ARGUMENTS = 4096
MAX_RANK = 64
MAX_MESSAGE_TEXT = 1024
NO_TIME = -1
#: Distinct timings whose ExecutionResult a ResultDecoder keeps for reuse.
CACHED_SUCCESSES = 64

_REQUEST = struct.Struct(
    "<IIBBxxqqIII"
)  # kind, seq, measure, flags, deadline, loop timeout, pools, inputs, outputs
_POOL = struct.Struct("<BxxxI")  # kind, slot id or buffer token
_ARGUMENT = struct.Struct("<BxxxIIII")  # has no value, pool index, offset, length, rank
_RESULT = struct.Struct("<IIiIQQ")  # kind, seq, status, shapes, time on device, time in driver
_SHAPE = struct.Struct("<BxxxI")  # is sufficient, rank
_ASK = struct.Struct("<III")  # kind, seq, slots
_U32 = U32 = struct.Struct("<I")  # U32: the sequence number's format, at byte 4 of every message
_OP_TIME = struct.Struct("<IQ")  # operation index, duration ns (protocol 1.3, after the message text)

_RESULT_KIND_BYTES = _U32.pack(KIND_RESULT)

#: Request flags (protocol 1.3; 1.2 sent 0 in this byte).
FLAG_MEASURE_OPERATIONS = 1


class PoolRef(NamedTuple):
    """One request pool: a memory by the slot id the client gave it, or a driver buffer by its token."""

    kind: int
    value: int

    @classmethod
    def slot(cls, slot: int) -> PoolRef:
        return cls(POOL_SLOT, slot)

    @classmethod
    def token(cls, token: int) -> PoolRef:
        return cls(POOL_TOKEN, token)


@dataclass(frozen=True, slots=True)
class BurstRequest:
    """One execution as the request ring carries it."""

    seq: int
    pools: tuple[PoolRef, ...]
    inputs: tuple[RequestArgument, ...]
    outputs: tuple[RequestArgument, ...]
    measure: MeasureTiming = MeasureTiming.NO
    deadline: TimePoint | None = None
    loop_timeout: int | None = None
    measure_operations: bool = False


@dataclass(frozen=True, slots=True)
class BurstResult:
    """What the result ring returns for one execution."""

    seq: int
    status: ErrorStatus
    output_shapes: tuple[OutputShape, ...] = ()
    timing: Timing = Timing()
    message: str = ""
    operation_times: OperationTimes | None = None


def _ns(value: int | None) -> int:
    return NO_TIME if value is None else value


def _arguments(args: tuple[RequestArgument, ...]) -> bytes:
    parts = []
    for a in args:
        loc = a.location
        parts.append(
            _ARGUMENT.pack(a.has_no_value, loc.pool_index, loc.offset, loc.length, len(a.dimensions))
        )
        parts.append(struct.pack(f"<{len(a.dimensions)}I", *a.dimensions))
    return b"".join(parts)


def encode_request(r: BurstRequest) -> bytes:
    head = _REQUEST.pack(
        KIND_EXECUTE,
        r.seq,
        int(r.measure),
        FLAG_MEASURE_OPERATIONS if r.measure_operations else 0,
        _ns(r.deadline),
        _ns(r.loop_timeout),
        len(r.pools),
        len(r.inputs),
        len(r.outputs),
    )
    pools = b"".join(_POOL.pack(kind, value) for kind, value in r.pools)
    return b"".join((head, pools, _arguments(r.inputs), _arguments(r.outputs)))


class _Reader:
    """Reads fixed-size fields from a message, refusing to go past its end."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, fmt: struct.Struct) -> tuple[int, ...]:
        if self.at + fmt.size > len(self.data):
            raise ValueError(f"the message ends at byte {len(self.data)}, inside a field at {self.at}")
        values = fmt.unpack_from(self.data, self.at)
        self.at += fmt.size
        return values

    def u32s(self, n: int) -> tuple[int, ...]:
        if self.at + 4 * n > len(self.data):
            raise ValueError(f"{n} values do not fit in the {len(self.data) - self.at} bytes left")
        values = struct.unpack_from(f"<{n}I", self.data, self.at)
        self.at += 4 * n
        return values

    def end(self) -> None:
        if self.at != len(self.data):
            raise ValueError(f"{len(self.data) - self.at} bytes follow the end of the message")


def _read_arguments(reader: _Reader, n: int, n_pools: int, what: str) -> tuple[RequestArgument, ...]:
    args = []
    for i in range(n):
        no_value, pool, offset, length, rank = reader.take(_ARGUMENT)
        if no_value > 1:
            raise ValueError(f"{what}[{i}]: has-no-value flag {no_value} is not 0 or 1")
        if rank > MAX_RANK:
            raise ValueError(f"{what}[{i}]: rank {rank} exceeds {MAX_RANK}")
        if not no_value and pool >= n_pools:
            raise ValueError(f"{what}[{i}]: pool index {pool} but the request has {n_pools} pools")
        dims = reader.u32s(rank)
        args.append(RequestArgument(bool(no_value), DataLocation(pool, offset, length), dims))
    return tuple(args)


def _read_pools(reader: _Reader, n: int) -> tuple[PoolRef, ...]:
    if reader.at + _POOL.size * n > len(reader.data):
        raise ValueError(f"{n} pools do not fit in the {len(reader.data) - reader.at} bytes left")
    pools = []
    for i in range(n):
        kind, value = reader.take(_POOL)
        if kind not in (POOL_SLOT, POOL_TOKEN):
            raise ValueError(
                f"pool {i}: kind {kind} is not {POOL_SLOT} (slot) or {POOL_TOKEN} (buffer token)"
            )
        if kind == POOL_TOKEN and value == 0:
            raise ValueError(f"pool {i}: buffer token 0 is not a valid token")
        pools.append(PoolRef(kind, value))
    return tuple(pools)


def request_seq(data: bytes) -> int:
    """The sequence number of an execute request whose fixed part is whole (0 for anything else).

    A request that fails to decode is answered under this number, so its client gets the error
    instead of waiting for a result that never comes.
    """
    if len(data) < _REQUEST.size:
        return 0
    kind, seq = _REQUEST.unpack_from(data, 0)[:2]
    return int(seq) if kind == KIND_EXECUTE else 0


#: The first four bytes of every execute message.
EXECUTE_KIND_BYTES = _U32.pack(KIND_EXECUTE)


def message_seq(data: bytes) -> int:
    """The sequence number of a message of at least 8 bytes (unchecked: see `request_seq`)."""
    return int(_U32.unpack_from(data, 4)[0])


def decode_request(data: bytes) -> BurstRequest:
    """A request message; ValueError naming what is wrong."""
    reader = _Reader(data)
    kind, seq, measure, flags, deadline, loop_timeout, n_pools, n_in, n_out = reader.take(_REQUEST)
    if kind != KIND_EXECUTE:
        raise ValueError(f"request kind {kind} is not {KIND_EXECUTE} (execute)")
    if measure > 1:
        raise ValueError(f"measure timing {measure} is not 0 or 1")
    if flags & ~FLAG_MEASURE_OPERATIONS:
        raise ValueError(
            f"request flags {flags:#04x} hold bits other than {FLAG_MEASURE_OPERATIONS} (measure operations)"
        )
    if n_pools > MAX_POOLS or n_in + n_out > MAX_ARGUMENTS:
        raise ValueError(f"{n_pools} pools, {n_in} inputs and {n_out} outputs exceed the limits")
    for name, value in (("deadline", deadline), ("loop timeout", loop_timeout)):
        if value < NO_TIME:
            raise ValueError(f"{name} {value} is negative")
    pools = _read_pools(reader, n_pools)
    inputs = _read_arguments(reader, n_in, n_pools, "input")
    outputs = _read_arguments(reader, n_out, n_pools, "output")
    reader.end()
    return BurstRequest(
        seq,
        pools,
        inputs,
        outputs,
        MeasureTiming(measure),
        None if deadline == NO_TIME else TimePoint(deadline),
        None if loop_timeout == NO_TIME else loop_timeout,
        bool(flags & FLAG_MEASURE_OPERATIONS),
    )


def renumber(data: bytes, seq: int) -> bytes:
    """An encoded request message with another sequence number (how a client resends a request)."""
    return data[:4] + _U32.pack(seq) + data[8:]


def set_seq(message: bytearray, seq: int) -> None:
    """Give an encoded request message (in place) another sequence number."""
    _U32.pack_into(message, 4, seq)


def encode_result(r: BurstResult) -> bytes:
    text = r.message.encode("utf-8", "replace")[:MAX_MESSAGE_TEXT]
    parts = [
        _RESULT.pack(
            KIND_RESULT,
            r.seq,
            int(r.status),
            len(r.output_shapes),
            r.timing.time_on_device,
            r.timing.time_in_driver,
        )
    ]
    for s in r.output_shapes:
        parts.append(_SHAPE.pack(s.is_sufficient, len(s.dimensions)))
        parts.append(struct.pack(f"<{len(s.dimensions)}I", *s.dimensions))
    parts.append(_U32.pack(len(text)))
    parts.append(text)
    if r.operation_times is not None:  # only when the request asked: a 1.2 client never sees it
        times = checked_by_service(r.operation_times)
        parts.append(_U32.pack(len(times)))
        parts.extend(_OP_TIME.pack(e.operation, e.duration_ns) for e in times)
    return b"".join(parts)


def encode_get_memories(seq: int, slots: tuple[int, ...]) -> bytes:
    return _ASK.pack(KIND_GET_MEMORIES, seq, len(slots)) + struct.pack(f"<{len(slots)}I", *slots)


def result_kind(data: bytes) -> int:
    if len(data) < 4:
        raise ValueError("a result message shorter than its kind")
    return _U32.unpack_from(data)[0]


def decode_get_memories(data: bytes) -> tuple[int, tuple[int, ...]]:
    reader = _Reader(data)
    _kind, seq, n = reader.take(_ASK)
    if n > MAX_POOLS:
        raise ValueError(f"{n} slots asked for, more than {MAX_POOLS}")
    slots = reader.u32s(n)
    reader.end()
    return seq, slots


def decode_result(data: bytes) -> BurstResult:
    reader = _Reader(data)
    kind, seq, status, n_shapes, on_device, in_driver = reader.take(_RESULT)
    if kind != KIND_RESULT:
        raise ValueError(f"result kind {kind} is not {KIND_RESULT}")
    try:
        error = ErrorStatus(status)
    except ValueError:
        raise ValueError(f"status {status} is not an ErrorStatus") from None
    if n_shapes > MAX_ARGUMENTS:
        raise ValueError(f"{n_shapes} output shapes exceed {MAX_ARGUMENTS}")
    shapes = []
    for i in range(n_shapes):
        sufficient, rank = reader.take(_SHAPE)
        if sufficient > 1 or rank > MAX_RANK:
            raise ValueError(f"output shape {i}: flag {sufficient} or rank {rank} out of range")
        shapes.append(OutputShape(reader.u32s(rank), bool(sufficient)))
    (length,) = reader.take(_U32)
    if length > MAX_MESSAGE_TEXT or reader.at + length > len(data):
        raise ValueError(f"message text of {length} bytes does not fit")
    text = data[reader.at : reader.at + length].decode("utf-8", "replace")
    reader.at += length
    times = _read_operation_times(reader) if reader.at < len(data) else None
    reader.end()
    if error == ErrorStatus.NONE and (on_device != UINT64_MAX or in_driver != UINT64_MAX):
        if in_driver != UINT64_MAX and on_device != UINT64_MAX and on_device > in_driver:
            raise ValueError("timeOnDevice exceeds timeInDriver")
    return BurstResult(seq, error, tuple(shapes), Timing(on_device, in_driver), text, times)


def _read_operation_times(reader: _Reader) -> OperationTimes:
    (n,) = reader.take(_U32)
    if n > MAX_OPERATION_TIMES or reader.at + _OP_TIME.size * n > len(reader.data):
        raise ValueError(f"{n} operation times do not fit in the {len(reader.data) - reader.at} bytes left")
    entries = [OperationTime(*reader.take(_OP_TIME)) for _ in range(n)]
    try:
        return check_operation_times(entries, None, "operation times")
    except HalError as e:
        raise ValueError(e.message) from None


class ResultDecoder:
    """`decode_result` for a stream of results that mostly differ only in their sequence number and
    timing (a burst running one request again and again): the rest of the last message is decoded
    once and reused while it repeats byte for byte. Not thread-safe (one per burst)."""

    def __init__(self) -> None:
        self._tail: bytes | None = None
        self._decoded: BurstResult | None = None
        # The ExecutionResults of `success` by their message's bytes after the sequence number (status,
        # shape count, timing and the tail above), each checked once.
        self._successes: dict[bytes, ExecutionResult] = {}
        self._ok_shapes = -1  # the number of output shapes when `_decoded` is a success, else -1

    def decode(self, data: bytes) -> BurstResult:
        if len(data) < _RESULT.size:
            return decode_result(data)  # says what is wrong
        tail = data[_RESULT.size :]
        last = self._decoded
        if last is None or tail != self._tail:
            result = decode_result(data)
            self._tail, self._decoded = tail, result
            self._successes = {}
            self._ok_shapes = len(result.output_shapes) if result.status == ErrorStatus.NONE else -1
            return result
        kind, seq, status, n_shapes, on_device, in_driver = _RESULT.unpack_from(data)
        if kind != KIND_RESULT or status != last.status or n_shapes != len(last.output_shapes):
            return decode_result(data)
        if (
            status == ErrorStatus.NONE
            and in_driver != UINT64_MAX
            and on_device != UINT64_MAX
            and on_device > in_driver
        ):
            raise ValueError("timeOnDevice exceeds timeInDriver")
        return BurstResult(
            seq,
            last.status,
            last.output_shapes,
            Timing(on_device, in_driver),
            last.message,
            last.operation_times,
        )

    def success(self, data: bytes) -> tuple[int, ExecutionResult] | None:
        """(seq, the execution's result) for a successful result whose bytes after the fixed part repeat
        the last decoded successful one's, or None (the caller then uses `decode`). Equal timings give
        the very same ExecutionResult object (it is immutable)."""
        key = data[8:]
        result = self._successes.get(key)
        if result is not None and data[:4] == _RESULT_KIND_BYTES:
            return _U32.unpack_from(data, 4)[0], result
        if self._ok_shapes < 0 or data[_RESULT.size :] != self._tail:
            return None
        kind, seq, status, n_shapes, on_device, in_driver = _RESULT.unpack_from(data)
        if kind != KIND_RESULT or status != 0 or n_shapes != self._ok_shapes:
            return None
        if in_driver != UINT64_MAX and on_device != UINT64_MAX and on_device > in_driver:
            raise ValueError("timeOnDevice exceeds timeInDriver")
        last = self._decoded
        assert last is not None
        result = ExecutionResult(last.output_shapes, Timing(on_device, in_driver), last.operation_times)
        successes = self._successes
        if len(successes) >= CACHED_SUCCESSES:
            successes.clear()
        successes[key] = result
        return seq, result


class ResultEncoder:
    """`encode_result` for successful results without operation times, with the bytes after the fixed
    part (output shapes, empty message) encoded once per distinct output shapes and reused. Not
    thread-safe (one per burst)."""

    def __init__(self) -> None:
        self._shapes: tuple[OutputShape, ...] | None = None
        self._tail = b""

    def success(self, seq: int, shapes: tuple[OutputShape, ...], timing: Timing) -> bytes:
        if shapes is not self._shapes and shapes != self._shapes:
            tail = encode_result(BurstResult(0, ErrorStatus.NONE, shapes))[_RESULT.size :]
            self._shapes, self._tail = shapes, tail
        return (
            _RESULT.pack(KIND_RESULT, seq, 0, len(shapes), timing.time_on_device, timing.time_in_driver)
            + self._tail
        )
