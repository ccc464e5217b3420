"""`mlts convert` and `mlts inspect`: ONNX to .nnm, and what a .nnm holds."""

from __future__ import annotations

import re
from pathlib import Path

import click
import numpy as np

from mlts.commands._common import echo_json

#: The largest --input-shape dimension: NN operand dimensions are 32-bit (mlts.hal.codec.MAX_DIMENSION).
MAX_DIMENSION = 2**31 - 1


def _list_ops(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    for line in list_ops_lines():
        click.echo(line)
    ctx.exit(0)


def list_ops_lines() -> list[str]:
    """One line per ONNX op the converter takes: domain, op type, opset range and handler versions."""
    from mlts.convert import converter
    from mlts.convert.load import MICROSOFT_DOMAIN, MICROSOFT_OPS
    from mlts.convert.registry import versions

    newest = converter.NEWEST_TESTED_OPSET
    table = versions()
    lines = [f"ONNX operators the converter takes (opsets of the default domain; tested up to {newest}):"]
    width = max(len(op) for op in table)
    for op, starts in table.items():
        if op in MICROSOFT_OPS:
            continue
        steps = ", ".join(str(v) for v in starts)
        lines.append(f"  {op:<{width}}  opset {starts[0]}-{newest}  (versions from {steps})")
    lines.append(f"{MICROSOFT_DOMAIN} operators (onnxruntime's QOperator format):")
    for op in sorted(MICROSOFT_OPS):
        lines.append(f"  {op}")
    return lines + tflite_ops_lines()


def tflite_ops_lines() -> list[str]:
    """One line per TFLite builtin the importer maps: the NNAPI operations and the delegate's versions."""
    from mlts.convert.tflite.registry import mappings

    table = mappings()
    width = max(len(m.builtin) for m in table)
    lines = ["TFLite builtins (as TFLite's NNAPI delegate maps them; docs/tflite.md):"]
    for m in table:
        versions = "any version" if m.max_version is None else f"versions 1-{m.max_version}"
        lines.append(f"  {m.builtin:<{width}}  {versions:<14}  -> {', '.join(m.nnapi) or '(folded)'}")
    lines.append(
        "  GELU"
        + " " * (width - 2)
        + "any version     -> the vendor extension's GELU, when a driver declares it"
    )
    return lines


@click.command("convert")
@click.argument("onnx_file", metavar="MODEL.onnx|MODEL.tflite|ZOO_NAME")
@click.option(
    "-o", "--output", required=True, type=click.Path(dir_okay=False), help="The .nnm file to write."
)
@click.option(
    "--dot", "dot_file", type=click.Path(dir_okay=False), help="Also write the graph as Graphviz .dot."
)
@click.option(
    "--batch-size",
    default=1,
    show_default=True,
    type=click.IntRange(1, 1 << 16),
    help="Value for symbolic batch dimensions.",
)
@click.option(
    "--nhwc-io",
    is_flag=True,
    help="Give the NN model NHWC inputs/outputs instead of keeping the ONNX layout.",
)
@click.option(
    "--input-shape",
    "input_shapes",
    multiple=True,
    metavar="NAME=D1,D2,...",
    callback=lambda _ctx, _param, specs: parse_input_shapes(specs),
    help="The whole shape of input NAME, fixing its symbolic dimensions (ONNX) or the -1 dimensions of "
    "its shape signature (TFLite) (e.g. a time axis: features=50,1,320); repeatable, one per input.",
)
@click.option(
    "--input-value",
    "input_values",
    multiple=True,
    metavar="NAME=V[,V...]",
    callback=lambda _ctx, _param, specs: parse_input_values(specs),
    help="Fix input NAME to a value, making it a constant of the model (configuration such as a "
    "sample rate: sr=16000); one number for a scalar or [1] input, a comma-separated list for a "
    "vector. Numbers are taken in the input's element type (integers for integer and bool inputs); "
    "repeatable, one per input.",
)
@click.option(
    "--list-ops",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_list_ops,
    help="Print the ONNX operators and opsets the converter takes and the TFLite builtins the importer maps, and exit.",
)
@click.option(
    "--extension",
    "extensions",
    multiple=True,
    metavar="NAME",
    help="A vendor extension the target driver declares (e.g. com.example.mlts.activations, which "
    "sample-all declares): ONNX ops it provides, such as Gelu, map to it (without it, Gelu is "
    "computed from its ONNX definition); repeatable.",
)
@click.option(
    "--signature",
    default=None,
    metavar="KEY",
    help="TFLite models: convert the subgraph of this signature, with its inputs and outputs "
    "(default: the main subgraph).",
)
def convert_cmd(
    onnx_file: str,
    output: str,
    dot_file: str | None,
    batch_size: int,
    nhwc_io: bool,
    input_shapes: dict[str, tuple[int, ...]],
    input_values: dict[str, np.ndarray],
    extensions: tuple[str, ...],
    signature: str | None,
) -> None:
    """Convert an ONNX or TFLite model (a file, or a zoo model's name) to an NN graph file (.nnm).

    ONNX: symbolic batch dimensions become --batch-size; any other symbolic
    dimension needs the input's shape from --input-shape; inputs that are
    configuration rather than data (a sample rate) can be fixed with
    --input-value, and the model computes with that value. TFLite: operators
    map as TFLite's NNAPI delegate maps them (docs/tflite.md), with the
    file's shapes or, for inputs whose shape signature has -1 dimensions,
    those --input-shape gives; --signature picks a signature's subgraph.
    """
    from mlts.convert import convert
    from mlts.hal import nnfile
    from mlts.hal.atomic import write_atomic
    from mlts.hal.dot import to_dot
    from mlts.hal.validate import validate_model

    onnx_file = _resolve_model(onnx_file)
    from mlts.errors import InputError
    from mlts.hal.extensions import check_name

    for name in extensions:
        try:
            check_name(name)
        except ValueError as e:
            raise InputError(f"--extension: {e}") from None
    from mlts.convert import model_format

    tflite = model_format(onnx_file) == "tflite"
    if tflite and (batch_size != 1 or nhwc_io):
        raise InputError(
            "--batch-size and --nhwc-io apply to ONNX models; a TFLite model is NHWC with the file's shapes"
        )
    conv = convert(
        onnx_file,
        batch_size=batch_size,
        keep_io_layout=not nhwc_io,
        input_shapes=input_shapes,
        input_values=input_values,
        extensions=extensions,
        signature=signature,
    )
    validate_model(conv.model)
    meta = {
        "source": Path(onnx_file).name,
        ("tflite_schema" if tflite else "onnx_opset"): str(conv.opset),
        "inputs": ",".join(f"{t.name}:{'x'.join(map(str, t.shape))}:{t.dtype}" for t in conv.inputs),
        "outputs": ",".join(f"{t.name}:{'x'.join(map(str, t.shape))}:{t.dtype}" for t in conv.outputs),
    }
    dot_text = to_dot(conv.model, name=Path(onnx_file).stem) if dot_file else None
    nnfile.write(conv.model, output, metadata=meta)
    if dot_file is not None and dot_text is not None:
        write_atomic(dot_file, dot_text.encode("utf-8"))
    sub = conv.model.main
    click.echo(f"wrote {output}: {len(sub.operations)} operations, {len(sub.operands)} operands")
    for note in conv.notes:
        click.echo(f"  {note}")
    if dot_file:
        click.echo(f"wrote {dot_file}")


def parse_input_shapes(specs: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    """{NAME: dims} from NAME=D1,D2,... specs; click.BadParameter for a malformed or repeated one."""
    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        name, sep, dims = spec.partition("=")
        name = name.strip()
        parts = [p.strip() for p in dims.split(",")]
        if (
            not sep
            or not name
            or not all(p.isascii() and p.isdigit() and 0 < int(p) <= MAX_DIMENSION for p in parts)
        ):
            raise click.BadParameter(
                f"'{spec}' is not NAME=D1,D2,... with positive integer dimensions of at most {MAX_DIMENSION}",
                param_hint="'--input-shape'",
            )
        if name in shapes:
            raise click.BadParameter(f"input '{name}' is given twice", param_hint="'--input-shape'")
        shapes[name] = tuple(int(p) for p in parts)
    return shapes


_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?|[+-]?(inf|nan)", re.IGNORECASE)
_INTEGER = re.compile(r"[+-]?\d+")


def parse_input_values(specs: tuple[str, ...] | list[str]) -> dict[str, np.ndarray]:
    """{NAME: value} from NAME=V or NAME=V0,V1,... specs; click.BadParameter for a malformed or repeated one.

    One number gives a rank-0 array, several a 1-D array. Integers stay integers (int64) and any
    decimal point, exponent, inf or nan makes the whole value float64; the converter then takes the
    value in the model input's element type (mlts.convert.convert's input_values).
    """
    values: dict[str, np.ndarray] = {}
    for spec in specs:
        name, sep, text = spec.partition("=")
        name = name.strip()
        parts = [p.strip() for p in text.split(",")]
        if not sep or not name or not all(p.isascii() and _NUMBER.fullmatch(p) for p in parts):
            raise click.BadParameter(
                f"'{spec}' is not NAME=V or NAME=V0,V1,... with decimal numbers", param_hint="'--input-value'"
            )
        if name in values:
            raise click.BadParameter(f"input '{name}' is given twice", param_hint="'--input-value'")
        if all(_INTEGER.fullmatch(p) for p in parts):
            ints = [int(p) for p in parts]
            if any(not -(2**63) <= v < 2**63 for v in ints):
                raise click.BadParameter(
                    f"'{spec}' has an integer outside the 64-bit range", param_hint="'--input-value'"
                )
            arr = np.array(ints, dtype=np.int64)
        else:
            arr = np.array([float(p) for p in parts], dtype=np.float64)
        values[name] = arr.reshape(()) if len(parts) == 1 else arr
    return values


def _resolve_model(arg: str) -> str:
    """A path as given; a zoo name (when no such file exists) as its cached ONNX file."""
    if Path(arg).exists():
        return arg
    from mlts.models import zoo

    if arg in {m.name for m in zoo.list_models()}:
        return str(zoo.model_path(arg))
    raise FileNotFoundError(2, "no such file, and not a zoo model name (see mlts models)", arg)


@click.command("inspect")
@click.argument("nnm_file", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def inspect_cmd(nnm_file: str, as_json: bool) -> None:
    """Print the operands, operations, constants and pools of an .nnm file."""
    from mlts.hal import nnfile
    from mlts.hal.describe import describe, to_json

    f = nnfile.load(nnm_file)
    if as_json:
        echo_json(to_json(f.model, f.metadata))
        return
    for key, value in sorted(f.metadata.items()):
        click.echo(f"{key}: {value}")
    for line in describe(f.model):
        click.echo(line)
