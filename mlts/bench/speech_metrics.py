"""MLTS's sequence accuracy metrics: PhoneErrorRate (ASR), MelCepLogF0 (TTS) and per-output errors.

Every function works in float64 and returns a JSON-ready dict of plain Python values. The `*_many`
aggregates pool the sums of all sequences (not means of per-sequence values) and also report the
per-sequence maxima; MLTS validates every sequence on its own, so a single sequence over a limit is a
violation even when the pooled value is within it. `violations` holds one line per broken limit and
`ok` is true exactly when it is empty.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

PHONE_ERROR_RATE_LIMIT = 5.0  # percent
MEL_CEP_DISTORTION_LIMIT = 4.0
LOG_F0_RMS_LIMIT = 0.01

# One TTS frame: [0:40] mel-cepstral amplitudes (dim 0 = energy), [40:47] aperiodicities, [47] logF0,
# [48] voicing.
FRAME_SIZE = 49
AMPLITUDE_DIMS = 40
LOG_F0_INDEX = 47
VOICING_INDEX = 48
# Voicing is a probability or a 0/1 flag here (voiced when > 0.5). MLTS thresholds its denormalised voicing
# output at 0 (voiced when > 0): the same decisions for 0/1 flags; for a logit output, where > 0 means a
# probability > 0.5, pass voicing_threshold=0.0.
VOICING_THRESHOLD = 0.5


# ---------------------------------------------------------------------------------------------------
# Edit distance


def _labels(seq: Sequence[int] | np.ndarray, name: str) -> np.ndarray:
    """A 1-D int64 array of labels; an empty sequence of any dtype is accepted."""
    arr = np.asarray(seq)
    if arr.ndim != 1:
        raise ValueError(f"edit_distance: {name} must be a 1-D sequence of labels, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype.kind not in "biu":
        raise ValueError(f"edit_distance: {name} must hold integer labels, got dtype {arr.dtype}")
    return arr.astype(np.int64)


def edit_distance(a: Sequence[int] | np.ndarray, b: Sequence[int] | np.ndarray) -> int:
    """Levenshtein distance with unit costs for substitution, insertion and deletion.

    Row i of the DP table holds D[i, j], the distance between a[:i] and b[:j]:
        D[i, j] = min(D[i-1, j] + 1, D[i-1, j-1] + (a[i-1] != b[j-1]), D[i, j-1] + 1).
    The first two terms come from the previous row and are vectorised as T[j]; the third chains along
    the row and unrolls to D[i, j] = min over k <= j of (T[k] + j - k), i.e. a running minimum of
    T[k] - k plus j. One Python loop over `a`, O(len(b)) memory.
    """
    x = _labels(a, "a")
    y = _labels(b, "b")
    cols = np.arange(y.size + 1, dtype=np.int64)
    row = cols.copy()  # D[0, j] = j: j insertions
    t = np.empty_like(row)
    for i, symbol in enumerate(x, start=1):
        t[0] = i  # D[i, 0] = i: i deletions
        np.minimum(row[:-1] + (y != symbol), row[1:] + 1, out=t[1:])
        row = np.minimum.accumulate(t - cols) + cols
    return int(row[-1])


# ---------------------------------------------------------------------------------------------------
# Shared helpers


def _over_limit(name: str, value: float | None, limit: float, unit: str = "") -> str | None:
    """A violation line when `value` is above `limit` or not a number; None when within it."""
    if value is None or value <= limit:
        return None
    shown = f"{value:.4g}{unit}" if math.isfinite(value) else f"{value} (not finite)"
    return f"{name} {shown} > limit {limit:g}{unit}"


def _sequences_over(name: str, values: Sequence[float | None], limit: float, unit: str = "") -> str | None:
    """One line naming how many sequences break `limit` and the worst one; None when none does."""
    bad = [(i, v) for i, v in enumerate(values) if v is not None and not v <= limit]
    if not bad:
        return None
    worst_i, worst = max(bad, key=lambda iv: _nan_last(iv[1]))
    return (
        f"{name} above limit {limit:g}{unit} in {len(bad)} of {len(values)} sequences "
        f"(worst: sequence {worst_i}, {worst:.4g}{unit})"
    )


def _max_or_none(values: Sequence[float | None]) -> float | None:
    """Largest non-None value (NaN wins, so a broken sequence is not hidden); None when all are None."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    return max(present, key=_nan_last)


