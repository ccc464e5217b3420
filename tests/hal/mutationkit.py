"""Operand mutations of one-operation probe models and the invalid (BROKEN) cases built with them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from mlts.hal.enums import DTYPE_NAME, OperandLifeTime, OperandType, OperationType
from mlts.hal.types import DataLocation, Model, Operand, Subgraph, SymmPerChannelQuantParams

T = OperandType


Op = OperationType


F32, F16, Q8, QS8, I32 = (
    T.TENSOR_FLOAT32,
    T.TENSOR_FLOAT16,
    T.TENSOR_QUANT8_ASYMM,
    T.TENSOR_QUANT8_ASYMM_SIGNED,
    T.TENSOR_INT32,
)


def _operand_index(model: Model, pos: int) -> int:
    """Operand index of input `pos` of operation 0 (negative: output -1 - pos)."""
    op = model.main.operations[0]
    return op.inputs[pos] if pos >= 0 else op.outputs[-1 - pos]


def _set_operand(model: Model, index: int, **changes) -> Model:
    operands = list(model.main.operands)
    operands[index] = replace(operands[index], **changes)
    return replace(model, main=replace(model.main, operands=tuple(operands)))


def set_in(pos: int, **changes) -> Callable[[Model], Model]:
    """Change fields of input `pos` (negative: output -1 - pos)."""
    return lambda m: _set_operand(m, _operand_index(m, pos), **changes)


def retype(pos: int, t: int, scale: float = 0.0, zp: int = 0) -> Callable[[Model], Model]:
    """Give input `pos` type `t`; constants get fresh bytes of the new element size."""

    def mutate(m: Model) -> Model:
        i = _operand_index(m, pos)
        o = m.main.operands[i]
        if o.lifetime in (OperandLifeTime.CONSTANT_COPY, OperandLifeTime.CONSTANT_REFERENCE):
            n = int(np.prod(o.dimensions)) if o.dimensions else 1
            data = np.zeros(n, dtype=DTYPE_NAME[T(t)]).tobytes()
            m, loc = _append_value(m, data)
            return _set_operand(
                m, i, type=t, scale=scale, zero_point=zp, location=loc, lifetime=OperandLifeTime.CONSTANT_COPY
            )
        return _set_operand(m, i, type=t, scale=scale, zero_point=zp)

    return mutate


def _append_value(m: Model, data: bytes) -> tuple[Model, DataLocation]:
    values = bytes(m.operand_values)
    values += b"\0" * (-len(values) % 4)
    loc = DataLocation(0, len(values), len(data))
    return replace(m, operand_values=values + data), loc


def value(pos: int, v) -> Callable[[Model], Model]:
    """Give constant input `pos` the value `v` (same type and element count; stored afresh)."""

    def mutate(m: Model) -> Model:
        i = _operand_index(m, pos)
        o = m.main.operands[i]
        arr = np.asarray(v, dtype=DTYPE_NAME[T(o.type)])
        m, loc = _append_value(m, arr.tobytes())
        dims = o.dimensions if o.type in (T.INT32, T.FLOAT32, T.BOOL, T.FLOAT16) else arr.shape
        return _set_operand(
            m, i, location=loc, dimensions=tuple(dims), lifetime=OperandLifeTime.CONSTANT_COPY
        )

    return mutate


def omit(pos: int) -> Callable[[Model], Model]:
    return set_in(pos, lifetime=OperandLifeTime.NO_VALUE, location=DataLocation())


def drop_last_input(m: Model) -> Model:
    op = m.main.operations[0]
    return replace(m, main=replace(m.main, operations=(replace(op, inputs=op.inputs[:-1]),)))


def drop_last_output(m: Model) -> Model:
    op = m.main.operations[0]
    last = op.outputs[-1]
    main = replace(
        m.main,
        operations=(replace(op, outputs=op.outputs[:-1]),),
        output_indexes=tuple(i for i in m.main.output_indexes if i != last),
    )
    return _set_operand(replace(m, main=main), last, lifetime=OperandLifeTime.TEMPORARY_VARIABLE)


def add_input(t: int, dims=()) -> Callable[[Model], Model]:
    """Append a new model input of type `t` to operation 0's inputs."""

    def mutate(m: Model) -> Model:
        sub = m.main
        new = Operand(t, tuple(dims), 1, lifetime=OperandLifeTime.SUBGRAPH_INPUT)
        idx = len(sub.operands)
        op = sub.operations[0]
        main = Subgraph(
            (*sub.operands, new),
            (replace(op, inputs=(*op.inputs, idx)),),
            (*sub.input_indexes, idx),
            sub.output_indexes,
        )
        return replace(m, main=main)

    return mutate


