"""The zoo's data-dependent loop model: ONNX Loop -> WHILE on the sample driver, against onnxruntime and
a float64 NumPy transcription of the model."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import numpy_helper

from driver.executor import run_model
from mlts.convert import convert
from mlts.hal.enums import OperationType
from mlts.models import refine, zoo


def _numpy_reference(proto, x: np.ndarray) -> tuple[np.ndarray, int]:
    """The model written out in float64 from its weights: (output, iterations run)."""
    w = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in proto.graph.initializer}
    x = x.astype(np.float64)
    u = x @ w["u_w"] + w["u_b"]
    z, iterations = np.tanh(u), 0
    while iterations < refine.MAX_ITERATIONS:
        new = np.tanh(z @ w["w"] + u)
        again = np.mean((new - z) ** 2) > refine.TOL
        z, iterations = new, iterations + 1
        if not again:
            break
    return x + z @ w["v_w"], iterations


def test_refinement_runs_a_data_dependent_while_loop() -> None:
    proto = zoo.get(refine.NAME).build()
    conv = convert(proto)
    assert OperationType.WHILE in [op.type for op in conv.model.main.operations]
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    counts = []
    for scale in (0.05, 1.0, 4.0):
        x = (rng.standard_normal((refine.TOKENS, refine.DIM)) * scale).astype(np.float32)
        (want,) = session.run(None, {"input": x})
        (got,) = run_model(conv.model, [x])
        ref, iterations = _numpy_reference(proto, x)
        counts.append(iterations)
        assert iterations < refine.MAX_ITERATIONS  # it converged; the trip count did not end it
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=5 * 2**-23)
        np.testing.assert_allclose(got, ref, atol=1e-5, rtol=1e-5)
    assert len(set(counts)) > 1, counts  # how often the body runs depends on the input


def test_refinement_is_in_the_zoo_with_deterministic_weights() -> None:
    entry = zoo.get(refine.NAME)
    assert entry.input_shape == entry.output_shape == (refine.TOKENS, refine.DIM)
    a, b = entry.build(), entry.build()
    assert a.SerializeToString() == b.SerializeToString()
