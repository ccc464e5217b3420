"""The reference workloads a driver's performance numbers are measured on, one operand type each.

Per operand type, the kind of model the Android documentation names as its
reference: TENSOR_FLOAT32 (and the scalar FLOAT32, which shares its numbers)
is measured on the float MobileNets v1 and v2 and on one step of the LSTM
speech models asr_float and tts_float (state carried as zeros);
TENSOR_QUANT8_ASYMM on the `_quant` MobileNets; TENSOR_QUANT8_ASYMM_SIGNED
on the `_quant_signed` ones. A user's ONNX or TFLite file can be added with
the type it stands for (`FILE.onnx:TYPE`, `FILE.tflite:TYPE`, or inferred from
its 8-bit/float inputs and outputs), an ONNX file converted with the
--input-shape and --input-value the user gave; a TFLite model's CPU run is
LiteRT's; an .nnm file is accepted but skipped (no CPU reference runs it).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from mlts.errors import InputError
from mlts.hal import files
from mlts.hal.enums import OperandType

TENSOR_FLOAT32 = OperandType.TENSOR_FLOAT32.name
QUANT8 = OperandType.TENSOR_QUANT8_ASYMM.name
QUANT8_SIGNED = OperandType.TENSOR_QUANT8_ASYMM_SIGNED.name

#: The zoo models measured when no regex narrows them, with the type each stands for.
DEFAULT_ZOO: tuple[tuple[str, str], ...] = (
    ("mobilenet_v1_1.0_224", TENSOR_FLOAT32),
    ("mobilenet_v2_1.0_224", TENSOR_FLOAT32),
    ("asr_float", TENSOR_FLOAT32),
    ("tts_float", TENSOR_FLOAT32),
    ("mobilenet_v1_1.0_224_quant", QUANT8),
    ("mobilenet_v2_1.0_224_quant", QUANT8),
    ("mobilenet_v1_1.0_224_quant_signed", QUANT8_SIGNED),
    ("mobilenet_v2_1.0_224_quant_signed", QUANT8_SIGNED),
)

#: The control-flow workloads, by name (mlts.calibrate.control_flow).
CONTROL_FLOW_WORKLOADS = ("if_select", "while_refine")

#: Types whose numbers come from another type's workloads too: the scalar FLOAT32 from TENSOR_FLOAT32's.
SHARED_TYPES: dict[str, tuple[str, ...]] = {TENSOR_FLOAT32: (OperandType.FLOAT32.name,)}

#: Operand types a workload may be declared for (the HAL's types, without OEM and SUBGRAPH).
DECLARABLE_TYPES: tuple[str, ...] = tuple(
    t.name
    for t in OperandType
    if t not in (OperandType.OEM, OperandType.TENSOR_OEM_BYTE, OperandType.SUBGRAPH)
)

#: ONNX element type of every input and output -> the operand type a model of them stands for.
_INFERRED = {
    onnx.TensorProto.FLOAT: TENSOR_FLOAT32,
    onnx.TensorProto.UINT8: QUANT8,
    onnx.TensorProto.INT8: QUANT8_SIGNED,
    onnx.TensorProto.FLOAT16: OperandType.TENSOR_FLOAT16.name,
}


# TFLite TensorType -> the operand type a workload of that element type measures.
_TFLITE_INFERRED = {0: TENSOR_FLOAT32, 3: QUANT8, 9: QUANT8_SIGNED, 1: OperandType.TENSOR_FLOAT16.name}


def _infer_tflite_type(path: Path) -> str:
    from mlts.convert.errors import ConversionError
    from mlts.convert.tflite import load_tflite
    from mlts.convert.tflite.schema import type_name

    try:
        model = load_tflite(path)
    except ConversionError as e:
        raise WorkloadError(f"--model {e}") from None
    sg = model.subgraphs[0]
    codes = {sg.tensors[i].type for i in (*sg.inputs, *sg.outputs)}
    if len(codes) == 1 and next(iter(codes)) in _TFLITE_INFERRED:
        return _TFLITE_INFERRED[next(iter(codes))]
    found = ", ".join(sorted(type_name(c) for c in codes)) or "none"
    raise WorkloadError(
        f"--model {path}: cannot tell which operand type it measures (tensor types: {found}); "
        f"name it, e.g. --model {path}:{TENSOR_FLOAT32}"
    )


class WorkloadError(InputError):
    """A workload selection or a `--model FILE.onnx[:TYPE]` argument that cannot be used."""


@dataclass(frozen=True, slots=True)
class CalibrationWorkload:
    """One model measured for one operand type: a zoo model (`zoo_name`) or an ONNX file (`path`).

    `zero_inputs` names inputs fed zeros on every call (the LSTM state of a per-step model); `user`
    is a user's file's mlts.bench.user_model.UserModel (its input shapes and fixed values).
    """

    name: str
    operand_type: str
    zoo_name: str | None = None
    path: Path | None = None
    zero_inputs: tuple[str, ...] = ()
    user: Any = None

    def __post_init__(self) -> None:
        if (self.zoo_name is None) == (self.path is None):
            raise WorkloadError(f"workload {self.name!r} needs exactly one of a zoo model name and a file")

    @property
    def types(self) -> tuple[str, ...]:
        """Every operand type this workload's ratio counts for (its own first)."""
        return (self.operand_type, *SHARED_TYPES.get(self.operand_type, ()))

    def load(self):
        """The ONNX model (a zoo model is built into the cache on first use), or a TfliteModel for a .tflite file."""
        from mlts.convert import load_model

        if self.path is not None:
            return load_model(self.path)
        from mlts.models import zoo

        return zoo.load(str(self.zoo_name))


