"""Running one prepared operation case on the driver: every execution path, driver memory, unknown shapes.

`PreparedCase` prepares the case's model once and runs requests on it by any
execution path (`mlts.runtime.execution`), with inputs and outputs in one shared
memory pool, or with input 0 and output 0 in driver-managed buffers (memory
domains: `allocate`, `copyFrom`, `copyTo`). Outputs come back shaped as the driver
reports them (the model's declared shapes on the fenced path, which reports none).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mlts.hal.enums import DTYPE_NAME, ErrorStatus, MeasureTiming, OperandType
from mlts.hal.errors import HalError
from mlts.hal.memory import HostMemory, SharedMemory
from mlts.hal.types import (
    BufferDesc,
    BufferRole,
    DataLocation,
    ExecutionResult,
    Model,
    Operand,
    Request,
    RequestArgument,
)
from mlts.runtime.execution import ExecutionMode, execute, forget_memory
from mlts.runtime.remote import RemoteDevice

ALIGN = 64


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _dtype(operand: Operand) -> np.dtype:
    return np.dtype(DTYPE_NAME[OperandType(operand.type)])


def layout(
    model: Model, inputs: Sequence[np.ndarray], out_bytes: Sequence[int]
) -> tuple[list[DataLocation], list[DataLocation], int]:
    """Where each input and output goes in one pool (64-byte aligned), and the pool's size."""
    offset = 0
    ins, outs = [], []
    for arr in inputs:
        ins.append(DataLocation(0, offset, arr.nbytes))
        offset = _align(offset + max(arr.nbytes, 1))
    for size in out_bytes:
        outs.append(DataLocation(0, offset, size))
        offset = _align(offset + max(size, 1))
    return ins, outs, max(offset, ALIGN)


def host_request(model: Model, inputs: Sequence[np.ndarray], out_bytes: Sequence[int]) -> Request:
    """A request whose single pool is host memory holding `inputs` (for reproducer files)."""
    ins, outs, size = layout(model, inputs, out_bytes)
    data = bytearray(size)
    for arr, loc in zip(inputs, ins, strict=True):
        data[loc.offset : loc.offset + arr.nbytes] = arr.tobytes()
    return Request(
        tuple(RequestArgument(False, loc, tuple(a.shape)) for a, loc in zip(inputs, ins, strict=True)),
        tuple(RequestArgument(False, loc, ()) for loc in outs),
        (HostMemory(data),),
    )


class NoDriverMemory(Exception):
    """The driver does not allocate driver-managed buffers (allocate answers GENERAL_FAILURE)."""


def _fill(pool: SharedMemory, inputs: Sequence[np.ndarray], where: Sequence[DataLocation]) -> None:
    for arr, loc in zip(inputs, where, strict=True):
        if arr.nbytes:
            pool.buffer[loc.offset : loc.offset + arr.nbytes] = arr.tobytes()