def _nan_last(v: float) -> float:
    """Sort key making NaN the largest value, so max() does not hide a NaN."""
    return math.inf if math.isnan(v) else v


def _check_pairs(name: str, actual: Sequence, expected: Sequence) -> None:
    if len(actual) != len(expected):
        raise ValueError(f"{name}: {len(actual)} output sequences but {len(expected)} reference sequences")
    if not actual:
        raise ValueError(f"{name}: no sequences to score")


# ---------------------------------------------------------------------------------------------------
# PhoneErrorRate (ASR)


def _phone_scores(scores: np.ndarray, name: str) -> np.ndarray:
    """[frames, phones] scores; a [frames, 1, phones] batch axis is squeezed."""
    arr = np.asarray(scores)
    if arr.ndim == 3 and arr.shape[1] == 1:
        arr = arr[:, 0, :]
    if arr.ndim != 2:
        raise ValueError(
            f"PhoneErrorRate: {name} must be [frames, phones] or [frames, 1, phones], got shape {arr.shape}"
        )
    return arr


def _phone_edits(scores: np.ndarray, reference_scores: np.ndarray) -> tuple[int, int]:
    """(edits, frames): edit distance between the per-frame argmax phones of the two score arrays."""
    hyp = _phone_scores(scores, "scores")
    ref = _phone_scores(reference_scores, "reference_scores")
    if hyp.shape != ref.shape:
        raise ValueError(f"PhoneErrorRate: scores shape {hyp.shape} differs from reference shape {ref.shape}")
    if hyp.shape[0] == 0 or hyp.shape[1] == 0:
        raise ValueError(f"PhoneErrorRate: scores of shape {hyp.shape} have no frames or no phones")
    return edit_distance(hyp.argmax(axis=1), ref.argmax(axis=1)), int(hyp.shape[0])


def _per_result(edits: int, frames: int) -> dict:
    per = edits * 100.0 / frames
    violation = _over_limit("PhoneErrorRate", per, PHONE_ERROR_RATE_LIMIT, "%")
    return {
        "phone_error_rate": per,
        "frames": frames,
        "edits": edits,
        "limit": PHONE_ERROR_RATE_LIMIT,
        "ok": violation is None,
        "violations": [violation] if violation else [],
    }


def phone_error_rate(scores: np.ndarray, reference_scores: np.ndarray) -> dict:
    """MLTS "PhoneErrorRate" of one sequence, in percent.

    The phone of each frame is the argmax of its scores (first index on ties);
    PER = edit_distance(hyp_phones, ref_phones) * 100 / frames, limit 5%.
    """
    return _per_result(*_phone_edits(scores, reference_scores))


def phone_error_rate_many(scores: Sequence[np.ndarray], reference_scores: Sequence[np.ndarray]) -> dict:
    """PhoneErrorRate over several sequences: total edits * 100 / total frames.

    Each sequence is aligned on its own (no edits across sequence boundaries). Also reports the largest
    per-sequence PER ("max_phone_error_rate", MLTS's reported key); a sequence above 5% is a violation
    even when the pooled rate is within the limit, as MLTS validates sequence by sequence.
    """
    _check_pairs("PhoneErrorRate", scores, reference_scores)
    counts = [_phone_edits(s, r) for s, r in zip(scores, reference_scores, strict=True)]
    per_sequence = [e * 100.0 / f for e, f in counts]
    result = _per_result(sum(e for e, _ in counts), sum(f for _, f in counts))
    result["sequences"] = len(counts)
    result["max_phone_error_rate"] = max(per_sequence)
    line = _sequences_over("PhoneErrorRate", per_sequence, PHONE_ERROR_RATE_LIMIT, "%")
    if line:
        result["violations"].append(line)
    result["ok"] = not result["violations"]
    return result


# ---------------------------------------------------------------------------------------------------
# MelCepLogF0 (TTS)