def control_flow_workload(name: str) -> CalibrationWorkload:
    """An IF or WHILE workload (mlts.calibrate.control_flow): its ratios are the "if" or "while" entry."""
    from mlts.calibrate.control_flow import CONTROL_FLOW_WORKLOADS, workload_file

    return CalibrationWorkload(name, CONTROL_FLOW_WORKLOADS[name][0], path=workload_file(name))


def zoo_workload(name: str, operand_type: str) -> CalibrationWorkload:
    """The workload of zoo model `name`; a per-step recurrent model gets its state inputs zeroed."""
    from mlts.models import zoo

    entry = zoo.get(name)
    state = tuple(i for i, _, _ in entry.state) if entry.form == "step" else ()
    return CalibrationWorkload(name, operand_type, zoo_name=name, zero_inputs=state)


def default_workloads(regex: str | None = None) -> list[CalibrationWorkload]:
    """The default zoo workloads whose name matches `regex` (re.search; all when None)."""
    try:
        pattern = re.compile(regex or "")
    except re.error as e:
        raise WorkloadError(f"bad --models regex {regex!r}: {e}") from None
    chosen = [zoo_workload(n, t) for n, t in DEFAULT_ZOO if pattern.search(n)]
    chosen += [control_flow_workload(n) for n in CONTROL_FLOW_WORKLOADS if pattern.search(n)]
    if not chosen:
        names = ", ".join([*(n for n, _ in DEFAULT_ZOO), *CONTROL_FLOW_WORKLOADS])
        raise WorkloadError(f"--models {regex!r} matches no calibration workload; they are: {names}")
    return chosen


def parse_model_arguments(arguments: Sequence[str], settings=None) -> list[CalibrationWorkload]:
    """The workloads of `--model` arguments, their inputs resolved with `settings` (mlts.bench.user_model
    .InputSettings: --input-shape, --input-value); a name no file has is a one-line error."""
    from mlts.bench.user_model import InputSettings, UserModelError, resolve_all
    from mlts.convert.formats import is_tflite_source

    settings = settings or InputSettings()
    split = [_split(a) for a in arguments]
    # A TFLite model's inputs are the file's: the input options resolve the ONNX and .nnm files only.
    resolvable = [path for path, _ in split if not is_tflite_source(path)]
    try:
        users = dict(zip(resolvable, (u for u, _ in resolve_all(resolvable, settings)), strict=True))
    except UserModelError as e:
        raise WorkloadError(str(e)) from None
    fixed = frozenset(settings.values)
    return [
        CalibrationWorkload(path.stem, declared or infer_type(path, fixed), path=path, user=users.get(path))
        for path, declared in split
    ]


