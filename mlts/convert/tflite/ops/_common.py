"""Checks and operand helpers shared by the mappings: types, fused activations, padding, simple ops."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from mlts.convert.tflite import schema
from mlts.convert.tflite.context import Graph
from mlts.hal.enums import OperationType

FLOAT = (schema.FLOAT32,)
QUANT8 = (schema.UINT8, schema.INT8)
FLOAT_OR_QUANT8 = (schema.FLOAT32, schema.UINT8, schema.INT8)
FLOAT_QUANT8_INT32 = (schema.FLOAT32, schema.UINT8, schema.INT8, schema.INT32)


def type_of(g: Graph, k: int) -> int:
    """The TensorType code of the current operator's input k."""
    return g.tensor(g.input(k)).type


def out_type(g: Graph, k: int = 0) -> int:
    return g.tensor(g.output(k)).type


def names(types: Iterable[int]) -> str:
    return ", ".join(schema.type_name(t) for t in types)


def expect_type(g: Graph, k: int, allowed: Sequence[int], what: str = "input") -> int:
    """Input k's type, refused unless in `allowed` (the delegate's ExpectTypeIn)."""
    code = type_of(g, k)
    if code not in allowed:
        raise g.refuse(
            f"its {what} is {schema.type_name(code)}; the NNAPI delegate maps it for {names(allowed)}"
        )
    return code


def expect_output_type(g: Graph, allowed: Sequence[int], k: int = 0) -> int:
    code = out_type(g, k)
    if code not in allowed:
        raise g.refuse(
            f"its output is {schema.type_name(code)}; the NNAPI delegate maps it for {names(allowed)}"
        )
    return code


def activation(g: Graph, allow: bool = True) -> int:
    """The fused activation as NNAPI's FuseCode; refused for activations NNAPI cannot fuse.

    TFLite's NONE/RELU/RELU_N1_TO_1/RELU6 have NNAPI's codes 0-3; TANH and SIGN_BIT have none (the
    delegate would pass an invalid code). `allow=False`: the delegate maps the operator only without one.
    """
    code = int(g.option("fused_activation_function", schema.ACT_NONE) or 0)
    if code not in (0, 1, 2, 3):
        name = schema.ACTIVATION_NAMES.get(code, str(code))
        raise g.refuse(
            f"fused activation {name} has no NNAPI fused-activation code (NONE, RELU, RELU1, RELU6)"
        )
    if code and not allow:
        raise g.refuse(
            f"fused activation {schema.ACTIVATION_NAMES[code]}: the NNAPI delegate maps this operator "
            "without a fused activation only"
        )
    return code


def padding(g: Graph) -> int:
    """The padding option as NNAPI's implicit PaddingScheme (SAME=1, VALID=2)."""
    code = int(g.option("padding", 0) or 0)
    if code not in schema.PADDING_NAMES:
        raise g.refuse(f"padding {code} is neither SAME nor VALID")
    return code + 1


def rank(g: Graph, index: int) -> int:
    return len(g.tensor(index).shape)


def emit_simple(
    g: Graph, op_type: OperationType, inputs: Sequence[int], params: Sequence[int] = (), outputs: int = 1
) -> list[int]:
    """Emit op_type on the operands of the current operator's `inputs` (indices), then `params`."""
    operands = [g.operand(g.input(k)) for k in inputs] + list(params)
    outs = [g.new_operand(g.output(k)) for k in range(outputs)]
    g.emit(op_type, operands, outs)
    return outs
