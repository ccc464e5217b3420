"""One image (or other single-call) model made ready to benchmark: converted graph, inputs, references, scoring.

Image models (one NCHW RGB input) run on the image set: float inputs are the
Inception-preprocessed images, 8-bit inputs the same images quantized with
the input's scale and zero point. Golden outputs come from a float64 copy of
the model run by `onnx.reference` (for a quantized zoo model: of the float
model it was made from, on the float images), and their arg-max gives the
labels top-k is scored against unless the image set has ground truth. Other
models get seeded non-zero inputs and are scored against onnxruntime (and
against the float64 reference when it can run them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from mlts.bench import evaluators
from mlts.bench.accuracy import (
    QUANT_TOLERANCE_UNITS,
    QUANT_TOLERANCE_UNITS_MOBILENET,
    compare,
    compare_quantized,
)
from mlts.bench.inputs import make_inputs
from mlts.bench.progress import Progress
from mlts.bench.reference import OnnxRuntimeReference
from mlts.bench.sources import ModelSource, family_of, zoo_entry
from mlts.convert.converter import Conversion

# Non-image models: how many distinct seeded inputs at most.
MAX_SYNTHETIC_INPUTS = 16


@dataclass
class Workload:
    name: str
    family: str
    model: object  # the converted NN graph (mlts.hal.types.Model)
    conv: Conversion  # the converter's result (input/output tensor descriptions)
    feeds: list[list[np.ndarray]]
    reference: Any  # OnnxRuntimeReference; LiteRtReference for .tflite models (mlts.bench.tflite_workload)
    expected: list[list[np.ndarray]]  # onnxruntime's outputs for every feed
    golden: list[np.ndarray] | None  # the float64 reference's first output per feed
    labels: list[int] | None
    label_source: str | None
    dataset: dict
    quantized: bool
    quantization: Callable[[dict], dict] | None = None
    reference_verdict: dict | None = None  # quantized models: is onnxruntime exact for them on this CPU?
    extensions: tuple[str, ...] = ()  # the vendor extensions the converted model uses

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
            acc["vs_golden"]["golden_max_abs"] = max(
                float(np.max(np.abs(g), initial=0.0)) for g in self.golden
            )
        if against_reference:
            if self.quantized:
                acc["vs_reference"] = quantized_scores(outputs, self.expected, self.conv, self.name)
                if self.reference_verdict is not None:
                    acc["vs_reference"]["reference_exact"] = self.reference_verdict["exact"]
                    acc["vs_reference"]["reference_note"] = self.reference_verdict["note"]
            else:
                acc["vs_reference"] = compare(outputs, self.expected)
        return acc


def quantized_scores(outputs: list, expected: list, conv, name: str) -> dict:
    """compare_quantized with CTS's tolerance for the model (3 units for MobileNets, else 1)."""
    units = QUANT_TOLERANCE_UNITS_MOBILENET if "mobilenet" in name else QUANT_TOLERANCE_UNITS
    return compare_quantized(outputs, expected, [t.scale for t in conv.outputs], units)


def _image_input(conv) -> tuple[int, object] | None:
    """(resolution, tensor) of a model whose only input is one NCHW RGB square image, batch 1."""
    from mlts.bench.inputs import _is_image

    if len(conv.inputs) != 1:
        return None
    t = conv.inputs[0]
    shape = tuple(int(d) for d in t.shape)
    if not _is_image(shape, np.dtype(t.dtype), t.scale) or shape[0] != 1:
        return None
    return shape[2], t


def prepare_workload(
    source: ModelSource, proto, config, imageset, progress: Progress, extensions: Iterable[str] = ()
) -> Workload:
    """`extensions`: the vendor extensions the drivers offer, for ONNX ops only an extension provides."""
    from mlts.convert import convert
    from mlts.hal.extensions import extensions_used

    progress.phase(source.name, "-", "convert")
    conv = convert(proto, extensions=extensions)
    quantized = bool(conv.outputs) and all(t.dtype in ("uint8", "int8") for t in conv.outputs)
    image = _image_input(conv) if imageset is not None else None
    progress.phase(source.name, "-", "onnxruntime reference outputs")
    reference = OnnxRuntimeReference(proto.SerializeToString(), config.threads)
    if image is None:
        feeds = _synthetic_feeds(conv, config)
        expected = _reference_outputs(reference, feeds, config, progress)
        parts = _synthetic_parts(source, proto, feeds, quantized, progress)
    else:
        feeds, floats = _image_feeds(imageset, *image)
        expected = _reference_outputs(reference, feeds, config, progress)
        parts = _image_parts(source, proto, imageset, floats, expected, quantized, progress)
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
        **parts,
    )


