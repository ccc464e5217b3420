"""One single-call model made ready to benchmark: converted graph, inputs, references, scoring.

Inputs fit the model (`mlts.bench.inputs`): a classifier whose only input is an image (a zoo
model, or a user's model whose first output is one score vector per image) runs on the image set
(float inputs are the preprocessed images, 8-bit inputs the same images quantized with the input's
scale and zero point), with top-k scored against the golden outputs' arg-max or the set's ground
truth. Every other model takes MAX_SYNTHETIC_INPUTS inputs (fewer with --images; a model with
image inputs --images of them when given) of the kinds its inputs are (images, signals, zero state,
token ids, ...), or the user's own from --inputs DIR, and is scored by its errors. Golden outputs come from a float64 copy of the ONNX model run by
`onnx.reference` (for a quantized zoo model: of the float model it was made from, on the float
images); a user's quantized model has none. The user's --input-shape and --input-value go to the
converter, and the references are fed the fixed values too. An .nnm file has neither onnxruntime
nor golden outputs: its drivers are timed, not scored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mlts.bench import evaluators
from mlts.bench.accuracy import (
    QUANT_TOLERANCE_UNITS,
    QUANT_TOLERANCE_UNITS_MOBILENET,
    compare,
    compare_quantized,
)
from mlts.bench.inputs import InputSpec, image_layout, input_kind, make_inputs
from mlts.bench.output_kind import output_kind
from mlts.bench.progress import Progress
from mlts.bench.reference import OnnxRuntimeReference
from mlts.bench.sources import ModelSource, family_of, zoo_entry
from mlts.convert.converter import Conversion, TensorInfo

# Models scored by their errors (not a classifier on the image set): how many inputs by default.
MAX_SYNTHETIC_INPUTS = 16


@dataclass
class Workload:
    name: str
    family: str
    model: object  # the converted NN graph (mlts.hal.types.Model)
    conv: Conversion  # the converter's result (input/output tensor descriptions)
    feeds: list[list[np.ndarray]]  # the driver's inputs per call, in conv.inputs order
    # OnnxRuntimeReference; LiteRtReference for .tflite models (mlts.bench.tflite_workload); None: no
    # model a reference can run (an .nnm file)
    reference: Any
    expected: list[list[np.ndarray]] | None  # the reference's outputs for every feed
    golden: list[np.ndarray] | None  # the float64 reference's first output per feed
    labels: list[int] | None
    label_source: str | None
    dataset: dict
    quantized: bool
    quantization: Callable[[dict], dict] | None = None
    reference_verdict: dict | None = None  # quantized models: is onnxruntime exact for them on this CPU?
    extensions: tuple[str, ...] = ()  # the vendor extensions the converted model uses
    reference_feeds: list[list[np.ndarray]] = field(default_factory=list)  # the reference's inputs per call
    golden_others: list[list[np.ndarray]] | None = None  # the float64 reference's other outputs per feed
    output_kinds: tuple[str, ...] = ()  # what each output is (mlts.bench.output_kind)
    reference_unavailable: str | None = None  # why there is no onnxruntime reference

    @property
    def output_kind(self) -> str | None:
        """What the first output is: which whole-network rule judges the drivers."""
        return self.output_kinds[0] if self.output_kinds else None

    def score(self, outputs: list[list[np.ndarray]], *, against_reference: bool) -> dict:
        """Accuracy per evaluator: top-k against the labels, errors against golden and onnxruntime."""
        first = [np.asarray(o[0]) for o in outputs]
        out_t = self.conv.outputs[0]
        acc: dict = {}
        if self.labels is not None:
            acc["topk"] = evaluators.topk_accuracy(
                [f.reshape(-1) for f in first], self.labels, label_source=self.label_source or "golden"
            )
        if self.golden is not None:
            scale = out_t.scale if self.quantized else None
            zero_point = out_t.zero_point if self.quantized else None
            acc["vs_golden"] = evaluators.golden_error(first, self.golden, scale, zero_point)
            # The golden outputs' magnitude sets the float32 floor of the whole-network verdict.
            acc["vs_golden"]["golden_max_abs"] = _max_abs(self.golden)
            if self.golden_others:
                acc["vs_golden"]["other_outputs"] = self._other_errors(outputs)
        if against_reference and self.expected is not None:
            if self.quantized:
                acc["vs_reference"] = quantized_scores(outputs, self.expected, self.conv, self.name)
                if self.reference_verdict is not None:
                    acc["vs_reference"]["reference_exact"] = self.reference_verdict["exact"]
                    acc["vs_reference"]["reference_note"] = self.reference_verdict["note"]
            else:
                classifier = self.output_kind in (None, "classifier")
                tolerance = self._top1_tolerance() if classifier else None
                acc["vs_reference"] = compare(
                    outputs, self.expected, classifier=classifier, top1_tolerance=tolerance
                )
        return acc

    def _other_errors(self, outputs: list[list[np.ndarray]]) -> dict:
        """Errors of the outputs after the first against their golden outputs, by output name."""
        assert self.golden_others is not None
        errors = {}
        for k, info in enumerate(self.conv.outputs[1:]):
            mine = [np.asarray(o[k + 1]) for o in outputs]
            gold = [g[k] for g in self.golden_others]
            scale = info.scale if self.quantized else None
            errors[info.name] = {
                **evaluators.golden_error(mine, gold, scale, info.zero_point if self.quantized else None),
                "golden_max_abs": _max_abs(gold),
            }
        return errors

    def _top1_tolerance(self) -> float:
        """How far below onnxruntime's best score a driver's class may score and still count as the same
        choice: the verdict's error limit (k x onnxruntime's error against golden + the float32 floor)."""
        from mlts.bench.verdict import error_limit

        assert self.expected is not None
        if self.golden is None:
            return error_limit(0.0, _max_abs([np.asarray(e[0]) for e in self.expected]))
        reference_error = evaluators.golden_error([np.asarray(e[0]) for e in self.expected], self.golden)
        return error_limit(reference_error["max_abs_error"], _max_abs(self.golden))


def _max_abs(arrays) -> float:
    return max((float(np.max(np.abs(a), initial=0.0)) for a in arrays), default=0.0)


def quantized_scores(outputs: list, expected: list, conv, name: str) -> dict:
    """compare_quantized with CTS's tolerance for the model (3 units for MobileNets, else 1)."""
    units = QUANT_TOLERANCE_UNITS_MOBILENET if "mobilenet" in name else QUANT_TOLERANCE_UNITS
    return compare_quantized(outputs, expected, [t.scale for t in conv.outputs], units)


