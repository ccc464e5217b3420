"""Per-op conversion tests: tiny ONNX models run by onnxruntime and by the sample driver after conversion."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tests.convert._util import check, make_model

R = np.random.default_rng(1234)


def f32(*shape: int, positive: bool = False) -> np.ndarray:
    a = R.standard_normal(shape).astype(np.float32)
    return np.abs(a) + 0.5 if positive else a


def i64(*values: int) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


N = helper.make_node
X4 = {"x": [1, 3, 8, 8]}


def conv_node(out: str = "c", inp: str = "x", **kw) -> helper.NodeProto:
    return N("Conv", [inp, "w", "b"], [out], **kw)


def bn_inits(c: int) -> dict[str, np.ndarray]:
    return {"g": f32(c, positive=True), "be": f32(c), "mu": f32(c), "var": f32(c, positive=True)}


def conv_then(nodes, opset, out="y", cout=4, cin=3, k=3, extra=None, **conv_kw):
    inits = {"w": f32(cout, cin, k, k) / np.float32(np.sqrt(cin * k * k)), "b": f32(cout), **(extra or {})}
    return make_model([conv_node(pads=[1, 1, 1, 1], **conv_kw), *nodes], X4, [out], inits, opset)


def clip_node(
    inp: str, out: str, lo: float | None, hi: float | None, opset: int, inits: dict
) -> helper.NodeProto:
    if opset < 11:
        kw = {k: v for k, v in (("min", lo), ("max", hi)) if v is not None}
        return N("Clip", [inp], [out], **kw)
    names = []
    for tag, v in (("lo", lo), ("hi", hi)):
        if v is None:
            names.append("")
        else:
            inits[f"{out}_{tag}"] = np.float32(v)
            names.append(f"{out}_{tag}")
    while names and names[-1] == "":
        names.pop()
    return N("Clip", [inp, *names], [out])


# ------------------------------------------------------------ model factories: (opset) -> ModelProto

CASES: dict[str, object] = {}


def case(name: str, opsets=(11, 13, 17, 21)):
    def deco(fn):
        for o in opsets:
            CASES[f"{name}-op{o}"] = (fn, o)
        return fn

    return deco


@case("conv-pads-asym-stride-dilation")
def _(o):
    inits = {"w": f32(5, 3, 3, 3), "b": f32(5)}
    return make_model(
        [N("Conv", ["x", "w", "b"], ["y"], pads=[0, 1, 2, 1], strides=[2, 1], dilations=[1, 2])],
        X4,
        ["y"],
        inits,
        o,
    )


@case("conv-auto-pad", opsets=(11, 21))
def _(o):
    inits = {"w": f32(4, 3, 3, 2), "w2": f32(2, 4, 2, 3), "w3": f32(2, 2, 3, 2)}
    nodes = [
        N("Conv", ["x", "w"], ["a"], auto_pad="SAME_UPPER", strides=[2, 3]),
        N("Conv", ["a", "w2"], ["b"], auto_pad="SAME_LOWER", strides=[1, 2]),
        N("Conv", ["b", "w3"], ["y"], auto_pad="VALID"),
    ]
    return make_model(nodes, {"x": [1, 3, 9, 10]}, ["y"], inits, o)


@case("conv-depthwise", opsets=(11, 17))
def _(o):
    inits = {"w": f32(3, 1, 3, 3), "b": f32(3), "w2": f32(6, 1, 3, 3)}
    nodes = [
        N("Conv", ["x", "w", "b"], ["a"], group=3, pads=[1, 1, 1, 1]),
        N("Conv", ["a", "w2"], ["y"], group=3, strides=[2, 2]),  # depth multiplier 2
    ]
    return make_model(nodes, X4, ["y"], inits, o)


@case("conv-pointwise-batch2", opsets=(13,))
def _(o):
    return make_model(
        [N("Conv", ["x", "w", "b"], ["y"])],
        {"x": [2, 3, 5, 5]},
        ["y"],
        {"w": f32(7, 3, 1, 1), "b": f32(7)},
        o,
    )


@case("conv-relu")
def _(o):
    return conv_then([N("Relu", ["c"], ["y"])], o)


@case("conv-clip-relu6", opsets=(10, 11, 13, 21))
def _(o):
    inits: dict = {}
    return conv_then([clip_node("c", "y", 0.0, 6.0, o, inits)], o, extra=inits)


@case("conv-bn-relu", opsets=(11, 13, 17, 21))
def _(o):
    return conv_then(
        [
            N("BatchNormalization", ["c", "g", "be", "mu", "var"], ["n"], epsilon=1e-3),
            N("Relu", ["n"], ["y"]),
        ],
        o,
        extra=bn_inits(4),
    )


@case("bn-standalone", opsets=(11, 17))
def _(o):
    # The conv output has two readers, so the BatchNormalization cannot be folded.
    nodes = [N("BatchNormalization", ["c", "g", "be", "mu", "var"], ["n"]), N("Add", ["n", "c"], ["y"])]
    return conv_then(nodes, o, extra=bn_inits(4))


@case("bn-on-input", opsets=(13,))
def _(o):
    return make_model(
        [N("BatchNormalization", ["x", "g", "be", "mu", "var"], ["y"])], X4, ["y"], bn_inits(3), o
    )


@case("binary-per-channel-and-relu")
def _(o):
    nodes = [
        N("Add", ["c", "pc"], ["a"]),
        N("Mul", ["a", "s"], ["m"]),
        N("Sub", ["k", "m"], ["d"]),
        N("Div", ["d", "pc2"], ["e"]),
        N("Relu", ["e"], ["y"]),
    ]
    extra = {"pc": f32(4, 1, 1), "s": np.float32(0.5), "k": f32(1, 1, 8), "pc2": f32(4, 1, 1, positive=True)}
    return conv_then(nodes, o, extra=extra)


@case("binary-runtime-broadcast", opsets=(13, 21))
def _(o):
    nodes = [
        conv_node(pads=[1, 1, 1, 1]),
        N("Add", ["c", "x"], ["a"]),
        N("Mul", ["a", "v"], ["m"]),
        N("Sub", ["m", "row"], ["y"]),
    ]
    inits = {"w": f32(3, 3, 3, 3), "b": f32(3)}
    return make_model(nodes, {"x": [1, 3, 8, 8], "v": [3, 1, 1], "row": [8]}, ["y"], inits, o)


@case("binary-rank2", opsets=(11,))
def _(o):
    nodes = [N("Add", ["p", "q"], ["a"]), N("Div", ["a", "k"], ["y"])]
    return make_model(nodes, {"p": [2, 5], "q": [1, 5]}, ["y"], {"k": f32(5, positive=True)}, o)


@case("unary-activations", opsets=(14, 17, 21))
def _(o):
    nodes = [
        N("Sigmoid", ["c"], ["s"]),
        N("Tanh", ["c"], ["t"]),
        N("HardSwish", ["c"], ["h"]),
        N("Elu", ["c"], ["e"], alpha=0.7),
        N("Relu", ["c"], ["r"]),
    ]
    nodes += [N("Concat", ["s", "t", "h", "e", "r"], ["y"], axis=1)]
    return conv_then(nodes, o)


@case("clip-general", opsets=(10, 11, 13, 21))
def _(o):
    inits: dict = {}
    nodes = [
        clip_node("x", "a", -0.5, 0.7, o, inits),
        clip_node("a", "b", 0.1, None, o, inits),
        clip_node("b", "y", None, 0.6, o, inits),
    ]
    return make_model(nodes, X4, ["y"], inits, o)


@case("clip-relu1-standalone", opsets=(11,))
def _(o):
    inits: dict = {}
    return make_model([clip_node("x", "y", -1.0, 1.0, o, inits)], X4, ["y"], inits, o)


@case("global-pools")
def _(o):
    nodes = [
        N("GlobalAveragePool", ["c"], ["a"]),
        N("GlobalMaxPool", ["c"], ["m"]),
        N("Add", ["a", "m"], ["y"]),
    ]
    return conv_then(nodes, o)


@case("avgpool-pads-exclude", opsets=(11, 19))
def _(o):
    return make_model(
        [N("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 0, 1, 2], strides=[2, 2])],
        X4,
        ["y"],
        None,
        o,
    )


@case("avgpool-count-include-pad", opsets=(11, 21))
def _(o):
    node = N(
        "AveragePool",
        ["x"],
        ["y"],
        kernel_shape=[3, 2],
        pads=[1, 1, 0, 1],
        strides=[2, 1],
        count_include_pad=1,
    )
    return make_model([node], X4, ["y"], None, o)


@case("avgpool-ceil", opsets=(11, 17))
def _(o):
    node = N("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    return make_model([node], {"x": [1, 3, 8, 9]}, ["y"], None, o)


@case("avgpool-ceil-include-pad", opsets=(13,))
def _(o):
    node = N(
        "AveragePool",
        ["x"],
        ["y"],
        kernel_shape=[3, 3],
        strides=[2, 2],
        pads=[1, 1, 1, 1],
        ceil_mode=1,
        count_include_pad=1,
    )
    return make_model([node], {"x": [1, 3, 8, 9]}, ["y"], None, o)


@case("avgpool-same-upper", opsets=(11,))
def _(o):
    return make_model(
        [N("AveragePool", ["x"], ["y"], kernel_shape=[2, 3], strides=[2, 2], auto_pad="SAME_UPPER")],
        X4,
        ["y"],
        None,
        o,
    )


@case("maxpool-pads-ceil-relu", opsets=(11, 13, 21))
def _(o):
    nodes = [
        N("MaxPool", ["c"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 0, 0], ceil_mode=1),
        N("Relu", ["p"], ["y"]),
    ]
    return conv_then(nodes, o)


@case("flatten-nhwc-gemm")
def _(o):
    nodes = [N("Flatten", ["c"], ["f"]), N("Gemm", ["f", "fw", "fb"], ["y"], transB=1, alpha=0.5, beta=2.0)]
    return conv_then(nodes, o, extra={"fw": f32(6, 256) / np.float32(16), "fb": f32(6)})


@case("gemm-transb0-cmatrix", opsets=(11, 13))
def _(o):
    nodes = [N("Gemm", ["p", "fw", "fc"], ["g"]), N("Relu", ["g"], ["y"])]
    return make_model(nodes, {"p": [3, 5]}, ["y"], {"fw": f32(5, 4), "fc": f32(3, 4)}, o)


@case("matmul-add-relu", opsets=(11, 17))
def _(o):
    nodes = [N("MatMul", ["p", "mw"], ["m"]), N("Add", ["m", "mb"], ["a"]), N("Relu", ["a"], ["y"])]
    return make_model(nodes, {"p": [2, 5]}, ["y"], {"mw": f32(5, 4), "mb": f32(4)}, o)


@case("matmul-rank3", opsets=(13,))
def _(o):
    return make_model([N("MatMul", ["p", "mw"], ["y"])], {"p": [2, 3, 5]}, ["y"], {"mw": f32(5, 4)}, o)


@case("matmul-rank4-nhwc", opsets=(13,))
def _(o):
    return conv_then([N("MatMul", ["c", "mw"], ["y"])], o, extra={"mw": f32(8, 3)})


@case("gemm-bn", opsets=(13,))
def _(o):
    nodes = [
        N("Gemm", ["p", "fw"], ["g"], transB=1),
        N("BatchNormalization", ["g", "g2", "be", "mu", "var"], ["y"]),
    ]
    inits = {
        "fw": f32(4, 5),
        "g2": f32(4, positive=True),
        "be": f32(4),
        "mu": f32(4),
        "var": f32(4, positive=True),
    }
    return make_model(nodes, {"p": [2, 5]}, ["y"], inits, o)


@case("reshape-variants", opsets=(11, 13, 14, 21))
def _(o):
    nodes = [N("Reshape", ["c", "s1"], ["r"]), N("Relu", ["r"], ["q"]), N("Reshape", ["q", "s2"], ["y"])]
    return conv_then(nodes, o, extra={"s1": i64(0, -1, 4), "s2": i64(1, 4, 8, 8)})


@case("reshape-to-nchw-then-conv", opsets=(13,))
def _(o):
    nodes = [N("Reshape", ["p", "s"], ["r"]), N("Conv", ["r", "w", "b"], ["y"], pads=[1, 1, 1, 1])]
    return make_model(
        nodes, {"p": [1, 48]}, ["y"], {"s": i64(1, 3, 4, 4), "w": f32(2, 3, 3, 3), "b": f32(2)}, o
    )


@case("squeeze-unsqueeze", opsets=(11, 13, 21))
def _(o):
    if o < 13:
        nodes = [
            N("GlobalAveragePool", ["c"], ["g"]),
            N("Squeeze", ["g"], ["s"], axes=[2, 3]),
            N("Unsqueeze", ["s"], ["u"], axes=[1]),
            N("Squeeze", ["u"], ["y"]),
        ]
        extra = None
    else:
        nodes = [
            N("GlobalAveragePool", ["c"], ["g"]),
            N("Squeeze", ["g", "ax"], ["s"]),
            N("Unsqueeze", ["s", "ax1"], ["u"]),
            N("Squeeze", ["u"], ["y"]),
        ]
        extra = {"ax": i64(2, 3), "ax1": i64(1)}
    return conv_then(nodes, o, extra=extra)


@case("softmax-axis1-rank4", opsets=(11, 13))
def _(o):
    return conv_then([N("Softmax", ["c"], ["y"], axis=1)], o)


@case("softmax-axis2-rank4", opsets=(11, 13))
def _(o):
    return conv_then([N("Softmax", ["c"], ["y"], axis=2)], o)


@case("softmax-default-rank3", opsets=(11, 13, 21))
def _(o):
    return make_model([N("Softmax", ["p"], ["y"])], {"p": [2, 3, 4]}, ["y"], None, o)


@case("concat-channels-with-const", opsets=(11, 13))
def _(o):
    nodes = [N("Relu", ["c"], ["r"]), N("Concat", ["c", "r", "k"], ["y"], axis=1)]
    return conv_then(nodes, o, extra={"k": f32(1, 2, 8, 8)})


@case("concat-rank2", opsets=(13,))
def _(o):
    return make_model([N("Concat", ["p", "q"], ["y"], axis=-1)], {"p": [2, 3], "q": [2, 4]}, ["y"], None, o)


@case("pad-constant", opsets=(10, 11, 13, 18, 21))
def _(o):
    if o < 11:
        nodes = [
            N("Pad", ["c"], ["a"], pads=[0, 0, 1, 2, 0, 1, 0, 3]),
            N("Pad", ["a"], ["y"], pads=[0, 1, 0, 0, 0, 0, 1, 1], value=0.5),
        ]
        extra = None
    else:
        nodes = [N("Pad", ["c", "p1"], ["a"]), N("Pad", ["a", "p2", "v"], ["y"])]
        extra = {"p1": i64(0, 0, 1, 2, 0, 1, 0, 3), "p2": i64(0, 1, 0, 0, 0, 0, 1, 1), "v": np.float32(0.5)}
    return conv_then(nodes, o, extra=extra)


@case("pad-axes", opsets=(18, 21))
def _(o):
    nodes = [N("Pad", ["c", "p", "", "ax"], ["y"])]
    return conv_then(nodes, o, extra={"p": i64(2, 1, 0, 3), "ax": i64(2, -1)})


@case("transpose", opsets=(11, 13))
def _(o):
    nodes = [
        N("Transpose", ["c"], ["t"], perm=[0, 3, 1, 2]),
        N("Relu", ["t"], ["r"]),
        N("Transpose", ["r"], ["y"], perm=[0, 2, 3, 1]),
    ]
    return conv_then(nodes, o)


@case("transpose-to-nhwc-output", opsets=(13,))
def _(o):
    nodes = [N("Transpose", ["c"], ["y"], perm=[0, 2, 3, 1])]
    return conv_then(nodes, o)


@case("transpose-rank3", opsets=(13,))
def _(o):
    return make_model([N("Transpose", ["p"], ["y"], perm=[2, 0, 1])], {"p": [2, 3, 4]}, ["y"], None, o)


@case("reduce-mean", opsets=(11, 13, 18, 21))
def _(o):
    if o < 18:
        nodes = [
            N("ReduceMean", ["c"], ["a"], axes=[2, 3]),
            N("ReduceMean", ["c"], ["m"], axes=[1], keepdims=0),
            N("ReduceMean", ["c"], ["d"], axes=[-1, 2], keepdims=0),
        ]
        extra = {}
    else:
        nodes = [
            N("ReduceMean", ["c", "a1"], ["a"]),
            N("ReduceMean", ["c", "a2"], ["m"], keepdims=0),
            N("ReduceMean", ["c", "a3"], ["d"], keepdims=0),
        ]
        extra = {"a1": i64(2, 3), "a2": i64(1), "a3": i64(-1, 2)}
    nodes += [
        N("Flatten", ["a"], ["af"]),
        N("Flatten", ["m"], ["bf"]),
        N("Concat", ["af", "bf", "d"], ["y"], axis=1),
    ]
    return conv_then(nodes, o, extra=extra)


@case("identity-dropout", opsets=(11, 13, 21))
def _(o):
    nodes = [N("Identity", ["c"], ["i"]), N("Dropout", ["i"], ["d"]), N("Relu", ["d"], ["y"])]
    return conv_then(nodes, o)


@case("pytorch-shape-subgraph", opsets=(11, 13, 17))
def _(o):
    if o < 13:
        unsq = [N("Unsqueeze", ["n"], ["nu"], axes=[0])]
        extra = {}
    else:
        unsq = [N("Unsqueeze", ["n", "ax0"], ["nu"])]
        extra = {"ax0": i64(0)}
    nodes = [
        N("Shape", ["c"], ["sh"]),
        N("Constant", [], ["zero"], value=helper.make_tensor("zero", 7, [], [0])),
        N("Gather", ["sh", "zero"], ["n"], axis=0),
        *unsq,
        N("Constant", [], ["m1"], value=helper.make_tensor("m1", 7, [1], [-1])),
        N("Concat", ["nu", "m1"], ["shape"], axis=0),
        N("Reshape", ["c", "shape"], ["f"]),
        N("MatMul", ["f", "mw"], ["y"]),
    ]
    return conv_then(nodes, o, extra={"mw": f32(256, 3), **extra})


@case("graph-input-is-output-and-const-output", opsets=(13,))
def _(o):
    nodes = [N("Identity", ["x"], ["y"]), N("Relu", ["x"], ["z"]), N("Identity", ["k"], ["kk"])]
    return make_model(nodes, {"x": [2, 3]}, ["y", "z", "kk", "z"][:3], {"k": f32(2, 2)}, o)


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_matches_onnxruntime(name: str) -> None:
    fn, opset = CASES[name]
    check(fn(opset))


def test_mini_convnet_all_opsets_deep_chain() -> None:
    """A 10-node net (conv, BN, Clip, depthwise, pointwise, Add, pool, Gemm, Softmax) at every opset 11..21."""
    for opset in range(11, 22):
        inits = {
            "w": f32(8, 3, 3, 3),
            "b": f32(8),
            "dw": f32(8, 1, 3, 3),
            "pw": f32(16, 8, 1, 1),
            "fw": f32(10, 16),
            "fb": f32(10),
            **bn_inits(8),
        }
        inits2: dict = {}
        nodes = [
            N("Conv", ["x", "w", "b"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
            N("BatchNormalization", ["c1", "g", "be", "mu", "var"], ["n1"]),
            clip_node("n1", "r1", 0.0, 6.0, opset, inits2),
            N("Conv", ["r1", "dw"], ["c2"], group=8, pads=[1, 1, 1, 1]),
            N("Relu", ["c2"], ["r2"]),
            N("Conv", ["r2", "pw"], ["c3"]),
            N("Add", ["c3", "c3"], ["a3"]),
            N("GlobalAveragePool", ["a3"], ["p"]),
            N("Flatten", ["p"], ["f"]),
            N("Gemm", ["f", "fw", "fb"], ["logits"], transB=1),
            N("Softmax", ["logits"], ["y"], axis=1),
        ]
        check(make_model(nodes, {"x": [1, 3, 16, 16]}, ["y"], {**inits, **inits2}, opset), atol=1e-5)


def mobilenet_v2_like(opset: int):
    """Stem + 5 inverted-residual blocks (1x1 expand, depthwise 3x3, 1x1 project, residual Add) + head."""
    inits: dict[str, np.ndarray] = {}
    nodes: list = []

    def conv_bn(x: str, cin: int, cout: int, k: int, s: int, group: int = 1, act: bool = True) -> str:
        i = len(nodes)
        inits[f"w{i}"] = f32(cout, cin // group, k, k) / np.float32(np.sqrt(cin // group * k * k))
        nodes.append(N("Conv", [x, f"w{i}"], [f"c{i}"], pads=[k // 2] * 4, strides=[s, s], group=group))
        inits.update(
            {
                f"g{i}": f32(cout, positive=True),
                f"be{i}": f32(cout) / 10,
                f"mu{i}": f32(cout) / 10,
                f"var{i}": f32(cout, positive=True),
            }
        )
        nodes.append(N("BatchNormalization", [f"c{i}", f"g{i}", f"be{i}", f"mu{i}", f"var{i}"], [f"n{i}"]))
        if not act:
            return f"n{i}"
        nodes.append(clip_node(f"n{i}", f"r{i}", 0.0, 6.0, opset, inits))
        return f"r{i}"

    x = conv_bn("x", 3, 16, 3, 2)
    for cin, cout, s in [(16, 16, 1), (16, 24, 2), (24, 24, 1), (24, 32, 2), (32, 32, 1)]:
        h = conv_bn(
            conv_bn(conv_bn(x, cin, cin * 6, 1, 1), cin * 6, cin * 6, 3, s, group=cin * 6),
            cin * 6,
            cout,
            1,
            1,
            act=False,
        )
        if s == 1 and cin == cout:
            nodes.append(N("Add", [x, h], [f"add{len(nodes)}"]))
            h = nodes[-1].output[0]
        x = h
    inits.update(fw=f32(10, 32) / np.float32(6), fb=f32(10))
    nodes += [
        N("GlobalAveragePool", [x], ["p"]),
        N("Flatten", ["p"], ["f"]),
        N("Gemm", ["f", "fw", "fb"], ["logits"], transB=1),
        N("Softmax", ["logits"], ["y"], axis=1),
    ]
    return make_model(nodes, {"x": ["batch", 3, 32, 32]}, ["y", "logits"], inits, opset)


@pytest.mark.parametrize("opset", [11, 21])
def test_mobilenet_v2_like(opset: int) -> None:
    """A 17-conv network; atol 1e-4 because rounding differences accumulate over the chain."""
    conv = check(mobilenet_v2_like(opset), atol=1e-4, batch_size=2)
    assert conv.inputs[0].shape == (2, 3, 32, 32) and [o.name for o in conv.outputs] == ["y", "logits"]
    assert any("folded 16 BatchNormalization into Conv" == n for n in conv.notes)