def _reference_outputs(reference: OnnxRuntimeReference, feeds, config, progress: Progress) -> list:
    """onnxruntime's outputs on every feed, from the on-disk cache when this exact run made them before."""
    from mlts.bench.ort_cache import reference_outputs

    outputs, _ = reference_outputs(reference.model_bytes, feeds, config.threads, reference.run, progress.log)
    return outputs


def _image_feeds(imageset, resolution: int, tensor) -> tuple[list[list[np.ndarray]], np.ndarray]:
    """One feed per image (quantized with the input's scale and zero point for 8-bit inputs), and the floats."""
    floats = imageset.batch(resolution, "NCHW")
    if np.dtype(tensor.dtype) == np.float32:
        model_input = floats
    else:
        model_input = imageset.quantized(
            resolution, tensor.scale, tensor.zero_point, np.dtype(tensor.dtype).type
        )
    return [[np.ascontiguousarray(model_input[i : i + 1])] for i in range(len(model_input))], floats


def _image_parts(source, proto, imageset, floats, expected, quantized: bool, progress: Progress) -> dict:
    """Golden outputs, labels, dataset description and the float-model figure of an image model."""
    golden, float_name = _image_golden(source, proto, quantized, floats, progress)
    labels, label_source = _labels(imageset, golden, expected)
    quantization = None
    if float_name is not None:

        def quantization(acc: dict, _float=float_name) -> dict:
            top1 = (acc.get("topk") or {}).get("top1")
            return {"float_model": _float, "top1_agreement_with_float": top1}

    return {
        "golden": golden,
        "labels": labels,
        "label_source": label_source,
        "dataset": {"name": imageset.name, "size": len(expected), "labels": label_source},
        "quantization": quantization,
    }


def _image_golden(
    source: ModelSource, proto, quantized: bool, floats: np.ndarray, progress: Progress
) -> tuple[list[np.ndarray] | None, str | None]:
    """Golden first outputs for the images, and the float model's name when they come from it."""
    from mlts.datasets.golden import golden_outputs

    float_name = None
    golden_proto = proto
    if quantized:
        from mlts.models import zoo

        entry = zoo_entry(source)
        if entry is None or entry.float_name is None:
            return None, None  # a user's quantized model: no float64 reference of it
        float_name = entry.float_name
        golden_proto = zoo.load(float_name)
    progress.phase(source.name, "-", f"golden outputs for {len(floats)} images (float64, cached)")
    input_name = golden_proto.graph.input[0].name
    label = float_name or source.name
    golden = golden_outputs(
        golden_proto, [{input_name: floats[i : i + 1]} for i in range(len(floats))], label, progress.advance
    )
    return golden, float_name


def _labels(imageset, golden, expected) -> tuple[list[int] | None, str | None]:
    """Ground truth mapped onto the model's classes, else the golden outputs' arg-max."""
    if imageset.ground_truth is not None and np.asarray(expected[0][0]).ndim == 2:
        classes = int(np.asarray(expected[0][0]).shape[-1])
        return imageset.labels_for(classes), "ground_truth"
    shape = np.asarray(golden[0]).shape if golden is not None else ()
    if len(shape) == 2 and shape[0] == 1 and shape[1] > 1:  # a [1, classes] score vector
        return evaluators.golden_labels(golden), "golden"
    return None, None


def _synthetic_feeds(conv, config) -> list[list[np.ndarray]]:
    """Seeded non-zero inputs for a model without a single image input."""
    specs = [(t.shape, t.dtype, t.scale, t.zero_point) for t in conv.inputs]
    count = min(config.images or MAX_SYNTHETIC_INPUTS, MAX_SYNTHETIC_INPUTS)
    return make_inputs(specs, count, seed=config.seed)


def _synthetic_parts(source, proto, feeds, quantized: bool, progress: Progress) -> dict:
    """Golden outputs when onnx.reference runs the (float) model; no labels."""
    golden = None
    if not quantized:
        progress.phase(source.name, "-", "golden outputs (float64, cached)")
        golden = _try_golden(source, proto, feeds, progress)
    return {
        "golden": golden,
        "labels": None,
        "label_source": None,
        "dataset": {"name": "synthetic", "size": len(feeds), "labels": None},
    }


def _try_golden(source: ModelSource, proto, feeds, progress: Progress) -> list[np.ndarray] | None:
    """The float64 reference's first outputs, or None when onnx.reference cannot run the model."""
    from mlts.datasets.golden import golden_outputs

    names = [i.name for i in proto.graph.input if i.name not in {t.name for t in proto.graph.initializer}]
    try:
        feeds_by_name = [dict(zip(names, f, strict=True)) for f in feeds]
        return golden_outputs(proto, feeds_by_name, source.name, progress.advance)
    except Exception:  # onnx.reference lacks an operator or dtype: score against onnxruntime only
        return None
