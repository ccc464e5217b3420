"""The structures and constants of driver/native/mlts_kernels.h, mirrored once with ctypes.

Every structure that crosses the boundary to the compiled kernels is declared here and nowhere else
on the Python side, with the C name it mirrors (`C_NAME`); `STRUCTURES` lists them all. The library
reports each C structure's size and each field's offset and size (`mk_layout`) and the interface's
constants (`mk_constant`); tests/driver/test_native_layout.py checks that both sides agree, field by
field, so a change on one side alone fails a test instead of corrupting memory.

A bound call (driver/ops/_bind.py, driver/bound_steps.py) is one row of `CALL_INTS` int64 words,
its kind first and then its arguments in the order of the kind's structure below (`CALL_ARGS`
names the structure of each kind), and one row of `CALL_FLOATS` float32 values (`CallFloats`).
"""

from __future__ import annotations

import ctypes

_P = ctypes.c_void_p
_L = ctypes.c_int64
_I32 = ctypes.c_int32
_F = ctypes.c_float

#: The interface's one ABI number (MK_ABI): the library's mk_abi() must return it.
ABI = 17

# Bound-call kinds (enum mk_call_kind).
CALL_IM2COL_F32 = 1
CALL_GEMM_PACKED_BIAS_ACT_F32 = 2
CALL_DEPTHWISE_F32 = 3
CALL_GEMM_FEWROWS_BIAS_ACT_F32 = 4
CALL_ADD_F32 = 5
CALL_COPY = 6
CALL_QIM2COL = 7
CALL_QGEMM_REQUANT = 8
CALL_DEPTHWISE_Q8 = 9
CALL_TANH_F32 = 10
CALL_LOGISTIC_F32 = 11
CALL_COPY_2D = 12
CALL_SOFTMAX_F32 = 13
CALL_SOFTMAX_Q8 = 14
CALL_MEAN_Q8 = 15
CALL_PAIR_TABLE_Q8 = 16
CALL_LSTM_CELL_F32 = 17
#: The int64 words of one bound call (its kind, then its arguments).
CALL_INTS = 20
#: The float32 values of one bound call.
CALL_FLOATS = 2

#: The largest K of the 8-bit integer GEMM (K * 255 * 255 < 2^31).
QGEMM_MAX_K = 33025

#: The C constants (mk_constant) and their values here.
CONSTANTS: dict[str, int] = {
    "MK_ABI": ABI,
    "MK_CALL_INTS": CALL_INTS,
    "MK_CALL_FLOATS": CALL_FLOATS,
    "MK_CALL_IM2COL_F32": CALL_IM2COL_F32,
    "MK_CALL_GEMM_PACKED_BIAS_ACT_F32": CALL_GEMM_PACKED_BIAS_ACT_F32,
    "MK_CALL_DEPTHWISE_F32": CALL_DEPTHWISE_F32,
    "MK_CALL_GEMM_FEWROWS_BIAS_ACT_F32": CALL_GEMM_FEWROWS_BIAS_ACT_F32,
    "MK_CALL_ADD_F32": CALL_ADD_F32,
    "MK_CALL_COPY": CALL_COPY,
    "MK_CALL_QIM2COL": CALL_QIM2COL,
    "MK_CALL_QGEMM_REQUANT": CALL_QGEMM_REQUANT,
    "MK_CALL_DEPTHWISE_Q8": CALL_DEPTHWISE_Q8,
    "MK_CALL_TANH_F32": CALL_TANH_F32,
    "MK_CALL_LOGISTIC_F32": CALL_LOGISTIC_F32,
    "MK_CALL_COPY_2D": CALL_COPY_2D,
    "MK_CALL_SOFTMAX_F32": CALL_SOFTMAX_F32,
    "MK_CALL_SOFTMAX_Q8": CALL_SOFTMAX_Q8,
    "MK_CALL_MEAN_Q8": CALL_MEAN_Q8,
    "MK_CALL_PAIR_TABLE_Q8": CALL_PAIR_TABLE_Q8,
    "MK_CALL_LSTM_CELL_F32": CALL_LSTM_CELL_F32,
    "MK_QGEMM_MAX_K": QGEMM_MAX_K,
}


class Geom(ctypes.Structure):
    """A window's geometry (batch, input height, width, channels, kernel height and width, strides,
    dilations, padding above and left, output height and width)."""

    C_NAME = "mk_geom_t"
    _fields_ = [
        (name, _I32)
        for name in ("n", "h", "w", "c", "kh", "kw", "sh", "sw", "dh", "dw", "pt", "pl", "oh", "ow")
    ]


#: The fields of PoolStats (mk_pool_stats_t), in their order.
POOL_STATS: tuple[str, ...] = (
    "jobs",
    "worker_tasks",
    "wakes",
    "wait_ns",
    "preempted",
    "crowded",
    "late",
    "kept",
    "rests",
)


class PoolStats(ctypes.Structure):
    """The kernels' pool counters (mk_pool_stats; driver.native.pool_stats describes them)."""

    C_NAME = "mk_pool_stats_t"
    _fields_ = [(name, _L) for name in POOL_STATS]


