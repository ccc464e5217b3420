"""NNAPI window parameters and the matching onnxruntime attributes for the conv and pool kernel tests."""

from __future__ import annotations

from mlts.hal.enums import OperandType
from tests.driver.opkit import Omit


def window_args(padding, stride, extras, act, layout, dilation):
    """NNAPI parameter inputs after (input, filter, bias): padding, strides, extras, act, [layout, [dilations]]."""
    if padding == "SAME":
        args = [1]
    elif padding == "VALID":
        args = [2]
    else:
        args = list(padding)
    args += [stride[0], stride[1], *extras, act]
    if layout is not None or dilation != (1, 1):
        args.append(Omit(OperandType.BOOL) if layout in (None, "omit") else layout)
    if dilation != (1, 1):
        args += [dilation[0], dilation[1]]
    return args


def same_pads(size, k, stride, dilation):
    """TFLite SAME padding (before, after); onnxruntime's SAME_UPPER refuses dilations."""
    out = -(-size // stride)
    total = max((out - 1) * stride + (k - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def ort_attrs(padding, stride, dilation, hw=None, khw=None):
    attrs = {"strides": [stride[1], stride[0]], "dilations": [dilation[1], dilation[0]]}
    if padding == "SAME" and dilation != (1, 1):
        top, bottom = same_pads(hw[0], khw[0], stride[1], dilation[1])
        left, right = same_pads(hw[1], khw[1], stride[0], dilation[0])
        attrs["pads"] = [top, left, bottom, right]
    elif padding == "SAME":
        attrs["auto_pad"] = "SAME_UPPER"
    elif padding == "VALID":
        attrs["auto_pad"] = "VALID"
    else:
        left, right, top, bottom = padding
        attrs["pads"] = [top, left, bottom, right]
    return attrs
