"""ONNX operations with no NNAPI equivalent that a vendor extension provides.

ONNX `Gelu` (opset 20) and a node of the extension's own domain
(`com.example.mlts.activations`, op type `Gelu`) become the extension's GELU
operation, with the `approximate` attribute ("none" or "tanh") as the
APPROXIMATION operand's extension data, when a target driver declares the
extension (`convert(..., extensions=...)`). Without it, ONNX's Gelu becomes
its definition in NNAPI arithmetic (ops/transformer.py), and the extension
domain's node fails saying no driver offers it. Float32 tensors only.
"""

from __future__ import annotations

from onnx import NodeProto

from mlts.convert.context import Context, where
from mlts.convert.errors import ConversionError
from mlts.convert.ops._common import attrs
from mlts.convert.registry import register
from mlts.hal import example_extension as activations

#: Custom ONNX domains whose nodes map to an extension: domain -> {op type: handler}.
CUSTOM_DOMAINS: dict[str, dict] = {}


def _require(ctx: Context, node: NodeProto, extension: str) -> None:
    if extension not in ctx.extensions:
        offered = ", ".join(sorted(ctx.extensions)) or "none"
        raise ConversionError(
            f"{where(node)} has no NNAPI equivalent; it needs the vendor extension {extension!r}, "
            f"which no target driver offers (extensions offered: {offered})"
        )


def _gelu(ctx: Context, node: NodeProto) -> None:
    _require(ctx, node, activations.NAME)
    approximate = attrs(node).get("approximate", "none")
    if isinstance(approximate, bytes):
        approximate = approximate.decode("utf-8", "replace")
    if approximate not in activations.MODES.values():
        raise ConversionError(f"{where(node)}: approximate={approximate!r}; expected 'none' or 'tanh'")
    x = ctx.tensor(node)
    if x.quant is not None:
        raise ConversionError(f"{where(node)}: GELU on quantized tensors is not supported (float32 only)")
    out = ctx.new_tensor(node.output[0], x.shape, x.nhwc)
    activations.add_gelu(ctx.builder, x.operand, out.operand, approximate)
    ctx.counts["extension_operation"] += 1


@register("Gelu", 20)
def gelu(ctx: Context, node: NodeProto) -> None:
    """The extension's GELU (com.example.mlts.activations) when a target driver declares it; otherwise
    its ONNX definition in NNAPI arithmetic (ops/transformer.py: erf or tanh form)."""
    if activations.NAME in ctx.extensions:
        _gelu(ctx, node)
        return
    from mlts.convert.ops.transformer import emit_gelu

    approximate = attrs(node).get("approximate", "none")
    if approximate not in activations.MODES.values():
        raise ConversionError(f"{where(node)}: approximate={approximate!r}; expected 'none' or 'tanh'")
    emit_gelu(ctx, node, approximate)


CUSTOM_DOMAINS[activations.NAME] = {"Gelu": _gelu}


def convert_custom(ctx: Context, node: NodeProto) -> None:
    """A node of a custom extension domain; ConversionError for an op type that domain does not define."""
    handler = CUSTOM_DOMAINS[node.domain].get(node.op_type)
    if handler is None:
        raise ConversionError(
            f"unsupported op '{node.op_type}' of domain '{node.domain}' (node '{node.name}'); "
            f"that domain defines: {', '.join(sorted(CUSTOM_DOMAINS[node.domain]))}"
        )
    handler(ctx, node)
