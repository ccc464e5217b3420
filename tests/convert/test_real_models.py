"""Real trained ONNX models from PyPI packages (the `real-models` extra): convert, run, compare.

Each model in mlts.models.real.REAL_MODELS whose package is installed is converted with the input
shapes and values a user would give, run on the sample driver's in-process executor, and compared
with onnxruntime running the original file on the same inputs. A model whose package is missing is
skipped, naming the package and the extra.

Rule (the whole-network float rule's floor, mlts.records.tolerance.WHOLE_NETWORK_FLOAT): for each
output, max |driver - onnxruntime| <= 64 float32 epsilons of the output's largest magnitude (at least
1). Per element CTS tolerances are the wrong scale for whole networks (see records/tolerance.py):
a 30-layer model agreeing with onnxruntime to 1e-6 still drifts past 1e-5 + 5 ulp on large logits.

Inputs are deterministic: a speech-like signal (a chirp and harmonics with a little noise) for audio,
uniform values in [-1, 1] for images (the normalised range these exporters feed), bytes 0..255 for
Magika, and small random state for recurrent inputs (zeros would hide a wrong state path). The input
sizes are the small ones in the table, so the whole file runs in seconds.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from mlts.convert import convert, prepare_input
from mlts.hal.validate import validate_model
from mlts.models import real
from mlts.records.tolerance import FP32_EPS, WHOLE_NETWORK_FLOAT

FLOOR = WHOLE_NETWORK_FLOAT.floor_eps * FP32_EPS


def _signal(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    n = shape[-1]
    t = np.arange(n) / 16000.0
    tone = 0.3 * np.sin(2 * np.pi * (220 + 2000 * t) * t) + 0.1 * np.sin(2 * np.pi * 660 * t)
    sig = np.broadcast_to(tone, shape) + 0.02 * rng.standard_normal(shape)
    return sig.astype(np.float32)


def feeds_for(model: real.RealModel, session: ort.InferenceSession) -> dict[str, np.ndarray]:
    """onnxruntime feeds for every input of the original model (fixed values included)."""
    rng = np.random.default_rng(7)
    state_inputs = {i for i, _ in model.state}
    feeds: dict[str, np.ndarray] = {}
    for inp in session.get_inputs():
        name = inp.name
        if name in model.input_values:
            dtype = np.int64 if "int64" in inp.type else np.int32 if "int32" in inp.type else np.float32
            feeds[name] = np.asarray(model.input_values[name], dtype)
            continue
        shape = tuple(model.input_shapes.get(name) or inp.shape)
        if "int" in inp.type:
            feeds[name] = rng.integers(0, 256, shape).astype(np.int64 if "int64" in inp.type else np.int32)
        elif name in state_inputs:
            feeds[name] = (0.1 * rng.standard_normal(shape)).astype(np.float32)
        elif model.kind == "speech-probability":
            feeds[name] = _signal(shape, rng)
        else:
            feeds[name] = rng.uniform(-1.0, 1.0, shape).astype(np.float32)
    return feeds


@pytest.mark.parametrize("name", [m.name for m in real.REAL_MODELS])
def test_real_model_converts_and_runs_like_onnxruntime(name: str) -> None:
    from driver.executor import run_model

    model = real.by_name(name)
    if not real.installed(model):
        pytest.skip(f"package '{model.package}' is not installed (pip install 'mlts[real-models]')")
    path = real.find(model)
    values = {k: np.asarray(v) for k, v in model.input_values.items()}
    conv = convert(path, input_shapes=model.input_shapes, input_values=values)
    validate_model(conv.model)
    assert {i.name for i in conv.inputs}.isdisjoint(values), "fixed inputs are constants, not inputs"
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = feeds_for(model, session)
    expected = session.run([o.name for o in conv.outputs], feeds)
    actual = run_model(conv.model, [prepare_input(i, feeds[i.name]) for i in conv.inputs])
    for info, got, want in zip(conv.outputs, actual, expected, strict=True):
        want = np.asarray(want)
        assert got.shape == want.shape, f"{info.name}: shape {got.shape}, onnxruntime {want.shape}"
        assert np.all(np.isfinite(got)), f"{info.name}: non-finite values"
        err = float(np.max(np.abs(got.astype(np.float64) - want)))
        limit = FLOOR * max(1.0, float(np.max(np.abs(want))))
        assert err <= limit, f"{info.name}: max |driver - onnxruntime| {err:.3g} > {limit:.3g}"


def test_recurrent_state_round_trips() -> None:
    """Feeding a state output back as the next window's state gives what onnxruntime gives."""
    from driver.executor import run_model

    model = real.by_name("silero-vad")
    if not real.installed(model):
        pytest.skip(f"package '{model.package}' is not installed (pip install 'mlts[real-models]')")
    path = real.find(model)
    conv = convert(path, input_shapes=model.input_shapes, input_values={"sr": np.asarray(16000)})
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    signal = _signal((1, 576 * 3), rng)
    ours = theirs = np.zeros((2, 1, 128), np.float32)
    names = [o.name for o in conv.outputs]
    for k in range(3):
        window = signal[:, k * 512 : k * 512 + 576]
        prob_ort, theirs = session.run(
            ["output", "stateN"], {"input": window, "state": theirs, "sr": np.asarray(16000, np.int64)}
        )
        got = dict(
            zip(
                names,
                run_model(conv.model, [window if i.name == "input" else ours for i in conv.inputs]),
                strict=True,
            )
        )
        ours = got["stateN"]
        assert abs(float(got["output"].reshape(-1)[0]) - float(prob_ort.reshape(-1)[0])) <= FLOOR
        assert float(np.max(np.abs(ours - theirs))) <= FLOOR * max(1.0, float(np.max(np.abs(theirs))))


def test_table_and_find() -> None:
    names = [m.name for m in real.REAL_MODELS]
    assert len(names) == len(set(names))
    assert all(m.kind in real.KINDS for m in real.REAL_MODELS)
    with pytest.raises(real.RealModelError, match="no real model is called 'nope'; they are: silero-vad"):
        real.by_name("nope")
    missing = real.RealModel("x", "no-such-package-mlts", "1", "x.onnx", "MIT", "classifier", "none")
    with pytest.raises(real.RealModelError, match=r"not installed \(pip install 'mlts\[real-models\]'\)"):
        real.find(missing)
    for m in real.REAL_MODELS:
        if real.installed(m):
            assert real.find(m).name == m.path.rsplit("/", 1)[-1]


def test_sample_rate_left_to_run_time_suggests_input_value() -> None:
    """Silero's If on `sr` cannot become an NNAPI IF (its branches differ in shapes): the refusal says
    which input the condition comes from and how to fix it."""
    from mlts.convert import ConversionError

    model = real.by_name("silero-vad")
    if not real.installed(model):
        pytest.skip(f"package '{model.package}' is not installed (pip install 'mlts[real-models]')")
    with pytest.raises(ConversionError) as info:
        convert(real.find(model), input_shapes=model.input_shapes)
    message = str(info.value)
    assert message.startswith("If node 'If_0': branch ")
    assert "computed from graph input 'sr': fixing its value with --input-value NAME=V" in message