class LstmConst(ctypes.Structure):
    """What a prepared LSTM keeps for the fused cell (mk_lstm_cell_f32)."""

    C_NAME = "mk_lstm_const_t"
    _fields_ = [
        ("units", _L),
        ("k1", _L),
        ("k2", _L),
        ("gates", _L),
        ("act", _L),
        ("cell_clip", ctypes.c_double),
        ("w", _P),
        ("bias", _P),
        ("peep_i", _P),
        ("peep_f", _P),
        ("peep_o", _P),
        # written by the kernel: how many steps were offered to the kernels' pool
        ("offered", _L),
    ]


class CallIm2colF32(ctypes.Structure):
    """CALL_IM2COL_F32: mk_im2col_f32."""

    C_NAME = "mk_call_im2col_f32_t"
    _fields_ = [("kind", _L), ("x", _P), ("geom", _P), ("cols", _P)]


class CallGemmF32(ctypes.Structure):
    """CALL_GEMM_PACKED_BIAS_ACT_F32 (b: packed panels) and CALL_GEMM_FEWROWS_BIAS_ACT_F32 (b:
    row-major); floats: CallBounds."""

    C_NAME = "mk_call_gemm_f32_t"
    _fields_ = [("kind", _L), ("a", _P), ("b", _P), ("c", _P), ("m", _L), ("n", _L), ("k", _L), ("bias", _P)]


class CallDepthwiseF32(ctypes.Structure):
    """CALL_DEPTHWISE_F32: mk_depthwise_f32; floats: CallBounds."""

    C_NAME = "mk_call_depthwise_f32_t"
    _fields_ = [("kind", _L), ("x", _P), ("geom", _P), ("m", _L), ("wt", _P), ("bias", _P), ("y", _P)]


class CallAddF32(ctypes.Structure):
    """CALL_ADD_F32: mk_add_f32."""

    C_NAME = "mk_call_add_f32_t"
    _fields_ = [("kind", _L), ("a", _P), ("b", _P), ("y", _P), ("n", _L)]


class CallCopy(ctypes.Structure):
    """CALL_COPY: `bytes` bytes from src to dst."""

    C_NAME = "mk_call_copy_t"
    _fields_ = [("kind", _L), ("src", _P), ("dst", _P), ("bytes", _L)]


class CallQim2col(ctypes.Structure):
    """CALL_QIM2COL: mk_qim2col."""

    C_NAME = "mk_call_qim2col_t"
    _fields_ = [("kind", _L), ("x", _P), ("geom", _P), ("pad", _L), ("lda", _L), ("cols", _P)]


class CallQgemmRequant(ctypes.Structure):
    """CALL_QGEMM_REQUANT: mk_qgemm_requant."""

    C_NAME = "mk_call_qgemm_requant_t"
    _fields_ = [
        ("kind", _L),
        ("a", _P),
        ("lda", _L),
        ("a_signed", _L),
        ("bp", _P),
        ("colc", _P),
        ("zw", _L),
        ("m", _L),
        ("n", _L),
        ("k", _L),
        ("bias", _P),
        ("mult", _P),
        ("left", _P),
        ("right", _P),
        ("zp", _L),
        ("lo", _L),
        ("hi", _L),
        ("is_signed", _L),
        ("out", _P),
    ]


class CallDepthwiseQ8(ctypes.Structure):
    """CALL_DEPTHWISE_Q8: mk_depthwise_q8."""

    C_NAME = "mk_call_depthwise_q8_t"
    _fields_ = [
        ("kind", _L),
        ("x", _P),
        ("is_signed", _L),
        ("zp_x", _L),
        ("geom", _P),
        ("m", _L),
        ("wp", _P),
        ("bias", _P),
        ("mult", _P),
        ("left", _P),
        ("right", _P),
        ("zp_y", _L),
        ("lo", _L),
        ("hi", _L),
        ("y", _P),
    ]


class CallMapF32(ctypes.Structure):
    """CALL_TANH_F32 and CALL_LOGISTIC_F32: mk_tanh_f32, mk_logistic_f32."""

    C_NAME = "mk_call_map_f32_t"
    _fields_ = [("kind", _L), ("x", _P), ("y", _P), ("n", _L)]


class CallCopy2d(ctypes.Structure):
    """CALL_COPY_2D: mk_copy_2d."""

    C_NAME = "mk_call_copy_2d_t"
    _fields_ = [
        ("kind", _L),
        ("src", _P),
        ("dst", _P),
        ("rows", _L),
        ("row_bytes", _L),
        ("src_stride", _L),
        ("dst_stride", _L),
    ]


class CallSoftmaxF32(ctypes.Structure):
    """CALL_SOFTMAX_F32: mk_softmax_f32; floats: CallSoftmaxFloats."""

    C_NAME = "mk_call_softmax_f32_t"
    _fields_ = [("kind", _L), ("x", _P), ("y", _P), ("rows", _L), ("cols", _L)]


