"""NN HAL 1.3 for Python: types, validation, the graph file format, the wire protocol and the service host."""

from mlts.hal.enums import (
    DeviceType,
    ErrorStatus,
    ExecutionPreference,
    FusedActivationFunc,
    MeasureTiming,
    OperandLifeTime,
    OperandType,
    OperationType,
    PaddingScheme,
    Priority,
)
from mlts.hal.errors import HalError
from mlts.hal.interface import Buffer, Burst, Device, PreparedModel
from mlts.hal.memory import HostMemory, SharedMemory
from mlts.hal.types import (
    Capabilities,
    DataLocation,
    ExecutionResult,
    Model,
    Operand,
    Operation,
    OutputShape,
    PerformanceInfo,
    Request,
    RequestArgument,
    Subgraph,
    Timing,
)

__all__ = [
    "Buffer",
    "Burst",
    "Capabilities",
    "DataLocation",
    "Device",
    "DeviceType",
    "ErrorStatus",
    "ExecutionPreference",
    "ExecutionResult",
    "FusedActivationFunc",
    "HalError",
    "HostMemory",
    "MeasureTiming",
    "Model",
    "Operand",
    "OperandLifeTime",
    "OperandType",
    "Operation",
    "OperationType",
    "OutputShape",
    "PaddingScheme",
    "PerformanceInfo",
    "PreparedModel",
    "Priority",
    "Request",
    "RequestArgument",
    "SharedMemory",
    "Subgraph",
    "Timing",
]
