"""The float32 LSTM cell (float16 operands computed in it, see `_adapt`) and the signature checks shared by LSTM and UNIDIRECTIONAL_SEQUENCE_LSTM.

NNAPI's float LSTM (TFLite's lstm_eval). One step, with x the input, h the previous output state
and c the previous cell state, for the gates k in i (input), f (forget), g (cell), o (output):

    pre_k = x·W_xk^T + h·W_hk^T                  (all gates in one product: W packed by rows)
    pre_i += w_ci * c ; pre_f += w_cf * c        (peepholes, optional)
    pre_k += b_k,  or with layer norm  pre_k = norm(pre_k) * ln_k + b_k  where
        norm(v) = (v - mean(v)) / sqrt(var(v) + 1e-8) over the num_units of each batch row
    i = sigmoid(pre_i) (CIFG: i = 1 - f), f = sigmoid(pre_f), g = act(pre_g)
    c' = f*c + i*g, clipped to [-cell_clip, cell_clip] when cell_clip > 0
    pre_o += w_co * c' (the output peephole sees the new cell state), then bias or layer norm as above
    o = sigmoid(pre_o), h' = o * act(c')
    with projection: h' = h'·P^T + proj_bias, clipped to [-proj_clip, proj_clip] when proj_clip > 0

`act` is the op's activation (0 none, 1 relu, 3 relu6, 4 tanh, 6 sigmoid); the gates always use the
logistic sigmoid. Gates are packed in the order i, f, g, o (no i under CIFG), so o is always last.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from driver.ops._base import ArgInfo, expect_type, packed
from driver.ops._fast import matmul
from driver.ops._params import F32, as_f32, float_param, int_param, is_absent
from mlts.hal.enums import OperandType
from mlts.hal.errors import invalid

# Operand positions shared by both ops; the per-gate families are in i, f, g, o order.
W_X = (1, 2, 3, 4)
W_H = (5, 6, 7, 8)
PEEPHOLE = (9, 10, 11)  # cell_to_{input, forget, output}_weights
BIAS = (12, 13, 14, 15)
PROJ_W, PROJ_B = 16, 17
H_IN, C_IN = 18, 19
ACTIVATION, CELL_CLIP, PROJ_CLIP = 20, 21, 22
INPUT_GATE = (W_X[0], W_H[0], BIAS[0])  # present together, or all omitted for CIFG
REQUIRED = (0, 2, 3, 4, 6, 7, 8, 13, 14, 15, H_IN, C_IN, ACTIVATION, CELL_CLIP, PROJ_CLIP)

OPERAND_NAMES = (
    "input",
    "input_to_input_weights",
    "input_to_forget_weights",
    "input_to_cell_weights",
    "input_to_output_weights",
    "recurrent_to_input_weights",
    "recurrent_to_forget_weights",
    "recurrent_to_cell_weights",
    "recurrent_to_output_weights",
    "cell_to_input_weights",
    "cell_to_forget_weights",
    "cell_to_output_weights",
    "input_gate_bias",
    "forget_gate_bias",
    "cell_bias",
    "output_gate_bias",
    "projection_weights",
    "projection_bias",
    "output_state_in",
    "cell_state_in",
    "activation",
    "cell_clip",
    "proj_clip",
)
LN_NAMES = (
    "input_layer_norm_weights",
    "forget_layer_norm_weights",
    "cell_layer_norm_weights",
    "output_layer_norm_weights",
)
LN_EPSILON = F32(1e-8)


def sigmoid(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """1 / (1 + exp(-x)) without overflow: with e = exp(-|x|), 1 / (1 + e) for x >= 0, e / (1 + e) below."""
    e = np.exp(-np.abs(x))
    return np.divide(np.where(x < 0, e, F32(1)), 1 + e, out=out)


def _identity(x: np.ndarray) -> np.ndarray:
    return x


# The cell-input and cell-output activation, by NNAPI's (TFLite's) fused-activation code.
ACTIVATIONS: dict[int, Callable[[np.ndarray], np.ndarray]] = {
    0: _identity,
    1: lambda x: np.maximum(x, F32(0)),
    3: lambda x: np.clip(x, F32(0), F32(6)),
    4: np.tanh,
    6: sigmoid,
}
ACTIVATION_LABELS = "0 (none), 1 (relu), 3 (relu6), 4 (tanh), 6 (sigmoid)"


@dataclass(frozen=True, slots=True)
class LstmConfig:
    """What prepare learned about one LSTM operation: sizes, which optional parts are used, parameters."""

    num_units: int
    input_size: int
    output_size: int
    cifg: bool
    peephole: bool
    projection: bool
    projection_bias: bool
    layer_norm: bool
    ln_first: int  # operand index of input_layer_norm_weights (23 for LSTM, 24 for the sequence op)
    activation: int
    cell_clip: float
    proj_clip: float

    @property
    def gates(self) -> int:
        return 3 if self.cifg else 4

    @property
    def ln_operands(self) -> tuple[int, ...]:
        return tuple(range(self.ln_first, self.ln_first + 4))

    def per_gate(self, family: tuple[int, ...]) -> tuple[int, ...]:
        """The operands of a four-gate family in packing order, without the input gate's under CIFG."""
        return family[1:] if self.cifg else family

    def tensor_shapes(self, batch: int) -> dict[int, tuple[int, ...]]:
        """Expected shape of every present weight and state operand (batch 0 = not known yet)."""
        u, n, m = self.num_units, self.input_size, self.output_size
        shapes: dict[int, tuple[int, ...]] = {H_IN: (batch, m), C_IN: (batch, u)}
        shapes.update({k: (u, n) for k in self.per_gate(W_X)})
        shapes.update({k: (u, m) for k in self.per_gate(W_H)})
        shapes.update({k: (u,) for k in self.per_gate(BIAS)})
        if self.peephole:
            shapes.update({k: (u,) for k in PEEPHOLE[1 if self.cifg else 0 :]})
        if self.projection:
            shapes[PROJ_W] = (m, u)
        if self.projection_bias:
            shapes[PROJ_B] = (m,)
        if self.layer_norm:
            shapes.update({k: (u,) for k in self.per_gate(self.ln_operands)})
        return shapes


