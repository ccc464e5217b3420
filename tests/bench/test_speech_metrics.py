"""MLTS speech metrics (PhoneErrorRate, MelCepLogF0, output errors) against hand-computed values.

Values are exact integers or short float64 sums, so comparisons use pytest.approx's default relative
tolerance (1e-6): float64 rounding of a few dozen terms is ~1e-15, far below it.
"""

from __future__ import annotations

import json
import math
import random
from functools import cache

import numpy as np
import pytest

from mlts.bench.speech_metrics import (
    edit_distance,
    mel_cep_log_f0,
    mel_cep_log_f0_many,
    output_errors,
    output_errors_many,
    phone_error_rate,
    phone_error_rate_many,
)

# ---------------------------------------------------------------------------------------------------
# edit_distance


def _reference_distance(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """Plain recursive Levenshtein definition, memoised (independent of the row-vectorised kernel)."""

    @cache
    def d(i: int, j: int) -> int:
        if i == 0:
            return j
        if j == 0:
            return i
        return min(d(i - 1, j) + 1, d(i, j - 1) + 1, d(i - 1, j - 1) + (a[i - 1] != b[j - 1]))

    return d(len(a), len(b))


def test_kitten_sitting():
    k, i, t, e, n, s, g = range(1, 8)
    assert edit_distance([k, i, t, t, e, n], [s, i, t, t, i, n, g]) == 3
    assert edit_distance([s, i, t, t, i, n, g], [k, i, t, t, e, n]) == 3


@pytest.mark.parametrize(
    ("a", "b", "want"),
    [
        ([], [], 0),
        ([], [4, 5, 6], 3),
        ([4, 5], [], 2),
        ([3, 1, 4, 1, 5], [3, 1, 4, 1, 5], 0),
        ([1, 2, 3], [1, 9, 2, 9, 3], 2),  # two insertions
        ([1, 9, 2, 9, 3], [1, 2, 3], 2),  # two deletions
        ([1, 2, 3], [0, 1, 2, 3], 1),  # insertion at the front
        ([7], [8], 1),
    ],
)
def test_edit_distance_hand_cases(a, b, want):
    assert edit_distance(a, b) == want


def test_edit_distance_accepts_arrays_and_returns_int():
    got = edit_distance(np.array([1, 2, 3], dtype=np.int32), np.array([1, 3], dtype=np.int64))
    assert got == 1 and type(got) is int


def test_edit_distance_matches_recursive_definition_on_random_sequences():
    rng = random.Random(1234)
    for _ in range(200):
        a = tuple(rng.randrange(4) for _ in range(rng.randrange(0, 9)))
        b = tuple(rng.randrange(4) for _ in range(rng.randrange(0, 9)))
        assert edit_distance(a, b) == _reference_distance(a, b), (a, b)


def test_edit_distance_refuses_non_label_input():
    with pytest.raises(ValueError, match="1-D"):
        edit_distance([[1, 2]], [1])
    with pytest.raises(ValueError, match="integer labels"):
        edit_distance([1.5, 2.0], [1])


# ---------------------------------------------------------------------------------------------------
# PhoneErrorRate


def _scores(labels: list[int], phones: int = 3) -> np.ndarray:
    """Scores whose per-frame argmax is `labels` (the winner gets 0.9, others small distinct values)."""
    s = np.tile(np.linspace(0.1, 0.2, phones, dtype=np.float32), (len(labels), 1))
    s[np.arange(len(labels)), labels] = 0.9
    return s


def test_phone_error_rate_hand_case_is_edit_distance_not_hamming():
    # ref 0 1 2 0 1, hyp 1 2 0 1 1: Hamming 4, but deleting the leading 0 and appending a 1 gives 2 edits.
    ref = _scores([0, 1, 2, 0, 1])
    hyp = _scores([1, 2, 0, 1, 1])
    got = phone_error_rate(hyp, ref)
    assert got["edits"] == 2 and got["frames"] == 5
    assert got["phone_error_rate"] == pytest.approx(40.0)
    assert got["limit"] == 5.0 and got["ok"] is False
    assert got["violations"] == ["PhoneErrorRate 40% > limit 5%"]


def test_phone_error_rate_squeezes_batch_axis_and_passes_when_equal():
    ref = _scores([2, 2, 0, 1])
    got = phone_error_rate(ref[:, None, :] + 0.01, ref)  # [frames, 1, phones] vs [frames, phones]
    assert got == {
        "phone_error_rate": 0.0,
        "frames": 4,
        "edits": 0,
        "limit": 5.0,
        "ok": True,
        "violations": [],
    }


def test_phone_error_rate_shape_errors():
    with pytest.raises(ValueError, match=r"PhoneErrorRate: scores shape \(5, 3\) differs"):
        phone_error_rate(_scores([0] * 5), _scores([0] * 4))
    with pytest.raises(ValueError, match="must be \\[frames, phones\\]"):
        phone_error_rate(np.zeros((2, 2, 3)), np.zeros((2, 2, 3)))
    with pytest.raises(ValueError, match="no frames"):
        phone_error_rate(np.zeros((0, 3)), np.zeros((0, 3)))


def test_phone_error_rate_many_pools_edits_over_frames():
    # 1 edit in 20 frames (5%) and 0 in 10: pooled 1 * 100 / 30 = 3.33% (a mean of rates would be 2.5%).
    ref_a = _scores([i % 3 for i in range(20)])
    hyp_a = _scores([i % 3 for i in range(19)] + [0])  # last frame 1 -> 0: one substitution
    ref_b = _scores([1] * 10)
    got = phone_error_rate_many([hyp_a, ref_b], [ref_a, ref_b])
    assert got["edits"] == 1 and got["frames"] == 30 and got["sequences"] == 2
    assert got["phone_error_rate"] == pytest.approx(100 / 30)
    assert got["max_phone_error_rate"] == pytest.approx(5.0)  # exactly at the limit: allowed
    assert got["ok"] is True and got["violations"] == []


def test_phone_error_rate_many_flags_a_sequence_over_the_limit():
    # 2 edits in 5 frames (40%) plus 35 clean frames: pooled 2 * 100 / 40 = 5% is within the limit, but
    # MLTS validates each sequence, so the 40% sequence is a violation.
    hyp_a, ref_a = _scores([1, 2, 0, 1, 1]), _scores([0, 1, 2, 0, 1])
    clean = _scores([0, 1] * 17 + [2])
    got = phone_error_rate_many([hyp_a, clean], [ref_a, clean])
    assert got["phone_error_rate"] == pytest.approx(5.0)
    assert got["max_phone_error_rate"] == pytest.approx(40.0)
    assert got["ok"] is False
    assert got["violations"] == ["PhoneErrorRate above limit 5% in 1 of 2 sequences (worst: sequence 0, 40%)"]


def test_phone_error_rate_many_refuses_mismatched_lists():
    with pytest.raises(ValueError, match="2 output sequences but 1 reference"):
        phone_error_rate_many([_scores([0]), _scores([0])], [_scores([0])])
    with pytest.raises(ValueError, match="no sequences"):
        phone_error_rate_many([], [])


# ---------------------------------------------------------------------------------------------------
# MelCepLogF0


def _frames(n: int, voicing: float = 1.0, log_f0: float = 5.0, dtype: type = np.float64) -> np.ndarray:
    """[n, 49] frames with distinct amplitude values, fixed logF0 and voicing."""
    f = np.tile(np.linspace(-1.0, 1.0, 49, dtype=dtype), (n, 1))
    f[:, 47] = log_f0
    f[:, 48] = voicing
    return f


def test_mcd_ignores_energy_dim_and_non_amplitude_dims():
    ref = _frames(8)
    out = ref.copy()
    out[:, 0] += 100.0  # energy
    out[:, 40:47] += 3.0  # aperiodicities
    got = mel_cep_log_f0(out, ref)
    assert got["mel_cep_distortion"] == 0.0 and got["max_frame_mel_cep_distortion"] == 0.0
    assert got["ok"] is True


def test_mcd_of_constant_delta_is_its_magnitude():
    ref = _frames(6, dtype=np.float32).reshape(3, 2, 49)  # [steps, frames per step, 49], float32 outputs
    out = ref.copy()
    out[..., 1:40] -= 0.75
    got = mel_cep_log_f0(out, ref)
    assert got["mel_cep_distortion"] == pytest.approx(0.75)
    assert got["max_frame_mel_cep_distortion"] == pytest.approx(0.75)
    assert got["frames"] == 6 and got["mel_cep_limit"] == 4.0


def test_mcd_is_the_rms_over_frames_and_dims_together():
    # Frame 0 differs by 3 on dims 1..39, frame 1 not at all: sqrt(9 * 39 / (2 * 39)) = sqrt(4.5);
    # a mean of per-frame RMS would give 1.5. The worst frame is 3.
    ref = _frames(2)
    out = ref.copy()
    out[0, 1:40] += 3.0
    got = mel_cep_log_f0(out, ref)
    assert got["mel_cep_distortion"] == pytest.approx(math.sqrt(4.5))
    assert got["max_frame_mel_cep_distortion"] == pytest.approx(3.0)
    assert got["ok"] is True


def test_mcd_over_limit_is_a_violation():
    ref = _frames(4)
    out = ref.copy()
    out[:, 1:40] += 5.0
    got = mel_cep_log_f0(out, ref)
    assert got["ok"] is False
    assert got["violations"] == ["MelCepLogF0 mel-cepstral distortion 5 > limit 4"]


def test_log_f0_rms_only_over_frames_voiced_in_both():
    ref = _frames(4)
    out = ref.copy()
    out[0, 47] += 0.003  # voiced in both
    out[1, 47] -= 0.004  # voiced in both
    out[2, 47] += 100.0  # unvoiced in the output only: must not count
    out[2, 48] = 0.2
    out[3, 47] += 50.0  # unvoiced in both: must not count
    out[3, 48] = 0.0
    ref[3, 48] = 0.5  # exactly at the threshold is unvoiced (voiced means > 0.5)
    got = mel_cep_log_f0(out, ref)
    assert got["voiced_frames"] == 2
    assert got["log_f0_rms"] == pytest.approx(math.sqrt((0.003**2 + 0.004**2) / 2))
    assert got["voicing_mismatch"] == pytest.approx(0.25)  # frame 2 only
    assert got["log_f0_limit"] == 0.01 and got["ok"] is True


def test_no_voiced_frames_gives_none_and_is_not_a_failure():
    ref = _frames(3, voicing=0.0)
    out = _frames(3, voicing=1.0, log_f0=9.0)
    got = mel_cep_log_f0(out, ref)
    assert got["log_f0_rms"] is None and got["voiced_frames"] == 0
    assert got["voicing_mismatch"] == 1.0
    assert got["ok"] is True and got["violations"] == []


def test_log_f0_over_limit_is_a_violation():
    ref = _frames(2)
    out = ref.copy()
    out[:, 47] += 0.02
    got = mel_cep_log_f0(out, ref)
    assert got["log_f0_rms"] == pytest.approx(0.02)
    assert got["ok"] is False
    assert got["violations"] == ["MelCepLogF0 logF0 RMS 0.02 > limit 0.01"]


def test_voicing_threshold_parameter_for_logit_voicing():
    ref = _frames(2, voicing=0.3)
    out = ref.copy()
    out[0, 48] = -0.1  # a logit below 0: unvoiced at threshold 0
    out[:, 47] += 0.001
    assert mel_cep_log_f0(out, ref)["voiced_frames"] == 0
    got = mel_cep_log_f0(out, ref, voicing_threshold=0.0)
    assert got["voiced_frames"] == 1 and got["voicing_mismatch"] == pytest.approx(0.5)


def test_nan_outputs_fail():
    ref = _frames(2)
    out = ref.copy()
    out[0, 5] = np.nan
    got = mel_cep_log_f0(out, ref)
    assert got["ok"] is False and "not finite" in got["violations"][0]


def test_mel_cep_log_f0_shapes():
    steps = np.stack([_frames(4)] * 3)  # [3, 4, 49]
    assert mel_cep_log_f0(steps[:, None], steps)["frames"] == 12  # [3, 1, 4, 49] vs [3, 4, 49]
    with pytest.raises(
        ValueError, match=r"frames shape \(4, 3, 49\) differs from reference shape \(3, 4, 49\)"
    ):
        mel_cep_log_f0(steps.reshape(4, 3, 49), steps)
    with pytest.raises(ValueError, match=r"\[\.\.\., 49\]"):
        mel_cep_log_f0(np.zeros((2, 48)), np.zeros((2, 48)))
    with pytest.raises(ValueError, match="no frames"):
        mel_cep_log_f0(np.zeros((0, 49)), np.zeros((0, 49)))


def test_mel_cep_log_f0_many_pools_frames():
    # A: 1 step x 4 frames, dims 1..39 off by 3 (MCD 3), one voiced frame with logF0 off by 0.006.
    # B: 2 steps x 4 frames, exact, two voiced frames. Pooled MCD sqrt(9 * 4 * 39 / (12 * 39)) = sqrt(3);
    # pooled logF0 RMS sqrt(0.006^2 / 3) (a mean of per-sequence RMS would be 0.003).
    ref_a = _frames(4, voicing=0.0)[None]
    ref_a[0, 0, 48] = 1.0
    out_a = ref_a.copy()
    out_a[..., 1:40] += 3.0
    out_a[0, 0, 47] += 0.006
    ref_b = _frames(8, voicing=0.0).reshape(2, 4, 49)
    ref_b[:, 0, 48] = 1.0
    got = mel_cep_log_f0_many([out_a, ref_b], [ref_a, ref_b])
    assert got["frames"] == 12 and got["sequences"] == 2 and got["voiced_frames"] == 3
    assert got["mel_cep_distortion"] == pytest.approx(math.sqrt(3.0))
    assert got["max_mel_cep_distortion"] == pytest.approx(3.0)
    assert got["max_frame_mel_cep_distortion"] == pytest.approx(3.0)
    assert got["log_f0_rms"] == pytest.approx(0.006 / math.sqrt(3.0))
    assert got["max_log_f0_rms"] == pytest.approx(0.006)
    assert got["voicing_mismatch"] == 0.0
    assert got["ok"] is True and got["violations"] == []


def test_mel_cep_log_f0_many_flags_a_sequence_over_the_limit_and_skips_unvoiced_ones():
    bad_ref = _frames(1, voicing=0.0)  # no voiced frame: its logF0 RMS is None, skipped by the max
    bad_out = bad_ref.copy()
    bad_out[:, 1:40] += 5.0  # MCD 5 in this sequence; pooled with 99 exact frames: 5 / sqrt(100) = 0.5
    good = _frames(99)
    got = mel_cep_log_f0_many([bad_out, good], [bad_ref, good])
    assert got["mel_cep_distortion"] == pytest.approx(0.5)
    assert got["max_mel_cep_distortion"] == pytest.approx(5.0)
    assert got["max_log_f0_rms"] == 0.0 and got["log_f0_rms"] == 0.0
    assert got["ok"] is False
    assert got["violations"] == [
        "MelCepLogF0 mel-cepstral distortion above limit 4 in 1 of 2 sequences (worst: sequence 0, 5)"
    ]


def test_mel_cep_log_f0_many_all_unvoiced():
    ref = _frames(2, voicing=0.0)
    got = mel_cep_log_f0_many([ref, ref], [ref, ref])
    assert got["log_f0_rms"] is None and got["max_log_f0_rms"] is None and got["ok"] is True


# ---------------------------------------------------------------------------------------------------
# Output errors


def test_output_errors_mse_and_absolute_max():
    got = output_errors(np.array([1.0, 2.0, 3.0], np.float32), np.array([1.5, 2.0, 1.0], np.float32))
    assert got["mse"] == pytest.approx((0.25 + 0.0 + 4.0) / 3)
    assert got["max_abs_error"] == pytest.approx(2.0)
    assert got["elements"] == 3 and got["ok"] is True
    # A negative error is the largest: a signed maximum (MLTS) would report 0 here.
    assert output_errors(np.array([0.0, -3.0]), np.zeros(2))["max_abs_error"] == 3.0


def test_output_errors_many_pools_elements():
    # Squared errors 1 + 4 over 2 elements and 16 over 3: pooled MSE 21 / 5 (mean of MSEs would be 3.92).
    got = output_errors_many(
        [np.array([1.0, 2.0]), np.zeros((1, 3))], [np.zeros(2), np.array([[0.0, 0.0, -4.0]])]
    )
    assert got["mse"] == pytest.approx(21 / 5)
    assert got["max_abs_error"] == 4.0 and got["elements"] == 5 and got["sequences"] == 2
    assert got["violations"] == []


def test_output_errors_nan_shape_and_empty():
    got = output_errors_many([np.array([np.nan, 1.0]), np.array([9.0])], [np.zeros(2), np.zeros(1)])
    assert got["ok"] is False and "not finite" in got["violations"][0]
    assert math.isnan(got["max_abs_error"])
    assert output_errors(np.zeros(0), np.zeros(0))["mse"] == 0.0
    with pytest.raises(ValueError, match=r"output shape \(2,\) differs from reference shape \(3,\)"):
        output_errors(np.zeros(2), np.zeros(3))


# ---------------------------------------------------------------------------------------------------
# JSON


def test_results_are_plain_json_values():
    frames = _frames(4)
    scores = _scores([0, 1, 2])
    results = [
        phone_error_rate(scores, scores),
        phone_error_rate_many([scores], [scores]),
        mel_cep_log_f0(frames, frames),
        mel_cep_log_f0_many([frames], [frames]),
        output_errors(frames, frames),
        output_errors_many([frames], [frames]),
    ]
    for r in results:
        json.dumps(r, allow_nan=False)
        for key, value in r.items():
            assert type(value) in (int, float, bool, list, type(None)), (key, type(value))
