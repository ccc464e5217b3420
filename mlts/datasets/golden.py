"""Golden outputs: a float64 reference run, independent of both the driver and onnxruntime, cached.

The reference is `onnx.reference` (ONNX's own NumPy implementation of the
operators) evaluating a float64 copy of the model: every float initializer,
input and output becomes DOUBLE, so the only float32 rounding left is that of
the weights themselves (which are the model). The operators onnx.reference
computes element by element in Python (Conv, ConvTranspose, MaxPool,
AveragePool) and LRN (which it gets wrong for a batch of one) run vectorised
kernels of our own instead (`GOLDEN_OPS`: `_golden_conv`, `_golden_pool`).

Every output of every input is cached on its own under
<cache>/golden/<label>.<model key>/<input key>.npz (the model key covers the
model bytes and the reference's version, the input key the input's names,
types, shapes and bytes), so a changed model or input never serves stale
outputs, a corrupt file is recomputed, and a run over more or other inputs
computes only the ones not cached yet. When the inputs left to compute would
take long (timed on the first one), they are split among worker processes
(MLTS_GOLDEN_WORKERS, default one per CPU up to 4), each making the float64
copy once and running the reference on its chunks with one BLAS thread; each
chunk is stored as it lands, so an interrupted run keeps what it computed.
"""

from __future__ import annotations

import hashlib
import io
import os
import time
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from mlts.datasets.cache import build_lock, cache_root
from mlts.hal.atomic import write_atomic

_FLOAT_TYPES = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16)


# Raised whenever the golden computation changes, so cached outputs of the old one are not served.
GOLDEN_VERSION = "5"


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

    Subgraphs (If, Loop and Scan bodies) are cast the same way, so a branch's own float constants meet
    float64 values. Inference-mode BatchNormalization is folded into a float64 Mul + Add (see
    _fold_batch_norms).
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    _float64_graph(out.graph)
    return out