@dataclass(frozen=True, slots=True)
class _TtsSums:
    """Sums of one or more sequences, from which the MelCepLogF0 values are formed."""

    frames: int
    mcep_sq_sum: float  # sum over frames and amplitude dims 1..39 of (x - y)^2
    frame_mcep_max: float  # largest per-frame RMS over dims 1..39
    voiced: int  # frames voiced in both
    f0_sq_sum: float  # sum over voiced-in-both frames of (logF0 - logF0_ref)^2
    mismatched: int  # frames whose voiced/unvoiced decisions differ

    @property
    def mel_cep_distortion(self) -> float:
        return math.sqrt(self.mcep_sq_sum / (self.frames * (AMPLITUDE_DIMS - 1)))

    @property
    def log_f0_rms(self) -> float | None:
        return math.sqrt(self.f0_sq_sum / self.voiced) if self.voiced else None


def _tts_frames(frames: np.ndarray, name: str) -> np.ndarray:
    """[..., 49] -> float64 [frames, 49]."""
    arr = np.asarray(frames, dtype=np.float64)
    if arr.ndim < 1 or arr.shape[-1] != FRAME_SIZE:
        raise ValueError(
            f"MelCepLogF0: {name} must be [..., {FRAME_SIZE}] frame vectors, got shape {arr.shape}"
        )
    return arr.reshape(-1, FRAME_SIZE)


def _tts_sums(frames: np.ndarray, reference_frames: np.ndarray, voicing_threshold: float) -> _TtsSums:
    """Sums for one sequence. Shapes must agree once length-1 axes are ignored."""
    a_shape, e_shape = np.shape(frames), np.shape(reference_frames)
    if tuple(d for d in a_shape if d != 1) != tuple(d for d in e_shape if d != 1):
        raise ValueError(f"MelCepLogF0: frames shape {a_shape} differs from reference shape {e_shape}")
    x = _tts_frames(frames, "frames")
    y = _tts_frames(reference_frames, "reference_frames")
    if x.shape[0] == 0:
        raise ValueError("MelCepLogF0: no frames to score")
    sq = (x[:, 1:AMPLITUDE_DIMS] - y[:, 1:AMPLITUDE_DIMS]) ** 2
    voiced_x = x[:, VOICING_INDEX] > voicing_threshold
    voiced_y = y[:, VOICING_INDEX] > voicing_threshold
    both = voiced_x & voiced_y
    f0_diff = x[both, LOG_F0_INDEX] - y[both, LOG_F0_INDEX]
    return _TtsSums(
        frames=int(x.shape[0]),
        mcep_sq_sum=float(sq.sum()),
        frame_mcep_max=float(np.sqrt(sq.mean(axis=1)).max()),
        voiced=int(both.sum()),
        f0_sq_sum=float(np.sum(f0_diff * f0_diff)),
        mismatched=int(np.sum(voiced_x != voiced_y)),
    )


def _tts_result(s: _TtsSums) -> dict:
    mcd, f0 = s.mel_cep_distortion, s.log_f0_rms
    lines = [
        _over_limit("MelCepLogF0 mel-cepstral distortion", mcd, MEL_CEP_DISTORTION_LIMIT),
        _over_limit("MelCepLogF0 logF0 RMS", f0, LOG_F0_RMS_LIMIT),
    ]
    violations = [line for line in lines if line]
    return {
        "mel_cep_distortion": mcd,
        "max_frame_mel_cep_distortion": s.frame_mcep_max,
        "mel_cep_limit": MEL_CEP_DISTORTION_LIMIT,
        "log_f0_rms": f0,
        "log_f0_limit": LOG_F0_RMS_LIMIT,
        "voiced_frames": s.voiced,
        "voicing_mismatch": s.mismatched / s.frames,
        "frames": s.frames,
        "ok": not violations,
        "violations": violations,
    }


def mel_cep_log_f0(
    frames: np.ndarray, reference_frames: np.ndarray, voicing_threshold: float = VOICING_THRESHOLD
) -> dict:
    """MLTS "MelCepLogF0" of one sequence of [..., 49] frame vectors (flattened to [N, 49]).

    - mel_cep_distortion = sqrt( sum_{n, k=1..39} (x[n,k] - y[n,k])^2 / (N * 39) ): the RMS over all
      frames and amplitude dims 1..39 together (dim 0, the energy, excluded), exactly as MLTS computes
      it; limit 4.0. max_frame_mel_cep_distortion = max_n sqrt(mean_{k=1..39} (x[n,k] - y[n,k])^2).
      (The textbook MCD is (10 / ln 10) * sqrt(2 * sum_k (x_k - y_k)^2) per frame, in dB; MLTS's limit
      4.0 is for the RMS form, so that is what is used.)
    - log_f0_rms = sqrt(mean over V of (logF0 - logF0_ref)^2), V = frames whose voicing is above
      `voicing_threshold` in both; None with voiced_frames 0 when V is empty (not a failure); limit 0.01.
    - voicing_mismatch = share of frames whose voiced/unvoiced decisions differ (informative).
    """
    return _tts_result(_tts_sums(frames, reference_frames, voicing_threshold))