def operand_label(index: int, ln_first: int) -> str:
    """`input 5 (recurrent_to_input_weights)` for messages."""
    if index < len(OPERAND_NAMES):
        label = OPERAND_NAMES[index]
    elif ln_first <= index < ln_first + 4:
        label = LN_NAMES[index - ln_first]
    else:
        label = "time_major"
    return f"input {index} ({label})"


# ------------------------------------------------------------ signature checks


def _present(ins: Sequence[ArgInfo], indexes: Sequence[int]) -> list[bool]:
    return [not is_absent(ins, k) for k in indexes]


def _check_required_and_types(name: str, ins: Sequence[ArgInfo], ln_first: int) -> None:
    """Required operands are present; every present tensor is TENSOR_FLOAT32 (float16 arrives as float32)."""
    for k in REQUIRED:
        if is_absent(ins, k):
            raise invalid(f"{name}: {operand_label(k, ln_first)} is required but omitted")
    tensors = [*range(0, ACTIVATION), *range(ln_first, min(len(ins), ln_first + 4))]
    for k in tensors:
        if not is_absent(ins, k):
            expect_type(name, operand_label(k, ln_first), ins[k], OperandType.TENSOR_FLOAT32)


def _cifg(name: str, ins: Sequence[ArgInfo]) -> bool:
    """CIFG (coupled input and forget gate): operands 1, 5 and 12 all omitted; some omitted is invalid."""
    flags = _present(ins, INPUT_GATE)
    if any(flags) and not all(flags):
        raise invalid(
            f"{name}: input_to_input_weights, recurrent_to_input_weights and input_gate_bias must be "
            f"all present or all omitted (CIFG), got presence {flags}"
        )
    return not any(flags)


def _peephole(name: str, ins: Sequence[ArgInfo], cifg: bool) -> bool:
    """Peepholes used: cell_to_forget and cell_to_output together, cell_to_input with them unless CIFG."""
    has_i, has_f, has_o = _present(ins, PEEPHOLE)
    if has_f != has_o:
        raise invalid(
            f"{name}: cell_to_forget_weights and cell_to_output_weights must be both present or both omitted"
        )
    if cifg and has_i:
        raise invalid(f"{name}: cell_to_input_weights must be omitted with CIFG (no input gate)")
    if not cifg and has_i != has_f:
        raise invalid(
            f"{name}: cell_to_input_weights must be present exactly when the other peepholes are (no CIFG)"
        )
    return has_f


