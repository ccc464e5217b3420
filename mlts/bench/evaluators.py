"""Accuracy evaluators of the image classification benchmark: top-k, golden error, MLTS's validation rule.

Pure functions on NumPy arrays, one entry per image. MLTS's TopK evaluator
reports the cumulative share of images whose label is among the 5 highest
scores (top_1..top_5) and flags a validation error when top-1 falls below the
expected top-1 minus 0.05 (VALIDATION_TOP1_THRESHOLD). MLTS takes the expected
top-1 from its model list; here it is the reference backend's measured top-1.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mlts.records.benchmark import violation

TOP_K = 5
VALIDATION_TOLERANCE = 0.05
"""MLTS's VALIDATION_TOP1_THRESHOLD: top-1 may be at most this far below the reference's."""
_SLACK = 1e-9
"""Absorbs binary rounding of shares (0.81 - 0.05 is 0.7600000000000001, 76/100 is 0.76)."""


def _score_matrix(scores: Sequence[np.ndarray]) -> np.ndarray:
    """[N, C] scores: int64 when every array is integer (8-bit outputs), else float64."""
    arrays = [np.asarray(s).ravel() for s in scores]
    sizes = {a.size for a in arrays}
    if len(sizes) != 1:
        raise ValueError(f"score arrays have different sizes {sorted(sizes)}; expected one score per class")
    integer = all(np.issubdtype(a.dtype, np.integer) for a in arrays)
    return np.stack(arrays).astype(np.int64 if integer else np.float64)


def topk_accuracy(
    scores: Sequence[np.ndarray], labels: Sequence[int], k_max: int = TOP_K, label_source: str = "golden"
) -> dict:
    """Cumulative top-1..top-k_max accuracy: {"labels", "n", "top1", ..., "top<k_max>"}.

    Ties are broken uniformly at random, in expectation: with g classes scoring
    strictly higher than image i's label and t other classes scoring the same,
    the label's place is equally likely to be any of g+1 .. g+t+1, so image i
    adds min(1, max(0, (k - g) / (t + 1))) to top-k. (MLTS breaks ties in its
    priority queue's order, i.e. arbitrarily; this is that rule's expected
    value, so 8-bit outputs with saturated scores are neither favoured nor
    punished.) 8-bit scores are compared as integers. A NaN score ranks above
    every number, and an image whose label's score is NaN is never counted.
    With no images the shares are None.
    """
    if k_max < 1:
        raise ValueError(f"k_max {k_max} is invalid; expected an integer >= 1")
    if len(scores) != len(labels):
        raise ValueError(f"{len(scores)} score arrays but {len(labels)} labels; expected one label per image")
    result: dict = {"labels": label_source, "n": len(labels)}
    if not len(labels):
        return result | {f"top{k}": None for k in range(1, k_max + 1)}
    s = _score_matrix(scores)
    y = np.asarray(labels, dtype=np.int64)
    classes = s.shape[1]
    if y.min() < 0 or y.max() >= classes:
        bad = int(y[(y < 0) | (y >= classes)][0])
        raise ValueError(f"label {bad} is out of range; the scores have classes 0..{classes - 1}")
    own = s[np.arange(len(y)), y]
    greater = s > own[:, None]
    if s.dtype == np.float64:
        greater |= np.isnan(s)
    above = np.sum(greater, axis=1).astype(np.float64)
    tied = np.sum(s == own[:, None], axis=1) - 1  # other classes with exactly the label's score
    if s.dtype == np.float64:
        above[np.isnan(own)] = np.inf  # never in the top k
    for k in range(1, k_max + 1):
        result[f"top{k}"] = float(np.mean(np.clip((k - above) / (tied + 1), 0.0, 1.0)))
    return result


def golden_labels(golden: Sequence[np.ndarray]) -> list[int]:
    """argmax of each float64 golden output (the first index among equal maxima)."""
    out = []
    for i, g in enumerate(golden):
        a = np.asarray(g, dtype=np.float64).ravel()
        if a.size == 0 or not np.isfinite(a).all():
            raise ValueError(f"golden output {i} is empty or not finite; it cannot give a label")
        out.append(int(np.argmax(a)))
    return out


def golden_error(
    outputs: Sequence[np.ndarray],
    golden: Sequence[np.ndarray],
    scale: float | None = None,
    zero_point: int | None = None,
) -> dict[str, float]:
    """{"mse", "max_abs_error"} of `outputs` against the float64 golden outputs, over every element.

    Integer (8-bit) outputs are first dequantized: (q - zero_point) * scale
    (zero_point defaults to 0). All arithmetic is float64; mse = mean((o - g)^2),
    max_abs_error = max |o - g| (absolute, not MLTS's signed maximum).
    """
    if len(outputs) != len(golden):
        raise ValueError(f"{len(outputs)} outputs but {len(golden)} golden outputs; expected one per image")
    if not len(outputs):
        raise ValueError("no outputs to compare with the golden outputs")
    diffs = []
    for i, (o, g) in enumerate(zip(outputs, golden, strict=True)):
        real = _dequantize(np.asarray(o), scale, zero_point).ravel()
        ref = np.asarray(g, dtype=np.float64).ravel()
        if real.size != ref.size:
            raise ValueError(f"output {i} has {real.size} values but its golden output has {ref.size}")
        diffs.append(real - ref)
    d = np.concatenate(diffs)
    if d.size == 0:
        return {"mse": 0.0, "max_abs_error": 0.0}
    return {"mse": float(np.mean(d * d)), "max_abs_error": float(np.max(np.abs(d)))}


def _dequantize(a: np.ndarray, scale: float | None, zero_point: int | None) -> np.ndarray:
    """float64 real values of `a`: as is for floats and plain integers (TENSOR_INT32, bool: no
    quantization scale), (q - zero_point) * scale for quantized integers."""
    if not np.issubdtype(a.dtype, np.integer) or not scale:
        return a.astype(np.float64)
    if not scale > 0:
        raise ValueError(f"quantized outputs need a quantization scale > 0; got {scale!r}")
    return (a.astype(np.float64) - float(zero_point or 0)) * float(scale)


def validation_errors(backend: dict, reference: dict, tolerance: float = VALIDATION_TOLERANCE) -> list[dict]:
    """MLTS's rule: one error when the backend's top-1 is more than `tolerance` below the reference's.

    The comparison is reference_top1 - backend_top1 > tolerance (with 1e-9 of
    slack for binary rounding), so a backend exactly `tolerance` below passes.
    Nothing is reported when either side has no top-1.
    """
    top1, ref = backend.get("top1"), reference.get("top1")
    if top1 is None or ref is None:
        return []
    if ref - top1 > tolerance + _SLACK:
        message = (
            f"top-1 accuracy {top1:.3f} is more than {tolerance:g} below the reference's {ref:.3f} "
            "(MLTS validation rule)"
        )
        # metric: how far below the reference the backend's top-1 is; limit: the rule's tolerance.
        return [violation(message, "top1_below_reference", ref - top1, tolerance)]
    return []