class PreparedCase:
    """A case model prepared on a device; run it by path, read its outputs. Close it when done."""

    def __init__(self, device: RemoteDevice, model: Model) -> None:
        self.device = device
        self.model = model
        sub = model.main
        self.in_operands = [sub.operands[i] for i in sub.input_indexes]
        self.out_operands = [sub.operands[i] for i in sub.output_indexes]
        self.prepared = device.prepareModel(model)
        self._pools: list[SharedMemory] = []

    def out_bytes(self, shapes: Sequence[Sequence[int]] | None = None) -> list[int]:
        sizes = []
        for k, op in enumerate(self.out_operands):
            dims = shapes[k] if shapes is not None else op.dimensions
            sizes.append(int(np.prod(dims, dtype=np.int64)) * _dtype(op).itemsize)
        return sizes

    def run(
        self,
        mode: ExecutionMode,
        inputs: Sequence[np.ndarray],
        out_bytes: Sequence[int] | None = None,
    ) -> tuple[list[np.ndarray], ExecutionResult]:
        """Execute once by path `mode`; the outputs (copies) and the execution result."""
        if out_bytes is None and not all(op.is_fully_specified for op in self.out_operands):
            return self._run_unknown(mode, inputs)
        sizes = list(self.out_bytes() if out_bytes is None else out_bytes)
        ins, outs, size = layout(self.model, inputs, sizes)
        pool = SharedMemory.create(size, "mlts-validate-case")
        self._pools.append(pool)
        _fill(pool, inputs, ins)
        request = Request(
            tuple(RequestArgument(False, loc, tuple(a.shape)) for a, loc in zip(inputs, ins, strict=True)),
            tuple(RequestArgument(False, loc, ()) for loc in outs),
            (pool,),
        )
        result = execute(self.prepared, request, MeasureTiming.NO, mode)
        return self._read(pool, outs, result), result

    def _run_unknown(
        self, mode: ExecutionMode, inputs: Sequence[np.ndarray]
    ) -> tuple[list[np.ndarray], ExecutionResult]:
        """Outputs whose shape the model leaves open: ask with empty buffers, then give what the driver needs."""
        if mode == ExecutionMode.FENCED:
            raise HalError(ErrorStatus.INVALID_ARGUMENT, "fenced execution needs fully specified outputs")
        sizes = [
            0 if not op.is_fully_specified else b
            for op, b in zip(
                self.out_operands,
                self.out_bytes([op.dimensions if op.is_fully_specified else () for op in self.out_operands]),
                strict=True,
            )
        ]
        try:
            return self.run(mode, inputs, sizes)
        except HalError as e:
            shapes = getattr(e, "output_shapes", ())
            if e.status != ErrorStatus.OUTPUT_INSUFFICIENT_SIZE or len(shapes) != len(self.out_operands):
                raise
            return self.run(mode, inputs, self.out_bytes([s.dimensions for s in shapes]))

    def _read(
        self, pool: SharedMemory, outs: Sequence[DataLocation], result: ExecutionResult, skip: int = -1
    ) -> list[np.ndarray]:
        arrays: list[np.ndarray] = []
        for k, (op, loc) in enumerate(zip(self.out_operands, outs, strict=True)):
            if k == skip:
                arrays.append(np.empty(0))
                continue
            reported = result.output_shapes[k].dimensions if k < len(result.output_shapes) else ()
            dims = tuple(reported) if reported or op.is_scalar_type else tuple(op.dimensions)
            dtype = _dtype(op)
            count = int(np.prod(dims, dtype=np.int64))
            if count * dtype.itemsize > loc.length:
                raise HalError(
                    ErrorStatus.GENERAL_FAILURE,
                    f"output {k}: the driver reports shape {list(dims)}, larger than the {loc.length} bytes given",
                )
            arrays.append(np.frombuffer(pool.buffer, dtype, count, loc.offset).reshape(dims).copy())
        return arrays

    def run_in_driver_memory(self, mode: ExecutionMode, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Execute with input 0 and output 0 in driver buffers (allocate, copyFrom, copyTo); the outputs."""
        dev = self.device
        try:
            out_buf = dev.allocate(BufferDesc(), [self.prepared], [], [BufferRole(0, 0)])
        except HalError as e:
            if e.status == ErrorStatus.GENERAL_FAILURE:  # NNAPI: a driver without memory domains
                raise NoDriverMemory(e.message) from None
            raise
        try:
            in_buf = dev.allocate(BufferDesc(), [self.prepared], [BufferRole(0, 0)], []) if inputs else None
        except BaseException:
            out_buf.close()
            raise
        try:
            rest = list(inputs)
            tokens: list[int] = [out_buf.token]
            if in_buf is not None:
                first = np.ascontiguousarray(inputs[0])
                in_buf.copyFrom(memoryview(first.tobytes()), first.shape)
                rest[0] = np.empty(0, first.dtype)
                tokens.append(in_buf.token)
            sizes = self.out_bytes()
            ins, outs, size = layout(self.model, rest, sizes)
            pool = SharedMemory.create(size, "mlts-validate-case")
            self._pools.append(pool)
            _fill(pool, rest, ins)
            args_in = [RequestArgument(False, loc, tuple(a.shape)) for a, loc in zip(rest, ins, strict=True)]
            if in_buf is not None:
                args_in[0] = RequestArgument(False, DataLocation(2, 0, 0), ())
            args_out = [RequestArgument(False, DataLocation(1, 0, 0), ())]
            args_out += [RequestArgument(False, loc, ()) for loc in outs[1:]]
            request = Request(tuple(args_in), tuple(args_out), (pool, *tokens))
            result = execute(self.prepared, request, MeasureTiming.NO, mode)
            arrays = self._read(pool, outs, result, skip=0)
            op0 = self.out_operands[0]
            data = bytearray(sizes[0])
            out_buf.copyTo(memoryview(data))
            arrays[0] = np.frombuffer(bytes(data), _dtype(op0)).reshape(op0.dimensions).copy()
            return arrays
        finally:
            if in_buf is not None:
                in_buf.close()
            out_buf.close()

    def close(self) -> None:
        try:
            for pool in self._pools:
                forget_memory(self.prepared, pool)
            if self._pools:
                self.device.freeMemory(self._pools)
        except HalError:
            pass  # a dead driver holds no mappings
        finally:
            for pool in self._pools:
                pool.close()
            self._pools = []
            self.prepared.close()