def _projection(name: str, ins: Sequence[ArgInfo]) -> tuple[bool, bool]:
    """(projection weights present, projection bias present); a bias needs the weights."""
    has_w, has_b = _present(ins, (PROJ_W, PROJ_B))
    if has_b and not has_w:
        raise invalid(f"{name}: projection_bias is present but projection_weights is omitted")
    return has_w, has_b


def _layer_norm(name: str, ins: Sequence[ArgInfo], ln_first: int, cifg: bool) -> bool:
    """Layer norm used: all four weights present (the input one omitted under CIFG) or all omitted."""
    flags = _present(ins, range(ln_first, ln_first + 4))
    if not any(flags):
        return False
    expected = [not cifg, True, True, True]
    if flags != expected:
        form = "with CIFG: input one omitted, the other three present" if cifg else "all four present"
        raise invalid(f"{name}: layer-norm weights have presence {flags}, expected all omitted or {form}")
    return True


def _known_2d(name: str, ins: Sequence[ArgInfo], index: int, ln_first: int) -> tuple[int, int]:
    """The fully known shape of a rank-2 weight operand."""
    arg = ins[index]
    shape = tuple(arg.value.shape) if arg.value is not None else tuple(arg.shape)
    if len(shape) != 2 or 0 in shape:
        raise invalid(
            f"{name}: {operand_label(index, ln_first)} has shape {shape}, expected a fully known 2-D shape"
        )
    return int(shape[0]), int(shape[1])


def _clip(name: str, ins: Sequence[ArgInfo], index: int) -> float:
    value = float_param(name, OPERAND_NAMES[index], ins, index)
    if not (math.isfinite(value) and value >= 0):
        raise invalid(f"{name}: {OPERAND_NAMES[index]} is {value}, expected a finite value >= 0 (0 = off)")
    return value


def _activation(name: str, ins: Sequence[ArgInfo]) -> int:
    code = int_param(name, "activation", ins, ACTIVATION)
    if code not in ACTIVATIONS:
        raise invalid(f"{name}: activation is {code}, expected one of {ACTIVATION_LABELS}")
    return code


def parse_config(name: str, ins: Sequence[ArgInfo], ln_first: int) -> LstmConfig:
    """Check the operand combination, types, sizes and parameters; the operation's LstmConfig."""
    _check_required_and_types(name, ins, ln_first)
    cifg = _cifg(name, ins)
    peephole = _peephole(name, ins, cifg)
    projection, projection_bias = _projection(name, ins)
    layer_norm = _layer_norm(name, ins, ln_first, cifg)
    num_units, input_size = _known_2d(name, ins, W_X[3], ln_first)
    units_h, output_size = _known_2d(name, ins, W_H[3], ln_first)
    if units_h != num_units:
        raise invalid(
            f"{name}: recurrent_to_output_weights has {units_h} rows, expected num_units = {num_units}"
        )
    if not projection and output_size != num_units:
        raise invalid(
            f"{name}: without projection output_size must equal num_units = {num_units}, "
            f"but recurrent_to_output_weights has {output_size} columns"
        )
    return LstmConfig(
        num_units,
        input_size,
        output_size,
        cifg,
        peephole,
        projection,
        projection_bias,
        layer_norm,
        ln_first,
        _activation(name, ins),
        _clip(name, ins, CELL_CLIP),
        _clip(name, ins, PROJ_CLIP),
    )


def fits(declared: Sequence[int], expected: Sequence[int]) -> bool:
    """A declared shape (0 = unknown dim, () = unknown rank) agrees with `expected` (0 = not known yet)."""
    if not declared:
        return True
    return len(declared) == len(expected) and all(
        d == 0 or e == 0 or d == e for d, e in zip(declared, expected, strict=True)
    )


