"""Accuracy of a backend's outputs against a reference's on the same inputs."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# CTS/VTS precision for TENSOR_FLOAT32: |actual - expected| <= atol + rtol * |expected|.
FP32_ATOL = 1e-5
FP32_RTOL = 5.0 * 2.0**-23


def tolerance_ratio(
    actual: np.ndarray, expected: np.ndarray, atol: float = FP32_ATOL, rtol: float = FP32_RTOL
) -> float:
    """max |a - e| / (atol + rtol * |e|): at most 1 passes; 3 means three times the allowed error."""
    if actual.size == 0:
        return 0.0
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    return float(np.max(np.abs(a - e) / (atol + rtol * np.abs(e))))


def within_tolerance(
    actual: np.ndarray, expected: np.ndarray, atol: float = FP32_ATOL, rtol: float = FP32_RTOL
) -> bool:
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    return bool(np.all(np.abs(a - e) <= atol + rtol * np.abs(e)))


def compare(
    actual: Sequence[Sequence[np.ndarray]], expected: Sequence[Sequence[np.ndarray]]
) -> dict[str, float | bool | None]:
    """Compare per-input output lists. The first output is treated as class scores for top-1 agreement."""
    max_abs = 0.0
    sq_sum = 0.0
    count = 0
    cts = True
    ratio = 0.0
    agree = 0
    scored = 0
    for outs_a, outs_e in zip(actual, expected, strict=True):
        for a, e in zip(outs_a, outs_e, strict=True):
            if a.shape != e.shape:
                raise ValueError(f"output shape {a.shape} differs from reference shape {e.shape}")
            d = a.astype(np.float64) - e.astype(np.float64)
            if d.size:
                max_abs = max(max_abs, float(np.max(np.abs(d))))
            sq_sum += float(np.sum(d * d))
            count += d.size
            cts = cts and within_tolerance(a, e)
            ratio = max(ratio, tolerance_ratio(a, e))
        first_a, first_e = outs_a[0], outs_e[0]
        if first_a.ndim >= 1 and first_a.shape[-1] > 1:
            la = first_a.reshape(-1, first_a.shape[-1]).argmax(axis=-1)
            le = first_e.reshape(-1, first_e.shape[-1]).argmax(axis=-1)
            agree += int(np.sum(la == le))
            scored += la.size
    return {
        "max_abs_error": max_abs,
        "mse": sq_sum / count if count else 0.0,
        "top1_agreement": agree / scored if scored else None,
        "cts_pass": cts,
        "cts_ratio": ratio,
        "tolerance": f"|a-e| <= {FP32_ATOL:g} + {FP32_RTOL:.3g}*|e| (CTS fp32)",
    }
