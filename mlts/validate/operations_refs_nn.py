"""Float64 references of the convolution, pooling, resize, fully-connected and RNN operations (NHWC).

Direct loops from NNAPI's definitions (explicit padding: left, right, top, bottom,
then stride width, stride height), independent of the driver's kernels; the cases are
small, so clarity beats speed. Registered into `operations_refs.REFERENCES`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mlts.validate.operations_refs import Ctx, fuse, ref


def _conv(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray,
    pads: tuple[int, int, int, int],
    stride: tuple[int, int],
    groups: int,
    dilation: tuple[int, int] = (1, 1),
) -> np.ndarray:
    """Grouped convolution; `w` is [out, fh, fw, in/groups]."""
    left, right, top, bottom = pads
    sw, sh = stride
    dw, dh = dilation
    x = np.pad(x, [(0, 0), (top, bottom), (left, right), (0, 0)])
    n, h, wd, cin = x.shape
    cout, fh, fw, _ = w.shape
    oh = (h - (fh - 1) * dh - 1) // sh + 1
    ow = (wd - (fw - 1) * dw - 1) // sw + 1
    per_in, per_out = cin // groups, cout // groups
    y = np.zeros((n, oh, ow, cout))
    for o in range(cout):
        g = o // per_out
        for i in range(fh):
            for j in range(fw):
                patch = x[
                    :, i * dh : i * dh + sh * (oh - 1) + 1 : sh, j * dw : j * dw + sw * (ow - 1) + 1 : sw
                ]
                y[..., o] += patch[..., g * per_in : (g + 1) * per_in] @ w[o, i, j]
        y[..., o] += b[o]
    return y


def _explicit(a: list[Any], at: int) -> tuple[tuple[int, int, int, int], tuple[int, int]]:
    pads = tuple(int(v) for v in a[at : at + 4])
    return pads, (int(a[at + 4]), int(a[at + 5]))  # type: ignore[return-value]


def _dilation(a: list[Any], at: int) -> tuple[int, int]:
    if len(a) > at + 1 and a[at] is not None:
        return int(a[at]), int(a[at + 1])
    return 1, 1


@ref("CONV_2D")
def _conv2d(a: list[Any], c: Ctx) -> list[np.ndarray]:
    pads, stride = _explicit(a, 3)
    return [fuse(_conv(a[0], a[1], a[2], pads, stride, 1, _dilation(a, 11)), a[9])]


@ref("DEPTHWISE_CONV_2D")
def _depthwise(a: list[Any], c: Ctx) -> list[np.ndarray]:
    pads, stride = _explicit(a, 3)
    x, w = a[0], a[1]
    mult = int(a[9])
    cin = x.shape[3]
    # Depthwise: output channel k reads input channel k // multiplier.
    x = np.repeat(x, mult, axis=3)
    weights = np.transpose(w, (3, 1, 2, 0))  # [out, fh, fw, 1]
    y = _conv(x, weights, a[2], pads, stride, cin * mult, _dilation(a, 12))
    return [fuse(y, a[10])]


@ref("GROUPED_CONV_2D")
def _grouped(a: list[Any], c: Ctx) -> list[np.ndarray]:
    pads, stride = _explicit(a, 3)
    return [fuse(_conv(a[0], a[1], a[2], pads, stride, int(a[9])), a[10])]


@ref("TRANSPOSE_CONV_2D")
def _transpose_conv(a: list[Any], c: Ctx) -> list[np.ndarray]:
    x, w, b = a[0], a[1], a[2]
    (left, right, top, bottom), (sw, sh) = _explicit(a, 3)
    n, h, wd, _ = x.shape
    cout, fh, fw, _ = w.shape
    full = np.zeros((n, (h - 1) * sh + fh, (wd - 1) * sw + fw, cout))
    for i in range(h):
        for j in range(wd):
            # Each input pixel scatters its filter-weighted contribution.
            full[:, i * sh : i * sh + fh, j * sw : j * sw + fw, :] += np.einsum(
                "nc,ohwc->nhwo", x[:, i, j], w
            )
    y = full[:, top : full.shape[1] - bottom, left : full.shape[2] - right, :] + b
    return [fuse(y, a[9])]


@ref("FULLY_CONNECTED")
def _fully_connected(a: list[Any], c: Ctx) -> list[np.ndarray]:
    x, w, b = a[0], a[1], a[2]
    x = x.reshape(-1, w.shape[1])
    y = x @ w.T + (0.0 if b is None else b)
    return [fuse(y, a[3])]


def _pool(a: list[Any], reduce: str) -> np.ndarray:
    x = a[0]
    (left, right, top, bottom), (sw, sh) = _explicit(a, 1)
    fw, fh = int(a[7]), int(a[8])
    n, h, wd, ch = x.shape
    oh = (h + top + bottom - fh) // sh + 1
    ow = (wd + left + right - fw) // sw + 1
    y = np.zeros((n, oh, ow, ch))
    for i in range(oh):
        for j in range(ow):
            r0, c0 = i * sh - top, j * sw - left
            win = x[:, max(r0, 0) : min(r0 + fh, h), max(c0, 0) : min(c0 + fw, wd), :]
            if reduce == "max":
                y[:, i, j] = win.max(axis=(1, 2))
            elif reduce == "avg":
                y[:, i, j] = win.mean(axis=(1, 2))  # padding is not counted (NNAPI)
            else:
                y[:, i, j] = np.sqrt((win * win).mean(axis=(1, 2)))
    return fuse(y, a[9])


@ref("AVERAGE_POOL_2D")
def _avg_pool(a: list[Any], c: Ctx) -> list[np.ndarray]:
    return [_pool(a, "avg")]


@ref("MAX_POOL_2D")
def _max_pool(a: list[Any], c: Ctx) -> list[np.ndarray]:
    return [_pool(a, "max")]


@ref("L2_POOL_2D")
def _l2_pool(a: list[Any], c: Ctx) -> list[np.ndarray]:
    return [_pool(a, "l2")]


def _resize_flags(a: list[Any]) -> tuple[bool, bool]:
    align = bool(a[4]) if len(a) > 4 and a[4] is not None else False
    half = bool(a[5]) if len(a) > 5 and a[5] is not None else False
    return align, half


def _source(out_size: int, in_size: int, align: bool, half: bool) -> np.ndarray:
    i = np.arange(out_size, dtype=np.float64)
    if align and out_size > 1:
        return i * (in_size - 1) / (out_size - 1)
    scale = in_size / out_size
    return (i + 0.5) * scale - 0.5 if half else i * scale


@ref("RESIZE_BILINEAR")
def _resize_bilinear(a: list[Any], c: Ctx) -> list[np.ndarray]:
    x = a[0]
    ow, oh = int(a[1]), int(a[2])
    align, half = _resize_flags(a)
    _, h, w, _ = x.shape
    ys = np.clip(_source(oh, h, align, half), 0, h - 1)
    xs = np.clip(_source(ow, w, align, half), 0, w - 1)
    y0, x0 = np.floor(ys).astype(int), np.floor(xs).astype(int)
    y1, x1 = np.minimum(y0 + 1, h - 1), np.minimum(x0 + 1, w - 1)
    fy, fx = (ys - y0)[None, :, None, None], (xs - x0)[None, None, :, None]
    top = x[:, y0][:, :, x0] * (1 - fx) + x[:, y0][:, :, x1] * fx
    bottom = x[:, y1][:, :, x0] * (1 - fx) + x[:, y1][:, :, x1] * fx
    return [top * (1 - fy) + bottom * fy]


@ref("RESIZE_NEAREST_NEIGHBOR")
def _resize_nearest(a: list[Any], c: Ctx) -> list[np.ndarray]:
    x = a[0]
    ow, oh = int(a[1]), int(a[2])
    align, half = _resize_flags(a)
    _, h, w, _ = x.shape

    def index(out_size: int, in_size: int) -> np.ndarray:
        scale = (in_size - 1) / (out_size - 1) if align and out_size > 1 else in_size / out_size
        src = (np.arange(out_size) + (0.5 if half else 0.0)) * scale
        picked = np.floor(src + 0.5) if align else np.floor(src)  # round half away from zero
        return np.clip(picked.astype(int), 0, in_size - 1)

    return [x[:, index(oh, h)][:, :, index(ow, w)]]


def _rnn_activation(code: int, y: np.ndarray) -> np.ndarray:
    if code == 4:
        return np.tanh(y)
    if code == 6:
        return 1.0 / (1.0 + np.exp(-y))
    return fuse(y, code)


@ref("RNN")
def _rnn(a: list[Any], c: Ctx) -> list[np.ndarray]:
    x, w, r, b, h, act = a[0], a[1], a[2], a[3], a[4], int(a[5])
    out = _rnn_activation(act, x @ w.T + h @ r.T + b)
    return [out, out]


@ref("UNIDIRECTIONAL_SEQUENCE_RNN")
def _sequence_rnn(a: list[Any], c: Ctx) -> list[np.ndarray]:
    x, w, r, b, h, act, time_major = a[0], a[1], a[2], a[3], a[4], int(a[5]), int(a[6])
    seq = x if time_major else np.swapaxes(x, 0, 1)
    steps = []
    for t in range(seq.shape[0]):
        h = _rnn_activation(act, seq[t] @ w.T + h @ r.T + b)
        steps.append(h)
    y = np.stack(steps)
    return [y if time_major else np.swapaxes(y, 0, 1)]


@ref("BIDIRECTIONAL_SEQUENCE_RNN")
def _bidirectional_rnn(a: list[Any], c: Ctx) -> list[np.ndarray]:
    x = a[0]
    if any(v is not None for v in a[9:12]):
        raise NotImplementedError("auxiliary inputs")
    act, time_major, merge = int(a[12]), bool(a[13]), bool(a[14])
    seq = x if time_major else np.swapaxes(x, 0, 1)

    def run(w: np.ndarray, r: np.ndarray, b: np.ndarray, h: np.ndarray, steps: range) -> np.ndarray:
        out = np.zeros((seq.shape[0], seq.shape[1], w.shape[0]))
        for t in steps:
            h = _rnn_activation(act, seq[t] @ w.T + h @ r.T + b)
            out[t] = h
        return out

    fw = run(a[1], a[2], a[3], a[4], range(seq.shape[0]))
    bw = run(a[5], a[6], a[7], a[8], range(seq.shape[0] - 1, -1, -1))
    if not time_major:
        fw, bw = np.swapaxes(fw, 0, 1), np.swapaxes(bw, 0, 1)
    return [np.concatenate([fw, bw], axis=-1)] if merge else [fw, bw]


@ref("AXIS_ALIGNED_BBOX_TRANSFORM")
def _bbox_transform(a: list[Any], c: Ctx) -> list[np.ndarray]:
    rois, deltas, batches, info = a[0], a[1], np.asarray(a[2], dtype=np.int64), a[3]
    n = rois.shape[0]
    d = deltas.reshape(n, -1, 4)
    width, height = rois[:, 2] - rois[:, 0], rois[:, 3] - rois[:, 1]
    cx, cy = rois[:, 0] + 0.5 * width, rois[:, 1] + 0.5 * height
    pcx = d[..., 0] * width[:, None] + cx[:, None]
    pcy = d[..., 1] * height[:, None] + cy[:, None]
    pw, ph = np.exp(d[..., 2]) * width[:, None], np.exp(d[..., 3]) * height[:, None]
    img_h, img_w = info[batches, 0][:, None], info[batches, 1][:, None]
    boxes = np.stack(
        [
            np.clip(pcx - 0.5 * pw, 0, img_w),
            np.clip(pcy - 0.5 * ph, 0, img_h),
            np.clip(pcx + 0.5 * pw, 0, img_w),
            np.clip(pcy + 0.5 * ph, 0, img_h),
        ],
        axis=-1,
    )
    return [boxes.reshape(n, -1)]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _lstm_step(
    a: list[Any], x: np.ndarray, h: np.ndarray, c: np.ndarray, norm: list[Any]
) -> tuple[np.ndarray, np.ndarray]:
    """One NNAPI LSTM cell step (CIFG, peephole, projection and clipping as the inputs give them)."""
    if any(v is not None for v in norm):
        raise NotImplementedError("layer normalisation")
    act, cell_clip, proj_clip = int(a[20]), float(a[21]), float(a[22])

    def gate(w: int, r: int, peep: int | None, bias: int, cell: np.ndarray) -> np.ndarray:
        z = x @ a[w].T + h @ a[r].T + a[bias]
        if peep is not None and a[peep] is not None:
            z = z + cell * a[peep]
        return z

    f = _sigmoid(gate(2, 6, 10, 13, c))
    i = 1.0 - f if a[1] is None else _sigmoid(gate(1, 5, 9, 12, c))
    g = _rnn_activation(act, gate(3, 7, None, 14, c))
    c_new = f * c + i * g
    if cell_clip > 0:
        c_new = np.clip(c_new, -cell_clip, cell_clip)
    o = _sigmoid(gate(4, 8, 11, 15, c_new))
    h_new = o * _rnn_activation(act, c_new)
    if a[16] is not None:
        h_new = h_new @ a[16].T + (0.0 if a[17] is None else a[17])
        if proj_clip > 0:
            h_new = np.clip(h_new, -proj_clip, proj_clip)
    return h_new, c_new


@ref("LSTM")
def _lstm(a: list[Any], c: Ctx) -> list[Any]:
    h, cell = _lstm_step(a, a[0], a[18], a[19], a[23:27])
    return [None, h, cell, h]  # the scratch buffer's contents are the driver's own


@ref("UNIDIRECTIONAL_SEQUENCE_LSTM")
def _sequence_lstm(a: list[Any], c: Ctx) -> list[Any]:
    time_major = bool(a[23])
    seq = a[0] if time_major else np.swapaxes(a[0], 0, 1)
    h, cell = a[18], a[19]
    steps = []
    for t in range(seq.shape[0]):
        h, cell = _lstm_step(a, seq[t], h, cell, a[24:28])
        steps.append(h)
    y = np.stack(steps)
    return [y if time_major else np.swapaxes(y, 0, 1), h, cell]


@ref("BIDIRECTIONAL_SEQUENCE_LSTM")
def _bidirectional_lstm(a: list[Any], c: Ctx) -> list[Any]:
    if any(v is not None for v in a[39:48]):
        raise NotImplementedError("auxiliary inputs")
    merge, time_major = bool(a[51]), bool(a[52])
    seq = a[0] if time_major else np.swapaxes(a[0], 0, 1)
    tail = [a[48], a[49], a[50]]
    # Each direction as a unidirectional LSTM's inputs: weights, biases, projection, states, parameters.
    fw = [None, *a[1:18], a[35], a[36], *tail]
    bw = [None, *a[18:35], a[37], a[38], *tail]

    def run(args: list[Any], norm: list[Any], steps: range) -> np.ndarray:
        h, cell = args[18], args[19]
        out: list[np.ndarray] = [np.empty(0)] * seq.shape[0]
        for t in steps:
            h, cell = _lstm_step(args, seq[t], h, cell, norm)
            out[t] = h
        return np.stack(out)

    y_fw = run(fw, a[53:57], range(seq.shape[0]))
    y_bw = run(bw, a[57:61], range(seq.shape[0] - 1, -1, -1))
    if not time_major:
        y_fw, y_bw = np.swapaxes(y_fw, 0, 1), np.swapaxes(y_bw, 0, 1)
    return [np.concatenate([y_fw, y_bw], axis=-1)] if merge else [y_fw, y_bw]
