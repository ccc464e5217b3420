"""Shared by the bound-step tests (driver.bound_steps): a plan whose steps all run one by one."""

from __future__ import annotations

from driver.executor import Plan
from driver.straight_line import compile_steps


def unbound(plan: Plan) -> Plan:
    """The plan's straight-line function with every step called one by one (no chunk binds)."""
    plan._straight = compile_steps(
        plan.steps, plan.input_indexes, plan.output_indexes, plan._template, plan.sub.operands, bind=False
    )
    plan._straight_tried = True
    return plan
