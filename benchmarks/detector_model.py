"""A synthetic text-detector-like ONNX model: what a real 640x640 segmentation detector exports.

The layout follows the detectors exported from PaddleOCR and similar toolchains (a DB-style text
detector): a MobileNetV3-like backbone (strided 3x3 convolutions, depthwise-separable blocks with
HardSwish, BatchNormalization left unfused as exporters leave it), a feature pyramid (1x1 lateral
convolutions, nearest Resize x2 upsampling and Add, 3x3 smoothing convolutions, nearest Resize to
1/4 and Concat), a MaxPool context branch and a head of Conv + BatchNormalization + Relu and two
ConvTranspose 2x2 stride 2 up to the input size, ending in Sigmoid: one probability map
[1, 1, H, W] per image. The weights are seeded random (He-scaled so activations stay O(1)).

usage: from benchmarks.detector_model import detector; onnx.save(detector(640), "det.onnx")
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class _Builder:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, base: str) -> str:
        self.count += 1
        return f"{base}_{self.count}"

    def const(self, value: np.ndarray, base: str = "c") -> str:
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, group: int = 1) -> str:
        fan_in = cin // group * k * k
        w = self.rng.normal(0, np.sqrt(2.0 / fan_in), (cout, cin // group, k, k)).astype(np.float32)
        pad = k // 2
        return self.node(
            "Conv", [x, self.const(w, "w")], kernel_shape=[k, k], strides=[stride, stride],
            pads=[pad] * 4, group=group,
        )  # fmt: skip

    def bn(self, x: str, c: int) -> str:
        scale = self.rng.uniform(0.8, 1.2, c).astype(np.float32)
        bias = self.rng.uniform(-0.1, 0.1, c).astype(np.float32)
        mean = self.rng.uniform(-0.1, 0.1, c).astype(np.float32)
        var = self.rng.uniform(0.8, 1.2, c).astype(np.float32)
        params = [self.const(v, n) for v, n in ((scale, "s"), (bias, "b"), (mean, "m"), (var, "v"))]
        return self.node("BatchNormalization", [x, *params], epsilon=1e-5)

    def conv_bn(self, x: str, cin: int, cout: int, k: int, stride: int = 1, group: int = 1, act="HardSwish"):
        y = self.bn(self.conv(x, cin, cout, k, stride, group), cout)
        return self.node(act, [y]) if act else y

    def block(self, x: str, cin: int, cout: int, stride: int) -> str:
        """Depthwise-separable: 3x3 depthwise (stride), 1x1 pointwise; a residual when shapes allow."""
        y = self.conv_bn(x, cin, cin, 3, stride, group=cin)
        y = self.conv_bn(y, cin, cout, 1, act=None)
        return self.node("Add", [x, y]) if stride == 1 and cin == cout else y

    def resize(self, x: str, scale: float) -> str:
        scales = self.const(np.array([1, 1, scale, scale], np.float32), "scales")
        return self.node("Resize", [x, "", scales], mode="nearest")


def detector(size: int = 640, width: int = 1, seed: int = 0) -> onnx.ModelProto:
    """The detector for [1, 3, size, size] images (size a multiple of 32); `width` scales the channels."""
    if size % 32:
        raise ValueError(f"size {size} must be a multiple of 32")
    b = _Builder(seed)
    ch = [c * width for c in (16, 24, 40, 96, 160)]
    x = b.conv_bn("image", 3, ch[0], 3, 2)  # 1/2
    feats = []
    for cin, cout in zip(ch[:-1], ch[1:], strict=True):
        x = b.block(x, cin, cout, 2)  # 1/4, 1/8, 1/16, 1/32
        x = b.block(x, cout, cout, 1)
        feats.append((x, cout))
    # Context: spatial pyramid pooling on the coarsest map (MaxPool 5x5, stride 1).
    top, ctop = feats[-1]
    pooled = b.node("MaxPool", [top], kernel_shape=[5, 5], pads=[2, 2, 2, 2], strides=[1, 1])
    top = b.conv_bn(b.node("Concat", [top, pooled], axis=1), 2 * ctop, ctop, 1, act="Relu")
    feats[-1] = (top, ctop)
    inner = 32 * width
    lateral = [b.conv(f, c, inner, 1) for f, c in feats]
    merged = [lateral[-1]]
    for lat in reversed(lateral[:-1]):
        merged.insert(0, b.node("Add", [lat, b.resize(merged[0], 2.0)]))
    quarter = inner // 4
    smooth = [b.conv(m, inner, quarter, 3) for m in merged]
    ups = [s if i == 0 else b.resize(s, float(2**i)) for i, s in enumerate(smooth)]
    fuse = b.node("Concat", ups, axis=1)  # 1/4, `inner` channels
    head = b.conv_bn(fuse, inner, quarter, 3, act="Relu")
    w1 = b.rng.normal(0, np.sqrt(2.0 / (quarter * 4)), (quarter, quarter, 2, 2)).astype(np.float32)
    up1 = b.node("ConvTranspose", [head, b.const(w1, "w")], kernel_shape=[2, 2], strides=[2, 2])
    up1 = b.node("Relu", [b.bn(up1, quarter)])
    w2 = b.rng.normal(0, np.sqrt(1.0 / (quarter * 4)), (quarter, 1, 2, 2)).astype(np.float32)
    bias = b.const(np.zeros(1, np.float32), "b")
    up2 = b.node("ConvTranspose", [up1, b.const(w2, "w"), bias], kernel_shape=[2, 2], strides=[2, 2])
    b.nodes.append(helper.make_node("Sigmoid", [up2], ["maps"]))
    graph = helper.make_graph(
        b.nodes,
        "detector",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("maps", TensorProto.FLOAT, [1, 1, size, size])],
        b.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], producer_name="mlts")
    model.ir_version = 8  # what onnxruntime reads (onnx >= 1.23 would write 14)
    onnx.checker.check_model(model)
    return model