def mel_cep_log_f0_many(
    frames: Sequence[np.ndarray],
    reference_frames: Sequence[np.ndarray],
    voicing_threshold: float = VOICING_THRESHOLD,
) -> dict:
    """MelCepLogF0 over several sequences, pooled.

    mel_cep_distortion is the RMS over all frames of all sequences (dims 1..39); log_f0_rms pools the
    squared differences of all voiced-in-both frames (not a mean of per-sequence RMS); voicing_mismatch
    is over all frames. Also reports the per-sequence maxima max_mel_cep_distortion and max_log_f0_rms
    (MLTS's reported keys); a sequence above a limit is a violation, as MLTS validates each sequence.
    """
    _check_pairs("MelCepLogF0", frames, reference_frames)
    parts = [_tts_sums(a, e, voicing_threshold) for a, e in zip(frames, reference_frames, strict=True)]
    pooled = _TtsSums(
        frames=sum(p.frames for p in parts),
        mcep_sq_sum=sum(p.mcep_sq_sum for p in parts),
        frame_mcep_max=float(np.max([p.frame_mcep_max for p in parts])),
        voiced=sum(p.voiced for p in parts),
        f0_sq_sum=sum(p.f0_sq_sum for p in parts),
        mismatched=sum(p.mismatched for p in parts),
    )
    result = _tts_result(pooled)
    mcds = [p.mel_cep_distortion for p in parts]
    f0s = [p.log_f0_rms for p in parts]
    result["sequences"] = len(parts)
    result["max_mel_cep_distortion"] = _max_or_none(mcds)
    result["max_log_f0_rms"] = _max_or_none(f0s)
    for line in (
        _sequences_over("MelCepLogF0 mel-cepstral distortion", mcds, MEL_CEP_DISTORTION_LIMIT),
        _sequences_over("MelCepLogF0 logF0 RMS", f0s, LOG_F0_RMS_LIMIT),
    ):
        if line:
            result["violations"].append(line)
    result["ok"] = not result["violations"]
    return result


# ---------------------------------------------------------------------------------------------------
# Per-output errors


def _error_sums(actual: np.ndarray, expected: np.ndarray) -> tuple[float, float, int]:
    """(sum of squared errors, max |error|, elements) in float64."""
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    if a.shape != e.shape:
        raise ValueError(f"output shape {a.shape} differs from reference shape {e.shape}")
    d = a - e
    if d.size == 0:
        return 0.0, 0.0, 0
    return float(np.sum(d * d)), float(np.max(np.abs(d))), int(d.size)


def _errors_result(sq_sum: float, max_abs: float, count: int) -> dict:
    mse = sq_sum / count if count else 0.0
    finite = math.isfinite(mse) and math.isfinite(max_abs)
    violations = [] if finite else [f"output errors are not finite (mse {mse}, max |error| {max_abs})"]
    return {"mse": mse, "max_abs_error": max_abs, "elements": count, "ok": finite, "violations": violations}


def output_errors(actual: np.ndarray, expected: np.ndarray) -> dict:
    """mse = mean((a - e)^2) and max_abs_error = max |a - e| over all elements, in float64.

    The maximum is of the absolute error (MLTS reports a signed maximum, which hides negative errors).
    No limit applies; NaN or infinite errors are the only violation.
    """
    return _errors_result(*_error_sums(actual, expected))


def output_errors_many(actual: Sequence[np.ndarray], expected: Sequence[np.ndarray]) -> dict:
    """output_errors pooled over sequences: MSE over all elements of all sequences, max over all."""
    _check_pairs("output errors", actual, expected)
    parts = [_error_sums(a, e) for a, e in zip(actual, expected, strict=True)]
    result = _errors_result(
        sum(p[0] for p in parts), max((p[1] for p in parts), key=_nan_last), sum(p[2] for p in parts)
    )
    result["sequences"] = len(parts)
    return result
