"""The speech datasets: deterministic sequences with the structure of real front-end features."""

from __future__ import annotations

import numpy as np
import pytest

from mlts.datasets import speech


@pytest.mark.parametrize("model", ["asr_float", "tts_float"])
def test_fifty_deterministic_sequences_of_realistic_lengths(model):
    seqs = speech.sequences(model)
    again = speech.sequences(model)
    assert len(seqs) == speech.SEQUENCES == 50
    lo, hi = speech.ASR_STEPS if model == "asr_float" else speech.TTS_STEPS
    lengths = [len(s) for s in seqs]
    assert all(lo <= n <= hi for n in lengths) and len(set(lengths)) > 20
    for a, b in zip(seqs, again, strict=True):
        assert a.dtype == np.float32 and a.shape[1] == speech.FEATURES[model] and np.isfinite(a).all()
        assert np.array_equal(a, b)
    # Sequence i does not depend on how many were asked for.
    assert np.array_equal(speech.sequences(model, 2, start=9)[1], seqs[10])
    assert not np.array_equal(seqs[0][:20], seqs[1][:20])


def test_asr_features_are_normalised_stacked_log_mel_frames():
    x = speech.asr_sequence(4)
    steps = len(x)
    frames = x.reshape(steps, speech.ASR_STACK, speech.ASR_BANDS)
    # Stacking: frame k of step t is frame k-1 of step t+1.
    np.testing.assert_array_equal(frames[1:, :-1], frames[:-1, 1:])
    logmel = np.concatenate([frames[0], frames[1:, -1]])  # the utterance's frames, once each
    np.testing.assert_allclose(logmel.mean(0), 0.0, atol=1e-5)  # CMVN per band
    np.testing.assert_allclose(logmel.std(0), 1.0, atol=1e-4)
    # Smooth in time (phones last several frames) and across neighbouring bands (spectral envelopes).
    lag1 = np.corrcoef(logmel[:-1].ravel(), logmel[1:].ravel())[0, 1]
    band = np.corrcoef(logmel[:, :-1].ravel(), logmel[:, 1:].ravel())[0, 1]
    assert lag1 > 0.6 and band > 0.5


def test_tts_features_are_one_hot_phones_questions_and_positions():
    x = speech.tts_sequence(5).astype(np.float64)
    n = speech.TTS_PHONES
    for block in range(3):
        one_hot = x[:, block * n : (block + 1) * n]
        assert np.array_equal(one_hot.sum(1), np.ones(len(x))) and set(np.unique(one_hot)) == {0.0, 1.0}
    binary = x[:, 3 * n : 3 * n + sum(speech.TTS_QUESTIONS)]
    assert set(np.unique(binary)) <= {0.0, 1.0} and 0.1 < binary.mean() < 0.5
    numeric = x[:, -speech.TTS_NUMERIC :]
    assert numeric.min() >= 0.0 and numeric.max() <= 1.0
    current = x[:, n : 2 * n].argmax(1)
    assert current[0] == 0 and current[-1] == 0  # silence at both ends
    # The previous-phone block at the first step of a phone names the phone before it.
    changes = np.flatnonzero(current[1:] != current[:-1]) + 1
    assert len(changes) >= 3
    np.testing.assert_array_equal(x[changes, :n].argmax(1), current[changes - 1])
    # Position in the phone ramps from 0 to 1 within each phone.
    in_phone = numeric[:, 0]
    assert (in_phone[changes] == 0).all()


def test_bad_requests_are_refused():
    with pytest.raises(ValueError, match="no speech dataset for model 'mobilenet'"):
        speech.sequences("mobilenet")
    with pytest.raises(ValueError, match="negative"):
        speech.asr_sequence(-1)
    with pytest.raises(ValueError, match="negative"):
        speech.sequences("tts_float", -2)
