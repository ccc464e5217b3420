"""CONV_2D: NHWC (or NCHW) input convolved with an [Cout,KH,KW,Cin] filter, plus bias and fused activation.

Explicit padding (10, 11 or 13 inputs) or implicit SAME/VALID (7, 8 or 10), optional layout and
dilation. Pointwise convolutions are one matmul; the rest are im2col then one matmul.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from driver.ops._activation import apply_activation
from driver.ops._base import ArgInfo, Run, expect_count, register
from driver.ops._conv_common import bias_vector, check_filter_and_bias, constant_or_none, is_explicit
from driver.ops._params import as_f32, float_outputs
from driver.ops._window import channel_dim, from_nhwc, geometry, parse_window_params, to_nhwc
from mlts.hal.enums import OperationType
from mlts.hal.errors import invalid

NAME = "CONV_2D"


def pack_filter(f: np.ndarray) -> np.ndarray:
    """[Cout,KH,KW,Cin] to the contiguous [KH*KW*Cin, Cout] matrix the patch matrix multiplies."""
    return as_f32(np.asarray(f, dtype=np.float32).reshape(f.shape[0], -1).T)


@register(OperationType.CONV_2D)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    expect_count(NAME, ins, (7, 8, 10, 11, 13), outs)
    explicit = is_explicit(NAME, ins, 7, (10, 11, 13), (7, 8, 10))
    float_outputs(NAME, outs)
    cout, kh, kw, cin = check_filter_and_bias(NAME, ins, 0)
    p = parse_window_params(NAME, ins, 3, explicit)
    known_cin = channel_dim(ins[0], p.nchw)
    if known_cin and known_cin != cin:
        raise invalid(f"{NAME}: input has {known_cin} channels, filter expects {cin}")
    packed = constant_or_none(ins[1], pack_filter)
    bias = constant_or_none(ins[2], bias_vector)
    window, act, nchw = p.window, p.activation, p.nchw

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        x = to_nhwc(args[0], nchw, NAME)
        n, h, w, c = x.shape
        if c != cin:
            raise invalid(f"{NAME}: input has {c} channels, filter expects {cin}")
        wmat = packed if packed is not None else pack_filter(args[1])
        b = bias if bias is not None else bias_vector(args[2])
        g = geometry(NAME, window, h, w, kh, kw)
        if kh == kw == 1 and not g.padded:
            # Pointwise: the strided input itself is the patch matrix.
            cols = x[:, :: g.stride_h, :: g.stride_w, :].reshape(-1, cin)
        else:
            cols = g.im2col(g.pad(x))
        y = cols @ wmat
        y += b
        apply_activation(act, y)
        return [from_nhwc(y.reshape(n, g.out_h, g.out_w, cout), nchw)]

    return run
