"""A .tflite model made ready to benchmark: converted as TFLite's NNAPI delegate would, with LiteRT as reference.

Inputs: a single NHWC RGB square image input ([1, r, r, 3]) runs on the image set: float32 inputs
get MLTS's Inception preprocessing (values in [-1, 1]); 8-bit inputs get the image's bytes (uint8
0..255, int8 as byte - 128), as TFLite's image models take them (for MLTS's quantized MobileNets,
scale 1/128 and zero point 128, that is the same as quantizing the Inception values). Other models
get seeded inputs; state inputs (variable tensors) start at zero. The reference is LiteRT on the same
inputs (mlts.bench.litert_reference); with `--reference both` and the same model given as ONNX too,
onnxruntime on that twin is a second reference row. A TFLite model has no float64 golden model:
top-k is scored against the image set's ground truth when it has one; agreement with the reference's
top-1 is always reported (accuracy.vs_reference.top1_agreement).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from mlts.bench.inputs import make_inputs
from mlts.bench.progress import Progress
from mlts.bench.sources import ModelSource, family_of
from mlts.bench.workload import MAX_SYNTHETIC_INPUTS, Workload, output_kinds_of
from mlts.errors import InputError


def nhwc_image_input(conv) -> tuple[int, object] | None:
    """(resolution, tensor) of a model whose only input is one NHWC RGB square image, batch 1."""
    model_inputs = list(conv.inputs)
    if len(model_inputs) != 1:
        return None
    t = model_inputs[0]
    shape = tuple(int(d) for d in t.shape)
    dtype = np.dtype(t.dtype)
    if len(shape) != 4 or shape[0] != 1 or shape[3] != 3 or shape[1] != shape[2]:
        return None
    if dtype not in (np.dtype(np.float32), np.dtype(np.uint8), np.dtype(np.int8)):
        return None
    return shape[1], t


def image_feeds(imageset, resolution: int, tensor) -> list[list[np.ndarray]]:
    """One NHWC feed per image: Inception floats, or the image bytes for 8-bit inputs."""
    floats = imageset.batch(resolution, "NHWC")
    dtype = np.dtype(tensor.dtype)
    if dtype == np.float32:
        batch = floats
    else:
        pixels = np.clip(np.rint((floats.astype(np.float64) + 1.0) * 127.5), 0, 255)
        batch = (pixels - (128 if dtype == np.int8 else 0)).astype(dtype)
    return [[np.ascontiguousarray(batch[i : i + 1])] for i in range(len(batch))]


def synthetic_feeds(conv, plan, config) -> list[list[np.ndarray]]:
    """Seeded inputs; the state inputs (after the model's own) are zeros."""
    specs = [(t.shape, t.dtype, t.scale, t.zero_point) for t in conv.inputs]
    count = min(config.images or MAX_SYNTHETIC_INPUTS, MAX_SYNTHETIC_INPUTS)
    feeds = make_inputs(specs, count, seed=config.seed)
    for feed in feeds:
        for k in range(len(feed) - plan.state_inputs, len(feed)):
            feed[k] = np.zeros_like(feed[k])
    return feeds


def prepare_tflite_workload(
    source: ModelSource,
    model,
    config,
    imageset,
    progress: Progress,
    extensions: Iterable[str] = (),
) -> Workload:
    """The Workload of TFLite model `model` (a TfliteModel) on the image set or seeded inputs."""
    from mlts.bench.litert_reference import LiteRtReference
    from mlts.convert.tflite import convert_tflite_plan
    from mlts.hal.extensions import extensions_used

    progress.phase(source.name, "-", "convert (TFLite)")
    conv, plan = convert_tflite_plan(
        model, extensions=extensions, input_shapes=dict(source.input_shapes) or None
    )
    quantized = bool(conv.outputs) and all(t.dtype in ("uint8", "int8") for t in conv.outputs)
    progress.phase(source.name, "-", "LiteRT reference outputs")
    reference = LiteRtReference(model.data, config.threads, plan)
    image = nhwc_image_input(conv) if imageset is not None else None
    if image is None:
        feeds = synthetic_feeds(conv, plan, config)
        dataset = {"name": "synthetic", "size": len(feeds), "labels": None}
    else:
        feeds = image_feeds(imageset, *image)
        dataset = {"name": imageset.name, "size": len(feeds)}
    expected = [reference.run(f) for f in feeds]
    labels, label_source = _labels(imageset if image is not None else None, expected)
    if image is not None:
        dataset["labels"] = label_source
    return Workload(
        name=source.name,
        family=family_of(source),
        model=conv.model,
        conv=conv,
        feeds=feeds,
        reference=reference,
        expected=expected,
        golden=None,
        labels=labels,
        label_source=label_source,
        dataset=dataset,
        quantized=quantized,
        extensions=extensions_used(conv.model),
        reference_feeds=feeds,  # LiteRT takes the driver's inputs as they are
        output_kinds=output_kinds_of(conv, expected, quantized),
    )


def _labels(imageset, expected) -> tuple[list[int] | None, str | None]:
    """Ground truth mapped onto the classes of a [1, classes] first output; None without ground truth.

    A TFLite model has no float64 golden model to take labels from; agreement with the reference's
    top-1 is scored anyway (accuracy.vs_reference.top1_agreement).
    """
    if imageset is None or imageset.ground_truth is None:
        return None, None
    first = np.asarray(expected[0][0])
    if first.ndim != 2 or first.shape[0] != 1 or first.shape[1] < 2:
        return None, None
    return imageset.labels_for(int(first.shape[1])), "ground_truth"


def require_litert() -> None:
    """InputError when LiteRT is not installed (checked before any driver starts)."""
    from mlts.bench.litert_reference import LiteRtUnavailable, available

    if not available():
        raise LiteRtUnavailable(
            "a .tflite model needs the LiteRT reference (package ai-edge-litert): pip install 'mlts[tflite]'"
        )


class ReferenceChoiceError(InputError):
    """--reference names a reference a model cannot have."""
