"""Accuracy of a backend's outputs against a reference's on the same inputs."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mlts.records.tolerance import CTS_FP32, CTS_MOBILENET_QUANT8, CTS_QUANT8, Tolerance

# CTS/VTS precision for TENSOR_FLOAT32: |actual - expected| <= atol + rtol * |expected| (mlts.records.tolerance).
FP32_ATOL = CTS_FP32.atol
FP32_RTOL = CTS_FP32.rtol


def tolerance_ratio(
    actual: np.ndarray, expected: np.ndarray, atol: float = FP32_ATOL, rtol: float = FP32_RTOL
) -> float:
    """max |a - e| / (atol + rtol * |e|): at most 1 passes; 3 means three times the allowed error."""
    return Tolerance("", atol, rtol).ratio(actual, expected)


def within_tolerance(
    actual: np.ndarray, expected: np.ndarray, atol: float = FP32_ATOL, rtol: float = FP32_RTOL
) -> bool:
    return Tolerance("", atol, rtol).within(actual, expected)


def compare(
    actual: Sequence[Sequence[np.ndarray]],
    expected: Sequence[Sequence[np.ndarray]],
    *,
    classifier: bool = True,
    top1_tolerance: float | None = None,
) -> dict[str, float | bool | str | None]:
    """Compare per-input output lists over every output.

    With `classifier` (the first output is one score vector per input) the share of inputs whose
    arg-max agrees is `top1_agreement` (None otherwise); with `top1_tolerance` also
    `top1_agreement_within_tolerance`: an input agrees when the expected score of the actual arg-max
    is within that tolerance of the expected maximum (a near-tie is no disagreement).
    """
    max_abs = 0.0
    sq_sum = 0.0
    count = 0
    cts = True
    ratio = 0.0
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
    firsts, expected_firsts = [o[0] for o in actual], [o[0] for o in expected]
    out: dict[str, float | bool | str | None] = {
        "max_abs_error": max_abs,
        "mse": sq_sum / count if count else 0.0,
        "top1_agreement": top1_agreement(firsts, expected_firsts, vectors=True) if classifier else None,
        "cts_pass": cts,
        "cts_ratio": ratio,
        "tolerance": CTS_FP32.text(),
    }
    if classifier and top1_tolerance is not None:
        out["top1_agreement_within_tolerance"] = top1_agreement_within(
            firsts, expected_firsts, top1_tolerance
        )
        out["top1_tolerance"] = top1_tolerance
    return out


# CTS/VTS precision for quantized outputs, in quantized units (3 for the MobileNet models).
QUANT_TOLERANCE_UNITS = CTS_QUANT8.units
QUANT_TOLERANCE_UNITS_MOBILENET = CTS_MOBILENET_QUANT8.units
HISTOGRAM_MAX_UNITS = 8  # the histogram's last bucket counts deviations of this many units or more
ROUNDING_NOTE = (
    "onnxruntime requantizes in float32 and rounds half to even; NNAPI requantizes with a fixed-point "
    "multiplier and shift and rounds ties up/away from zero, so single layers can differ by one unit "
    "and the difference can grow through the network"
)


def compare_quantized(
    actual: Sequence[Sequence[np.ndarray]],
    expected: Sequence[Sequence[np.ndarray]],
    scales: Sequence[float],
    tolerance_units: int = QUANT_TOLERANCE_UNITS,
) -> dict:
    """Compare 8-bit outputs in quantized units: max deviation, its histogram, top-1 agreement.

    `scales` are the output scales (for MSE and max error in real units). A
    backend passes CTS's rule when no value deviates by more than
    `tolerance_units`.
    """
    hist = np.zeros(HISTOGRAM_MAX_UNITS + 1, dtype=np.int64)
    max_units = 0
    sq_units = 0
    max_abs = 0.0
    sq_sum = 0.0
    count = 0
    for outs_a, outs_e in zip(actual, expected, strict=True):
        for a, e, scale in zip(outs_a, outs_e, scales, strict=True):
            if a.shape != e.shape:
                raise ValueError(f"output shape {a.shape} differs from reference shape {e.shape}")
            units = np.abs(a.astype(np.int64) - e.astype(np.int64))
            if units.size:
                max_units = max(max_units, int(units.max()))
            hist += np.bincount(
                np.minimum(units, HISTOGRAM_MAX_UNITS).ravel(), minlength=HISTOGRAM_MAX_UNITS + 1
            )
            sq_units += int(np.sum(units * units))
            real = units.astype(np.float64) * scale
            if real.size:
                max_abs = max(max_abs, float(real.max()))
            sq_sum += float(np.sum(real * real))
            count += units.size
    return {
        "max_abs_error": max_abs,
        "mse": sq_sum / count if count else 0.0,
        "top1_agreement": top1_agreement([o[0] for o in actual], [o[0] for o in expected]),
        "max_quant_deviation": max_units,
        # Root mean square deviation in units: the rounding difference keeps it well below one unit.
        "rms_quant_deviation": float(np.sqrt(sq_units / count)) if count else 0.0,
        "output_scale": float(scales[0]) if len(scales) else None,
        "quant_deviation_histogram": {
            (f">={i}" if i == HISTOGRAM_MAX_UNITS else str(i)): int(n) for i, n in enumerate(hist)
        },
        "cts_pass": max_units <= tolerance_units,
        "cts_ratio": max_units / tolerance_units,
        "tolerance": Tolerance("CTS quant8", units=tolerance_units).units_text(),
        "rounding_note": ROUNDING_NOTE,
    }


def _vectors(x: np.ndarray) -> np.ndarray:
    """A classifier output as [N, C]: one row per batch entry ([N, C, 1, 1] and [C] included)."""
    return x.reshape(x.shape[0], -1) if x.ndim >= 2 else x.reshape(1, -1)


def _top1(a: np.ndarray, e: np.ndarray, vectors: bool = False) -> tuple[int, int]:
    """(agreeing, scored) argmax positions of two score tensors over their last axis (with `vectors`:
    over each batch entry's scores)."""
    if vectors:
        a, e = _vectors(a), _vectors(e)
    if a.ndim < 1 or a.shape[-1] <= 1:
        return 0, 0
    la = a.reshape(-1, a.shape[-1]).argmax(axis=-1)
    le = e.reshape(-1, e.shape[-1]).argmax(axis=-1)
    return int(np.sum(la == le)), int(la.size)


def top1_agreement(
    actual: Sequence[np.ndarray], expected: Sequence[np.ndarray], vectors: bool = False
) -> float | None:
    """Share of inputs whose argmax of the first output agrees (e.g. a quantized model vs its float model)."""
    agree = scored = 0
    for a, e in zip(actual, expected, strict=True):
        n, m = _top1(np.asarray(a), np.asarray(e), vectors)
        agree += n
        scored += m
    return agree / scored if scored else None


def top1_agreement_within(
    actual: Sequence[np.ndarray], expected: Sequence[np.ndarray], tolerance: float
) -> float | None:
    """Share of score vectors whose actual arg-max has an expected score within `tolerance` of the
    expected maximum (8-bit scores compared in units)."""
    agree = scored = 0
    for a, e in zip(actual, expected, strict=True):
        av, ev = _vectors(np.asarray(a)), _vectors(np.asarray(e)).astype(np.float64)
        if av.shape[-1] <= 1:
            continue
        chosen = ev[np.arange(len(ev)), av.argmax(axis=-1)]
        agree += int(np.sum(chosen >= ev.max(axis=-1) - tolerance))
        scored += len(ev)
    return agree / scored if scored else None
