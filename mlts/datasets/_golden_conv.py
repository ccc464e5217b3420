"""Vectorised float64 Conv and ConvTranspose for the golden reference run (ONNX, 1-D and 2-D, from the spec).

`onnx.reference`'s own Conv walks its output in Python loops: about 3 s per 224x224 MobileNet
image, so the golden outputs of the zoo took most of a first benchmark run. This one gathers every
kernel window at once (a strided view of the padded input) and, in float64, multiplies them with the
weights: as one matrix product (group 1 with few channels; a 1x1 kernel with stride 1 and no padding
multiplies the pixels directly), one matrix product per kernel position (group 1), one multiply-add
per kernel position (depthwise) or one `einsum` (other groups). Its ConvTranspose scatters each input column through col2im one output
channel and pixel at a time (about 20 s for the two 2x2 upsamplings of a 640x640 detector's head);
here each kernel position is one matrix product per group added into a strided slice of the output.
1-D convolutions run as 2-D ones of height 1; other ranks go to onnx.reference's kernels.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from onnx.reference.ops.op_conv import Conv as _ReferenceConv
from onnx.reference.ops.op_conv_transpose import ConvTranspose as _ReferenceConvTranspose


def _pads(auto_pad, pads, size, kernel, stride, dilation) -> tuple[int, int]:
    """(head, tail) padding of one spatial axis as ONNX defines it."""
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        effective = (kernel - 1) * dilation + 1
        out = -(-size // stride)
        needed = max(0, (out - 1) * stride + effective - size)
        head = (needed + 1) // 2 if auto_pad == "SAME_LOWER" else needed // 2
        return head, needed - head
    if auto_pad == "VALID":
        return 0, 0
    return pads


def conv2d(x, w, b=None, auto_pad="NOTSET", dilations=None, group=1, pads=None, strides=None) -> np.ndarray:
    """ONNX Conv of x [N, C, H, W] with w [M, C/group, KH, KW] (and bias b [M])."""
    x, w = np.asarray(x), np.asarray(w)
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    dh, dw = dilations or (1, 1)
    sh, sw = strides or (1, 1)
    p = list(pads) if pads is not None else [0, 0, 0, 0]
    top, bottom = _pads(auto_pad, (p[0], p[2]), h, kh, sh, dh)
    left, right = _pads(auto_pad, (p[1], p[3]), wd, kw, sw, dw)
    g = int(group)
    if g == 1 and (kh, kw, sh, sw, top, bottom, left, right) == (1, 1, 1, 1, 0, 0, 0, 0):
        # Pointwise: the weights times each image's [C, H*W] pixels, no windows to gather.
        out = np.matmul(w.reshape(m, c), x.reshape(n, c, h * wd)).reshape(n, m, h, wd)
        return out if b is None else out + np.asarray(b).reshape(1, m, 1, 1)
    padded = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    windows = sliding_window_view(padded, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(2, 3))
    windows = windows[:, :, ::sh, ::sw, ::dh, ::dw]  # [N, C, OH, OW, KH, KW]
    oh, ow = windows.shape[2], windows.shape[3]
    per = m // g
    if g == 1 and c < 8:  # few channels: one matrix product of the windows (im2col) with the weights
        cols = windows.transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, c * kh * kw)
        out = (cols @ w.reshape(m, -1).T).reshape(n, oh, ow, m).transpose(0, 3, 1, 2)
    elif g == 1:  # one [M, C] x [C, pixels] product per kernel position: no transposed window copy
        acc = np.zeros((n, m, oh * ow), dtype=np.result_type(x, w))
        for i in range(kh):
            for j in range(kw):
                acc += np.matmul(w[:, :, i, j], windows[:, :, :, :, i, j].reshape(n, c, oh * ow))
        out = acc.reshape(n, m, oh, ow)
    elif cg == 1:  # depthwise: one multiply-add per kernel position
        ws = w.reshape(g, per, kh, kw)
        acc = np.zeros((n, g, per, oh, ow), dtype=np.result_type(x, w))
        term = np.empty_like(acc)  # one buffer for every product: no temporary per kernel position
        for i in range(kh):
            for j in range(kw):
                np.multiply(windows[:, :, None, :, :, i, j], ws[None, :, :, i, j, None, None], out=term)
                acc += term
        out = acc.reshape(n, m, oh, ow)
    else:
        xs = windows.reshape(n, g, cg, oh, ow, kh, kw)
        ws = w.reshape(g, per, cg, kh, kw)
        out = np.einsum("ngcijkl,gmckl->ngmij", xs, ws, optimize=True).reshape(n, m, oh, ow)
    if b is not None:
        out = out + np.asarray(b).reshape(1, m, 1, 1)
    return out


def conv_transpose2d(
    x,
    w,
    b=None,
    auto_pad="NOTSET",
    dilations=None,
    group=1,
    output_padding=None,
    output_shape=None,
    pads=None,
    strides=None,
) -> np.ndarray:
    """ONNX ConvTranspose of x [N, C, H, W] with w [C, M/group, KH, KW] (and bias b [M]).

    The full (unpadded) output of one axis has (in - 1) * stride + (kernel - 1) * dilation + 1
    positions; the result is its window starting at the head pad, `output_padding` (or an
    `output_shape` beyond it) extending the tail with positions no input reaches (bias only).
    """
    x, w = np.asarray(x), np.asarray(w)
    n, c, h, wd = x.shape
    _, per, kh, kw = w.shape
    g = int(group)
    m = per * g
    dh, dw = dilations or (1, 1)
    sh, sw = strides or (1, 1)
    extra = list(output_padding) if output_padding is not None else [0, 0]
    full = ((h - 1) * sh + (kh - 1) * dh + 1, (wd - 1) * sw + (kw - 1) * dw + 1)
    heads, sizes = [], []
    for axis in range(2):
        natural = full[axis] + extra[axis]
        given = output_shape is not None and len(output_shape) > 0
        if given or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            # The pads follow from the output size: an odd total puts the extra one at the tail for
            # SAME_UPPER, at the head otherwise.
            size = int(list(output_shape)[-2 + axis]) if given else (h, wd)[axis] * (sh, sw)[axis]
            total = natural - size
            heads.append(total // 2 if auto_pad == "SAME_UPPER" else total - total // 2)
        else:
            p = list(pads) if pads is not None else [0, 0, 0, 0]
            size = natural - p[axis] - p[axis + 2]
            heads.append(p[axis])
        sizes.append(size)
    buf = np.zeros((n, m, max(full[0], heads[0] + sizes[0]), max(full[1], heads[1] + sizes[1])))
    xs = x.reshape(n, g, c // g, h * wd)
    ws = w.reshape(g, c // g, per, kh, kw)
    for i in range(kh):
        for j in range(kw):
            # [N, G, per, H*W]: every input pixel's contribution through kernel position (i, j).
            part = np.matmul(ws[:, :, :, i, j].transpose(0, 2, 1), xs).reshape(n, m, h, wd)
            buf[:, :, i * dh : i * dh + (h - 1) * sh + 1 : sh, j * dw : j * dw + (wd - 1) * sw + 1 : sw] += (
                part
            )
    top, left = heads
    out = np.zeros((n, m, sizes[0], sizes[1]))
    src = buf[:, :, max(0, top) : top + sizes[0], max(0, left) : left + sizes[1]]
    out[:, :, max(0, -top) : max(0, -top) + src.shape[2], max(0, -left) : max(0, -left) + src.shape[3]] = src
    if b is not None:
        out += np.asarray(b).reshape(1, m, 1, 1)
    return out


class ConvTranspose(_ReferenceConvTranspose):
    """onnx.reference's ConvTranspose with the vectorised 1-D and 2-D path."""

    def _run(  # type: ignore[override]
        self,
        X,
        W,
        B=None,
        auto_pad=None,
        dilations=None,
        group=None,
        kernel_shape=None,
        output_padding=None,
        output_shape=None,
        pads=None,
        strides=None,
    ):
        if X.ndim not in (3, 4) or (kernel_shape is not None and tuple(kernel_shape) != tuple(W.shape[2:])):
            return super()._run(
                X, W, B, auto_pad, dilations, group, kernel_shape, output_padding, output_shape, pads, strides
            )
        if X.ndim == 3:  # 1-D: a 2-D ConvTranspose of height 1
            y = conv_transpose2d(
                X[:, :, None, :], W[:, :, None, :], B, auto_pad or "NOTSET",
                None if dilations is None else [1, *dilations], group or 1,
                None if output_padding is None else [0, *output_padding],
                None if output_shape is None or not len(output_shape) else [1, *output_shape],
                None if pads is None else [0, pads[0], 0, pads[1]],
                None if strides is None else [1, *strides],
            )[:, :, 0, :]  # fmt: skip
        else:
            y = conv_transpose2d(
                X,
                W,
                B,
                auto_pad or "NOTSET",
                dilations,
                group or 1,
                output_padding,
                output_shape,
                pads,
                strides,
            )
        return (y.astype(X.dtype, copy=False),)


