"""Generators of rearrangements, resizes, gathers, reductions and the other convolutions: DEPTH_TO_SPACE,
SPACE_TO_DEPTH, SPACE_TO_BATCH_ND, BATCH_TO_SPACE_ND, CHANNEL_SHUFFLE, RESIZE_BILINEAR,
RESIZE_NEAREST_NEIGHBOR, TILE, GATHER, REDUCE_MAX, REDUCE_MIN, REDUCE_PROD, L2_POOL_2D,
GROUPED_CONV_2D, TRANSPOSE_CONV_2D.

All of them move or combine values without leaving the input's interval (the reductions and
pools) or scale them like CONV_2D (the convolutions); their quant8 forms keep the input's
scale and zero point where NNAPI requires it.
"""

from __future__ import annotations

from mlts.crash.random_graph.layers import finish_layer, nhwc, weights_and_bias, windowed
from mlts.crash.random_graph.spec import MAX_ELEMENTS, MAX_KERNEL, Act, Op, generates
from mlts.crash.random_graph.state import GraphState, Value, clip_interval

BLOCK = 2


def _rank4(g: GraphState, quant: bool, accept=lambda t: True, make=None) -> tuple[Value, bool]:  # type: ignore[no-untyped-def]
    x = g.source(quant, lambda t: len(t.dims) == 4 and accept(t), make or (lambda: g.shape(4)))
    return x, g.chance(0.3)


def _layout_dims(nchw: bool, n: int, h: int, w: int, c: int) -> tuple[int, int, int, int]:
    return (n, c, h, w) if nchw else (n, h, w, c)