def _float64_graph(g: onnx.GraphProto) -> None:
    """Cast graph `g` (and its subgraphs) to float64 in place."""
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
            elif attr.type == onnx.AttributeProto.GRAPH:
                _float64_graph(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    _float64_graph(sub)
        if node.op_type == "Cast":
            for attr in node.attribute:
                if attr.name == "to" and attr.i in _FLOAT_TYPES:
                    attr.i = TensorProto.DOUBLE
    for vi in [*g.input, *g.output]:
        if vi.type.tensor_type.elem_type in _FLOAT_TYPES:
            vi.type.tensor_type.elem_type = TensorProto.DOUBLE
    del g.value_info[:]


def golden_ops() -> list:
    """The vectorised kernels that replace onnx.reference's own in the golden run."""
    from mlts.datasets._golden_conv import Conv, ConvTranspose
    from mlts.datasets._golden_pool import LRN, AveragePool, MaxPool

    return [Conv, ConvTranspose, MaxPool, AveragePool, LRN]


def evaluator(model: onnx.ModelProto):
    """onnx.reference's evaluator of the float64 copy of `model`, with the golden kernels."""
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(float64_copy(model), new_ops=golden_ops())


def reference_outputs(
    model: onnx.ModelProto, feeds: Sequence[dict[str, np.ndarray]], on_step: Step | None = None
) -> list[list[np.ndarray]]:
    """Every output of the float64 copy of `model` for each feed (inputs given as any float dtype).

    `on_step(done, total)` is called after each feed (a long run's progress)."""
    return _run_feeds(evaluator(model), feeds, on_step)


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

#: Worker processes pay only when the inputs left would take this long in one process (seconds):
#: starting them (a fresh interpreter importing NumPy and onnx, the float64 copy) costs about 2 s.
PARALLEL_SECONDS = 6.0


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
    _worker_evaluator[:] = [evaluator(onnx.load_from_string(model_bytes))]


def _reference_chunk(feeds: Sequence[dict[str, np.ndarray]]) -> list[list[np.ndarray]]:
    return _run_feeds(_worker_evaluator[0], feeds)


#: (index of the feed, its outputs): called as each feed's outputs are known.
Landed = Callable[[int, list[np.ndarray]], None]


def _compute(model_bytes: bytes, feeds: Sequence[dict[str, np.ndarray]], landed: Landed) -> None:
    """Every output of each feed, handed to `landed` in feed order as it is known.

    The first feed runs in this process and is timed; the rest go to worker processes when more
    than one CPU is there and they would take longer than PARALLEL_SECONDS here, else they run here.
    """
    if not feeds:
        return
    run = evaluator(onnx.load_from_string(model_bytes))
    t0 = time.perf_counter()
    landed(0, _run_feeds(run, feeds[:1])[0])
    rest = feeds[1:]
    workers = min(_workers(), len(rest))
    if workers <= 1 or (time.perf_counter() - t0) * len(rest) < PARALLEL_SECONDS:
        for k, feed in enumerate(rest, start=1):
            landed(k, _run_feeds(run, [feed])[0])
        return
    del run
    _compute_in_workers(model_bytes, rest, workers, lambda k, outs: landed(k + 1, outs))


def _compute_in_workers(
    model_bytes: bytes, feeds: Sequence[dict[str, np.ndarray]], workers: int, landed: Landed
) -> None:
    """The feeds split into contiguous chunks run by spawned worker processes (the float64 run is
    NumPy on one core per process); each chunk's outputs go to `landed` as it lands, in feed order."""
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
            for start, part in zip(bounds[:-1], pool.map(_reference_chunk, chunks), strict=True):
                for offset, outs in enumerate(part):
                    landed(int(start) + offset, outs)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _model_key(model_bytes: bytes) -> str:
    h = hashlib.sha256(model_bytes)
    h.update(f"onnx{onnx.__version__}:golden{GOLDEN_VERSION}".encode())
    return h.hexdigest()[:24]


def _feed_key(feed: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(feed):
        arr = np.ascontiguousarray(feed[name])
        h.update(f"{name}:{arr.dtype}:{arr.shape}".encode())
        h.update(arr.tobytes())
    return h.hexdigest()[:24]


def _read(path: Path) -> list[np.ndarray] | None:
    """The outputs stored at `path`, or None when it is missing, unreadable or not what golden writes."""
    try:
        with np.load(path) as data:
            names = [f"out{i}" for i in range(len(data.files))]
            if sorted(data.files) != sorted(names) or not names:
                return None
            outs = [data[n] for n in names]
    except (OSError, ValueError, zipfile.BadZipFile, EOFError):
        return None
    return outs if all(o.dtype == np.float64 for o in outs) else None


def _write(path: Path, outs: list[np.ndarray]) -> None:
    buf = io.BytesIO()
    arrays: dict[str, Any] = {f"out{i}": o for i, o in enumerate(outs)}
    np.savez(buf, **arrays)
    write_atomic(path, buf.getvalue())


def golden_all_outputs(
    model: onnx.ModelProto, feeds: Sequence[dict[str, np.ndarray]], label: str, on_step: Step | None = None
) -> list[list[np.ndarray]]:
    """Every float64 reference output for each feed: from the cache, computing only the feeds not in it.

    `label` names the cache folder (e.g. the model name) so people can see what it is;
    `on_step(done, total)` follows the feeds computed (those from the cache count as done at once).
    """
    model_bytes = model.SerializeToString()
    folder = cache_root() / "golden" / f"{label}.{_model_key(model_bytes)}"
    paths = [folder / f"{_feed_key(f)}.npz" for f in feeds]
    results: list[list[np.ndarray] | None] = [_read(p) if p.is_file() else None for p in paths]
    if all(r is not None for r in results):
        if feeds and on_step is not None:
            on_step(len(feeds), len(feeds))
        return [r for r in results if r is not None]
    with build_lock(folder):
        # Another process may have computed some of them while this one waited for the lock.
        results = [
            r if r is not None else _read(p) if p.is_file() else None
            for r, p in zip(results, paths, strict=True)
        ]
        _fill(model_bytes, feeds, paths, results, folder, on_step)
    return [r for r in results if r is not None]


def _fill(
    model_bytes: bytes, feeds, paths: list[Path], results: list, folder: Path, on_step: Step | None
) -> None:
    """Compute and store the outputs of the feeds whose `results` entry is None, filling it in."""
    todo: dict[Path, list[int]] = {}
    for i, (path, outs) in enumerate(zip(paths, results, strict=True)):
        if outs is None:
            todo.setdefault(path, []).append(i)  # equal feeds are computed once
    done = len(feeds) - sum(len(v) for v in todo.values())
    if done and on_step is not None:
        on_step(done, len(feeds))
    if todo:
        folder.mkdir(parents=True, exist_ok=True)
        order = list(todo)

        def landed(k: int, outs: list[np.ndarray]) -> None:
            nonlocal done
            _write(order[k], outs)
            for i in todo[order[k]]:
                results[i] = outs
            done += len(todo[order[k]])
            if on_step is not None:
                on_step(done, len(feeds))

        _compute(model_bytes, [feeds[todo[p][0]] for p in order], landed)


def golden_outputs(
    model: onnx.ModelProto, feeds: Sequence[dict[str, np.ndarray]], label: str, on_step: Step | None = None
) -> list[np.ndarray]:
    """The float64 reference's first output for each feed (golden_all_outputs, cached the same way)."""
    return [outs[0] for outs in golden_all_outputs(model, feeds, label, on_step)]