def _image_input(conv) -> tuple[int, int, str, object] | None:
    """(height, width, layout, tensor) of a model whose only input is one RGB image, batch 1."""
    if len(conv.inputs) != 1:
        return None
    t = conv.inputs[0]
    shape = tuple(int(d) for d in t.shape)
    layout = image_layout(shape, np.dtype(t.dtype), t.scale)
    if layout is None or shape[0] != 1:
        return None
    h, w = (shape[2], shape[3]) if layout == "NCHW" else (shape[1], shape[2])
    return h, w, layout, t


def _batch(conv: Conversion) -> int | None:
    """The model's batch: its first input's leading dimension (None without inputs of rank >= 1)."""
    return int(conv.inputs[0].shape[0]) if conv.inputs and len(conv.inputs[0].shape) else None


def _first_kind(conv: Conversion, quantized: bool) -> str:
    t = conv.outputs[0]
    return output_kind(t.shape, t.dtype, quantized, batch=_batch(conv))


def prepare_workload(
    source: ModelSource, loaded, config, imageset, progress: Progress, extensions: Iterable[str] = ()
) -> Workload:
    """`loaded`: the ONNX ModelProto (or, for an .nnm file, its NnFile). `extensions`: the vendor
    extensions the drivers offer, for ONNX ops only an extension provides."""
    from mlts.convert import convert
    from mlts.hal.extensions import extensions_used

    user = source.user
    if user is not None and user.is_nnm:
        return _nnm_workload(source, loaded, config, imageset, progress)
    proto = loaded
    progress.phase(source.name, "-", "convert")
    fixed = {} if user is None else dict(user.values)
    conv = convert(
        proto,
        input_shapes=None if user is None else user.convert_shapes(),
        extensions=extensions,
        input_values=fixed or None,
    )
    quantized = bool(conv.outputs) and all(t.dtype in ("uint8", "int8") for t in conv.outputs)
    classifier = _first_kind(conv, quantized) == "classifier"
    files = None if user is None else user.files
    image = _image_input(conv) if imageset is not None and files is None else None
    progress.phase(source.name, "-", "onnxruntime reference outputs")
    reference = OnnxRuntimeReference(proto.SerializeToString(), config.threads)
    if image is not None and (classifier or zoo_entry(source) is not None):
        feeds, floats = _image_feeds(imageset, *image)
        ref_feeds = _reference_feeds(reference, conv, feeds, user, proto)
        expected = _reference_outputs(reference, ref_feeds, config, progress)
        parts = _image_parts(source, proto, imageset, floats, expected, quantized, progress, fixed)
    else:
        specs = _input_specs(conv, proto, user)
        feeds = _fitted_feeds(specs, conv, user, config, imageset)
        ref_feeds = _reference_feeds(reference, conv, feeds, user, proto)
        expected = _reference_outputs(reference, ref_feeds, config, progress)
        parts = _synthetic_parts(source, proto, reference, ref_feeds, quantized, progress)
        parts["dataset"]["inputs"] = {s.name: input_kind(s) for s in specs}
        if imageset is not None and "image" in parts["dataset"]["inputs"].values():
            parts["dataset"]["name"] = imageset.name
        if files is not None:
            parts["dataset"].update(name="files", folder=str(files.folder))
    verdict = None
    if quantized:
        from mlts.bench.ort_exactness import model_verdict

        verdict = model_verdict(proto)
    return Workload(
        name=source.name,
        family=family_of(source),
        model=conv.model,
        conv=conv,
        feeds=feeds,
        reference=reference,
        expected=expected,
        quantized=quantized,
        reference_verdict=verdict,
        extensions=extensions_used(conv.model),
        reference_feeds=ref_feeds,
        output_kinds=output_kinds_of(conv, expected, quantized),
        **parts,
    )