def check_declared(name: str, what: str, declared: Sequence[int], expected: Sequence[int]) -> None:
    if not fits(declared, expected):
        want = "[" + ", ".join("?" if e == 0 else str(e) for e in expected) + "]"
        raise invalid(f"{name}: {what} has shape {tuple(declared)}, expected {want}")


def check_prepare_shapes(name: str, ins: Sequence[ArgInfo], cfg: LstmConfig, batch: int) -> None:
    """Every present weight and state operand's declared shape agrees with the sizes (batch 0 = unknown)."""
    for k, expected in cfg.tensor_shapes(batch).items():
        arg = ins[k]
        declared = arg.value.shape if arg.value is not None else arg.shape
        check_declared(name, operand_label(k, cfg.ln_first), declared, expected)


def check_run_shapes(
    name: str, cfg: LstmConfig, args: Sequence[Any], runtime: Sequence[int], batch: int
) -> None:
    """The run-time weight and state arguments (operands `runtime`) have exactly the expected shapes."""
    if runtime == (H_IN, C_IN) and args[H_IN].shape == (batch, cfg.output_size):
        if args[C_IN].shape == (batch, cfg.num_units):
            return  # constant weights: only the states to check, and they fit
    shapes = cfg.tensor_shapes(batch)
    for k in runtime:
        if tuple(args[k].shape) != shapes[k]:
            raise invalid(
                f"{name}: {operand_label(k, cfg.ln_first)} has shape {tuple(args[k].shape)}, expected {shapes[k]}"
            )


def runtime_operands(ins: Sequence[ArgInfo], cfg: LstmConfig) -> tuple[int, ...]:
    """The operands whose shapes `check_run_shapes` must see: run-time weights, and both states
    (their batch must match the input's, which may be unknown at prepare)."""
    return tuple(k for k in cfg.tensor_shapes(0) if ins[k].value is None or k in (H_IN, C_IN))


# ------------------------------------------------------------ weights


@dataclass(frozen=True, slots=True)
class Weights:
    """The weights of one LSTM, packed for whole-batch, all-gate products (G = gates, u = num_units)."""

    w_x: np.ndarray  # [input_size, G*u]: x @ w_x is every gate's input part
    w_h: np.ndarray  # [output_size, G*u]
    bias: np.ndarray  # [G, u]
    peep_i: np.ndarray | None  # [u] each
    peep_f: np.ndarray | None
    peep_o: np.ndarray | None
    ln: np.ndarray | None  # [G, u]
    proj: np.ndarray | None  # [u, output_size]
    proj_bias: np.ndarray | None  # [output_size]


def _optional(values: Sequence[Any], index: int) -> np.ndarray | None:
    return None if index >= len(values) or values[index] is None else as_f32(values[index])


# How pack_weights obtains its matrices: Keep(name, compute, shape) -> compute() or a cached array.
Keep = Callable[[str, Callable[[], np.ndarray], tuple[int, ...]], np.ndarray]


