"""Records of NN HAL 1.3 as frozen, slotted dataclasses.

Field names are the HAL's, in snake_case (`numberOfConsumers` is
`number_of_consumers`). Sequences are tuples so records are hashable and
immutable; pools hold `mlts.hal.memory` objects.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlts.hal.deadlines import TimePoint
from mlts.hal.enums import (
    ELEMENT_SIZE,
    SCALAR_TYPES,
    UINT64_MAX,
    OperandLifeTime,
    OperandType,
)
from mlts.hal.memory import Memory
from mlts.hal.operation_times import OperationTimes

# ---------------------------------------------------------------- operands


@dataclass(frozen=True, slots=True)
class DataLocation:
    """Where a value lives: pool `pool_index` at `offset`, `length` bytes.

    For CONSTANT_COPY the "pool" is the model's operandValues; for SUBGRAPH
    operands `offset` is the index of the referenced subgraph.
    """

    pool_index: int = 0
    offset: int = 0
    length: int = 0


@dataclass(frozen=True, slots=True)
class SymmPerChannelQuantParams:
    """extraParams.channelQuant of TENSOR_QUANT8_SYMM_PER_CHANNEL operands."""

    scales: tuple[float, ...]
    channel_dim: int


@dataclass(frozen=True, slots=True)
class ExtensionData:
    """extraParams.extension: opaque bytes interpreted by an extension."""

    data: bytes


ExtraParams = SymmPerChannelQuantParams | ExtensionData | None


@dataclass(frozen=True, slots=True)
class Operand:
    type: int  # an OperandType, or an extension type code
    dimensions: tuple[int, ...] = ()
    number_of_consumers: int = 0
    scale: float = 0.0
    zero_point: int = 0
    lifetime: OperandLifeTime = OperandLifeTime.TEMPORARY_VARIABLE
    location: DataLocation = DataLocation()
    extra_params: ExtraParams = None

    @property
    def is_scalar_type(self) -> bool:
        return self.type in SCALAR_TYPES

    @property
    def is_fully_specified(self) -> bool:
        """Known rank and every dimension known (scalars always are)."""
        if self.is_scalar_type:
            return True
        return len(self.dimensions) > 0 and all(d > 0 for d in self.dimensions)

    def element_count(self) -> int:
        n = 1
        for d in self.dimensions:
            n *= d
        return n

    def byte_size(self) -> int:
        """Bytes of a fully specified value of this operand (0 for SUBGRAPH)."""
        size = ELEMENT_SIZE.get(self.type, 0)
        if self.is_scalar_type:
            return size
        return size * self.element_count()


@dataclass(frozen=True, slots=True)
class Operation:
    type: int  # an OperationType, or an extension type code
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Subgraph:
    operands: tuple[Operand, ...]
    operations: tuple[Operation, ...]
    input_indexes: tuple[int, ...]
    output_indexes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ExtensionNameAndPrefix:
    name: str
    prefix: int


@dataclass(frozen=True, slots=True)
class Model:
    main: Subgraph
    referenced: tuple[Subgraph, ...] = ()
    operand_values: bytes = b""
    pools: tuple[Memory, ...] = ()
    relax_computation_float32_to_float16: bool = False
    extension_name_to_prefix: tuple[ExtensionNameAndPrefix, ...] = ()

    def subgraph(self, index: int) -> Subgraph:
        """Subgraph 0 is main; SUBGRAPH operands index `referenced` from 0."""
        return self.main if index < 0 else self.referenced[index]


# ---------------------------------------------------------------- requests


@dataclass(frozen=True, slots=True)
class RequestArgument:
    """One input or output of a Request; empty `dimensions` keeps the model's."""

    has_no_value: bool = False
    location: DataLocation = DataLocation()
    dimensions: tuple[int, ...] = ()


# A request pool is memory, or the token of a driver-managed buffer (memory domains).
RequestPool = Memory | int