def output_kinds_of(conv: Conversion, expected, quantized: bool) -> tuple[str, ...]:
    """What each output is, from onnxruntime's outputs on the first input (the converted shapes without)."""
    kinds = []
    for k, t in enumerate(conv.outputs):
        value = np.asarray(expected[0][k]) if expected else None
        shape = value.shape if value is not None else t.shape
        sample = value if not quantized else None
        kinds.append(output_kind(shape, t.dtype, quantized, sample=sample, batch=_batch(conv)))
    return tuple(kinds)


def _input_specs(conv: Conversion, proto, user) -> list[InputSpec]:
    """The converted inputs as the input generator sees them, with what the ONNX graph says of each."""
    from mlts.bench.user_model import graph_inputs

    graph = {i.name: i for i in (user.inputs if user is not None else graph_inputs(proto))}
    specs = []
    for t in conv.inputs:
        g = graph.get(t.name)
        specs.append(
            InputSpec(
                t.name,
                tuple(int(d) for d in t.shape),
                np.dtype(t.dtype),
                t.scale,
                t.zero_point,
                "" if g is None else g.role,
                None if g is None else g.vocab,
            )
        )
    return specs


def _fitted_feeds(specs: list[InputSpec], conv: Conversion, user, config, imageset) -> list[list[np.ndarray]]:
    """Inputs that fit the model: the user's files where given, generated ones (of their kind) elsewhere."""
    files = None if user is None else user.files
    if files is not None:
        count = files.samples
    elif any(input_kind(s) == "image" for s in specs):
        count = config.images or MAX_SYNTHETIC_INPUTS
    else:
        count = min(config.images or MAX_SYNTHETIC_INPUTS, MAX_SYNTHETIC_INPUTS)
    feeds = make_inputs(specs, count, seed=config.seed, imageset=imageset)
    if files is not None:
        for k, feed in enumerate(feeds):
            for j, t in enumerate(conv.inputs):
                value = files.value(t.name, k)
                if value is not None:
                    feed[j] = np.ascontiguousarray(value.astype(t.dtype).reshape(feed[j].shape))
    return feeds


