"""What a model output is, from its shape and type: which whole-network accuracy rule can judge it.

Top-1 rules mean something only for a classifier: one probability or logit vector per input. An
output is classifier-shaped when, beside its leading batch dimension, exactly one dimension is
larger than 1 and has at least 2 entries ([N, C], [N, C, 1, 1], or a plain [C] vector). Everything
else is judged by its error against the float64 reference alone:

- dense-map: 4-D or more with two spatial dimensions larger than 1 (segmentation, depth, heat and
  probability maps, feature maps);
- boxes: rows whose last dimension holds 4 to 7 values (box coordinates, with score and class);
- embedding: a classifier-shaped output whose vectors have unit length (checked on the reference's
  values, when given);
- regression: one value per input;
- tensor: any other float output of two or more dimensions (sequences of vectors, ...);
- integers: integer or boolean outputs that are not quantized (labels, indexes, counts).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

KINDS = ("classifier", "dense-map", "boxes", "embedding", "regression", "tensor", "integers")
BOX_WIDTHS = range(4, 8)


def output_kind(
    shape: Sequence[int],
    dtype,
    quantized: bool = False,
    sample: np.ndarray | None = None,
    batch: int | None = None,
) -> str:
    """The kind of an output of `shape` and `dtype` (see the module doc); `sample` is one of its values
    (the reference's) to tell a unit-length embedding from a classifier's scores; `batch` is the
    model's batch (its first input's leading dimension): an output whose leading dimension differs
    has no batch dimension ([300, 4] boxes of a batch of 1). None: the leading dimension is the batch."""
    shape = tuple(int(d) for d in shape)
    if np.dtype(dtype).kind in "biu" and not quantized:
        return "integers"
    batched = len(shape) >= 2 and (batch is None or shape[0] == batch)
    per_input = shape[1:] if batched else shape
    large = [d for d in per_input if d > 1]
    if not large:
        return "regression"
    if len(large) == 1:
        if sample is not None and _unit_rows(np.asarray(sample, np.float64), large[0]):
            return "embedding"
        return "classifier"
    if len(shape) >= 4 and shape[-1] > 1 and shape[-2] > 1:
        return "dense-map"
    if shape[-1] in BOX_WIDTHS:
        return "boxes"
    return "tensor"


def _unit_rows(values: np.ndarray, width: int) -> bool:
    """Whether every vector of `width` values has Euclidean length 1 (within float32 rounding)."""
    if values.size % width or values.size == 0:
        return False
    norms = np.linalg.norm(values.reshape(-1, width), axis=1)
    return bool(np.all(np.abs(norms - 1.0) < 1e-4))


def rule_name(kind: str | None, quantized: bool) -> str:
    """The name of the verdict rule for a first output of `kind` (None: the LSTM rows, judged per output)."""
    if quantized:
        return "quant8-rms"
    if kind is None:
        return "per-output-error"
    return "classifier-top1" if kind == "classifier" else f"{kind}-error"
