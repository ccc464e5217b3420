"""IF and WHILE (NNAPI 1.3): operations that run referenced subgraphs.

IF: input 0 is a TENSOR_BOOL8 [1] condition, inputs 1 and 2 the then and else subgraphs, the rest
the branch inputs; the chosen branch's outputs are the operation's outputs.

WHILE: input 0 is the condition subgraph, input 1 the body, then m loop-carried values (whose final
values are the m outputs), k loop-state values and n input-only values. The condition sees all
m + k + n values and gives a TENSOR_BOOL8 [1]; the body takes the same and returns m + k new values.

Operands cross a subgraph boundary by value: a subgraph sees the arrays it is given and produces new
ones (kernels never write their inputs, and every array the executor hands on is read-only), so an
outer operand never changes because a subgraph ran. Shapes may change from one iteration to the next
where the operands leave dimensions unknown; the outer operation's declared dimensions are checked
on its outputs by the executor.

A WHILE loop runs at most the execution's loop timeout (default 2 s, at most 15 s), measured from
the start of that WHILE; past it the execution ends in MISSED_DEADLINE_TRANSIENT, so a condition that
never turns false cannot hold the driver. The execution's checkpoint (deadline, preemption) runs
before every operation inside the subgraphs too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from driver.budget import ExecutionMemory
from mlts.hal.enums import ErrorStatus, OperandLifeTime, OperationType
from mlts.hal.errors import HalError
from mlts.hal.types import Model, Operation, Subgraph

CONTROL_FLOW = frozenset({OperationType.IF, OperationType.WHILE})


@dataclass(frozen=True, slots=True)
class RunContext:
    """What every subgraph of one execution shares: its checkpoint, its WHILE loop timeout and the count
    of the bytes it holds against its memory budget (driver.budget.ExecutionMemory)."""

    checkpoint: Callable[[int], None] | None
    loop_timeout_ns: int
    memory: ExecutionMemory


class SubPlan(Protocol):
    def run_in(self, inputs: Sequence[Any], ctx: RunContext) -> list[np.ndarray]: ...


ControlStep = Callable[[Sequence[Any], RunContext], list[np.ndarray]]


def referenced_subgraphs(model: Model, sub: Subgraph, op: Operation) -> list[int]:
    """Indexes into model.referenced of the subgraphs an IF (then, else) or WHILE (cond, body) names."""
    positions = (1, 2) if op.type == OperationType.IF else (0, 1)
    result = []
    for pos in positions:
        operand = sub.operands[op.inputs[pos]]
        if operand.lifetime != OperandLifeTime.SUBGRAPH:
            raise HalError(ErrorStatus.INVALID_ARGUMENT, f"input {pos} must be a SUBGRAPH operand")
        result.append(operand.location.offset)
    return result


def condition_value(arr: Any, what: str) -> bool:
    if arr is None:  # a model input the request left without a value (NNAPI's executor fails it too)
        raise HalError(ErrorStatus.GENERAL_FAILURE, f"{what} has no value")
    flat = np.asarray(arr).reshape(-1)
    if flat.size != 1:
        raise HalError(ErrorStatus.GENERAL_FAILURE, f"{what} holds {flat.size} values; it must hold one")
    return bool(flat[0])


def build(op: Operation, plans: Sequence[SubPlan], outputs: int) -> ControlStep:
    """The step that runs an IF (plans: then, else) or a WHILE (plans: condition, body)."""
    if op.type == OperationType.IF:
        return _if_step(plans[0], plans[1])
    return _while_step(plans[0], plans[1], outputs)


def _if_step(then_plan: SubPlan, else_plan: SubPlan) -> ControlStep:
    def run(args: Sequence[Any], ctx: RunContext) -> list[np.ndarray]:
        branch = then_plan if condition_value(args[0], "the IF condition") else else_plan
        return branch.run_in(args[3:], ctx)

    return run


def _while_step(cond_plan: SubPlan, body_plan: SubPlan, outputs: int) -> ControlStep:
    def run(args: Sequence[Any], ctx: RunContext) -> list[np.ndarray]:
        values = list(args[2:])
        end = time.monotonic_ns() + ctx.loop_timeout_ns
        iterations = 0
        memory = ctx.memory
        carried = 0  # bytes of the values the loop made (the enclosing subgraph holds its own inputs)
        try:
            while condition_value(cond_plan.run_in(values, ctx)[0], "the WHILE condition's output"):
                if time.monotonic_ns() > end:
                    raise HalError(
                        ErrorStatus.MISSED_DEADLINE_TRANSIENT,
                        f"WHILE loop still running after {iterations} iterations: loop timeout of "
                        f"{ctx.loop_timeout_ns / 1e9:g} s exceeded",
                    )
                # The body's results are checked against what the execution holds, this loop's values
                # included: a loop that grows its values fails when it reaches the execution's budget.
                new = body_plan.run_in(values, ctx)
                values[: len(new)] = new
                made = sum(int(getattr(v, "nbytes", 0)) for v in new)
                memory.hold(made - carried)
                carried = made
                iterations += 1
        finally:
            memory.drop(carried)  # the enclosing subgraph counts the outputs it keeps
        return values[:outputs]

    return run