@dataclass(frozen=True, slots=True)
class Request:
    """An execution's inputs, outputs and pools.

    `measure_operations` (an extension, not NN HAL 1.3) asks the driver for per-operation times
    in the result (`mlts.hal.operation_times`); a driver that cannot measure them ignores it.
    """

    inputs: tuple[RequestArgument, ...]
    outputs: tuple[RequestArgument, ...]
    pools: tuple[RequestPool, ...]
    measure_operations: bool = False


@dataclass(frozen=True, slots=True)
class OutputShape:
    dimensions: tuple[int, ...]
    is_sufficient: bool = True


@dataclass(frozen=True, slots=True)
class Timing:
    """Microseconds; UINT64_MAX means not measured."""

    time_on_device: int = UINT64_MAX
    time_in_driver: int = UINT64_MAX

    @staticmethod
    def not_measured() -> Timing:
        return Timing()

    @staticmethod
    def is_measured(value: int) -> bool:
        return value != UINT64_MAX


@dataclass(frozen=True, slots=True)
class ExecutionResult:
    """What a successful execution returns: the real output shapes and timing.

    `operation_times`: per-operation times when the request asked for them and the driver measured
    them (`mlts.hal.operation_times`), else None.
    """

    output_shapes: tuple[OutputShape, ...]
    timing: Timing = Timing()
    operation_times: OperationTimes | None = None


# ---------------------------------------------------------------- device


@dataclass(frozen=True, slots=True)
class PerformanceInfo:
    """Ratio against the CPU doing the same work: lower is better."""

    exec_time: float = 3.4028234663852886e38
    power_usage: float = 3.4028234663852886e38


FLT_MAX = 3.4028234663852886e38


@dataclass(frozen=True, slots=True)
class OperandPerformance:
    type: int
    info: PerformanceInfo


@dataclass(frozen=True, slots=True)
class Capabilities:
    relaxed_float32_to_float16_performance_scalar: PerformanceInfo
    relaxed_float32_to_float16_performance_tensor: PerformanceInfo
    operand_performance: tuple[OperandPerformance, ...]  # sorted by type
    if_performance: PerformanceInfo
    while_performance: PerformanceInfo

    def performance_of(self, operand_type: int) -> PerformanceInfo:
        """The entry for `operand_type`; a missing type counts as FLT_MAX."""
        for entry in self.operand_performance:
            if entry.type == operand_type:
                return entry.info
        return PerformanceInfo(FLT_MAX, FLT_MAX)

    @staticmethod
    def uniform(info: PerformanceInfo) -> Capabilities:
        """The same numbers for every operand type, relaxed and control flow."""
        types = sorted(t for t in OperandType if t not in (OperandType.OEM, OperandType.TENSOR_OEM_BYTE))
        return Capabilities(
            info,
            info,
            tuple(OperandPerformance(int(t), info) for t in types),
            info,
            info,
        )


@dataclass(frozen=True, slots=True)
class ExtensionOperandTypeInformation:
    type: int
    is_tensor: bool
    byte_size: int


@dataclass(frozen=True, slots=True)
class Extension:
    name: str
    operand_types: tuple[ExtensionOperandTypeInformation, ...] = ()


@dataclass(frozen=True, slots=True)
class CacheFilesNeeded:
    num_model_cache: int = 0
    num_data_cache: int = 0


@dataclass(frozen=True, slots=True)
class BufferRole:
    """A role a driver-managed buffer may play: input or output `io_index` of model `model_index`."""

    model_index: int
    io_index: int
    frequency: float = 1.0


@dataclass(frozen=True, slots=True)
class BufferDesc:
    dimensions: tuple[int, ...] = ()


# A deadline is an absolute CLOCK_MONOTONIC time point (mlts.hal.deadlines.TimePoint), a duration
# nanoseconds; None means "none given".
OptionalTimePoint = TimePoint | None
OptionalTimeoutDuration = int | None

LOOP_TIMEOUT_DEFAULT_NS = 2_000_000_000
LOOP_TIMEOUT_MAXIMUM_NS = 15_000_000_000
MAX_NUMBER_OF_CACHE_FILES = 32
CACHE_TOKEN_BYTES = 32
