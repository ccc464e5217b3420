"""TFLite's GELU builtin, which NNAPI lacks, as the bundled vendor extension's GELU operation.

TFLite's NNAPI delegate does not map GELU. When a target driver declares the extension
com.example.mlts.activations (sample-all does), GELU becomes its GELU operation with the
`approximate` option as the approximation mode (false: exact x*Phi(x), true: the tanh form);
otherwise it is refused naming the extension it would need. FLOAT32 only.
"""

from __future__ import annotations

from mlts.convert.tflite import schema
from mlts.convert.tflite.context import Graph
from mlts.convert.tflite.model import Operator
from mlts.hal import example_extension as activations


def gelu(g: Graph, op: Operator) -> None:
    if activations.NAME not in g.session.extensions:
        offered = ", ".join(sorted(g.session.extensions)) or "none"
        raise g.refuse(
            f"NNAPI has no GELU and TFLite's NNAPI delegate does not map it; it needs the vendor extension "
            f"{activations.NAME!r}, which no target driver declares (extensions offered: {offered})"
        )
    x = g.tensor(g.input(0))
    if x.type != schema.FLOAT32:
        raise g.refuse(f"its input is {x.type_name}; the extension's GELU is mapped for FLOAT32")
    mode = "tanh" if g.option("approximate", False) else "none"
    activations.add_gelu(g.builder, g.operand(g.input(0)), g.new_operand(g.output(0)), mode)
    g.session.counts["extension_operation"] += 1
