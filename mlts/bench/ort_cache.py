"""onnxruntime's reference outputs of a benchmark's inputs, cached on disk between runs.

The benchmark scores every driver against onnxruntime's outputs on the same
inputs. Computing them runs the whole input set through onnxruntime once per
model; a repeated run (the same model file, inputs, onnxruntime version,
thread count and CPU) reads them from <cache>/ort_outputs/ instead. The key
covers everything the outputs depend on: the model's bytes, every input's
dtype, shape and bytes, onnxruntime's version, the intra-op thread count (the
order of float reductions can depend on it), the CPU model and its features
(onnxruntime picks kernels by instruction set) and the cache format's version.
A cache file that cannot be read, or whose contents do not match the inputs,
is ignored with a warning and recomputed.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mlts.datasets.cache import cache_root
from mlts.hal.atomic import write_atomic

# Raised whenever the file layout or what the outputs depend on changes.
ORT_CACHE_VERSION = "1"

Feeds = Sequence[Sequence[np.ndarray]]
Outputs = list[list[np.ndarray]]


def _cpu() -> str:
    from mlts.records.environment import cpu_flags, cpu_model

    return f"{cpu_model()}|{' '.join(sorted(cpu_flags() or ()))}"


def _ort_version() -> str:
    import onnxruntime

    return str(onnxruntime.__version__)


def cache_key(model_bytes: bytes, feeds: Feeds, threads: int) -> str:
    """The hex digest naming the outputs of `model_bytes` on `feeds` at `threads` on this machine."""
    h = hashlib.sha256()
    for part in (ORT_CACHE_VERSION, _ort_version(), str(int(threads)), _cpu()):
        h.update(part.encode() + b"\0")
    h.update(hashlib.sha256(model_bytes).digest())
    h.update(len(feeds).to_bytes(8, "little"))
    for feed in feeds:
        h.update(len(feed).to_bytes(8, "little"))
        for a in feed:
            a = np.ascontiguousarray(a)
            h.update(f"{a.dtype.str}{a.shape}".encode() + b"\0")
            h.update(a.tobytes())
    return h.hexdigest()


def cache_path(key: str) -> Path:
    return cache_root() / "ort_outputs" / f"{key}.npz"


def _encode(outputs: Outputs) -> bytes:
    arrays: dict[str, Any] = {
        f"o{i}_{j}": np.asarray(o) for i, outs in enumerate(outputs) for j, o in enumerate(outs)
    }
    arrays["counts"] = np.array([len(outs) for outs in outputs], dtype=np.int64)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _decode(path: Path, feeds: int) -> Outputs:
    """The outputs stored at `path`; ValueError (or an I/O error) when they are not a whole set."""
    with np.load(path, allow_pickle=False) as z:
        counts = z["counts"]
        if counts.ndim != 1 or len(counts) != feeds:
            raise ValueError(f"holds outputs of {counts.size} inputs, not {feeds}")
        return [[np.array(z[f"o{i}_{j}"]) for j in range(int(n))] for i, n in enumerate(counts)]


def reference_outputs(
    model_bytes: bytes,
    feeds: Feeds,
    threads: int,
    run: Callable[[Sequence[np.ndarray]], list[np.ndarray]],
    warn: Callable[[str], None] = lambda message: None,
    on_step: Callable[[int, int], None] | None = None,
) -> tuple[Outputs, bool]:
    """(outputs of `run` on every feed, whether they came from the cache).

    A cache file that cannot be used is reported through `warn` and replaced; `on_step(done, total)`
    follows the feeds run.
    """
    path = cache_path(cache_key(model_bytes, feeds, threads))
    if path.is_file():
        try:
            return _decode(path, len(feeds)), True
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
            reason = " ".join(str(e).split()) or type(e).__name__
            warn(f"ignoring unusable cached onnxruntime outputs {path}: {reason}; recomputing them")
    outputs = []
    for f in feeds:
        outputs.append(list(run(f)))
        if on_step is not None:
            on_step(len(outputs), len(feeds))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, _encode(outputs))
    except OSError as e:
        warn(f"cannot cache onnxruntime outputs in {path}: {e}")
    return outputs, False