def _reference_feeds(reference, conv: Conversion, feeds, user, proto) -> list[list[np.ndarray]]:
    from mlts.bench.user_model import reference_feeds

    return reference_feeds(proto, reference.input_names, [t.name for t in conv.inputs], feeds, user)


def _reference_outputs(reference: OnnxRuntimeReference, feeds, config, progress: Progress) -> list:
    """onnxruntime's outputs on every feed, from the on-disk cache when this exact run made them before."""
    from mlts.bench.ort_cache import reference_outputs

    outputs, _ = reference_outputs(
        reference.model_bytes, feeds, config.threads, reference.run, progress.log, progress.advance
    )
    return outputs


def _image_feeds(
    imageset, height: int, width: int, layout: str, tensor
) -> tuple[list[list[np.ndarray]], np.ndarray]:
    """One feed per image (quantized with the input's scale and zero point for 8-bit inputs), and the floats."""
    floats = imageset.fitted(height, width, layout)
    if np.dtype(tensor.dtype) == np.float32:
        model_input = floats
    elif height == width and layout == "NCHW":
        model_input = imageset.quantized(height, tensor.scale, tensor.zero_point, np.dtype(tensor.dtype).type)
    else:
        from mlts.datasets.images import quantize_images

        model_input = quantize_images(floats, tensor.scale, tensor.zero_point, np.dtype(tensor.dtype).type)
    return [[np.ascontiguousarray(model_input[i : i + 1])] for i in range(len(model_input))], floats


def _image_parts(
    source, proto, imageset, floats, expected, quantized: bool, progress: Progress, fixed: dict
) -> dict:
    """Golden outputs, labels, dataset description and the float-model figure of an image model
    (`fixed`: the inputs the user fixed, fed to the golden reference with each image)."""
    golden, others, float_name = _image_golden(source, proto, quantized, floats, progress, fixed)
    labels, label_source = _labels(imageset, golden, expected)
    quantization = None
    if float_name is not None:

        def quantization(acc: dict, _float=float_name) -> dict:
            top1 = (acc.get("topk") or {}).get("top1")
            return {"float_model": _float, "top1_agreement_with_float": top1}

    return {
        "golden": golden,
        "golden_others": others,
        "labels": labels,
        "label_source": label_source,
        "dataset": {"name": imageset.name, "size": len(expected), "labels": label_source},
        "quantization": quantization,
    }


def _image_golden(
    source: ModelSource, proto, quantized: bool, floats: np.ndarray, progress: Progress, fixed: dict
) -> tuple[list[np.ndarray] | None, list[list[np.ndarray]] | None, str | None]:
    """Golden first outputs for the images, the other outputs, and the float model's name when they
    come from it (a quantized zoo model: its float model's first output only)."""
    from mlts.datasets.golden import golden_all_outputs

    float_name = None
    golden_proto = proto
    if quantized:
        from mlts.models import zoo

        entry = zoo_entry(source)
        if entry is None or entry.float_name is None:
            return None, None, None  # a user's quantized model: no float64 reference of it
        float_name = entry.float_name
        golden_proto = zoo.load(float_name)
    progress.phase(source.name, "-", f"golden outputs for {len(floats)} images (float64, cached)")
    inits = {t.name for t in golden_proto.graph.initializer}
    names = [i.name for i in golden_proto.graph.input if i.name not in inits and i.name not in fixed]
    label = float_name or source.name
    feeds = [{names[0]: floats[i : i + 1], **fixed} for i in range(len(floats))]
    outs = golden_all_outputs(golden_proto, feeds, label, progress.advance)
    others = [o[1:] for o in outs] if float_name is None and len(outs[0]) > 1 else None
    return [o[0] for o in outs], others, float_name


