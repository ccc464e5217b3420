"""Deterministic input sequences for the LSTM speech models asr_float and tts_float.

MLTS scores each speech model on 50 sequences. No speech corpus can be
downloaded here, so sequences are synthesised from a seeded phone string
with the structure real front ends produce:

- ASR: 40 log-mel filterbank energies per 10 ms frame, each phone a spectral
  envelope of three formant-like bumps over a spectral tilt, with an energy
  contour per phone, coarticulation (smoothing across frames) and noise;
  normalised per utterance (mean 0, variance 1 per band, as CMVN does) and
  stacked 8 frames deep into one 320-value vector per step. 40-160 steps.
- TTS: 334 linguistic features per step (4 acoustic frames of 5 ms):
  one-hot identities of the previous, current and next phone (3 x 50),
  160 binary context questions about them, and 24 positional/numeric
  features in [0, 1] (position of the step in its phone, of the phone in
  its syllable, of the syllable in its word, of the word in the utterance,
  durations and counts). 25-100 steps.

Sequence i of a model is the same on every machine: each is generated from
its own seeded generator, independent of how many are asked for.
"""

from __future__ import annotations

import numpy as np

SEQUENCES = 50
"""How many sequences MLTS scores per speech model."""

DATASET_VERSION = "1"
"""Changes whenever the generated sequences change (part of cache keys)."""

ASR_BANDS = 40
ASR_STACK = 8
ASR_PHONES = 41
ASR_STEPS = (40, 160)
TTS_PHONES = 50
TTS_QUESTIONS = (80, 40, 40)  # about the current, previous and next phone
TTS_NUMERIC = 24
TTS_STEPS = (25, 100)
_ASR_SALT = 0x617372
_TTS_SALT = 0x747473


def _phone_string(
    rng: np.random.Generator, frames: int, phones: int, durations: tuple[int, int]
) -> np.ndarray:
    """Phone index per frame: segments of random phones with random durations (silence = phone 0 at both ends)."""
    ids: list[int] = []
    lengths: list[int] = []
    total = 0
    while total < frames:
        first_or_last = not ids or total + durations[1] >= frames
        ids.append(0 if first_or_last else int(rng.integers(1, phones)))
        n = int(rng.integers(durations[0], durations[1] + 1))
        lengths.append(n)
        total += n
    return np.repeat(np.asarray(ids), lengths)[:frames]


def _asr_templates() -> tuple[np.ndarray, np.ndarray]:
    """Per phone: log-mel envelope [phones, bands] and mean log energy [phones]; phone 0 is silence."""
    rng = np.random.default_rng(_ASR_SALT)
    bands = np.arange(ASR_BANDS, dtype=np.float64)
    envelope = np.empty((ASR_PHONES, ASR_BANDS))
    for p in range(ASR_PHONES):
        centers = np.sort(rng.uniform(2, ASR_BANDS - 2, 3))
        widths = rng.uniform(1.5, 5.0, 3)
        heights = rng.uniform(1.0, 3.0, 3)
        bumps = heights[:, None] * np.exp(-0.5 * ((bands[None] - centers[:, None]) / widths[:, None]) ** 2)
        envelope[p] = bumps.sum(0) - rng.uniform(0.01, 0.06) * bands
    energy = rng.uniform(2.0, 6.0, ASR_PHONES)
    envelope[0] = -0.02 * bands
    energy[0] = -2.0
    return envelope, energy


def _smooth(x: np.ndarray, passes: int) -> np.ndarray:
    """[0.25, 0.5, 0.25] along axis 0, `passes` times, edges repeated."""
    for _ in range(passes):
        padded = np.concatenate([x[:1], x, x[-1:]])
        x = 0.25 * padded[:-2] + 0.5 * padded[1:-1] + 0.25 * padded[2:]
    return x


def asr_sequence(index: int) -> np.ndarray:
    """ASR sequence `index`: float32 [steps, 320] (8 stacked frames of 40 normalised log-mel bands)."""
    if index < 0:
        raise ValueError(f"sequence index {index} is negative")
    rng = np.random.default_rng([_ASR_SALT, index])
    steps = int(rng.integers(ASR_STEPS[0], ASR_STEPS[1] + 1))
    frames = steps + ASR_STACK - 1
    envelope, energy = _asr_templates()
    phones = _phone_string(rng, frames, ASR_PHONES, (3, 12))
    # Energy rises and falls within each phone: a slow random contour.
    contour = _smooth(rng.normal(0.0, 0.8, frames), 6)
    logmel = envelope[phones] + (energy[phones] + contour)[:, None]
    logmel = _smooth(logmel, 2) + rng.normal(0.0, 0.3, logmel.shape)
    logmel = (logmel - logmel.mean(0)) / np.maximum(logmel.std(0), 1e-3)
    windows = np.lib.stride_tricks.sliding_window_view(logmel, ASR_STACK, axis=0)  # [steps, bands, stack]
    return np.ascontiguousarray(windows.transpose(0, 2, 1).reshape(steps, ASR_STACK * ASR_BANDS), np.float32)


