"""The conformance faults of sample-faulty: what `mlts validate` must catch.

- `skip_validation=1`: the driver does not validate what it is given; an
  invalid model "prepares" (its executions then fail with GENERAL_FAILURE) and
  an invalid request fails with GENERAL_FAILURE instead of INVALID_ARGUMENT;
  getSupportedOperations answers "all supported" for any model;
- `wrong_op=NAME`: every execution of a model that contains operation NAME
  reports success with spoiled outputs;
- `unstable_capabilities=1`: getCapabilities differs from one driver process
  to the next (a per-process factor on every performance number);
- `ignore_deadlines=1`: preparations and executions drop their deadlines;
- `token_cache=1`: prepared models are also remembered in memory by cache
  token, and prepareModelFromCache answers from there for any client holding
  the same token, whatever cache files it brings.
"""

from __future__ import annotations

import os
import random
from dataclasses import replace

from mlts.hal.enums import ErrorStatus, MeasureTiming
from mlts.hal.errors import HalError
from mlts.hal.interface import PreparedModel
from mlts.hal.types import (
    Capabilities,
    ExecutionResult,
    Model,
    OperandPerformance,
    OptionalTimePoint,
    PerformanceInfo,
    Request,
)


def unvalidated(error: HalError) -> HalError:
    """What a driver that skipped validation reports when the invalid input finally breaks something."""
    return HalError(
        ErrorStatus.GENERAL_FAILURE, f"could not run (input was never validated): {error.message}"
    )


class UnvalidatedPreparedModel(PreparedModel):
    """What `prepareModel` of a driver that skipped validation returns for an invalid model."""

    def __init__(self, error: HalError) -> None:
        self.error = error

    def executeSynchronously(
        self,
        request: Request,
        measure: MeasureTiming = MeasureTiming.NO,
        deadline: OptionalTimePoint = None,
        loop_timeout_duration: int | None = None,
    ) -> ExecutionResult:
        raise unvalidated(self.error)


def has_operation(model: Model, code: int | None) -> bool:
    """Whether any subgraph of `model` contains operation `code`."""
    if code is None:
        return False
    return any(op.type == code for sub in (model.main, *model.referenced) for op in sub.operations)


def unstable(capabilities: Capabilities) -> Capabilities:
    """`capabilities` with every performance number scaled by a factor drawn anew in each process."""
    factor = random.Random(f"{os.getpid()}:{os.urandom(8).hex()}").uniform(1.05, 2.0)

    def scaled(p: PerformanceInfo) -> PerformanceInfo:
        return PerformanceInfo(p.exec_time * factor, p.power_usage * factor)

    return replace(
        capabilities,
        relaxed_float32_to_float16_performance_scalar=scaled(
            capabilities.relaxed_float32_to_float16_performance_scalar
        ),
        relaxed_float32_to_float16_performance_tensor=scaled(
            capabilities.relaxed_float32_to_float16_performance_tensor
        ),
        operand_performance=tuple(
            OperandPerformance(o.type, scaled(o.info)) for o in capabilities.operand_performance
        ),
        if_performance=scaled(capabilities.if_performance),
        while_performance=scaled(capabilities.while_performance),
    )
