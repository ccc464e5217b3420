"""The compiled kernels' one interface (driver/native/mlts_kernels.h) against its Python side.

Every structure crossing the boundary is declared once in C (the header) and once with ctypes
(driver.native.layout): the library reports each structure's size and each field's offset and size,
and they must equal ctypes'. The constants (bound-call kinds, limits, the ABI) must agree, every
prototype of the header must be typed by driver.native with the same argument count and result,
bound calls written through the ctypes structures must run as the C side reads them, and the calls
driver.ops._bind makes must fit their kind's structure. One digest covers every source and header: a
change to any of them makes the build stale, and a stale build is refused with the reason.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from driver import native
from driver.native import layout

HEADER = Path(native.__file__).with_name("mlts_kernels.h")
needs_lib = pytest.mark.skipif(not native.available(), reason="compiled kernels not built")


def _c_layout() -> dict[str, dict[str, tuple[int, int]]]:
    """C type -> field ("" for the type itself) -> (offset, size), from mk_layout."""
    found: dict[str, dict[str, tuple[int, int]]] = {}
    for type_name, field, offset, size in native.layout_rows():
        found.setdefault(type_name, {})[field] = (offset, size)
    return found


@needs_lib
def test_every_structure_agrees_field_by_field_with_its_ctypes_mirror() -> None:
    c_side = _c_layout()
    assert set(c_side) == {s.C_NAME for s in layout.STRUCTURES}  # a mirror for every C structure
    for struct in layout.STRUCTURES:
        fields = c_side[struct.C_NAME]
        assert fields.pop("") == (0, ctypes.sizeof(struct)), struct.C_NAME
        py_side = {
            name: (getattr(struct, name).offset, getattr(struct, name).size) for name, *_ in struct._fields_
        }
        assert py_side == fields, struct.C_NAME


@needs_lib
def test_the_constants_agree() -> None:
    from driver.ops import _bind

    assert native.constants() == layout.CONSTANTS
    assert native.LIB is not None and native.LIB.mk_abi() == layout.ABI == native.ABI
    assert _bind.CALL_INTS == layout.CALL_INTS
    # Every kind has its structure, which fits a call's words.
    kinds = {
        v for k, v in layout.CONSTANTS.items() if k.startswith("MK_CALL_") and k[8:] not in ("INTS", "FLOATS")
    }
    assert kinds == set(layout.CALL_ARGS)
    assert ctypes.sizeof(layout.Call) == layout.CALL_INTS * 8
    assert ctypes.sizeof(layout.CallFloats) == layout.CALL_FLOATS * 4


def _prototypes() -> dict[str, tuple[str, int]]:
    """The header's functions: name -> (result type, argument count)."""
    text = re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)
    text = re.sub(r"^#.*$", "", text, flags=re.M)
    found: dict[str, tuple[str, int]] = {}
    for m in re.finditer(r"([A-Za-z_][\w ]*?[\s*]+)(mk_\w+)\s*\(([^;{}]*?)\)\s*;", text):
        result, name, args = " ".join(m.group(1).split()), m.group(2), m.group(3).strip()
        if result.startswith("typedef"):
            continue
        found[name] = (result, 0 if args in ("", "void") else args.count(",") + 1)
    return found


_RESULTS = {
    "void": None,
    "int": ctypes.c_int,
    "int64_t": ctypes.c_int64,
    "const char *": ctypes.c_char_p,
}


def test_every_function_of_the_header_is_typed_as_declared() -> None:
    protos = _prototypes()
    assert "mk_run_calls" in protos and "mk_lstm_cell_f32" in protos and "mk_qgemm_requant" in protos
    assert set(native.SIGNATURES) == set(protos)
    for name, (result, count) in protos.items():
        assert len(native.SIGNATURES[name]) == count, name
        assert native.restype(name) is _RESULTS[result], name


@needs_lib
def test_the_library_exports_the_functions_of_the_header_only() -> None:
    assert native.LIB is not None
    for name in native.SIGNATURES:
        fn = getattr(native.LIB, name)
        assert list(fn.argtypes) == native.SIGNATURES[name] and fn.restype is native.restype(name), name
    # What the three files no longer export: their own ABI numbers and digests.
    for gone in (
        "mk_lstm_abi",
        "mk_lstm_source_hash",
        "mk_qgemm_abi",
        "mk_qgemm_source_hash",
        "mk_call_ints",
    ):
        assert not hasattr(native.LIB, gone)


def _run(calls: list[layout.Call], floats: list[layout.CallFloats]) -> tuple[int, int]:
    table = (layout.Call * len(calls))(*calls)
    ftable = (layout.CallFloats * len(floats))(*floats)
    status = ctypes.c_int64(-7)
    assert native.LIB is not None
    failed = native.LIB.mk_run_calls(
        ctypes.addressof(table), ctypes.addressof(ftable), len(calls), ctypes.addressof(status)
    )
    return int(failed), status.value


