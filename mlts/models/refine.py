"""A fixed-point refinement block: the zoo's model with a data-dependent loop (ONNX Loop -> NNAPI WHILE).

    u = x U + b
    z = tanh(u);  repeat  z' = tanh(z W + u)  while mean((z' - z)^2) > TOL, at most MAX_ITERATIONS times
    y = x + z V

as in deep-equilibrium layers and iterative decoders: the number of iterations depends on the input,
so the benchmark runs WHILE with a condition the body computes, not a fixed count. W is a random
orthogonal matrix scaled to spectral norm CONTRACTION < 1 and tanh is 1-Lipschitz, so every
iteration shrinks the change by at least that factor: the loop always converges, in a handful of
iterations, and a float32 run stops at the same iteration as the float64 golden run except when a
change lands within rounding of TOL. Every constant lives in the main graph (the body reads them
from outside), so the float64 golden copy converts them too.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from mlts.models._onnx_graph import GraphBuilder

NAME = "iterative_refinement"
TOKENS = 16
DIM = 64
CONTRACTION = 0.35
TOL = 1e-8
MAX_ITERATIONS = 40


def _body() -> onnx.GraphProto:
    nodes = [
        helper.make_node("MatMul", ["z_in", "w"], ["zw"]),
        helper.make_node("Add", ["zw", "u"], ["pre"]),
        helper.make_node("Tanh", ["pre"], ["z_out"]),
        helper.make_node("Sub", ["z_out", "z_in"], ["change"]),
        helper.make_node("Mul", ["change", "change"], ["change2"]),
        helper.make_node("ReduceMean", ["change2"], ["msd"], keepdims=1),
        helper.make_node("Greater", ["msd", "tol"], ["again"]),
    ]
    return helper.make_graph(
        nodes,
        "refine_step",
        [
            helper.make_tensor_value_info("iteration", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, None),
            helper.make_tensor_value_info("z_in", TensorProto.FLOAT, [TOKENS, DIM]),
        ],
        [
            helper.make_tensor_value_info("again", TensorProto.BOOL, [1, 1]),
            helper.make_tensor_value_info("z_out", TensorProto.FLOAT, [TOKENS, DIM]),
        ],
    )


def iterative_refinement(seed: int = 401) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    g = GraphBuilder()
    q, _ = np.linalg.qr(rng.standard_normal((DIM, DIM)))
    g.constant("w", (q * CONTRACTION).astype(np.float32))
    u_w = g.constant("u_w", (rng.standard_normal((DIM, DIM)) * np.sqrt(1.0 / DIM)).astype(np.float32))
    u_b = g.constant("u_b", (rng.standard_normal(DIM) * 0.1).astype(np.float32))
    v_w = g.constant("v_w", (rng.standard_normal((DIM, DIM)) * np.sqrt(1.0 / DIM)).astype(np.float32))
    g.constant("tol", np.array(TOL, np.float32))
    trip = g.constant("max_iterations", np.array(MAX_ITERATIONS, np.int64))
    start = g.constant("start", np.array(True))
    u = g.node("Add", [g.node("MatMul", ["input", u_w], "u_mm"), u_b], "u")
    z0 = g.node("Tanh", [u], "z0")
    g.node("Loop", [trip, start, z0], "z", body=_body())
    g.node("Add", ["input", g.node("MatMul", ["z", v_w], "zv")], "output")
    model = g.finish(
        NAME,
        [("input", (TOKENS, DIM))],
        [("output", (TOKENS, DIM))],
        doc=(
            f"Fixed-point refinement of {TOKENS} tokens of width {DIM}: an ONNX Loop until the mean "
            f"squared change is at most {TOL:g} (at most {MAX_ITERATIONS} iterations)"
        ),
    )
    # ONNX's shape inference leaves a loop-carried output's shape open (it could change per iteration);
    # this one keeps its shape, and saying so lets tools that read the model (MAC counts) see it.
    model.graph.value_info.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [TOKENS, DIM]))
    onnx.checker.check_model(model)
    return model
