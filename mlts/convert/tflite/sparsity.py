"""Sparse TFLite weights made dense, as TFLite's own FormatConverter<T>::SparseToDense does.

A sparse tensor stores its non-zero values in traversal order: `traversal_order` lists the original
dimensions (0..rank-1) then the block dimensions (rank..rank+len(block_map)-1) from outermost to
innermost; each of those levels is DENSE (every index 0..dense_size-1) or SPARSE_CSR (for the
position reached so far, the indices between segments[p] and segments[p+1] of its indices array).
The leaves, in that order, take the stored values one after the other; an original coordinate is
its level index times the block size plus the index within the block. Everything else is zero.

The walk is done level by level over NumPy arrays (no recursion per element). A file whose
metadata points outside its arrays, stores fewer values than it addresses, or addresses a
coordinate outside the tensor's shape is refused rather than read past.
"""

from __future__ import annotations

import numpy as np

from mlts.convert.errors import ConversionError
from mlts.convert.tflite import schema
from mlts.convert.tflite.model import Sparsity, Tensor


def densify(tensor: Tensor, stored: np.ndarray, where: str) -> np.ndarray:
    """The dense value (tensor.shape, the tensor's dtype) of a sparse tensor's stored values."""
    sp = tensor.sparsity
    assert sp is not None
    shape = tensor.shape
    rank = len(shape)
    order = sp.traversal_order
    total = len(order)

    def bad(reason: str) -> ConversionError:
        return ConversionError(f"{where}: sparse {tensor.describe()}: {reason}")

    if sorted(order) != list(range(total)) or total != rank + len(sp.block_map):
        raise bad(
            f"traversal order {list(order)} is not a permutation of its {rank} + {len(sp.block_map)} dimensions"
        )
    if any(not 0 <= b < rank for b in sp.block_map) or len(set(sp.block_map)) != len(sp.block_map):
        raise bad(f"block map {list(sp.block_map)} names dimensions outside its rank {rank}")
    block_size = _block_sizes(sp, shape, bad)
    coords, count = _walk(sp, bad, tensor.size)
    if count > len(stored):
        raise bad(f"the metadata addresses {count} values but {len(stored)} are stored")
    # Leaf coordinates (one column per traversal level) -> original coordinates.
    original = np.zeros((count, rank), dtype=np.int64)
    for level in range(rank):
        original[:, order[level]] = coords[:, level]
    for level in range(rank, total):
        block = order[level] - rank
        dim = sp.block_map[block]
        original[:, dim] = original[:, dim] * block_size[block] + coords[:, level]
    limits = np.asarray(shape, dtype=np.int64)
    if count and (np.any(original < 0) or np.any(original >= limits)):
        raise bad(f"the metadata addresses a coordinate outside the shape {list(shape)}")
    dense = np.zeros(tensor.size, dtype=schema.dtype_of(tensor.type))
    if count:
        flat = np.ravel_multi_index(tuple(original.T), shape) if rank else np.zeros(count, dtype=np.int64)
        dense[flat] = stored[:count]
    return dense.reshape(shape)


def _block_sizes(sp: Sparsity, shape: tuple[int, ...], bad) -> list[int]:
    """The size of each block dimension (the dense size of its traversal level), dividing its dimension."""
    rank = len(shape)
    sizes = []
    for k, dim in enumerate(sp.block_map):
        level = sp.traversal_order.index(rank + k)
        size = sp.dims[level].dense_size
        if sp.dims[level].format != schema.DIM_DENSE or size <= 0 or shape[dim] % size:
            raise bad(f"block dimension {k} (size {size}) is not a dense block dividing dimension {dim}")
        sizes.append(size)
    return sizes


def _walk(sp: Sparsity, bad, limit: int) -> tuple[np.ndarray, int]:
    """Every leaf's index per traversal level, in storage order; refused when above `limit` leaves."""
    positions = np.zeros(1, dtype=np.int64)  # the previous level's position of each partial coordinate
    coords = np.zeros((1, 0), dtype=np.int64)
    for level, meta in enumerate(sp.dims):
        if meta.format == schema.DIM_DENSE:
            size = meta.dense_size
            if size < 0 or len(positions) * size > limit:
                raise bad(
                    f"dense level {level} of size {size} addresses more than the tensor's {limit} values"
                )
            idx = np.tile(np.arange(size, dtype=np.int64), len(positions))
            positions = np.repeat(positions, size) * size + idx
            coords = np.hstack([np.repeat(coords, size, axis=0), idx[:, None]])
            continue
        segments, indices = meta.segments, meta.indices
        assert segments is not None and indices is not None
        # TFLite skips a position with no segment entry after it.
        has = positions + 1 < len(segments)
        positions, coords = positions[has], coords[has]
        starts, ends = segments[positions], segments[positions + 1]
        if np.any(starts < 0) or np.any(ends < starts) or np.any(ends > len(indices)):
            raise bad(f"sparse level {level} has segments outside its {len(indices)} indices")
        counts = ends - starts
        n = int(counts.sum())
        if n > limit:
            raise bad(f"sparse level {level} addresses more than the tensor's {limit} values")
        # i runs over [start, end) of each position, in order.
        first = np.repeat(starts - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
        i = np.arange(n, dtype=np.int64) + first
        coords = np.hstack([np.repeat(coords, counts, axis=0), indices[i][:, None]])
        positions = i
    return coords, len(positions)
