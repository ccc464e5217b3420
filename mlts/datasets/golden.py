"""Golden outputs: a float64 reference run, independent of both the driver and onnxruntime, cached.

The reference is `onnx.reference` (ONNX's own NumPy implementation of the
operators, with a vectorised float64 Conv of our own: `_golden_conv`)
evaluating a float64 copy of the model: every float initializer,
input and output becomes DOUBLE, so the only float32 rounding left is that of
the weights themselves (which are the model). Results are cached under
<cache>/golden/ by a key made of the model bytes, the inputs and the
reference's version, so a changed model or dataset never serves stale
outputs; a corrupt cache file is recomputed. Many inputs are split among
worker processes (MLTS_GOLDEN_WORKERS, default one per CPU up to 4), each
making the float64 copy once and running the reference on its chunks with one BLAS thread.
"""

from __future__ import annotations

import hashlib
import io
import os
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from mlts.datasets.cache import cache_root, cached_file

_FLOAT_TYPES = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16)


# Raised whenever the golden computation changes, so cached outputs of the old one are not served.
GOLDEN_VERSION = "4"


#: A long computation's progress: (steps done, steps in all).
Step = Callable[[int, int], None]


def _fold_batch_norms(g: onnx.GraphProto) -> None:
    """Inference-mode BatchNormalization nodes with constant parameters become Mul + Add in float64.

    y = x * s + t with s = scale / sqrt(var + eps), t = bias - mean * s, per channel (axis 1).
    onnx.reference runs opset 9-13 BatchNormalization in training mode whenever the momentum
    attribute has its default value, so the golden run must not hand it these nodes.
    """
    inits = {t.name: t for t in g.initializer}
    nodes = []
    for node in g.node:
        params = node.input[1:5]
        if (
            node.op_type != "BatchNormalization"
            or len(node.output) != 1
            or not all(p in inits for p in params)
        ):
            nodes.append(node)
            continue
        scale, bias, mean, var = (numpy_helper.to_array(inits[p]).astype(np.float64) for p in params)
        eps = next((a.f for a in node.attribute if a.name == "epsilon"), 1e-5)
        s = scale / np.sqrt(var + np.float64(eps))
        t = bias - mean * s
        base = node.output[0] + "/golden"
        for name, value in ((base + "/s", s), (base + "/t", t)):
            g.initializer.append(numpy_helper.from_array(value.reshape(-1, 1, 1), name))
        nodes.append(onnx.helper.make_node("Mul", [node.input[0], base + "/s"], [base + "/xs"]))
        nodes.append(onnx.helper.make_node("Add", [base + "/xs", base + "/t"], [node.output[0]]))
    del g.node[:]
    g.node.extend(nodes)


def float64_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with float initializers, Constant values, inputs and outputs in float64; shapes re-inferred.

    Inference-mode BatchNormalization is folded into a float64 Mul + Add (see _fold_batch_norms).
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    _fold_batch_norms(g)
    for i, init in enumerate(g.initializer):
        if init.data_type in _FLOAT_TYPES:
            g.initializer[i].CopyFrom(
                numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float64), init.name)
            )
    for node in g.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type in _FLOAT_TYPES:
                attr.t.CopyFrom(
                    numpy_helper.from_array(numpy_helper.to_array(attr.t).astype(np.float64), attr.t.name)
                )
        if node.op_type == "Cast":
            for attr in node.attribute:
                if attr.name == "to" and attr.i in _FLOAT_TYPES:
                    attr.i = TensorProto.DOUBLE
    for vi in [*g.input, *g.output]:
        if vi.type.tensor_type.elem_type in _FLOAT_TYPES:
            vi.type.tensor_type.elem_type = TensorProto.DOUBLE
    del g.value_info[:]
    return out


def reference_outputs(
    model: onnx.ModelProto, feeds: Sequence[dict[str, np.ndarray]], on_step: Step | None = None
) -> list[list[np.ndarray]]:
    """Every output of the float64 copy of `model` for each feed (inputs given as any float dtype).

    `on_step(done, total)` is called after each feed (a long run's progress)."""
    from onnx.reference import ReferenceEvaluator

    from mlts.datasets._golden_conv import Conv

    return _run_feeds(ReferenceEvaluator(float64_copy(model), new_ops=[Conv]), feeds, on_step)


def _run_feeds(evaluator, feeds: Sequence[dict[str, np.ndarray]], on_step: Step | None = None) -> list:
    """Every output of `evaluator` (in float64) for each feed, its float inputs cast to float64."""
    results = []
    for feed in feeds:
        cast = {
            k: np.asarray(v, np.float64) if np.issubdtype(np.asarray(v).dtype, np.floating) else v
            for k, v in feed.items()
        }
        results.append([np.asarray(o, np.float64) for o in evaluator.run(None, cast)])
        if on_step is not None:
            on_step(len(results), len(feeds))
    return results


_ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

#: Below this many feeds the golden run stays in this process (starting workers costs seconds).
PARALLEL_FEEDS = 8


def _workers() -> int:
    """Golden worker processes: $MLTS_GOLDEN_WORKERS, else one per CPU this process may use (at most 4)."""
    value = os.environ.get("MLTS_GOLDEN_WORKERS", "").strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    try:
        return max(1, min(len(os.sched_getaffinity(0)), 4))
    except (AttributeError, OSError):
        return 1


#: Chunks of feeds per worker: each worker's share lands in pieces, so progress advances as they do.
CHUNKS_PER_WORKER = 5

_worker_evaluator: list = []  # in a worker process: the evaluator of the model it was started with


def _start_worker(model_bytes: bytes) -> None:
    """Worker initializer: the float64 copy of the model is made once per worker, not once per chunk."""
    from onnx.reference import ReferenceEvaluator

    from mlts.datasets._golden_conv import Conv

    _worker_evaluator[:] = [
        ReferenceEvaluator(float64_copy(onnx.load_from_string(model_bytes)), new_ops=[Conv])
    ]


def _reference_chunk(feeds: Sequence[dict[str, np.ndarray]]) -> list[list[np.ndarray]]:
    return _run_feeds(_worker_evaluator[0], feeds)


def _reference_in_workers(
    model_bytes: bytes, feeds: Sequence[dict[str, np.ndarray]], on_step: Step | None = None
) -> list[list[np.ndarray]]:
    """reference_outputs over `feeds`, split into contiguous chunks run by spawned worker processes
    (the float64 run is NumPy on one core per process); in this process for few feeds or one CPU."""
    workers = min(_workers(), len(feeds) // (PARALLEL_FEEDS // 2) or 1)
    if workers <= 1 or len(feeds) < PARALLEL_FEEDS:
        return reference_outputs(onnx.load_from_string(model_bytes), feeds, on_step)
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    pieces = min(len(feeds), workers * CHUNKS_PER_WORKER)
    bounds = np.linspace(0, len(feeds), pieces + 1).astype(int)
    chunks = [list(feeds[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    context = multiprocessing.get_context("spawn")
    saved = {k: os.environ.get(k) for k in _ONE_THREAD}
    os.environ.update(_ONE_THREAD)  # the workers inherit it: one BLAS thread each, one worker per CPU
    try:
        with ProcessPoolExecutor(
            workers, mp_context=context, initializer=_start_worker, initargs=(model_bytes,)
        ) as pool:
            parts = []
            for part in pool.map(_reference_chunk, chunks):
                parts.append(part)
                if on_step is not None:  # progress as each chunk lands, in feed order
                    on_step(sum(len(p) for p in parts), len(feeds))
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return [outs for part in parts for outs in part]


def _key(model_bytes: bytes, feeds: Sequence[dict[str, np.ndarray]]) -> str:
    h = hashlib.sha256(model_bytes)
    for feed in feeds:
        for name in sorted(feed):
            arr = np.ascontiguousarray(feed[name])
            h.update(f"{name}:{arr.dtype}:{arr.shape}".encode())
            h.update(arr.tobytes())
    h.update(f"onnx{onnx.__version__}:golden{GOLDEN_VERSION}".encode())
    return h.hexdigest()[:24]


def _valid_npz(path: Path, count: int) -> bool:
    try:
        with np.load(path) as data:
            return sorted(data.files) == sorted(f"out{i}" for i in range(count)) and all(
                data[f].dtype == np.float64 and np.isfinite(data[f]).all() for f in data.files
            )
    except (OSError, ValueError, zipfile.BadZipFile, EOFError):
        return False


def golden_outputs(
    model: onnx.ModelProto, feeds: Sequence[dict[str, np.ndarray]], label: str, on_step: Step | None = None
) -> list[np.ndarray]:
    """The float64 reference's first output for each feed, from the cache when it holds them.

    `label` names the cache file (e.g. the model name) so people can see what it is.
    """
    model_bytes = model.SerializeToString()
    path = cache_root() / "golden" / f"{label}.{_key(model_bytes, feeds)}.npz"

    def build() -> bytes:
        outs = _reference_in_workers(model_bytes, feeds, on_step)
        buf = io.BytesIO()
        arrays: dict[str, Any] = {f"out{i}": o[0] for i, o in enumerate(outs)}
        np.savez(buf, **arrays)
        return buf.getvalue()

    cached_file(path, lambda p: _valid_npz(p, len(feeds)), build)
    with np.load(path) as data:
        return [data[f"out{i}"] for i in range(len(feeds))]
