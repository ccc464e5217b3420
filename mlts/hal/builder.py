"""ModelBuilder: assemble a valid HAL Model operand by operand and operation by operation."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from mlts.hal import extensions as ext
from mlts.hal.enums import DTYPE_NAME, SCALAR_TYPES, OperandLifeTime, OperandType, codes, is_extension_type
from mlts.hal.memory import HostMemory
from mlts.hal.types import (
    DataLocation,
    ExtensionData,
    ExtensionNameAndPrefix,
    ExtraParams,
    Model,
    Operand,
    Operation,
    Subgraph,
)

# NNAPI copies constants of at most this many bytes into operandValues.
MAX_COPY_BYTES = 128
POOL_ALIGNMENT = 64
# Copied values are padded to this so every scalar and small tensor starts aligned.
COPY_ALIGNMENT = 4


@dataclass(slots=True)
class _Spec:
    type: int
    dims: tuple[int, ...]
    scale: float
    zero_point: int
    lifetime: OperandLifeTime
    location: DataLocation
    extra_params: ExtraParams
    value: np.ndarray | None = None


def _infer_type(arr: np.ndarray, scalar: bool) -> OperandType:
    if arr.dtype == np.bool_:
        return OperandType.BOOL if scalar else OperandType.TENSOR_BOOL8
    if np.issubdtype(arr.dtype, np.floating):
        if arr.dtype == np.float16:
            return OperandType.FLOAT16 if scalar else OperandType.TENSOR_FLOAT16
        return OperandType.FLOAT32 if scalar else OperandType.TENSOR_FLOAT32
    if np.issubdtype(arr.dtype, np.integer):
        return OperandType.INT32 if scalar else OperandType.TENSOR_INT32
    raise ValueError(
        f"constant of dtype {arr.dtype} has no operand type; pass one of bool, int, float arrays or an explicit type"
    )


def _type_name(code: int) -> str:
    if code in codes(OperandType):
        return OperandType(code).name
    prefix, low = ext.decode(code)
    return f"extension type {low} of prefix {prefix}" if prefix else str(code)


class ModelBuilder:
    """Builds a Model: operands get indexes in creation order, operations run in insertion order."""

    def __init__(self) -> None:
        self._specs: list[_Spec] = []
        self._operations: list[Operation] = []
        self._origins: list[str | None] = []  # per operation: what produced it (a converter's source node)
        self._inputs: list[int] = []
        self._outputs: list[int] = []
        self._values = bytearray()
        self._pool = bytearray()
        # Keyed by a digest of the bytes so large weights are not held twice.
        self._copy_offsets: dict[bytes, int] = {}
        self._pool_offsets: dict[bytes, int] = {}
        # Extension name -> the prefix this model gives it (a bijection; see mlts.hal.extensions).
        self._prefixes: dict[str, int] = {}
        self._attached: list[Model] = []  # models SUBGRAPH operands name, by position

    # ------------------------------------------------------------ extensions

    def use_extension(self, name: str, prefix: int | None = None) -> int:
        """The prefix of extension `name` in this model, assigned (next free, from 1) on first use.

        `prefix` asks for a particular one; ValueError when it is taken by another name or the name
        already has another prefix, or when the name is not reverse-domain.
        """
        ext.check_name(name)
        have = self._prefixes.get(name)
        if prefix is None:
            if have is not None:
                return have
            taken = set(self._prefixes.values())
            prefix = next(p for p in range(1, ext.MAX_PREFIX + 1) if p not in taken)
        prefix = int(prefix)
        if not 0 < prefix <= ext.MAX_PREFIX:
            raise ValueError(f"extension prefix {prefix} outside [1, {ext.MAX_PREFIX}]")
        if have is not None and have != prefix:
            raise ValueError(f"extension {name!r} already has prefix {have} in this model")
        owner = next((n for n, p in self._prefixes.items() if p == prefix), None)
        if owner is not None and owner != name:
            raise ValueError(f"extension prefix {prefix} already names {owner!r} in this model")
        self._prefixes[name] = prefix
        return prefix

    def extension_operand_type(self, name: str, type: int) -> int:
        """The operand type code of type `type` of extension `name` (getExtensionOperandType)."""
        return ext.encode(self.use_extension(name), int(type))

    def extension_operation_type(self, name: str, type: int) -> int:
        """The operation type code of operation `type` of extension `name` (getExtensionOperationType)."""
        return ext.encode(self.use_extension(name), int(type))

    def _check_extension_code(self, code: int) -> None:
        prefix, _ = ext.decode(code)
        if prefix and prefix not in self._prefixes.values():
            raise ValueError(
                f"type code {code} has extension prefix {prefix}, which this model does not map to an extension; "
                "get codes from extension_operand_type / extension_operation_type"
            )

    def set_operand_extension_data(self, index: int, data: bytes) -> None:
        """Attach extension data to an extension operand (setOperandExtensionData)."""
        spec = self._specs[index]
        if not is_extension_type(spec.type):
            raise ValueError(
                f"operand {index} has type {_type_name(spec.type)}; only extension operands take extension data"
            )
        if not isinstance(data, (bytes, bytearray)):
            raise ValueError(f"extension data must be bytes, got {type(data).__name__}")
        spec.extra_params = ExtensionData(bytes(data))

    def add_extension_value(self, type: int, data: bytes, dims: Sequence[int] = ()) -> int:
        """A constant extension operand whose value is the raw bytes `data` (their meaning is the extension's)."""
        if not is_extension_type(type):
            raise ValueError(f"add_extension_value: {_type_name(type)} is not an extension type")
        self._check_extension_code(type)
        data = bytes(data)
        if not data:
            raise ValueError("add_extension_value: an empty value; constants need at least one byte")
        copy = len(data) <= MAX_COPY_BYTES
        buf, seen, align = (
            (self._values, self._copy_offsets, COPY_ALIGNMENT)
            if copy
            else (self._pool, self._pool_offsets, POOL_ALIGNMENT)
        )
        location = DataLocation(0, self._place(buf, seen, data, align), len(data))
        lifetime = OperandLifeTime.CONSTANT_COPY if copy else OperandLifeTime.CONSTANT_REFERENCE
        value = np.frombuffer(data, dtype=np.uint8)
        return self._add(
            _Spec(int(type), tuple(int(d) for d in dims), 0.0, 0, lifetime, location, None, value)
        )

    # ------------------------------------------------------------ operands

    def _add(self, spec: _Spec) -> int:
        self._specs.append(spec)
        return len(self._specs) - 1

    def add_operand(
        self,
        type: int,
        dims: Sequence[int] = (),
        scale: float = 0.0,
        zero_point: int = 0,
        extra_params: ExtraParams = None,
    ) -> int:
        """A temporary operand (written by one operation); returns its index."""
        dims = tuple(int(d) for d in dims)
        if type in SCALAR_TYPES and dims:
            raise ValueError(
                f"scalar operand type {_type_name(type)} cannot have dimensions {list(dims)}; use ()"
            )
        if any(d < 0 for d in dims):
            raise ValueError(f"operand dimensions {list(dims)} must be >= 0 (0 = unknown)")
        self._check_extension_code(int(type))
        if isinstance(extra_params, ExtensionData) and not is_extension_type(int(type)):
            raise ValueError(
                f"operand of type {_type_name(type)} cannot carry extension data; only extension operands can"
            )
        return self._add(
            _Spec(
                int(type),
                dims,
                float(scale),
                int(zero_point),
                OperandLifeTime.TEMPORARY_VARIABLE,
                DataLocation(),
                extra_params,
            )
        )

    def add_input(self, type: int, dims: Sequence[int], scale: float = 0.0, zero_point: int = 0) -> int:
        """A model input (SUBGRAPH_INPUT), in the order of the calls."""
        index = self.add_operand(type, dims, scale, zero_point)
        self._specs[index].lifetime = OperandLifeTime.SUBGRAPH_INPUT
        self._inputs.append(index)
        return index

    def add_subgraph(self, model: Model) -> int:
        """A SUBGRAPH operand naming `model`, whose subgraphs become referenced subgraphs at build (IF, WHILE)."""
        self._attached.append(model)
        where = DataLocation(0, len(self._attached) - 1, 0)
        return self._add(_Spec(OperandType.SUBGRAPH, (), 0.0, 0, OperandLifeTime.SUBGRAPH, where, None))

    def add_omitted(
        self,
        type: int,
        dims: Sequence[int] = (),
        scale: float = 0.0,
        zero_point: int = 0,
        extra_params: ExtraParams = None,
    ) -> int:
        """An optional input left out (NO_VALUE); quantised types still need a valid scale.

        An extension operand without a value may still carry extension data (`extra_params`).
        """
        index = self.add_operand(type, dims, scale, zero_point, extra_params)
        self._specs[index].lifetime = OperandLifeTime.NO_VALUE
        return index

    def add_scalar(self, value: bool | int | float, type: int) -> int:
        """A constant scalar of `type` (e.g. INT32 stride, FLOAT32 beta, BOOL layout)."""
        if type not in SCALAR_TYPES or type not in DTYPE_NAME:
            raise ValueError(
                f"add_scalar: {_type_name(type)} is not a scalar type with a value; use add_constant for tensors"
            )
        return self.add_constant(np.asarray(value, dtype=DTYPE_NAME[OperandType(type)]), type)

    def add_int32(self, value: int) -> int:
        """An INT32 scalar constant (a stride, an axis, a fused activation code)."""
        return self.add_scalar(int(value), OperandType.INT32)

    def add_float32(self, value: float) -> int:
        """A FLOAT32 scalar constant (beta, epsilon, a scale)."""
        return self.add_scalar(float(value), OperandType.FLOAT32)

    def add_bool(self, value: bool) -> int:
        """A BOOL scalar constant (a layout flag, keep_dims)."""
        return self.add_scalar(bool(value), OperandType.BOOL)

    def add_int32_tensor(self, values: Sequence[int] | Sequence[Sequence[int]]) -> int:
        """A TENSOR_INT32 constant: 1-D from a flat list or one number, nested lists keep their shape."""
        arr = np.asarray(values, dtype=np.int32)
        return self.add_constant(arr.reshape(1) if arr.ndim == 0 else arr, OperandType.TENSOR_INT32)

    def add_constant(
        self,
        value: Any,
        type: int | None = None,
        scale: float = 0.0,
        zero_point: int = 0,
        extra_params: ExtraParams = None,
    ) -> int:
        """A constant from a NumPy array or a Python bool/int/float.

        Rank-0 values become scalar operands, others tensors. The type is
        inferred when not given (float -> FLOAT32, int -> INT32, bool -> BOOL).
        Values of at most 128 bytes are copied into operandValues, larger ones
        are placed 64-byte aligned in the model's single memory pool.
        """
        arr = np.asarray(value)
        scalar = arr.ndim == 0
        code = _infer_type(arr, scalar) if type is None else OperandType(type)
        if (code in SCALAR_TYPES) != scalar:
            kind = "scalar" if code in SCALAR_TYPES else "tensor"
            raise ValueError(
                f"add_constant: a value of shape {list(arr.shape)} cannot have {kind} type {code.name}"
            )
        if code not in DTYPE_NAME:
            raise ValueError(f"add_constant: type {code.name} has no element representation")
        if arr.size == 0:
            raise ValueError(
                f"add_constant: empty constant of shape {list(arr.shape)}; constants need at least one element"
            )
        arr = np.array(arr, dtype=DTYPE_NAME[code], order="C")  # a copy: callers may mutate theirs
        data = arr.tobytes()
        if len(data) <= MAX_COPY_BYTES:
            lifetime = OperandLifeTime.CONSTANT_COPY
            location = DataLocation(
                0, self._place(self._values, self._copy_offsets, data, COPY_ALIGNMENT), len(data)
            )
        else:
            lifetime = OperandLifeTime.CONSTANT_REFERENCE
            location = DataLocation(
                0, self._place(self._pool, self._pool_offsets, data, POOL_ALIGNMENT), len(data)
            )
        arr.setflags(write=False)
        return self._add(
            _Spec(
                int(code),
                tuple(arr.shape),
                float(scale),
                int(zero_point),
                lifetime,
                location,
                extra_params,
                arr,
            )
        )

    @staticmethod
    def _place(buf: bytearray, seen: dict[bytes, int], data: bytes, alignment: int) -> int:
        # Identical constants (zero biases, repeated scalars) share one copy of their bytes.
        key = hashlib.blake2b(data, digest_size=20).digest() + len(data).to_bytes(8, "little")
        offset = seen.get(key)
        if offset is None:
            buf.extend(b"\0" * (-len(buf) % alignment))
            offset = len(buf)
            buf.extend(data)
            seen[key] = offset
        return offset

    # ------------------------------------------------------------ queries

    @property
    def operand_count(self) -> int:
        return len(self._specs)

    def type_of(self, index: int) -> int:
        """The operand type of operand `index`."""
        return self._specs[index].type

    def dims_of(self, index: int) -> tuple[int, ...]:
        """The dimensions of operand `index`."""
        return self._specs[index].dims

    def quant_of(self, index: int) -> tuple[float, int]:
        """(scale, zero point) of operand `index`."""
        spec = self._specs[index]
        return spec.scale, spec.zero_point

    def is_input(self, index: int) -> bool:
        """Whether operand `index` is a model input."""
        return index in self._inputs

    def value_of(self, index: int) -> np.ndarray | None:
        """The value of a constant operand (read-only), else None."""
        return self._specs[index].value

    # ------------------------------------------------------------ operations

    def add_operation(
        self, op_type: int, inputs: Sequence[int], outputs: Sequence[int], origin: str | None = None
    ) -> int:
        """Append an operation; returns its index. Operations must be added in execution order.

        `origin` names what the operation comes from (a converter's source node), kept in memory
        only (`operation_origins`), not in the model.
        """
        for what, idxs in (("input", inputs), ("output", outputs)):
            for i in idxs:
                if not 0 <= i < len(self._specs):
                    raise ValueError(
                        f"add_operation: {what} operand {i} does not exist (have {len(self._specs)} operands)"
                    )
        self._check_extension_code(int(op_type))
        self._operations.append(
            Operation(int(op_type), tuple(int(i) for i in inputs), tuple(int(i) for i in outputs))
        )
        self._origins.append(origin)
        return len(self._operations) - 1

    def mark_outputs(self, *indexes: int | Iterable[int]) -> None:
        """Declare model outputs, in order; accepts indexes or iterables of indexes."""
        for item in indexes:
            for i in [item] if isinstance(item, (int, np.integer)) else item:
                i = int(i)
                spec = self._specs[i]
                if spec.lifetime != OperandLifeTime.TEMPORARY_VARIABLE or i in self._outputs:
                    raise ValueError(
                        f"mark_outputs: operand {i} has lifetime {spec.lifetime.name}"
                        f"{' and is already an output' if i in self._outputs else ''}; only temporaries written by an operation can be outputs"
                    )
                self._outputs.append(i)

    # ------------------------------------------------------------ pruning

    def prune(self) -> int:
        """Drop operations no model output depends on, then operands nothing uses; returns the operations dropped.

        Model inputs are always kept. Operand indexes are renumbered in their
        original order and the constants' bytes are laid out again, so dropped
        constants take no space.
        """
        needed = set(self._outputs)
        kept: list[Operation] = []
        kept_origins: list[str | None] = []
        for op, origin in zip(reversed(self._operations), reversed(self._origins), strict=True):
            if any(o in needed for o in op.outputs):
                kept.append(op)
                kept_origins.append(origin)
                needed.update(op.inputs)
        dropped = len(self._operations) - len(kept)
        kept.reverse()
        kept_origins.reverse()
        used = set(self._inputs) | set(self._outputs)
        for op in kept:
            used.update(op.inputs)
            used.update(op.outputs)
        if dropped == 0 and len(used) == len(self._specs):
            return 0
        order = [i for i in range(len(self._specs)) if i in used]
        new_index = {old: new for new, old in enumerate(order)}
        specs = [self._specs[i] for i in order]
        self._values, self._pool = bytearray(), bytearray()
        self._copy_offsets, self._pool_offsets = {}, {}
        for spec in specs:
            if spec.value is not None and spec.lifetime in (
                OperandLifeTime.CONSTANT_COPY,
                OperandLifeTime.CONSTANT_REFERENCE,
            ):
                data = spec.value.tobytes()
                copy = spec.lifetime == OperandLifeTime.CONSTANT_COPY
                buf, seen = (self._values, self._copy_offsets) if copy else (self._pool, self._pool_offsets)
                offset = self._place(buf, seen, data, COPY_ALIGNMENT if copy else POOL_ALIGNMENT)
                spec.location = DataLocation(0, offset, len(data))
        self._specs = specs
        self._operations = [
            Operation(
                op.type, tuple(new_index[i] for i in op.inputs), tuple(new_index[i] for i in op.outputs)
            )
            for op in kept
        ]
        self._origins = kept_origins
        self._inputs = [new_index[i] for i in self._inputs]
        self._outputs = [new_index[i] for i in self._outputs]
        return dropped

    def operation_origins(self) -> tuple[str | None, ...]:
        """What each operation of main comes from (`add_operation`'s `origin`), in operation order."""
        return tuple(self._origins)

    # ------------------------------------------------------------ build

    def _check_order(self) -> None:
        available = {i for i, s in enumerate(self._specs) if s.lifetime != OperandLifeTime.TEMPORARY_VARIABLE}
        written: set[int] = set()
        for n, op in enumerate(self._operations):
            for i in op.inputs:
                if i not in available:
                    raise ValueError(f"operation {n} reads operand {i} before any operation writes it")
            for i in op.outputs:
                spec = self._specs[i]
                if spec.lifetime != OperandLifeTime.TEMPORARY_VARIABLE or i in written:
                    raise ValueError(
                        f"operation {n} writes operand {i}, which is {'already written' if i in written else spec.lifetime.name}"
                    )
                written.add(i)
                available.add(i)
        for i in self._outputs:
            if i not in written:
                raise ValueError(f"model output operand {i} is never written by an operation")

    def build(self, relax: bool = False) -> Model:
        """The Model: consumers counted, lifetimes of inputs/outputs set; raises ValueError if ill-formed."""
        if not self._operations:
            raise ValueError("a model needs at least one operation")
        for op in self._operations:
            self._check_extension_code(op.type)
        if not self._outputs:
            raise ValueError("a model needs at least one output; call mark_outputs")
        self._check_order()
        consumers = [0] * len(self._specs)
        for op in self._operations:
            for i in op.inputs:
                consumers[i] += 1
        outputs = set(self._outputs)
        operands = []
        for i, s in enumerate(self._specs):
            lifetime = OperandLifeTime.SUBGRAPH_OUTPUT if i in outputs else s.lifetime
            operands.append(
                Operand(
                    s.type, s.dims, consumers[i], s.scale, s.zero_point, lifetime, s.location, s.extra_params
                )
            )
        main = Subgraph(tuple(operands), tuple(self._operations), tuple(self._inputs), tuple(self._outputs))
        pools = (HostMemory(bytes(self._pool)),) if self._pool else ()
        table = tuple(
            ExtensionNameAndPrefix(name, prefix)
            for name, prefix in sorted(self._prefixes.items(), key=lambda e: e[1])
        )
        if not self._attached:
            return Model(main, (), bytes(self._values), pools, bool(relax), table)
        from mlts.hal._subgraphs import attach

        referenced, values, all_pools, positions = attach(main, bytes(self._values), pools, self._attached)
        moved = tuple(
            replace(o, location=DataLocation(0, positions[o.location.offset], 0))
            if o.lifetime == OperandLifeTime.SUBGRAPH
            else o
            for o in main.operands
        )
        return Model(replace(main, operands=moved), referenced, values, all_pools, bool(relax), table)
