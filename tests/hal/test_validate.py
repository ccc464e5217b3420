"""Model validation: valid models pass, then one mutation per model rule, and control-flow operand rules."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import pytest

from mlts.hal.types import (
    ExtensionData,
    Model,
    SymmPerChannelQuantParams,
)
from mlts.hal.validate import (
    validate_model,
)
from tests.hal.validatekit import (
    EXT,
    IN,
    MAIN_OP,
    NOVAL,
    OUT,
    SUB,
    TEMP,
    M,
    Op,
    T,
    _unary,
    add_operand,
    expect_invalid,
    make_if_model,
    make_model,
    make_while_model,
    oem,
    opnd,
    per_channel,
    set_graph,
    set_op,
    set_operand,
    with_ext,
)

# ---------------------------------------------------------------- valid models


@pytest.mark.parametrize(
    "build",
    [
        make_model,
        make_if_model,
        make_while_model,
        lambda: per_channel(oem(make_model())),
        lambda: set_operand(make_model(), 4, dimensions=(3, 3, 3, 2), extra_params=None),
        # Unknown dimensions and unknown rank are fine on non-constant tensors.
        lambda: set_operand(set_operand(make_model(), 3, dimensions=(1, 0, 0, 2)), 8, dimensions=()),
        # An extension operand type with vendor extra params, and an extension operation.
        lambda: with_ext(
            set_op(
                set_operand(oem(make_model()), 3, type=(1 << 16) | 3, extra_params=ExtensionData(b"x")),
                0,
                type=(1 << 16) | 7,
            ),
            (EXT, 1),
        ),
        lambda: set_operand(oem(make_model()), 8, type=T.TENSOR_QUANT8_ASYMM, scale=0.5, zero_point=255),
        lambda: set_operand(oem(make_model()), 8, type=T.TENSOR_INT32, scale=0.25),
        lambda: set_op(make_model(), 1, type=Op.OEM_OPERATION),
        lambda: add_operand(make_model(), opnd(T.TENSOR_FLOAT32, (2,), NOVAL)),
    ],
    ids=[
        "conv",
        "if",
        "while",
        "per-channel",
        "ref-ok",
        "unknown-dims",
        "extension",
        "quant8",
        "int32-bias",
        "oem-op",
        "unused-no-value",
    ],
)
def test_valid_models_pass(build: Callable[[], Model]) -> None:
    validate_model(build())


def test_allowed_extensions() -> None:
    model = with_ext(set_operand(oem(make_model()), 3, type=(1 << 16) | 3), (EXT, 1))
    validate_model(model, allowed_extensions={EXT})
    expect_invalid(
        lambda: validate_model(model, allowed_extensions={"com.other.ext"}),
        "extension_name_to_prefix[0]",
        "not in the allowed extensions",
    )


# ---------------------------------------------------------------- one mutation per model rule


MODEL_RULES: list[tuple[str, Callable[[], Model], tuple[str, ...]]] = [
    # operand types
    (
        "type-unknown",
        lambda: set_operand(M(), 3, type=99),
        ("operand 3 " + MAIN_OP, "neither an OperandType"),
    ),
    (
        "type-negative",
        lambda: set_operand(M(), 3, type=-1),
        ("operand 3 " + MAIN_OP, "not an operand type code"),
    ),
    (
        "type-ext-undeclared",
        lambda: set_operand(M(), 3, type=(5 << 16) | 1),
        ("operand 3", "prefix 5 is not declared"),
    ),
    ("ext-name", lambda: with_ext(M(), ("myext", 1)), ("extension_name_to_prefix[0]", "reverse-domain")),
    (
        "ext-prefix-zero",
        lambda: with_ext(M(), (EXT, 0)),
        ("extension_name_to_prefix[0]", "outside [1, 65535]"),
    ),
    (
        "ext-name-twice",
        lambda: with_ext(M(), (EXT, 1), (EXT, 2)),
        ("extension_name_to_prefix[1]", "one to one"),
    ),
    (
        "ext-prefix-twice",
        lambda: with_ext(M(), (EXT, 1), ("com.b.c", 1)),
        ("extension_name_to_prefix[1]", "one to one"),
    ),
    # dimensions
    (
        "scalar-with-dims",
        lambda: set_operand(M(), 2, dimensions=(1,)),
        ("operand 2 " + MAIN_OP, "scalars have rank 0"),
    ),
    (
        "dim-negative",
        lambda: set_operand(M(), 3, dimensions=(1, -4, 4, 2)),
        ("operand 3", "dimension 1 is -4"),
    ),
    (
        "dim-huge",
        lambda: set_operand(M(), 3, dimensions=(1, 2**32, 4, 2)),
        ("operand 3", "dimension 1 is 4294967296"),
    ),
    (
        "size-overflow",
        lambda: set_operand(M(), 3, dimensions=(65536, 65536, 1, 1)),
        ("operand 3", "uint32 size limit"),
    ),
    ("rank-too-big", lambda: set_operand(M(), 3, dimensions=(1,) * 33), ("operand 3", "rank 33 exceeds")),
    # scale and zero point
    (
        "float-scale",
        lambda: set_operand(M(), 0, scale=0.5),
        ("operand 0", "requires scale 0 and zero_point 0"),
    ),
    (
        "float-zero-point",
        lambda: set_operand(M(), 0, zero_point=3),
        ("operand 0", "requires scale 0 and zero_point 0"),
    ),
    ("scale-nan", lambda: set_operand(M(), 0, scale=math.nan), ("operand 0", "not a finite number")),
    (
        "scale-inf",
        lambda: set_operand(M(), 8, type=T.TENSOR_QUANT8_ASYMM, scale=math.inf),
        ("operand 8", "finite"),
    ),
    (
        "int32-neg-scale",
        lambda: set_operand(M(), 8, type=T.TENSOR_INT32, scale=-1.0),
        ("operand 8", "scale -1.0 < 0"),
    ),
    (
        "int32-zero-point",
        lambda: set_operand(M(), 8, type=T.TENSOR_INT32, zero_point=1),
        ("operand 8", "zero_point 1 != 0"),
    ),
    (
        "quant8-scale-0",
        lambda: set_operand(M(), 0, type=T.TENSOR_QUANT8_ASYMM),
        ("operand 0", "scale 0.0 <= 0"),
    ),
    (
        "quant8-zp",
        lambda: set_operand(M(), 0, type=T.TENSOR_QUANT8_ASYMM, scale=1.0, zero_point=256),
        ("operand 0", "zero_point 256 outside [0, 255]"),
    ),
    (
        "quant8-signed-zp",
        lambda: set_operand(M(), 0, type=T.TENSOR_QUANT8_ASYMM_SIGNED, scale=1.0, zero_point=128),
        ("operand 0", "outside [-128, 127]"),
    ),
    (
        "quant8-symm-zp",
        lambda: set_operand(M(), 0, type=T.TENSOR_QUANT8_SYMM, scale=1.0, zero_point=1),
        ("operand 0", "outside [0, 0]"),
    ),
    (
        "quant16-asymm-zp",
        lambda: set_operand(M(), 0, type=T.TENSOR_QUANT16_ASYMM, scale=1.0, zero_point=65536),
        ("operand 0", "outside [0, 65535]"),
    ),
    (
        "quant16-symm-scale",
        lambda: set_operand(M(), 0, type=T.TENSOR_QUANT16_SYMM, scale=-2.0),
        ("operand 0", "<= 0"),
    ),
    # extra params
    (
        "quant8-zero-point-missing",
        lambda: set_operand(M(), 0, type=T.TENSOR_QUANT8_ASYMM, scale=1.0, zero_point=None),
        ("operand 0", "zero_point None is not an int"),
    ),
    (
        "quant8-signed-negative-scale",
        lambda: set_operand(M(), 0, type=T.TENSOR_QUANT8_ASYMM_SIGNED, scale=-0.5, zero_point=0),
        ("operand 0", "scale -0.5 <= 0"),
    ),
    (
        "per-channel-missing",
        lambda: set_operand(per_channel(M()), 4, extra_params=None),
        ("operand 4", "require SymmPerChannelQuantParams"),
    ),
    (
        "per-channel-scale",
        lambda: per_channel(M(), scales=(0.5, 0.0, 0.1)),
        ("operand 4", "channel scale 1 is 0.0"),
    ),
    (
        "per-channel-dim",
        lambda: per_channel(M(), channel_dim=4),
        ("operand 4", "channel_dim 4 outside [0, rank 4)"),
    ),
    (
        "per-channel-count",
        lambda: per_channel(M(), scales=(1.0, 1.0)),
        ("operand 4", "2 channel scales != dimension 0 (3)"),
    ),
    (
        "per-channel-scale-nonzero",
        lambda: set_operand(per_channel(M()), 4, scale=1.0),
        ("operand 4", "requires scale 0"),
    ),
    (
        "channel-quant-elsewhere",
        lambda: set_operand(M(), 0, extra_params=SymmPerChannelQuantParams((1.0,), 0)),
        ("operand 0", "only TENSOR_QUANT8_SYMM_PER_CHANNEL"),
    ),
    (
        "extension-data-elsewhere",
        lambda: set_operand(M(), 0, extra_params=ExtensionData(b"x")),
        ("operand 0", "only TENSOR_QUANT8_SYMM_PER_CHANNEL"),
    ),
    # lifetimes and locations
    ("lifetime-unknown", lambda: set_operand(M(), 3, lifetime=9), ("operand 3", "not an OperandLifeTime")),
    ("temp-location", lambda: set_operand(M(), 3, location=(0, 0, 4)), ("operand 3", "must be all zeros")),
    ("input-location", lambda: set_operand(M(), 0, location=(1, 0, 0)), ("operand 0", "must be all zeros")),
    ("copy-pool", lambda: set_operand(M(), 5, location=(1, 12, 12)), ("operand 5", "pool_index 1 != 0")),
    (
        "copy-range",
        lambda: set_operand(M(), 5, location=(0, 24, 12)),
        ("operand 5", "exceeds operand_values (32 bytes)"),
    ),
    (
        "ref-pool",
        lambda: set_operand(M(), 4, location=(1, 0, 216)),
        ("operand 4", "pool_index 1 out of range"),
    ),
    (
        "ref-range",
        lambda: set_operand(M(), 4, location=(0, 100, 216)),
        ("operand 4", "exceeds pool 0 (256 bytes)"),
    ),
    (
        "const-length",
        lambda: set_operand(M(), 5, dimensions=(4,)),
        (
            "operand 5 of main subgraph (TENSOR_FLOAT32 CONSTANT_COPY)",
            "location.length 12 != 16 bytes (type size x dims)",
        ),
    ),
    (
        "scalar-const-length",
        lambda: set_operand(M(), 6, location=(0, 24, 8)),
        ("operand 6", "length 8 != 4 bytes"),
    ),
    (
        "const-unspecified",
        lambda: set_operand(M(), 5, dimensions=(0,)),
        ("operand 5", "must be fully specified"),
    ),
    (
        "const-unknown-rank",
        lambda: set_operand(M(), 5, dimensions=()),
        ("operand 5", "must be fully specified"),
    ),
    (
        "subgraph-type-temp",
        lambda: set_operand(M(), 3, type=T.SUBGRAPH, dimensions=()),
        ("operand 3", "go together"),
    ),
    (
        "subgraph-lifetime-float",
        lambda: set_operand(make_if_model(), 1, type=T.TENSOR_FLOAT32),
        ("operand 1", "go together"),
    ),
    (
        "subgraph-offset",
        lambda: set_operand(make_if_model(), 2, location=(0, 2, 0)),
        ("operand 2", "offset 2 is not a referenced subgraph index"),
    ),
    (
        "subgraph-length",
        lambda: set_operand(make_if_model(), 2, location=(0, 1, 4)),
        ("operand 2", "length 0"),
    ),
    # subgraph inputs and outputs
    ("input-not-listed", lambda: set_operand(M(), 3, lifetime=IN), ("operand 3", "not in input_indexes")),
    ("output-not-listed", lambda: set_operand(M(), 3, lifetime=OUT), ("operand 3", "not in output_indexes")),
    ("input-range", lambda: set_graph(M(), input_indexes=(0, 9)), ("main subgraph", "input_indexes[1] is 9")),
    (
        "input-duplicate",
        lambda: set_graph(M(), input_indexes=(0, 0)),
        ("input_indexes[1] repeats operand 0",),
    ),
    (
        "input-wrong-lifetime",
        lambda: set_graph(M(), input_indexes=(0, 3)),
        ("input_indexes[1] is operand 3", "expected SUBGRAPH_INPUT"),
    ),
    (
        "no-outputs",
        lambda: set_operand(set_graph(M(), output_indexes=()), 8, lifetime=TEMP),
        ("main subgraph", "no outputs"),
    ),
    # operations
    ("no-operations", lambda: set_graph(M(), operations=()), ("main subgraph", "no operations")),
    (
        "op-type-unknown",
        lambda: set_op(M(), 1, type=500),
        ("operation 1 of main subgraph", "neither an OperationType"),
    ),
    ("op-type-ext", lambda: set_op(M(), 1, type=(3 << 16) | 1), ("operation 1", "prefix 3 is not declared")),
    ("op-input-range", lambda: set_op(M(), 0, inputs=(0, 1, 20)), ("operation 0", "input 2 is operand 20")),
    ("op-output-range", lambda: set_op(M(), 0, outputs=(-1,)), ("operation 0", "output 0 is operand -1")),
    (
        "op-output-constant",
        lambda: set_op(M(), 1, outputs=(5,)),
        ("operation 1", "outputs must be TEMPORARY_VARIABLE"),
    ),
    (
        "op-output-twice",
        lambda: set_op(M(), 1, outputs=(3,)),
        ("operation 1", "already written by operation 0"),
    ),
    (
        "op-read-before-write",
        lambda: set_graph(M(), operations=M().main.operations[::-1]),
        ("operation 0 of main subgraph (CONV_2D)", "reads operand 3 before any operation writes it"),
    ),
    (
        "temp-never-written",
        lambda: add_operand(M(), opnd(T.TENSOR_FLOAT32, (2,))),
        ("operand 9", "never written"),
    ),
    (
        "consumers",
        lambda: set_operand(M(), 2, number_of_consumers=1),
        ("operand 2", "number_of_consumers 1 != 2"),
    ),
    ("consumers-negative", lambda: set_operand(M(), 2, number_of_consumers=-1), ("operand 2", "int >= 0")),
    # control flow and references
    (
        "if-branch-not-subgraph",
        lambda: set_op(make_if_model(), 0, inputs=(0, 3, 2, 3)),
        ("operation 0 of main subgraph (IF)", "input 1 (operand 3) must be a SUBGRAPH operand"),
    ),
    (
        "if-too-few-inputs",
        lambda: set_op(set_operand(make_if_model(), 3, number_of_consumers=0), 0, inputs=(0, 1, 2)),
        ("operation 0", "then branch takes 1 inputs", "IF passes 0"),
    ),
    (
        "if-arity",
        lambda: set_op(set_operand(make_if_model(), 3, number_of_consumers=2), 0, inputs=(0, 1, 2, 3, 3)),
        ("operation 0", "then branch takes 1 inputs", "IF passes 2"),
    ),
    (
        "if-branch-type",
        lambda: replace(make_if_model(), referenced=(_unary(), _unary(out_type=T.TENSOR_FLOAT16))),
        ("operation 0", "else branch output 0 is TENSOR_FLOAT32 outside but TENSOR_FLOAT16"),
    ),
    (
        "while-cond-type",
        lambda: replace(make_while_model(), referenced=(_unary(), _unary())),
        ("operation 0 of main subgraph (WHILE)", "condition output is TENSOR_FLOAT32", "TENSOR_BOOL8"),
    ),
    (
        "while-too-many-outputs",
        lambda: set_op(add_operand(make_while_model(), opnd(T.TENSOR_FLOAT32, (2,))), 0, outputs=(3, 4)),
        ("operation 0", "2 outputs for 1 loop inputs"),
    ),
    (
        "while-body-type",
        lambda: replace(
            make_while_model(), referenced=(make_while_model().referenced[0], _unary(in_type=T.TENSOR_INT32))
        ),
        ("operation 0", "body input 0 is TENSOR_FLOAT32 outside but TENSOR_INT32"),
    ),
    (
        "unused-subgraph",
        lambda: replace(make_if_model(), referenced=(*make_if_model().referenced, _unary())),
        ("referenced subgraph 2 is never referenced",),
    ),
    (
        "subgraph-cycle",
        lambda: add_operand(make_if_model(), opnd(T.SUBGRAPH, (), SUB, (0, 1, 0)), sub=1),
        ("referenced subgraph 1 references referenced subgraph 1", "cycle"),
    ),
    (
        "referenced-subgraph-rule",
        lambda: set_operand(make_if_model(), 0, 1, scale=1.0),
        ("operand 0 of referenced subgraph 1", "requires scale 0"),
    ),
]


@pytest.mark.parametrize("rule, mutate, fragments", MODEL_RULES, ids=[r[0] for r in MODEL_RULES])
def test_model_rule(rule: str, mutate: Callable[[], Model], fragments: tuple[str, ...]) -> None:
    expect_invalid(lambda: validate_model(mutate()), *fragments)


def test_model_rule_ids_unique() -> None:
    ids = [r[0] for r in MODEL_RULES]
    assert len(ids) == len(set(ids))


# ---------------------------------------------------------------- control flow operand compatibility


@pytest.mark.parametrize(
    ("mutate", "fragments"),
    [
        (lambda: set_operand(make_if_model(), 0, dimensions=(2,)), ["IF", "input 0 (condition", "one value"]),
        (
            lambda: set_operand(make_if_model(), 0, type=T.TENSOR_INT32),
            ["IF", "TENSOR_INT32", "TENSOR_BOOL8"],
        ),
        (
            lambda: set_operand(make_if_model(), 0, sub=0, dimensions=(3,)),
            ["then branch input 0", "dimensions [2]"],
        ),
        (
            lambda: set_operand(make_if_model(), 4, type=T.TENSOR_QUANT8_ASYMM, scale=0.5),
            ["then branch output 0", "TENSOR_QUANT8_ASYMM outside"],
        ),
        (
            lambda: set_operand(
                set_operand(make_while_model(), 1, sub=1, dimensions=(0,)), 0, sub=1, dimensions=(1,)
            ),
            [],
        ),
    ],
    ids=[
        "if-condition-shape",
        "if-condition-type",
        "if-branch-dims",
        "if-output-type",
        "while-unknown-dim-ok",
    ],
)
def test_control_flow_operands_must_be_compatible(mutate, fragments) -> None:
    if not fragments:
        validate_model(mutate())
        return
    expect_invalid(lambda: validate_model(mutate()), *fragments)


def test_while_body_returns_what_it_takes() -> None:
    model = set_operand(make_while_model(), 1, sub=1, type=T.TENSOR_QUANT8_ASYMM, scale=0.5)
    # The body's output feeds the loop output too, so make that one match the body's.
    model = set_operand(model, 3, type=T.TENSOR_QUANT8_ASYMM, scale=0.5)
    expect_invalid(
        lambda: validate_model(model), "WHILE", "loop variable 0", "the body must return what it takes"
    )
