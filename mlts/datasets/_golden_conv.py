"""A vectorised float64 Conv for the golden reference run (ONNX Conv, 2-D, from the operator's spec).

`onnx.reference`'s own Conv walks its output in Python loops: about 3 s per 224x224 MobileNet
image, so the golden outputs of the zoo took most of a first benchmark run. This one gathers every
kernel window at once (a strided view of the padded input) and, in float64, multiplies them with the
weights as one matrix product (group 1; a 1x1 kernel with stride 1 and no padding multiplies the
pixels directly), one multiply-add per kernel position (depthwise) or one
`einsum` (other groups). Other ranks go to onnx.reference's Conv.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from onnx.reference.ops.op_conv import Conv as _ReferenceConv


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
    if g == 1:  # one matrix product of the windows (im2col) with the weights
        cols = windows.transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, c * kh * kw)
        out = (cols @ w.reshape(m, -1).T).reshape(n, oh, ow, m).transpose(0, 3, 1, 2)
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
        if X.ndim != 4 or (kernel_shape is not None and tuple(kernel_shape) != tuple(W.shape[2:])):
            return super()._run(X, W, B, auto_pad, dilations, group, kernel_shape, pads, strides)
        auto_pad = auto_pad or self.auto_pad  # type: ignore[attr-defined]
        dilations = dilations or self.dilations  # type: ignore[attr-defined]
        group = group or self.group  # type: ignore[attr-defined]
        pads = pads or self.pads  # type: ignore[attr-defined]
        strides = strides or self.strides  # type: ignore[attr-defined]
        out = conv2d(X, W, B, auto_pad or "NOTSET", dilations, group or 1, pads, strides)
        return (out.astype(X.dtype, copy=False),)
