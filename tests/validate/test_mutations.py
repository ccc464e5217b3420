"""Mutant generation: every mutant breaks a rule of the reference validator, and the rules they reach are many."""

from __future__ import annotations

from collections import Counter

import pytest

from mlts.hal import opprobe, validate
from mlts.hal.enums import OperandType, OperationType
from mlts.validate import control_flow_mutations as cf
from mlts.validate.mutations import (
    graph_mutants,
    judge,
    operand_mutants,
    rule_of,
    write_scalar,
)
from mlts.validate.operation_mutations import operation_mutants
from mlts.validate.request_mutations import judge_requests, request_mutants, rule_of_request, valid_request
from mlts.validate.validation import model_sources


def test_base_models_are_valid():
    for model in (
        cf.if_model(),
        cf.while_model(),
        opprobe.probe_model(OperationType.ADD, OperandType.TENSOR_FLOAT32),
    ):
        validate.validate_model(model)
        assert rule_of(model) is None


def test_judged_mutants_are_rejected_and_name_their_rule():
    model = opprobe.probe_model(OperationType.CONV_2D, OperandType.TENSOR_QUANT8_ASYMM, True)
    mutants = list(judge(operand_mutants(model))) + list(judge(graph_mutants(model)))
    mutants += list(judge(operation_mutants(model)))
    assert len(mutants) > 80
    for m in mutants:
        found = rule_of(m.model)
        assert found is not None and found[0] == m.rule and m.rule.endswith(tuple("0123456789"))
        assert m.rule.split(":")[0].endswith(".py")


def test_valid_mutants_are_dropped():
    model = opprobe.probe_model(OperationType.ADD, OperandType.TENSOR_FLOAT32)
    activation = model.main.operations[0].inputs[2]
    still_valid = write_scalar(model, activation, 1)  # RELU: a valid fused activation
    assert still_valid is not None and rule_of(still_valid) is None
    from mlts.validate.mutations import Mutant

    assert list(judge([Mutant("x", "RELU", still_valid)])) == []


def test_parameter_value_mutants_hit_the_activation_rule():
    model = opprobe.probe_model(OperationType.ADD, OperandType.TENSOR_FLOAT32)
    details = [m.detail for m in judge(operation_mutants(model)) if m.family == "operation parameter value"]
    assert any("= -1" in d for d in details), details


def test_control_flow_mutants_break_control_flow_rules():
    mutants = list(judge(cf.if_mutants())) + list(judge(cf.while_mutants()))
    assert len(mutants) >= 10
    messages = " | ".join(m.message for m in mutants)
    for needle in ("TENSOR_BOOL8", "then branch", "must be a SUBGRAPH operand", "condition output", "body"):
        assert needle in messages


def test_request_mutants_are_rejected():
    model = opprobe.probe_model(OperationType.ADD, OperandType.TENSOR_FLOAT32)
    request = valid_request(model)
    assert rule_of_request(request, model) is None
    mutants = list(judge_requests(request_mutants(model, request), model))
    families = Counter(m.family for m in mutants)
    for family in (
        "request inputs",
        "request outputs",
        "request pool index",
        "request location",
        "request dimensions",
        "loop timeout",
    ):
        assert families[family] >= 1, families
    assert all(rule_of_request(m.request, model, m.loop_timeout) is not None for m in mutants)


@pytest.mark.parametrize("quick", [True, False])
def test_sources_cover_many_distinct_rules(quick):
    cases = [(c.op, c.key, False) for c in opprobe.probe_cases()]
    cases = cases[::7] if quick else cases[::2]
    rules = {m.rule for _, _, mutants in model_sources(cases, quick) for m in mutants}
    # The operation signature, operand, graph, control-flow and extension checks all fire.
    files = {r.split(":")[0] for r in rules}
    assert {"_validate_operation.py", "_validate_operand.py", "_validate_graph.py", "validate.py"} <= files
    assert len(rules) >= (40 if quick else 60)
