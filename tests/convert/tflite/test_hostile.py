"""Hostile .tflite files: truncated, bad offsets and indices, huge declared sizes, garbage, cycles.

Each must give one ConversionError line (an InputError: exit status 2 on the command line), never
another exception, a hang or a huge allocation.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mlts.convert.errors import ConversionError
from mlts.convert.tflite import convert_tflite
from mlts.convert.tflite.reader import read_bytes
from tests.convert.tflite._tflbuild import TflModel

ROOT = Path(__file__).resolve().parents[3]


def _valid() -> bytes:
    m = TflModel()
    g = m.subgraph("main")
    x = g.tensor([1, 4, 4, 2], name="x")
    w = g.tensor([3, 1, 1, 2], data=np.arange(6, dtype=np.float32).reshape(3, 1, 1, 2))
    b = g.tensor([3], data=np.ones(3, np.float32))
    y = g.tensor([1, 4, 4, 3], name="y")
    z = g.tensor([1, 4, 4, 3], name="z")
    g.op("CONV_2D", [x, w, b], [y], "Conv2DOptions", padding=0, stride_w=1, stride_h=1)
    g.op("RELU", [y], [z])
    g.io([x], [z])
    return m.finish()


def _refused(data: bytes) -> str:
    with pytest.raises(ConversionError) as info:
        convert_tflite(data)
    message = str(info.value)
    assert "\n" not in message and message
    return message


def test_the_valid_model_converts() -> None:
    assert convert_tflite(_valid()).model.main.operations


@pytest.mark.parametrize("length", [0, 3, 7, 8, 16, 40, 100, 200, 400])
def test_truncated_files(length: int) -> None:
    data = _valid()
    assert length < len(data)
    _refused(data[:length])


def test_every_truncation_is_refused_or_converts_never_crashes() -> None:
    data = _valid()
    for length in range(0, len(data), 7):
        try:
            convert_tflite(data[:length])
        except ConversionError:
            pass


def test_not_a_tflite_file() -> None:
    assert "no 'TFL3' file identifier" in _refused(b"\x10\x00\x00\x00ONNX" + bytes(64))


def test_root_offset_past_the_end() -> None:
    data = bytearray(_valid())
    data[0:4] = (len(data) + 100).to_bytes(4, "little")
    assert "root table offset" in _refused(bytes(data))


def test_huge_declared_tensor_is_refused_before_anything_is_allocated() -> None:
    m = TflModel()
    g = m.subgraph("main")
    x = g.tensor([1 << 20, 1 << 20, 1 << 10], name="x")
    y = g.tensor([1 << 20, 1 << 20, 1 << 10], name="y")
    g.op("RELU", [x], [y])
    g.io([x], [y])
    assert "NN operands hold at most" in _refused(m.finish())


def test_operator_naming_a_tensor_out_of_range() -> None:
    m = TflModel()
    g = m.subgraph("main")
    x, y = g.tensor([4], name="x"), g.tensor([4], name="y")
    g.op("RELU", [x], [y])
    g.ops[0].inputs = [57]
    g.io([x], [y])
    assert "name tensor 57, but the subgraph has 2 tensors" in _refused(m.finish())


def test_tensor_naming_a_buffer_out_of_range() -> None:
    m = TflModel()
    g = m.subgraph("main")
    x, y = g.tensor([4], name="x"), g.tensor([4], name="y")
    g.tensors[x].buffer = 99
    g.op("RELU", [x], [y])
    g.io([x], [y])
    assert "names buffer 99, but the model has 1 buffers" in _refused(m.finish())


def test_constant_data_that_does_not_match_its_shape() -> None:
    m = TflModel()
    g = m.subgraph("main")
    x = g.tensor([4], name="x")
    k = g.tensor([4], raw=b"\x00" * 7)
    y = g.tensor([4], name="y")
    g.op("ADD", [x, k], [y], "AddOptions")
    g.io([x], [y])
    assert "has 7 bytes of data; its shape [4] of FLOAT32 needs 16" in _refused(m.finish())


def test_operator_reading_a_tensor_nothing_writes() -> None:
    m = TflModel()
    g = m.subgraph("main")
    x, t, y = g.tensor([4], name="x"), g.tensor([4], name="orphan"), g.tensor([4], name="y")
    g.op("ADD", [x, t], [y], "AddOptions")
    g.io([x], [y])
    assert "reads tensor 1 'orphan' (FLOAT32 [4]) before any operator writes it" in _refused(m.finish())


def test_sparse_metadata_pointing_outside_its_arrays() -> None:
    m = TflModel()
    g = m.subgraph("main")
    x = g.tensor([2, 4], name="x")
    sparsity = {"order": [0, 1], "dims": [("dense", 3), ("sparse", [0, 2, 9, 40], [0, 1, 2])]}
    sw = g.tensor([3, 4], "float32", np.ones(3, np.float32), sparsity=sparsity)
    w = g.tensor([3, 4])
    y = g.tensor([2, 3], name="y")
    g.op("DENSIFY", [sw], [w])
    g.op("FULLY_CONNECTED", [x, w, -1], [y], "FullyConnectedOptions")
    g.io([x], [y])
    assert "segments outside its 3 indices" in _refused(m.finish())


def test_while_whose_body_is_the_main_subgraph_is_refused() -> None:
    m = TflModel()
    main = m.subgraph("main")
    i, o = main.tensor([1], "int32", name="i"), main.tensor([1], "int32", name="o")
    main.op("WHILE", [i], [o], "WhileOptions", cond_subgraph_index=0, body_subgraph_index=0)
    main.io([i], [o])
    assert "reaches itself" in _refused(m.finish())


def test_random_byte_flips_are_refused_or_converted_never_a_crash() -> None:
    """Seeded mutations of a valid model: every outcome is a model or one ConversionError line."""
    data = _valid()
    rng = np.random.default_rng(1234)
    outcomes = {"converted": 0, "refused": 0}
    for _ in range(300):
        mutated = bytearray(data)
        for pos in rng.integers(8, len(data), size=int(rng.integers(1, 4))):
            mutated[pos] = int(rng.integers(0, 256))
        try:
            convert_tflite(bytes(mutated))
            outcomes["converted"] += 1
        except ConversionError as e:
            assert "\n" not in str(e)
            outcomes["refused"] += 1
    assert outcomes["refused"] > 0


def test_garbage_after_the_identifier() -> None:
    rng = np.random.default_rng(7)
    for _ in range(50):
        data = b"\x0c\x00\x00\x00TFL3" + rng.integers(0, 256, 200, dtype=np.uint8).tobytes()
        try:
            read_bytes(data)
        except ConversionError as e:
            assert "\n" not in str(e)


def test_cli_refuses_a_hostile_file_in_one_line_with_exit_status_2(tmp_path) -> None:
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(_valid()[:150])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "mlts", "convert", str(bad), "-o", str(tmp_path / "out.nnm")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "bad.tflite" in lines[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "out.nnm").exists()