@generates(Op.DEPTH_TO_SPACE, quant=True, min_rank=4)
def _depth_to_space(g: GraphState, quant: bool) -> None:
    def make() -> tuple[int, ...]:
        n, h, w, _ = g.shape(4)
        return (n, h, w, BLOCK * BLOCK * g.rand.randint(1, 2))

    nchw = g.chance(0.3)
    x = g.source(quant, lambda t: len(t.dims) == 4 and nhwc(t.dims, nchw)[3] % (BLOCK * BLOCK) == 0, make)
    if nhwc(x.dims, nchw)[3] % (BLOCK * BLOCK):
        nchw = False  # the new input was made NHWC
    n, h, w, c = nhwc(x.dims, nchw)
    out = _layout_dims(nchw, n, h * BLOCK, w * BLOCK, c // (BLOCK * BLOCK))
    g.emit(Op.DEPTH_TO_SPACE, [x, g.i32(BLOCK), g.flag(nchw)], out, x.lo, x.hi, x.quant)


@generates(Op.SPACE_TO_DEPTH, quant=True, min_rank=4)
def _space_to_depth(g: GraphState, quant: bool) -> None:
    def fits(t: Value) -> bool:
        return t.dims[1] % BLOCK == 0 and t.dims[2] % BLOCK == 0 and t.dims[3] % BLOCK == 0

    def make() -> tuple[int, ...]:
        return (
            g.rand.randint(1, 2),
            BLOCK * g.rand.randint(1, 3),
            BLOCK * g.rand.randint(1, 3),
            BLOCK * g.dim(4),
        )

    x, nchw = _rank4(g, quant, fits, make)
    n, h, w, c = nhwc(x.dims, nchw)
    if h % BLOCK or w % BLOCK:
        nchw = not nchw
        n, h, w, c = nhwc(x.dims, nchw)
    out = _layout_dims(nchw, n, h // BLOCK, w // BLOCK, c * BLOCK * BLOCK)
    g.emit(Op.SPACE_TO_DEPTH, [x, g.i32(BLOCK), g.flag(nchw)], out, x.lo, x.hi, x.quant)


@generates(Op.SPACE_TO_BATCH_ND, quant=True, min_rank=4)
def _space_to_batch(g: GraphState, quant: bool) -> None:
    x, nchw = _rank4(g, quant)
    n, h, w, c = nhwc(x.dims, nchw)
    bh, bw = g.rand.randint(1, 2), g.rand.randint(1, 2)
    pads = []
    for size, b in ((h, bh), (w, bw)):
        before = g.rand.randint(0, 1)
        after = (-(size + before)) % b
        pads.append([before, after])
    ph, pw = h + sum(pads[0]), w + sum(pads[1])
    out = _layout_dims(nchw, n * bh * bw, ph // bh, pw // bw, c)
    args: list[Value | int] = [x, g.ints([bh, bw]), g.ints(pads), g.flag(nchw)]
    lo, hi = min(x.lo, 0.0), max(x.hi, 0.0)  # padding adds zeros (the zero point)
    g.emit(Op.SPACE_TO_BATCH_ND, args, out, lo, hi, x.quant)


@generates(Op.BATCH_TO_SPACE_ND, quant=True, min_rank=4)
def _batch_to_space(g: GraphState, quant: bool) -> None:
    x, nchw = _rank4(g, quant, lambda t: t.dims[0] % 2 == 0, lambda: (2, *g.shape(3)))
    n, h, w, c = nhwc(x.dims, nchw)
    bh, bw = (2, 1) if g.chance(0.5) else (1, 2)
    out = _layout_dims(nchw, n // (bh * bw), h * bh, w * bw, c)
    g.emit(Op.BATCH_TO_SPACE_ND, [x, g.ints([bh, bw]), g.flag(nchw)], out, x.lo, x.hi, x.quant)


@generates(Op.CHANNEL_SHUFFLE, quant=True)
def _channel_shuffle(g: GraphState, quant: bool) -> None:
    def make() -> tuple[int, ...]:
        dims = list(g.shape(g.rank(1, 4)))
        dims[0] += dims[0] % 2
        return tuple(dims)

    x = g.source(quant, lambda t: len(t.dims) <= 4 and any(d % 2 == 0 for d in t.dims), make)
    rank = len(x.dims)
    axis = g.rand.choice([a for a, d in enumerate(x.dims) if d % 2 == 0])
    groups = g.rand.choice([k for k in range(2, x.dims[axis] + 1) if x.dims[axis] % k == 0])
    axis_arg = axis - rank if g.chance(0.3) else axis
    g.emit(Op.CHANNEL_SHUFFLE, [x, g.i32(groups), g.i32(axis_arg)], x.dims, x.lo, x.hi, x.quant)


def _resize(g: GraphState, op: Op, quant: bool) -> None:
    x, nchw = _rank4(g, quant)
    n, h, w, c = nhwc(x.dims, nchw)
    room = max(MAX_ELEMENTS // (n * c), 1)
    out_h = g.rand.randint(1, max(1, min(2 * h, room)))
    out_w = g.rand.randint(1, max(1, min(2 * w, room // out_h)))
    align, half = g.rand.choice(((False, False), (True, False), (False, True)))
    args: list[Value | int] = [x, g.i32(out_w), g.i32(out_h), g.flag(nchw)]
    if align or half or g.chance(0.3):
        args += [g.flag(align), g.flag(half)]
    g.emit(op, args, _layout_dims(nchw, n, out_h, out_w, c), x.lo, x.hi, x.quant)


generates(Op.RESIZE_NEAREST_NEIGHBOR, quant=True, min_rank=4)(
    lambda g, q: _resize(g, Op.RESIZE_NEAREST_NEIGHBOR, q)
)
# Float only: the bundled driver has no quant8 RESIZE_BILINEAR kernel yet.
generates(Op.RESIZE_BILINEAR, min_rank=4)(lambda g, q: _resize(g, Op.RESIZE_BILINEAR, False))


@generates(Op.TILE, quant=True)
def _tile(g: GraphState, quant: bool) -> None:
    x = g.source(quant, lambda t: t.size * 2 <= MAX_ELEMENTS)
    multiples, size = [], x.size
    for _ in x.dims:
        m = g.rand.randint(1, 3) if size * 3 <= MAX_ELEMENTS else 1
        multiples.append(m)
        size *= m
    out = [d * m for d, m in zip(x.dims, multiples, strict=True)]
    g.emit(Op.TILE, [x, g.ints(multiples)], out, x.lo, x.hi, x.quant)


@generates(Op.GATHER, quant=True)
def _gather(g: GraphState, quant: bool) -> None:
    x = g.source(quant)
    rank = len(x.dims)
    axis = g.rand.randrange(rank)
    count = g.rand.randint(1, 4)
    indices = [g.rand.randrange(x.dims[axis]) for _ in range(count)]
    out = [*x.dims[:axis], count, *x.dims[axis + 1 :]]
    axis_arg = axis - rank if g.chance(0.3) else axis
    g.emit(Op.GATHER, [x, g.i32(axis_arg), g.ints(indices)], out, x.lo, x.hi, x.quant)


def _reduce(g: GraphState, op: Op, quant: bool) -> None:
    product = op == Op.REDUCE_PROD
    x = g.source(quant, lambda t: not product or t.bound <= 1.0)
    rank = len(x.dims)
    axes = sorted(g.rand.sample(range(rank), g.rand.randint(1, rank)))
    keep = g.chance(0.5)
    out = [1 if d in axes else n for d, n in enumerate(x.dims) if keep or d not in axes] or [1]
    listed = [a - rank if g.chance(0.3) else a for a in axes]
    # A product of values of magnitude <= 1 stays within [-1, 1].
    lo, hi = (-1.0, 1.0) if product else (x.lo, x.hi)
    g.emit(op, [x, g.ints(listed), g.flag(keep)], out, lo, hi, x.quant)


for _op, _q in ((Op.REDUCE_MAX, True), (Op.REDUCE_MIN, True), (Op.REDUCE_PROD, False)):
    generates(_op, quant=_q)(lambda g, q, op=_op: _reduce(g, op, q))


@generates(Op.L2_POOL_2D, min_rank=4)
def _l2_pool(g: GraphState, quant: bool) -> None:
    x, (n, kh, kw, c), win = windowed(g, False, dilation=False)
    code = g.rand.choice(tuple(Act))
    g.emit(
        Op.L2_POOL_2D,
        [x, *win.params(g, (kw, kh), code)],
        win.out_dims(n, c),
        *clip_interval(code, 0.0, x.bound),
    )


@generates(Op.GROUPED_CONV_2D, quant=True, min_rank=4)
def _grouped_conv(g: GraphState, quant: bool) -> None:
    x, (n, kh, kw, cin), win = windowed(g, quant, dilation=False)
    divisors = [k for k in range(1, cin + 1) if cin % k == 0]
    groups = g.rand.choice(divisors)
    room = max(MAX_ELEMENTS // (n * win.out_h * win.out_w * groups), 1)
    cout = groups * g.rand.randint(1, min(3, room))
    win.with_layout, win.with_dilation = True, False  # GROUPED_CONV_2D: layout required, no dilation
    wgt, bias, bound = weights_and_bias(g, x, (cout, kh, kw, cin // groups), (1, 2, 3), cout, quant)
    finish_layer(g, Op.GROUPED_CONV_2D, [x, wgt, bias], win, (groups,), win.out_dims(n, cout), bound, quant)


@generates(Op.TRANSPOSE_CONV_2D, min_rank=4)
def _transpose_conv(g: GraphState, quant: bool) -> None:
    x, nchw = _rank4(
        g, False, lambda t: t.size * 4 <= MAX_ELEMENTS, lambda: (1, g.dim(8), g.dim(8), g.dim(8))
    )
    n, h, w, cin = nhwc(x.dims, nchw)
    kh, kw = g.rand.randint(1, MAX_KERNEL), g.rand.randint(1, MAX_KERNEL)
    sh, sw = g.rand.randint(1, 2), g.rand.randint(1, 2)
    pads = [g.rand.randint(0, (k - 1) // 2) for k in (kw, kw, kh, kh)]  # left, right, top, bottom
    out_h = (h - 1) * sh + kh - pads[2] - pads[3]
    out_w = (w - 1) * sw + kw - pads[0] - pads[1]
    cout = g.rand.randint(1, max(1, min(8, MAX_ELEMENTS // max(n * out_h * out_w, 1))))
    # Each output sums a subset of the taps of one output channel: the per-channel weight norm bounds it.
    wgt, bias, bound = weights_and_bias(g, x, (cout, kh, kw, cin), (1, 2, 3), cout, False)
    code, lo, hi = g.activation(-bound, bound)
    args: list[Value | int] = [x, wgt, bias, *(g.i32(p) for p in pads), g.i32(sw), g.i32(sh), g.i32(code)]
    args.append(g.flag(nchw))
    g.emit(Op.TRANSPOSE_CONV_2D, args, _layout_dims(nchw, n, out_h, out_w, cout), lo, hi)
