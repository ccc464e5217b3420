"""Which CPU reference each model runs on: `--reference auto|litert|onnxruntime|both`.

auto (the default): the model's own framework, LiteRT for a .tflite file and onnxruntime for ONNX
files and zoo models. litert / onnxruntime: that one, for every model; a model in the other
format cannot have it (a .tflite file has no ONNX graph for onnxruntime, LiteRT runs no ONNX) and
is refused in one line before any driver starts. both: LiteRT and onnxruntime on every model, which
needs each model in both formats: `--model net.tflite --model net.onnx` (same file name) is one
model, converted from its .tflite file, with onnxruntime on the ONNX twin as a second reference
row; its inputs and outputs are moved between NHWC and NCHW where the twin's shapes are the
transposed ones.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from mlts.bench.sources import ModelSource
from mlts.errors import InputError

CHOICES = ("auto", "litert", "onnxruntime", "both")


class ReferenceChoiceError(InputError):
    """--reference names a reference a model cannot have."""


def framework_of(source: ModelSource) -> str:
    """ "litert" for a .tflite file, "onnxruntime" for an ONNX file or a zoo model."""
    if source.path is None:
        return "onnxruntime"
    from mlts.convert.formats import is_tflite_source

    return "litert" if is_tflite_source(source.path) else "onnxruntime"


def reference_label(source: ModelSource) -> str:
    return "cpu:litert" if framework_of(source) == "litert" else "cpu:onnxruntime"


def resolve(sources: list[ModelSource], choice: str) -> list[ModelSource]:
    """`sources` checked against `choice`; with "both", each TFLite/ONNX pair of one name joined into one."""
    if choice not in CHOICES:
        raise ReferenceChoiceError(f"--reference {choice!r}: choose one of {', '.join(CHOICES)}")
    if choice == "both":
        return _pairs(sources)
    for s in sources:
        own = framework_of(s)
        if choice != "auto" and own != choice:
            where = str(s.path) if s.path is not None else f"zoo model {s.name}"
            if own == "litert":
                reason = "it is a TFLite model: it has no ONNX graph for onnxruntime to run (use --reference litert)"
            else:
                reason = "it is an ONNX model: LiteRT runs TFLite models only (use --reference onnxruntime)"
            raise ReferenceChoiceError(f"--reference {choice}: model {where}: {reason}")
    return sources


def _pairs(sources: list[ModelSource]) -> list[ModelSource]:
    by_stem: dict[str, list[ModelSource]] = {}
    for s in sources:
        if s.path is None:
            raise ReferenceChoiceError(
                f"--reference both: zoo model {s.name} exists only as ONNX; both references need the same "
                "model as .tflite and .onnx (--model NAME.tflite --model NAME.onnx)"
            )
        by_stem.setdefault(s.path.stem, []).append(s)
    out = []
    for stem, group in by_stem.items():
        kinds = {framework_of(s): s for s in group}
        if len(group) != 2 or set(kinds) != {"litert", "onnxruntime"}:
            files = ", ".join(str(s.path) for s in group)
            raise ReferenceChoiceError(
                f"--reference both: model {stem} is given as {files}; both references need it once as .tflite "
                f"and once as ONNX (--model {stem}.tflite --model {stem}.onnx)"
            )
        out.append(replace(kinds["litert"], twin=kinds["onnxruntime"].path))
    return out


def reference_for_model(model, threads: int):
    """The CPU reference of a loaded model: LiteRT for a TfliteModel, onnxruntime for an ONNX ModelProto."""
    from mlts.convert.tflite import TfliteModel

    if isinstance(model, TfliteModel):
        from mlts.bench.litert_reference import LiteRtReference
        from mlts.convert.tflite import convert_tflite_plan

        _, plan = convert_tflite_plan(model)
        return LiteRtReference(model.data, threads, plan)
    from mlts.bench.reference import OnnxRuntimeReference

    return OnnxRuntimeReference(model.SerializeToString(), threads)


class TwinReference:
    """onnxruntime on a model's ONNX twin, fed the TFLite model's inputs (NHWC moved to NCHW where needed)."""

    backend = "cpu:onnxruntime"
    framework = "onnxruntime"

    def __init__(self, onnx_bytes: bytes, threads: int, conv) -> None:
        from mlts.bench.reference import OnnxRuntimeReference

        self.inner = OnnxRuntimeReference(onnx_bytes, threads)
        self.model_bytes = onnx_bytes
        session = self.inner.session
        ins = [tuple(i.shape) for i in session.get_inputs()]
        outs = [tuple(o.shape) for o in session.get_outputs()]
        if len(ins) != len(conv.inputs) or len(outs) != len(conv.outputs):
            raise ReferenceChoiceError(
                f"--reference both: the ONNX twin has {len(ins)} inputs and {len(outs)} outputs, the TFLite model "
                f"{len(conv.inputs)} and {len(conv.outputs)}"
            )
        self.in_perm = [_perm(t.shape, s, "input", t.name) for t, s in zip(conv.inputs, ins, strict=True)]
        self.out_perm = [_perm(t.shape, s, "output", t.name) for t, s in zip(conv.outputs, outs, strict=True)]

    def run(self, inputs) -> list[np.ndarray]:
        feeds = [
            np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if p else x
            for x, p in zip(inputs, self.in_perm, strict=True)
        ]
        outs = self.inner.run(feeds)
        return [
            np.ascontiguousarray(np.asarray(y).transpose(0, 2, 3, 1)) if p else np.asarray(y)
            for y, p in zip(outs, self.out_perm, strict=True)
        ]


def _perm(nhwc: tuple[int, ...], onnx_shape: tuple, what: str, name: str) -> bool:
    """Whether the twin holds this tensor NCHW (True) or as the TFLite model does (False)."""
    dims = tuple(d if isinstance(d, int) else None for d in onnx_shape)

    def fits(shape: tuple[int, ...]) -> bool:
        return len(shape) == len(dims) and all(d is None or d == s for d, s in zip(dims, shape, strict=True))

    if fits(tuple(nhwc)):
        return False
    if len(nhwc) == 4 and fits((nhwc[0], nhwc[3], nhwc[1], nhwc[2])):
        return True
    raise ReferenceChoiceError(
        f"--reference both: the ONNX twin's {what} {list(onnx_shape)} is neither the TFLite {what} '{name}' "
        f"{list(nhwc)} nor its NCHW transpose"
    )
