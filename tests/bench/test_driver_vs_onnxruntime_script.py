"""benchmarks/driver_vs_onnxruntime.py's own parts: the thread counts it takes, the speed-up table it
prints from a run's medians, and the onnxruntime side of its memory line (a child process)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import driver_vs_onnxruntime as script  # noqa: E402


def test_thread_counts_take_one_or_several_and_refuse_the_rest() -> None:
    assert script.thread_counts("1") == (1,)
    assert script.thread_counts("1,2") == (1, 2)
    assert script.thread_counts("4,1") == (4, 1)
    for bad, why in (("1,x", "whole numbers"), ("0", "at least 1"), ("2,2", "twice"), ("", "whole numbers")):
        with pytest.raises(argparse.ArgumentTypeError, match=why):
            script.thread_counts(bad)


def test_the_speedups_are_each_backends_median_at_the_fewest_threads_over_its_median_at_n(capsys) -> None:
    medians = {
        (1, "a", "sync"): (10.0, 8.0),
        (2, "a", "sync"): (5.0, 5.0),
        (1, "a", "burst"): (9.0, 8.0),
        (2, "a", "burst"): (6.0, 5.0),
        (1, "b", "sync"): (3.0, 2.0),  # no 2-thread row (its driver failed)
    }
    script.print_speedups((2, 1), ["a", "b"], ("sync", "burst"), medians)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("speed-up from 1 thread ")
    rows = {line[:38].strip(): line[38:].split() for line in lines[2:]}
    assert rows["a sync"] == ["2.00x", "1.60x"]
    assert rows["a burst"] == ["1.50x", "1.60x"]
    assert rows["b sync"] == ["-", "-"] and rows["b burst"] == ["-", "-"]


def test_the_memory_line_gives_each_peak_and_its_growth_over_idle() -> None:
    line = script.memory_line((50 * 1024, 80 * 1024), (40 * 1024, 100 * 1024))
    assert line == (
        "  memory: driver service peak 80.0 MiB (+30.0 over idle), "
        "onnxruntime process peak 100.0 MiB (+60.0 over idle)"
    )
    assert "driver service peak -," in script.memory_line(None, "not measured (x)")


def test_onnxruntime_memory_is_measured_in_a_child_process(tmp_path) -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((256, 1024), np.float32), "w")  # 1 MiB of weights
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1024])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    found = script.onnxruntime_memory(str(path), 1, runs=2)
    assert isinstance(found, tuple), found
    idle, peak = found
    assert 0 < idle and peak >= idle + 1024  # the session holds at least its weights
    assert script.onnxruntime_memory(str(tmp_path / "missing.onnx"), 1).startswith("not measured (")
