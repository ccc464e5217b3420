"""Inputs that fit the model: each input's kind from its shape, type and use, and data of that kind."""

from __future__ import annotations

import numpy as np
import pytest

from mlts.bench.inputs import SIGNAL_MIN_SAMPLES, InputSpec, input_kind, make_inputs, speech_like


def spec(shape, dtype="float32", name="", role="", vocab=None, scale=0.0, zero_point=0) -> InputSpec:
    return InputSpec(name, tuple(shape), np.dtype(dtype), scale, zero_point, role, vocab)


@pytest.mark.parametrize(
    ("s", "kind"),
    [
        (spec([1, 3, 224, 224]), "image"),
        (spec([2, 3, 480, 640]), "image"),  # not square, batch 2
        (spec([1, 320, 240, 3]), "image"),  # NHWC
        (spec([1, 3, 64, 64], "uint8", scale=1 / 128, zero_point=128), "image"),
        (spec([1, 3, 64, 64], "uint8"), "integers"),  # 8-bit without a scale is no image
        (spec([1, 3, 4, 4]), "values"),  # too small to be a picture
        (spec([1, 1, 64, 64]), "values"),  # one channel: a spectrogram as likely as an image
        (spec([1, 16000]), "signal"),
        (spec([16000]), "signal"),
        (spec([1, 1, SIGNAL_MIN_SAMPLES]), "signal"),
        (spec([1, 320]), "values"),  # a feature vector
        (spec([1, 320], name="audio_chunk"), "signal"),
        (spec([2, 1, 64], role="state"), "state"),
        (spec([1, 12], "int64", role="tokens", vocab=30), "tokens"),
        (spec([1, 12], "int64", role="mask"), "mask"),
        (spec([1, 12], "int32"), "integers"),
        (spec([4], "bool"), "bool"),
        (spec([1, 8], "int8", scale=0.1, zero_point=-3), "quantized"),
        (spec([]), "values"),
    ],
)
def test_kinds(s, kind):
    assert input_kind(s) == kind


def test_images_fit_their_height_width_and_layout():
    nchw, nhwc = make_inputs([spec([2, 3, 24, 40]), spec([1, 24, 40, 3])], 3)[0]
    assert nchw.shape == (2, 3, 24, 40) and nhwc.shape == (1, 24, 40, 3)
    assert nchw.dtype == np.float32 and -1.0 - 1e-6 <= nchw.min() and nchw.max() <= 1.0 + 1e-6
    # The second image input goes on from the images the first one used (2 per call, 3 calls).
    assert not np.array_equal(nchw[0], nhwc[0].transpose(2, 0, 1))
    feeds = make_inputs([spec([1, 3, 24, 40])], 8)
    assert feeds[6][0].shape == (1, 3, 24, 40)
    np.testing.assert_array_equal(nchw[1], feeds[1][0][0])  # the same procedural image, the same pixels


def test_a_signal_is_speech_like_bounded_and_differs_between_inputs():
    feeds = make_inputs([spec([2, 16000])], 2)
    a, b = feeds[0][0], feeds[1][0]
    assert a.shape == (2, 16000) and a.dtype == np.float32
    assert 0.3 < np.abs(a).max() <= 0.5 + 1e-6
    assert not np.array_equal(a[0], a[1]) and not np.array_equal(a, b)
    wave = speech_like(3, 16000).astype(np.float64)
    spectrum = np.abs(np.fft.rfft(wave))
    peak_hz = np.argmax(spectrum) * 16000 / len(wave)
    assert 80 < peak_hz < 2000  # voiced speech, not noise: the energy sits at a pitch and its harmonics
    np.testing.assert_array_equal(wave, speech_like(3, 16000))


def test_state_is_zero_tokens_index_their_table_masks_are_ones():
    x, h, ids, mask, flags = make_inputs(
        [
            spec([1, 16000]),
            spec([1, 1, 32], role="state"),
            spec([1, 50], "int64", role="tokens", vocab=7),
            spec([1, 50], "int64", role="mask"),
            spec([64], "bool"),
        ],
        1,
    )[0]
    assert not h.any() and x.any()
    assert ids.min() >= 1 and ids.max() <= 6 and ids.dtype == np.int64
    assert (mask == 1).all()
    assert flags.any() and not flags.all()


def test_never_all_zero():
    """Every generated input but state has a non-zero value; a model of state alone gets values."""
    kinds = [
        spec([1, 4], "int32"),
        spec([1], "int64"),
        spec([1, 1], "bool"),
        spec([3, 3], "uint8", scale=0.5, zero_point=0),
        spec([2, 2]),
        spec([]),
    ]
    for feed in make_inputs(kinds, 20, seed=4):
        assert all(np.any(x) for x in feed)
    (only_state,) = make_inputs([spec([1, 8], role="state")], 1)[0]
    assert np.any(only_state)


def test_inputs_are_seeded():
    specs = [spec([1, 3, 16, 16]), spec([1, 9]), spec([2], "int32")]
    a, b = make_inputs(specs, 2, seed=5), make_inputs(specs, 2, seed=5)
    assert all(np.array_equal(x, y) for fa, fb in zip(a, b, strict=True) for x, y in zip(fa, fb, strict=True))
    c = make_inputs(specs, 2, seed=6)
    assert not np.array_equal(a[0][1], c[0][1])


def test_the_old_tuple_specs_still_work():
    (q,) = make_inputs([((1, 3, 16, 16), "uint8", 1 / 128, 128)], 1)[0]
    assert q.dtype == np.uint8 and q.shape == (1, 3, 16, 16)