def _tts_questions() -> list[np.ndarray]:
    """Binary answer tables [phones, questions] for the current, previous and next phone."""
    rng = np.random.default_rng(_TTS_SALT)
    return [(rng.random((TTS_PHONES, n)) < 0.3).astype(np.float64) for n in TTS_QUESTIONS]


def _position(group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per item: its index within its run of equal `group` values / (run length - 1), and the run length."""
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    lengths = np.diff(np.r_[starts, len(group)])
    run = np.repeat(np.arange(len(starts)), lengths)
    index = np.arange(len(group)) - starts[run]
    length = lengths[run]
    return index / np.maximum(length - 1, 1), length


def tts_sequence(index: int) -> np.ndarray:
    """TTS sequence `index`: float32 [steps, 334] linguistic features (see the module docstring)."""
    if index < 0:
        raise ValueError(f"sequence index {index} is negative")
    rng = np.random.default_rng([_TTS_SALT, index])
    steps = int(rng.integers(TTS_STEPS[0], TTS_STEPS[1] + 1))
    phone_of_step = _phone_string(rng, steps, TTS_PHONES, (2, 8))
    # Phone segments, then syllables of 2-4 phones and words of 1-3 syllables over them.
    seg = np.cumsum(np.r_[0, phone_of_step[1:] != phone_of_step[:-1]])
    n_seg = int(seg[-1]) + 1
    seg_phone = phone_of_step[np.r_[0, np.flatnonzero(np.diff(seg)) + 1]]
    syllable = np.repeat(np.arange(n_seg), rng.integers(2, 5, n_seg))[:n_seg]
    word = np.repeat(np.arange(n_seg), rng.integers(1, 4, n_seg))[syllable]
    prev_phone = np.r_[0, seg_phone[:-1]][seg]
    next_phone = np.r_[seg_phone[1:], 0][seg]
    current = phone_of_step
    eye = np.eye(TTS_PHONES)
    q_cur, q_prev, q_next = _tts_questions()
    in_phone, phone_len = _position(seg)
    in_syllable, syllable_len = _position(syllable[seg])
    in_word, word_len = _position(word[seg])
    stressed = (rng.random(n_seg) < 0.35)[syllable][seg]
    progress = np.arange(steps) / max(steps - 1, 1)
    numeric = np.stack(
        [
            in_phone,
            1.0 - in_phone,
            np.minimum(phone_len / 8.0, 1.0),
            in_syllable,
            1.0 - in_syllable,
            np.minimum(syllable_len / 24.0, 1.0),
            in_word,
            1.0 - in_word,
            np.minimum(word_len / 64.0, 1.0),
            progress,
            1.0 - progress,
            stressed.astype(np.float64),
            (current == 0).astype(np.float64),
            (prev_phone == 0).astype(np.float64),
            (next_phone == 0).astype(np.float64),
            np.full(steps, min(steps / TTS_STEPS[1], 1.0)),
            np.full(steps, min(n_seg / 40.0, 1.0)),
            np.minimum(seg / 40.0, 1.0),
            0.5 + 0.5 * np.sin(2 * np.pi * progress),
            0.5 + 0.5 * np.cos(2 * np.pi * progress),
            0.5 + 0.5 * np.sin(np.pi * in_phone),
            0.5 + 0.5 * np.sin(np.pi * in_word),
            np.minimum(syllable[seg] / 20.0, 1.0),
            np.minimum(word[seg] / 10.0, 1.0),
        ],
        axis=1,
    )
    assert numeric.shape[1] == TTS_NUMERIC
    features = np.concatenate(
        [
            eye[prev_phone],
            eye[current],
            eye[next_phone],
            q_cur[current],
            q_prev[prev_phone],
            q_next[next_phone],
            numeric,
        ],
        axis=1,
    )
    return features.astype(np.float32)


GENERATORS = {"asr_float": asr_sequence, "tts_float": tts_sequence}
FEATURES = {
    "asr_float": ASR_STACK * ASR_BANDS,
    "tts_float": 3 * TTS_PHONES + sum(TTS_QUESTIONS) + TTS_NUMERIC,
}


def sequences(model: str, count: int = SEQUENCES, start: int = 0) -> list[np.ndarray]:
    """Sequences start..start+count-1 for speech model `model` ("asr_float" or "tts_float")."""
    try:
        make = GENERATORS[model]
    except KeyError:
        raise ValueError(f"no speech dataset for model {model!r}; known: {', '.join(GENERATORS)}") from None
    if count < 0:
        raise ValueError(f"sequence count {count} is negative")
    return [make(i) for i in range(start, start + count)]