def parse_model_argument(argument: str, fixed: frozenset[str] = frozenset()) -> CalibrationWorkload:
    """A workload from `FILE.onnx:TYPE` or `FILE.onnx` (type inferred from the file's tensor types, but
    those of the inputs `fixed` by --input-value, which become constants)."""
    path, declared = _split(argument)
    return CalibrationWorkload(path.stem, declared or infer_type(path, fixed), path=path)


def _split(argument: str) -> tuple[Path, str | None]:
    """(the file, the declared operand type or None) of a `FILE[:TYPE]` argument; WorkloadError otherwise."""
    path_text, declared = argument, None
    head, sep, tail = argument.rpartition(":")
    if sep and re.fullmatch(r"[A-Za-z0-9_]+", tail) and not tail.lower().endswith(("onnx", "tflite", "nnm")):
        path_text, declared = head, tail.upper()
    path = Path(path_text)
    if not path.is_file():
        raise WorkloadError(f"--model {argument}: no such file {path_text!r}")
    if declared is not None and declared not in DECLARABLE_TYPES:
        raise WorkloadError(
            f"--model {argument}: unknown operand type {declared!r}; valid: {', '.join(DECLARABLE_TYPES)}"
        )
    return path, declared


def infer_type(path: Path, fixed: frozenset[str] = frozenset()) -> str:
    """The operand type a model file stands for: the one element type all its inputs (but those `fixed`)
    and outputs share."""
    from mlts.convert.formats import is_tflite_source

    if is_tflite_source(path):
        return _infer_tflite_type(path)
    if path.suffix.lower() == ".nnm":
        return _nnm_type(path)
    try:
        data = files.read_bytes(path, what="an ONNX model", limit=files.MAX_ONNX_BYTES)
        graph = onnx.load_from_string(data).graph
    except OSError as e:
        raise WorkloadError(f"--model {e}") from None
    except Exception as e:  # a corrupt file: say so in one line
        raise WorkloadError(f"--model {path}: not a readable ONNX model ({type(e).__name__})") from None
    constants = {t.name for t in graph.initializer} | set(fixed)
    values = [v for v in graph.input if v.name not in constants] + list(graph.output)
    elements = {v.type.tensor_type.elem_type for v in values}
    if len(elements) == 1 and next(iter(elements)) in _INFERRED:
        return _INFERRED[next(iter(elements))]
    found = ", ".join(sorted(onnx.TensorProto.DataType.Name(e) for e in elements)) or "none"
    raise WorkloadError(
        f"--model {path}: cannot tell which operand type it measures (tensor types: {found}); "
        f"name it, e.g. --model {path}:{TENSOR_FLOAT32}"
    )


def _nnm_type(path: Path) -> str:
    """The operand type all the inputs and outputs of an .nnm file share."""
    from mlts.hal import nnfile

    try:
        sub = nnfile.load(path).model.main
    except (nnfile.NnFileError, OSError) as e:
        raise WorkloadError(f"--model {' '.join(str(e).split())}") from None
    types = {OperandType(sub.operands[i].type).name for i in (*sub.input_indexes, *sub.output_indexes)}
    if len(types) == 1:
        return next(iter(types))
    raise WorkloadError(
        f"--model {path}: cannot tell which operand type it measures (operand types: "
        f"{', '.join(sorted(types)) or 'none'}); name it, e.g. --model {path}:{TENSOR_FLOAT32}"
    )