def add_scalar(t: int, v) -> Callable[[Model], Model]:
    """Append a constant scalar of type `t` and value `v` to operation 0's inputs."""

    def mutate(m: Model) -> Model:
        data = np.asarray(v, dtype=DTYPE_NAME[T(t)]).tobytes()
        m, loc = _append_value(m, data)
        sub = m.main
        new = Operand(t, (), 1, lifetime=OperandLifeTime.CONSTANT_COPY, location=loc)
        op = sub.operations[0]
        idx = len(sub.operands)
        main = replace(
            sub, operands=(*sub.operands, new), operations=(replace(op, inputs=(*op.inputs, idx)),)
        )
        return replace(m, main=main)

    return mutate


def per_channel_filter(channel_dim: int = 0) -> Callable[[Model], Model]:
    def mutate(m: Model) -> Model:
        i = _operand_index(m, 1)
        o = m.main.operands[i]
        data = np.ones(int(np.prod(o.dimensions)), dtype=np.int8).tobytes()
        m, loc = _append_value(m, data)
        n = o.dimensions[channel_dim]
        extra = SymmPerChannelQuantParams(tuple([0.5] * n), channel_dim)
        return _set_operand(
            m,
            i,
            type=T.TENSOR_QUANT8_SYMM_PER_CHANNEL,
            scale=0.0,
            zero_point=0,
            location=loc,
            extra_params=extra,
            lifetime=OperandLifeTime.CONSTANT_COPY,
        )

    return mutate


def both(*mutations: Callable[[Model], Model]) -> Callable[[Model], Model]:
    def mutate(m: Model) -> Model:
        for f in mutations:
            m = f(m)
        return m

    return mutate