def _labels(imageset, golden, expected) -> tuple[list[int] | None, str | None]:
    """Ground truth mapped onto the model's classes, else the golden outputs' arg-max."""
    first = np.asarray(expected[0][0])
    if output_kind(first.shape, first.dtype, first.dtype.kind in "iu") != "classifier":
        return None, None
    if imageset.ground_truth is not None:
        return imageset.labels_for(int(first.size // first.shape[0])), "ground_truth"
    if golden is not None:
        return evaluators.golden_labels(golden), "golden"
    return None, None


def _synthetic_parts(source, proto, reference, ref_feeds, quantized: bool, progress: Progress) -> dict:
    """Golden outputs when onnx.reference runs the (float) model; no labels."""
    golden = None
    if not quantized:
        progress.phase(source.name, "-", f"golden outputs for {len(ref_feeds)} inputs (float64, cached)")
        golden = _try_golden(source, proto, reference.input_names, ref_feeds, progress)
    first = None if golden is None else [g[0] for g in golden]
    others = None if golden is None or len(golden[0]) < 2 else [g[1:] for g in golden]
    return {
        "golden": first,
        "golden_others": others,
        "labels": None,
        "label_source": None,
        "dataset": {"name": "synthetic", "size": len(ref_feeds), "labels": None},
    }


def _try_golden(source: ModelSource, proto, names, ref_feeds, progress: Progress) -> list | None:
    """Every float64 reference output per feed, or None when onnx.reference cannot run the model."""
    from mlts.datasets.golden import golden_all_outputs

    try:
        feeds_by_name = [dict(zip(names, f, strict=True)) for f in ref_feeds]
        return golden_all_outputs(proto, feeds_by_name, source.name, progress.advance)
    except Exception as e:  # onnx.reference lacks an operator or dtype: score against onnxruntime only
        progress.log(
            f"{source.name}: no float64 golden reference ({type(e).__name__}: {' '.join(str(e).split())[:200]})"
        )
        return None


def _nnm_workload(source: ModelSource, loaded, config, imageset, progress: Progress) -> Workload:
    """An NN graph file: inputs of the kinds its operands are, no onnxruntime or golden outputs."""
    from mlts.bench.user_model import nnm_inputs
    from mlts.hal.enums import DTYPE_NAME, OperandType
    from mlts.hal.extensions import extensions_used

    model, metadata = loaded.model, loaded.metadata
    inputs = tuple(TensorInfo(n, s, d, sc, zp) for n, s, d, sc, zp in nnm_inputs(model, metadata))
    sub = model.main
    listed = [p.rsplit(":", 2)[0] for p in (metadata.get("outputs") or "").split(",") if p.count(":") >= 2]
    names = (
        listed
        if len(listed) == len(sub.output_indexes)
        else [f"output{k}" for k in range(len(sub.output_indexes))]
    )
    outputs = []
    for name, i in zip(names, sub.output_indexes, strict=True):
        op = sub.operands[i]
        outputs.append(
            TensorInfo(name, tuple(op.dimensions), DTYPE_NAME[OperandType(op.type)], op.scale, op.zero_point)
        )
    conv = Conversion(model, inputs, tuple(outputs), 0)
    specs = [InputSpec(t.name, tuple(t.shape), np.dtype(t.dtype), t.scale, t.zero_point) for t in inputs]
    feeds = _fitted_feeds(specs, conv, source.user, config, imageset)
    quantized = bool(outputs) and all(t.dtype in ("uint8", "int8") for t in outputs)
    dataset = {"name": "synthetic", "size": len(feeds), "labels": None}
    dataset["inputs"] = {s.name: input_kind(s) for s in specs}
    if source.user is not None and source.user.files is not None:
        dataset.update(name="files", folder=str(source.user.files.folder))
    return Workload(
        name=source.name,
        family=family_of(source),
        model=model,
        conv=conv,
        feeds=feeds,
        reference=None,
        expected=None,
        golden=None,
        labels=None,
        label_source=None,
        dataset=dataset,
        quantized=quantized,
        extensions=extensions_used(model),
        output_kinds=tuple(output_kind(t.shape, t.dtype, quantized, batch=_batch(conv)) for t in outputs),
        reference_unavailable=(
            f"{source.path.name if source.path else source.name} is an NN graph file (.nnm): onnxruntime and the "
            "float64 golden reference run ONNX models, so its drivers are timed but their outputs are not "
            "scored (benchmark the ONNX file it was converted from for accuracy)"
        ),
    )