@needs_lib
def test_bound_calls_written_by_field_name_run_as_c_reads_them() -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 16)).astype(np.float32)
    b = rng.standard_normal((16, 9)).astype(np.float32)
    bias = rng.standard_normal(9).astype(np.float32)
    gemm_out = np.empty((3, 9), np.float32)
    x = rng.standard_normal((4, 10)).astype(np.float32) * 4
    summed, softmaxed = np.empty_like(x), np.empty_like(x)
    tanh_out, block = np.empty_like(x), np.zeros((2, 3), np.float32)
    calls, floats = [], []

    def add(kind: int, member: str, values: dict, fvalues: tuple[str, dict] | None = None) -> None:
        call, fl = layout.Call(), layout.CallFloats()
        arg = getattr(call, member)
        arg.kind = kind
        for k, v in values.items():
            setattr(arg, k, v)
        if fvalues is not None:
            for k, v in fvalues[1].items():
                setattr(getattr(fl, fvalues[0]), k, v)
        calls.append(call)
        floats.append(fl)

    ptr = native.ptr
    add(layout.CALL_GEMM_FEWROWS_BIAS_ACT_F32, "gemm_f32",
        {"a": ptr(a), "b": ptr(b), "c": ptr(gemm_out), "m": 3, "n": 9, "k": 16, "bias": ptr(bias)},
        ("bounds", {"lo": -1.0, "hi": 0.5}))  # fmt: skip
    add(layout.CALL_ADD_F32, "add_f32", {"a": ptr(x), "b": ptr(x), "y": ptr(summed), "n": x.size})
    add(layout.CALL_SOFTMAX_F32, "softmax_f32", {"x": ptr(x), "y": ptr(softmaxed), "rows": 4, "cols": 10},
        ("softmax", {"beta": 0.5}))  # fmt: skip
    add(layout.CALL_TANH_F32, "map_f32", {"x": ptr(x), "y": ptr(tanh_out), "n": x.size})
    add(layout.CALL_COPY_2D, "copy_2d",
        {"src": ptr(x) + 4, "dst": ptr(block), "rows": 2, "row_bytes": 12, "src_stride": 40, "dst_stride": 12})  # fmt: skip
    assert _run(calls, floats) == (0, 0)
    want = np.clip(a.astype(np.float64) @ b + bias, -1.0, 0.5)
    np.testing.assert_allclose(gemm_out, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(summed, x + x)
    e = np.exp(0.5 * (x.astype(np.float64) - x.max(axis=1, keepdims=True)))
    np.testing.assert_allclose(softmaxed, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(tanh_out, np.tanh(x.astype(np.float64)), rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(block, x[:2, 1:4])


@needs_lib
def test_a_call_that_breaks_its_kinds_rule_stops_the_run_at_it() -> None:
    x = np.ones(4, np.float32)
    y = np.zeros(4, np.float32)
    ok, bad, unknown = layout.Call(), layout.Call(), layout.Call()
    ok.add_f32.kind, ok.add_f32.a, ok.add_f32.b, ok.add_f32.y, ok.add_f32.n = layout.CALL_ADD_F32, x.ctypes.data, x.ctypes.data, y.ctypes.data, 4  # fmt: skip
    bad.gemm_f32.kind, bad.gemm_f32.m, bad.gemm_f32.n = layout.CALL_GEMM_FEWROWS_BIAS_ACT_F32, 4, 8  # m >= 4
    unknown.kind = 99
    assert _run([ok, bad, ok], [layout.CallFloats()] * 3) == (2, 0)
    assert _run([ok, unknown], [layout.CallFloats()] * 2) == (2, 0)
    np.testing.assert_array_equal(y, 2 * x)


@needs_lib
def test_the_geometry_the_convolutions_pass_reads_as_mk_geom_t() -> None:
    from driver.ops._fast import GeometryCache
    from driver.ops._window import EXPLICIT, Window

    # explicit padding left 1, right 1, top 0, bottom 2; strides w 2, h 1; dilations w 1, h 3
    cache = GeometryCache("CONV_2D", Window(EXPLICIT, (1, 1, 0, 2), 2, 1, 1, 3), 3, 2)
    g, address = cache.get((2, 9, 8, 5))
    read = layout.Geom.from_address(address)
    assert (
        (read.n, read.h, read.w, read.c, read.kh, read.kw) == (2, 9, 8, 5, g.k_h, g.k_w) == (2, 9, 8, 5, 3, 2)
    )
    assert (
        (read.sh, read.sw, read.dh, read.dw)
        == (g.stride_h, g.stride_w, g.dilation_h, g.dilation_w)
        == (1, 2, 3, 1)
    )
    assert (read.pt, read.pl, read.oh, read.ow) == (g.pad_top, g.pad_left, g.out_h, g.out_w)


@needs_lib
def test_every_call_the_binder_makes_fits_its_kinds_structure() -> None:
    from driver.executor import Plan
    from tests.driver.bindkit import _inputs, _model

    plan = Plan(_model())
    for x in _inputs(2):
        plan.run([x], checked=True)
    programs = [p for ws in plan.workspaces.free for p in ws.bound.values()]
    assert programs
    seen = set()
    for prog in programs:
        for row in range(prog.count):
            words = layout.Call.from_buffer(prog.ints[row])
            assert words.kind in layout.CALL_ARGS
            seen.add(words.kind)
        for _, step in prog.owners:
            for kind, ints, floats in step.calls:
                struct = layout.CALL_ARGS[kind]
                assert len(ints) == len(struct._fields_) - 1, struct.C_NAME
                assert len(floats) <= layout.CALL_FLOATS
    assert {layout.CALL_IM2COL_F32, layout.CALL_DEPTHWISE_F32, layout.CALL_ADD_F32} <= seen
    # The fields of a GEMM call, read through the structure, are the sizes the binder wrote.
    gemms = [
        (prog, row)
        for prog in programs
        for row in range(prog.count)
        if prog.ints[row, 0] in (layout.CALL_GEMM_PACKED_BIAS_ACT_F32, layout.CALL_GEMM_FEWROWS_BIAS_ACT_F32)
    ]
    assert gemms
    for prog, row in gemms:
        call = layout.Call.from_buffer(prog.ints[row]).gemm_f32
        y = prog.owners[row][1].out
        assert call.c == y.ctypes.data and call.n == y.shape[-1] and call.m * call.n == y.size
        bounds = layout.CallFloats.from_buffer(prog.floats[row]).bounds
        assert bounds.lo <= bounds.hi


@needs_lib
def test_pool_stats_are_read_through_the_structure() -> None:
    stats = native.pool_stats()
    assert tuple(stats) == native.POOL_STATS == tuple(name for name, _ in layout.PoolStats._fields_)
    assert min(stats.values()) >= 0


def test_one_digest_covers_every_source_and_header(tmp_path) -> None:
    for name in ("a.c", "b.c", "x.h", "y.h"):
        (tmp_path / name).write_text(f"/* {name} */\n")
    built = native.source_digest(tmp_path)
    assert native.built_from(tmp_path, built)
    for name in ("a.c", "b.c", "x.h", "y.h"):
        path = tmp_path / name
        text = path.read_text()
        path.write_text(text + " ")
        assert not native.built_from(tmp_path, built), name
        path.write_text(text)
        assert native.built_from(tmp_path, built)
    (tmp_path / "b.c").rename(tmp_path / "c.c")  # a renamed source is another build
    assert not native.built_from(tmp_path, built)
    (tmp_path / "new.h").write_text("")  # so is a new header
    (tmp_path / "c.c").rename(tmp_path / "b.c")
    assert not native.built_from(tmp_path, built)
    empty = tmp_path / "installed"
    empty.mkdir()
    assert native.built_from(empty, "anything")  # an install without sources
    assert native.sources(tmp_path) == [tmp_path / n for n in ("a.c", "b.c", "new.h", "x.h", "y.h")]


@needs_lib
def test_the_library_in_use_was_built_from_the_sources_beside_it() -> None:
    assert native.LIB is not None
    assert native.built_from(native.HERE, native.LIB.mk_source_hash().decode())
    assert native.LIB.mk_source_hash().decode() == native.source_digest()


@needs_lib
def test_a_stale_build_is_refused_and_says_why(tmp_path) -> None:
    """A copy of the driver package whose header changed after the build: no kernel is used (not the
    LSTM cell, not the integer GEMM) and the reason names the stale build."""
    root = Path(native.__file__).resolve().parents[2]
    copy = tmp_path / "driver"
    shutil.copytree(root / "driver", copy, ignore=shutil.ignore_patterns("__pycache__"))
    header = copy / "native" / "mlts_kernels.h"
    header.write_text(header.read_text() + "\n/* changed after the build */\n")
    code = (
        "from driver import native\n"
        "from driver.ops import _lstm_native, _qgemm\n"
        "print(native.available(), _lstm_native.available(), _qgemm.available(8))\n"
        "print(native.WHY_NOT)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(root)])}
    env.pop("MLTS_DRIVER_NATIVE", None)
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.splitlines()
    assert out[0] == "False False False"
    assert "stale" in out[1] and "driver/native/*.c and *.h" in out[1] and "rebuild" in out[1]