BROKEN = [
    ("add-count", Op.ADD, F32, drop_last_input, ["ADD takes 3 inputs, got 2"]),
    (
        "add-key-type",
        Op.ADD,
        F32,
        both(retype(0, T.TENSOR_BOOL8), retype(1, T.TENSOR_BOOL8), retype(-1, T.TENSOR_BOOL8)),
        ["input 0 (input1", "TENSOR_BOOL8", "ADD takes"],
    ),
    (
        "add-mixed-types",
        Op.ADD,
        F32,
        retype(1, F16),
        ["input 1 (input2", "TENSOR_FLOAT16", "must be TENSOR_FLOAT32"],
    ),
    ("add-activation-type", Op.ADD, F32, retype(2, T.FLOAT32), ["input 2 (activation", "must be INT32"]),
    ("add-activation-range", Op.ADD, F32, value(2, 4), ["input 2 (activation", "is 4", "in [0, 3]"]),
    ("add-broadcast", Op.ADD, F32, set_in(1, dimensions=(1, 2, 2, 3)), ["do not broadcast"]),
    (
        "add-rank5",
        Op.ADD,
        F32,
        both(
            set_in(0, dimensions=(1, 1, 2, 2, 2)),
            set_in(1, dimensions=(1, 1, 2, 2, 2)),
            set_in(-1, dimensions=(1, 1, 2, 2, 2)),
        ),
        ["rank 5", "at most 4"],
    ),
    (
        "add-output-type",
        Op.ADD,
        Q8,
        retype(-1, QS8, 0.5, 0),
        ["output 0 (output", "TENSOR_QUANT8_ASYMM_SIGNED"],
    ),
    ("conv-count", Op.CONV_2D, F32, drop_last_input, ["CONV_2D takes 7, 8, 10, 11 or 13 inputs, got 9"]),
    ("conv-rank3", Op.CONV_2D, F32, set_in(0, dimensions=(3, 3, 1)), ["input 0 (input", "rank 3", "rank 4"]),
    ("conv-stride0", Op.CONV_2D, F32, value(7, 0), ["input 7 (stride_width", "is 0", ">= 1"]),
    ("conv-pad-negative", Op.CONV_2D, F32, value(3, -1), ["input 3 (padding_left", ">= 0"]),
    (
        "conv-channels",
        Op.CONV_2D,
        F32,
        set_in(0, dimensions=(1, 3, 3, 2)),
        ["input 1 (filter", "dimension 3 is 1", "input 0 (input"],
    ),
    (
        "conv-bias-size",
        Op.CONV_2D,
        F32,
        both(set_in(2, dimensions=(2,)), value(2, [0.0, 0.0])),
        ["input 2 (bias", "dimension 0 is 2"],
    ),
    (
        "conv-bias-scale",
        Op.CONV_2D,
        Q8,
        set_in(2, scale=0.3),
        ["input 2 (bias", "input scale x weights scale"],
    ),
    (
        "conv-per-channel-float",
        Op.CONV_2D,
        F32,
        per_channel_filter(),
        ["input 1 (filter", "TENSOR_QUANT8_SYMM_PER_CHANNEL", "must be TENSOR_FLOAT32"],
    ),
    (
        "conv-per-channel-float-bias",
        Op.CONV_2D,
        Q8,
        both(per_channel_filter(), retype(2, F32)),
        ["input 2 (bias", "must be TENSOR_INT32"],
    ),
    ("conv-per-channel-dim", Op.CONV_2D, Q8, per_channel_filter(3), ["channel dimension 0"]),
    (
        "conv-filter-type-mix",
        Op.CONV_2D,
        Q8,
        retype(1, QS8, 0.5, 0),
        ["input 1 (filter", "TENSOR_QUANT8_ASYMM_SIGNED"],
    ),
    ("depthwise-multiplier", Op.DEPTHWISE_CONV_2D, F32, value(9, 2), ["output channels", "depth multiplier"]),
    ("grouped-groups", Op.GROUPED_CONV_2D, F32, value(9, 2), ["multiple of groups"]),
    ("transpose-conv-stride", Op.TRANSPOSE_CONV_2D, F32, value(7, 0), ["stride_width", ">= 1"]),
    ("transpose-conv-pad-left", Op.TRANSPOSE_CONV_2D, F32, value(3, -1), ["padding_left", ">= 0"]),
    ("avgpool-filter0", Op.AVERAGE_POOL_2D, F32, value(7, 0), ["input 7 (filter_width", ">= 1"]),
    ("maxpool-layout-type", Op.MAX_POOL_2D, F32, add_input(T.INT32), ["input 10 (layout", "must be BOOL"]),
    (
        "l2pool-quant",
        Op.L2_POOL_2D,
        F32,
        both(retype(0, Q8, 0.5, 0), retype(-1, Q8, 0.5, 0)),
        ["L2_POOL_2D takes"],
    ),
    (
        "fc-weights-rank",
        Op.FULLY_CONNECTED,
        F32,
        both(set_in(1, dimensions=(6,))),
        ["input 1 (weights", "rank 1"],
    ),
    (
        "fc-input-size",
        Op.FULLY_CONNECTED,
        F32,
        set_in(0, dimensions=(1, 3)),
        ["multiple of the weights' input size"],
    ),
    (
        "fc-output-units",
        Op.FULLY_CONNECTED,
        F32,
        set_in(-1, dimensions=(1, 4)),
        ["output 0", "the inputs make [1, 3]"],
    ),
    ("concat-rank5", Op.CONCATENATION, F32, set_in(0, dimensions=(1, 1, 1, 1, 2)), ["rank 5", "at most 4"]),
    ("concat-axis", Op.CONCATENATION, F32, value(1, 2), ["input 1 (axis", "is 2", "[-2, 2)"]),
    ("concat-count", Op.CONCATENATION, F32, drop_last_input, ["CONCATENATION takes 2 or more inputs, got 1"]),
    ("softmax-beta", Op.SOFTMAX, F32, value(1, 0.0), ["input 1 (beta", "must be > 0"]),
    ("softmax-beta-type", Op.SOFTMAX, F16, retype(1, T.FLOAT32), ["input 1 (beta", "must be FLOAT16"]),
    ("softmax-out-quant", Op.SOFTMAX, Q8, set_in(-1, scale=0.5), ["output 0", "scale 0.00390625"]),
    ("logistic-out-quant-signed", Op.LOGISTIC, QS8, set_in(-1, zero_point=0), ["zero point -128"]),
    ("l2norm-out-quant", Op.L2_NORMALIZATION, Q8, set_in(-1, scale=0.5), ["output 0", "scale 0.0078125"]),
    ("resize-size-zero", Op.RESIZE_BILINEAR, F32, value(1, 0), ["input 1 (output_width", ">= 1"]),
    ("resize-nn-count", Op.RESIZE_NEAREST_NEIGHBOR, F32, drop_last_input, ["takes 4, 5 or 6 inputs, got 3"]),
    (
        "resize-align-and-half-pixel",
        Op.RESIZE_NEAREST_NEIGHBOR,
        F32,
        both(add_scalar(T.BOOL, True), add_scalar(T.BOOL, True)),
        ["input 4 (align_corners", "input 5 (half_pixel_centers", "both true"],
    ),
    ("depth-to-space-block", Op.DEPTH_TO_SPACE, F32, value(1, 3), ["multiple of block size squared"]),
    ("space-to-depth-block0", Op.SPACE_TO_DEPTH, F32, value(1, 0), ["input 1 (block_size", ">= 1"]),
    (
        "space-to-batch-pads",
        Op.SPACE_TO_BATCH_ND,
        F32,
        value(2, [[0, -1], [0, 0]]),
        ["input 2 (paddings", ">= 0"],
    ),
    ("batch-to-space-block", Op.BATCH_TO_SPACE_ND, F32, value(1, [0, 2]), ["input 1 (block_shape", ">= 1"]),
    ("channel-shuffle-groups", Op.CHANNEL_SHUFFLE, F32, value(1, 0), ["input 1 (num_groups", ">= 1"]),
    (
        "reshape-two-minus-one",
        Op.RESHAPE,
        F32,
        both(set_in(1, dimensions=(2,)), value(1, [-1, -1])),
        ["at most one dimension may be -1"],
    ),
    ("reshape-count", Op.RESHAPE, F32, value(1, [5]), ["does not hold the 4 elements"]),
    ("transpose-perm", Op.TRANSPOSE, F32, value(1, [0, 1, 1]), ["permutation of 0..2"]),
    ("squeeze-axis", Op.SQUEEZE, F32, value(1, [3]), ["holds axis 3"]),
    (
        "conv-bias-omitted",
        Op.CONV_2D,
        F32,
        omit(2),
        ["input 2 (bias", "omitted (NO_VALUE)", "not an optional input"],
    ),
    ("strided-slice-stride0", Op.STRIDED_SLICE, F32, value(3, [1, 0]), ["strides must not be 0"]),
    (
        "strided-slice-begins-size",
        Op.STRIDED_SLICE,
        F32,
        value(1, [0, 0, 0]),
        ["input 1 (begins", "one per dimension"],
    ),
    ("pad-shape", Op.PAD, F32, value(1, [[0, 0, 0], [1, 1, 1]]), ["input 1 (paddings", "[2, 2]"]),
    ("pad-v2-value-type", Op.PAD_V2, Q8, retype(2, T.FLOAT32), ["input 2 (pad_value", "must be INT32"]),
    ("mean-axes", Op.MEAN, F32, value(1, [4]), ["holds axis 4"]),
    ("reduce-keep-type", Op.REDUCE_SUM, F32, retype(2, T.INT32), ["input 2 (keep_dims", "must be BOOL"]),
    ("argmax-output", Op.ARGMAX, F32, retype(-1, F32), ["output 0", "must be TENSOR_INT32"]),
    ("gather-axis", Op.GATHER, F32, value(1, -3), ["input 1 (axis", "is -3"]),
    ("expand-dims-axis", Op.EXPAND_DIMS, F32, value(1, 3), ["input 1 (axis", "[-3, 3)"]),
    ("split-count", Op.SPLIT, F32, value(2, 3), ["input 2 (num_outputs", "number of outputs (2)"]),
    ("topk-k", Op.TOPK_V2, F32, value(1, 4), ["input 1 (k", "in [1, 3]"]),
    ("tile-multiples", Op.TILE, F32, value(1, [2, 1, 1]), ["input 1 (multiples", "one per dimension"]),
    ("compare-output", Op.LESS, F32, retype(-1, F32), ["output 0", "must be TENSOR_BOOL8"]),
    (
        "logical-type",
        Op.LOGICAL_AND,
        T.TENSOR_BOOL8,
        retype(1, Q8, 0.5, 0),
        ["input 1 (input2", "must be TENSOR_BOOL8"],
    ),
    (
        "select-shapes",
        Op.SELECT,
        F32,
        set_in(2, dimensions=(1, 2, 2, 3)),
        ["input 2 (input2", "must have the shape"],
    ),
    ("select-condition", Op.SELECT, F32, retype(0, F32), ["input 0 (condition", "must be TENSOR_BOOL8"]),
    ("dequantize-output", Op.DEQUANTIZE, Q8, retype(-1, I32), ["output 0", "TENSOR_FLOAT32"]),
    ("quantize-input", Op.QUANTIZE, F32, both(retype(0, I32)), ["QUANTIZE takes"]),
    ("elu-alpha-type", Op.ELU, F32, retype(1, T.INT32), ["input 1 (alpha", "must be FLOAT32"]),
    ("fill-value-type", Op.FILL, I32, retype(1, T.FLOAT32), ["input 1 (value", "must be INT32"]),
    ("rank-output", Op.RANK, F32, retype(-1, I32), ["output 0", "must be INT32"]),
    ("lstm-activation", Op.LSTM, F32, value(20, 2), ["input 20 (activation", "recurrent activations"]),
    (
        "lstm-required-omitted",
        Op.LSTM,
        F32,
        omit(2),
        ["input 2 (forget_input_weights", "not an optional input"],
    ),
    ("lstm-clip", Op.LSTM, F32, value(21, -1.0), ["input 21 (cell_clip", ">= 0"]),
    (
        "seq-lstm-outputs",
        Op.UNIDIRECTIONAL_SEQUENCE_LSTM,
        F32,
        drop_last_input,
        ["takes 24 or 28 inputs, got 23"],
    ),
    ("rnn-rank", Op.RNN, F32, set_in(0, dimensions=(1, 1, 2)), ["input 0 (input", "rank 3"]),
    ("svdf-rank", Op.SVDF, F32, value(5, 0), ["input 5 (rank", ">= 1"]),
    (
        "bidi-rnn-time-major",
        Op.BIDIRECTIONAL_SEQUENCE_RNN,
        F32,
        retype(13, T.INT32),
        ["input 13 (time_major", "BOOL"],
    ),
    (
        "q16-lstm-bias",
        Op.QUANTIZED_16BIT_LSTM,
        Q8,
        retype(9, F32),
        ["input 9 (input_gate_bias", "TENSOR_INT32"],
    ),
    (
        "qlstm-cell",
        Op.QUANTIZED_LSTM,
        QS8,
        retype(19, QS8, 0.5, 0),
        ["input 19 (cell_state_in", "TENSOR_QUANT16_SYMM"],
    ),
    ("lsh-type", Op.LSH_PROJECTION, F32, value(3, 4), ["input 3 (type", "is 4"]),
    ("hashtable-hits", Op.HASHTABLE_LOOKUP, F32, retype(-2, I32), ["output 1 (hits", "TENSOR_QUANT8_ASYMM"]),
    ("embedding-lookups", Op.EMBEDDING_LOOKUP, F32, retype(0, F32), ["input 0 (lookups", "TENSOR_INT32"]),
    ("multinomial-samples", Op.RANDOM_MULTINOMIAL, F32, value(1, 0), ["input 1 (num_samples", ">= 1"]),
    ("roi-align-box-quant", Op.ROI_ALIGN, Q8, set_in(1, scale=0.25), ["input 1 (rois", "scale 0.125"]),
    ("roi-pooling-ratio", Op.ROI_POOLING, F32, value(5, 0.0), ["input 5 (height_ratio", "> 0"]),
    ("nms-kernel", Op.BOX_WITH_NMS_LIMIT, F32, value(5, 3), ["input 5 (soft_nms_kernel", "is 3"]),
    (
        "proposals-anchor-type",
        Op.GENERATE_PROPOSALS,
        Q8,
        retype(2, Q8, 0.5, 0),
        ["input 2 (anchors", "TENSOR_QUANT16_SYMM"],
    ),
    ("detection-scale", Op.DETECTION_POSTPROCESSING, F32, value(3, 0.0), ["input 3 (y_scale", "> 0"]),
    ("heatmap-layout", Op.HEATMAP_MAX_KEYPOINT, F32, retype(2, T.INT32), ["input 2 (layout", "BOOL"]),
    (
        "bbox-deltas",
        Op.AXIS_ALIGNED_BBOX_TRANSFORM,
        T.TENSOR_QUANT16_ASYMM,
        retype(1, I32),
        ["input 1 (deltas", "TENSOR_QUANT8_ASYMM"],
    ),
    (
        "instance-norm-rank",
        Op.INSTANCE_NORMALIZATION,
        F32,
        set_in(0, dimensions=(2, 2, 2)),
        ["rank 3", "rank 4"],
    ),
    ("log-softmax-axis", Op.LOG_SOFTMAX, F32, value(2, 2), ["input 2 (axis", "[-2, 2)"]),
    ("slice-size", Op.SLICE, F32, value(2, [1, -2]), ["input 2 (size", ">= -1"]),
    ("squeeze-one-input", Op.SQUEEZE, F32, drop_last_input, ["SQUEEZE takes 2 inputs, got 1"]),
    ("transpose-one-input", Op.TRANSPOSE, F32, drop_last_input, ["TRANSPOSE takes 2 inputs, got 1"]),
    (
        "hashtable-hits-quant",
        Op.HASHTABLE_LOOKUP,
        F32,
        set_in(-2, scale=0.5, zero_point=128),
        ["output 1 (hits", "scale 1.0 and zero point 0"],
    ),
    (
        "lsh-dense-no-weight",
        Op.LSH_PROJECTION,
        F32,
        value(3, 2),
        ["input 2 (weight", "DENSE", "needs a weight"],
    ),
    (
        "bidi-rnn-split-one-output",
        Op.BIDIRECTIONAL_SEQUENCE_RNN,
        F32,
        drop_last_output,
        ["input 14 (merge_outputs", "2 or 4 outputs, got 1"],
    ),
    (
        "bidi-lstm-split-one-output",
        Op.BIDIRECTIONAL_SEQUENCE_LSTM,
        F32,
        drop_last_output,
        ["input 51 (merge_outputs", "2 or 6 outputs, got 1"],
    ),
    (
        "q16-lstm-bias-scale",
        Op.QUANTIZED_16BIT_LSTM,
        Q8,
        set_in(9, scale=1 / 128),
        ["input 9 (input_gate_bias", "input scale x weights scale"],
    ),
    (
        "q16-lstm-cell-scale",
        Op.QUANTIZED_16BIT_LSTM,
        Q8,
        set_in(13, scale=2.0**-10),
        ["input 13 (prev_cell_state", "0.00048828125"],
    ),
]