class Conv(_ReferenceConv):
    """onnx.reference's Conv with the vectorised 2-D path (same attributes, same results up to rounding)."""

    def _run(  # type: ignore[override]
        self,
        X,
        W,
        B=None,
        auto_pad=None,
        dilations=None,
        group=None,
        kernel_shape=None,
        pads=None,
        strides=None,
    ):
        if X.ndim not in (3, 4) or (kernel_shape is not None and tuple(kernel_shape) != tuple(W.shape[2:])):
            return super()._run(X, W, B, auto_pad, dilations, group, kernel_shape, pads, strides)
        auto_pad = auto_pad or self.auto_pad  # type: ignore[attr-defined]
        dilations = dilations or self.dilations  # type: ignore[attr-defined]
        group = group or self.group  # type: ignore[attr-defined]
        pads = pads or self.pads  # type: ignore[attr-defined]
        strides = strides or self.strides  # type: ignore[attr-defined]
        if X.ndim == 3:  # 1-D (e.g. an STFT written as a Conv): a 2-D Conv of height 1
            out = conv2d(
                X[:, :, None, :], W[:, :, None, :], B, auto_pad or "NOTSET",
                None if dilations is None else [1, *dilations], group or 1,
                None if pads is None else [0, pads[0], 0, pads[1]],
                None if strides is None else [1, *strides],
            )[:, :, 0, :]  # fmt: skip
        else:
            out = conv2d(X, W, B, auto_pad or "NOTSET", dilations, group or 1, pads, strides)
        return (out.astype(X.dtype, copy=False),)