def _compute(name: str, compute: Callable[[], np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    return compute()


def _kept(name: str, compute: Callable[[], np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    return packed(name, compute, shape=shape, dtypes=(F32,))


def pack_weights(cfg: LstmConfig, values: Sequence[Any], keep: Keep = _compute) -> Weights:
    """Pack the weight operands (`values` indexed like the op's inputs; None when omitted).

    The transposed gate matrices come through `keep` (the compilation cache's packed arrays at prepare).
    """

    def stacked(family: tuple[int, ...]) -> np.ndarray:
        """[G, u] for vectors, [G*u, cols] for matrices."""
        gates = np.stack([as_f32(values[k]) for k in cfg.per_gate(family)])
        return gates if gates.ndim == 2 else gates.reshape(-1, gates.shape[-1])

    proj = _optional(values, PROJ_W)
    columns = cfg.gates * cfg.num_units
    return Weights(
        w_x=keep("w_x", lambda: as_f32(stacked(W_X).T), (cfg.input_size, columns)),
        w_h=keep("w_h", lambda: as_f32(stacked(W_H).T), (cfg.output_size, columns)),
        bias=stacked(BIAS),
        peep_i=_optional(values, PEEPHOLE[0]),
        peep_f=_optional(values, PEEPHOLE[1]),
        peep_o=_optional(values, PEEPHOLE[2]),
        ln=stacked(cfg.ln_operands) if cfg.layer_norm else None,
        proj=None if proj is None else keep("proj", lambda: as_f32(proj.T), (cfg.num_units, cfg.output_size)),
        proj_bias=_optional(values, PROJ_B),
    )


def prepacked(ins: Sequence[ArgInfo], cfg: LstmConfig) -> Weights | None:
    """The packed weights when every weight operand is a constant, else None (pack per run)."""
    weights = [k for k in cfg.tensor_shapes(0) if k not in (H_IN, C_IN)]
    if any(ins[k].value is None for k in weights):
        return None
    return pack_weights(cfg, [a.value for a in ins], _kept)


# ------------------------------------------------------------ one step


def input_part(cfg: LstmConfig, w: Weights, x: np.ndarray) -> np.ndarray:
    """x·W_x^T for every gate, plus the gate biases unless layer norm adds them later: [rows, G*u]."""
    y = matmul(x, w.w_x)
    if not cfg.layer_norm:
        y += w.bias.reshape(-1)
    return y


def _normalized(v: np.ndarray) -> np.ndarray:
    """(v - mean(v)) / sqrt(var(v) + 1e-8) over the last axis (the num_units of one gate and batch row)."""
    centred = v - v.mean(axis=-1, keepdims=True)
    var = np.mean(centred * centred, axis=-1, keepdims=True)
    return centred / np.sqrt(var + LN_EPSILON)


def _update_cell(cfg: LstmConfig, w: Weights, z: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Activate gates i, f, g in place in z [batch, G, u]; the new cell state f*c + i*g (clipped)."""
    fi = cfg.gates - 3  # index of the forget gate; the input gate (if any) is 0, g is fi + 1
    if w.peep_f is not None:
        z[:, fi] += w.peep_f * c
    if w.peep_i is not None:
        z[:, 0] += w.peep_i * c
    if w.ln is not None:
        z[:, :-1] = _normalized(z[:, :-1]) * w.ln[:-1] + w.bias[:-1]
    f = sigmoid(z[:, fi], out=z[:, fi])
    z[:, fi + 1] = ACTIVATIONS[cfg.activation](z[:, fi + 1])
    g = z[:, fi + 1]
    i = 1 - f if cfg.cifg else sigmoid(z[:, 0], out=z[:, 0])
    c_new = f * c + i * g
    if cfg.cell_clip > 0:
        np.clip(c_new, F32(-cfg.cell_clip), F32(cfg.cell_clip), out=c_new)
    return c_new


def _output_state(cfg: LstmConfig, w: Weights, z: np.ndarray, c_new: np.ndarray) -> np.ndarray:
    """Activate gate o in place in z; h' = o * act(c'), then the optional projection and its clip."""
    pre_o = z[:, -1]
    if w.peep_o is not None:
        pre_o += w.peep_o * c_new
    if w.ln is not None:
        pre_o[...] = _normalized(pre_o) * w.ln[-1] + w.bias[-1]
    o = sigmoid(pre_o, out=pre_o)
    return project(cfg, w, o * ACTIVATIONS[cfg.activation](c_new))


def project(cfg: LstmConfig, w: Weights, h: np.ndarray) -> np.ndarray:
    """h' from o * act(c'): `h` itself without projection, else h·P^T + proj_bias, clipped."""
    if w.proj is None:
        return h
    h = matmul(h, w.proj)
    if w.proj_bias is not None:
        h += w.proj_bias
    if cfg.proj_clip > 0:
        np.clip(h, F32(-cfg.proj_clip), F32(cfg.proj_clip), out=h)
    return h


def step(
    cfg: LstmConfig, w: Weights, x_part: np.ndarray, h: np.ndarray, c: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One step for the whole batch from the input part `x_part` [batch, G*u] (see `input_part`).

    Returns (h' [batch, output_size], c' [batch, u], gate activations [batch, G, u]).
    """
    z = matmul(h, w.w_h)
    z += x_part
    z = z.reshape(len(z), cfg.gates, cfg.num_units)
    c_new = _update_cell(cfg, w, z, c)
    return _output_state(cfg, w, z, c_new), c_new, z