class CallSoftmaxQ8(ctypes.Structure):
    """CALL_SOFTMAX_Q8: mk_softmax_q8."""

    C_NAME = "mk_call_softmax_q8_t"
    _fields_ = [
        ("kind", _L), ("x", _P), ("y", _P), ("rows", _L), ("cols", _L), ("exp_f0", _P), ("exp_accum", _P),
        ("is_signed", _L),
    ]  # fmt: skip


class CallMeanQ8(ctypes.Structure):
    """CALL_MEAN_Q8: mk_mean_q8."""

    C_NAME = "mk_call_mean_q8_t"
    _fields_ = [
        ("kind", _L), ("x", _P), ("is_signed", _L), ("outer", _L), ("n", _L), ("inner", _L), ("table", _P),
        ("table_base", _L), ("y", _P),
    ]  # fmt: skip


class CallPairTableQ8(ctypes.Structure):
    """CALL_PAIR_TABLE_Q8: mk_pair_table_q8."""

    C_NAME = "mk_call_pair_table_q8_t"
    _fields_ = [("kind", _L), ("a", _P), ("b", _P), ("table", _P), ("y", _P), ("n", _L)]


class CallLstmCellF32(ctypes.Structure):
    """CALL_LSTM_CELL_F32: mk_lstm_cell_f32 (cst: an LstmConst)."""

    C_NAME = "mk_call_lstm_cell_f32_t"
    _fields_ = [
        ("kind", _L), ("cst", _P), ("batch", _L), ("a1", _P), ("lda1", _L), ("a2", _P), ("lda2", _L),
        ("add", _P), ("ldadd", _L), ("c_in", _P), ("c_out", _P), ("h_out", _P), ("gates_out", _P),
    ]  # fmt: skip


class Call(ctypes.Union):
    """One bound call's int64 words, as each kind reads them."""

    C_NAME = "mk_call_t"
    _fields_ = [
        ("word", _L * CALL_INTS),
        ("kind", _L),
        ("im2col_f32", CallIm2colF32),
        ("gemm_f32", CallGemmF32),
        ("depthwise_f32", CallDepthwiseF32),
        ("add_f32", CallAddF32),
        ("copy", CallCopy),
        ("qim2col", CallQim2col),
        ("qgemm_requant", CallQgemmRequant),
        ("depthwise_q8", CallDepthwiseQ8),
        ("map_f32", CallMapF32),
        ("copy_2d", CallCopy2d),
        ("softmax_f32", CallSoftmaxF32),
        ("softmax_q8", CallSoftmaxQ8),
        ("mean_q8", CallMeanQ8),
        ("pair_table_q8", CallPairTableQ8),
        ("lstm_cell_f32", CallLstmCellF32),
    ]


class CallBounds(ctypes.Structure):
    """The bounds of a fused activation."""

    C_NAME = "mk_call_bounds_t"
    _fields_ = [("lo", _F), ("hi", _F)]


class CallSoftmaxFloats(ctypes.Structure):
    C_NAME = "mk_call_softmax_floats_t"
    _fields_ = [("beta", _F)]


class CallFloats(ctypes.Union):
    """One bound call's float32 values, as each kind reads them."""

    C_NAME = "mk_call_floats_t"
    _fields_ = [("word", _F * CALL_FLOATS), ("bounds", CallBounds), ("softmax", CallSoftmaxFloats)]


#: The structure each bound-call kind's words follow.
CALL_ARGS: dict[int, type[ctypes.Structure]] = {
    CALL_IM2COL_F32: CallIm2colF32,
    CALL_GEMM_PACKED_BIAS_ACT_F32: CallGemmF32,
    CALL_DEPTHWISE_F32: CallDepthwiseF32,
    CALL_GEMM_FEWROWS_BIAS_ACT_F32: CallGemmF32,
    CALL_ADD_F32: CallAddF32,
    CALL_COPY: CallCopy,
    CALL_QIM2COL: CallQim2col,
    CALL_QGEMM_REQUANT: CallQgemmRequant,
    CALL_DEPTHWISE_Q8: CallDepthwiseQ8,
    CALL_TANH_F32: CallMapF32,
    CALL_LOGISTIC_F32: CallMapF32,
    CALL_COPY_2D: CallCopy2d,
    CALL_SOFTMAX_F32: CallSoftmaxF32,
    CALL_SOFTMAX_Q8: CallSoftmaxQ8,
    CALL_MEAN_Q8: CallMeanQ8,
    CALL_PAIR_TABLE_Q8: CallPairTableQ8,
    CALL_LSTM_CELL_F32: CallLstmCellF32,
}

#: Every structure of mlts_kernels.h, mirrored.
STRUCTURES: tuple[type[ctypes.Structure] | type[ctypes.Union], ...] = (
    Geom,
    PoolStats,
    LstmConst,
    CallIm2colF32,
    CallGemmF32,
    CallDepthwiseF32,
    CallAddF32,
    CallCopy,
    CallQim2col,
    CallQgemmRequant,
    CallDepthwiseQ8,
    CallMapF32,
    CallCopy2d,
    CallSoftmaxF32,
    CallSoftmaxQ8,
    CallMeanQ8,
    CallPairTableQ8,
    CallLstmCellF32,
    Call,
    CallBounds,
    CallSoftmaxFloats,
    CallFloats,
)
