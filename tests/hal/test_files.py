"""Bounded file reading: every reader refuses devices, FIFOs and directories at once, and caps sizes."""

from __future__ import annotations

import json
import os
import threading

import pytest
from click.testing import CliRunner

from mlts.cli import main
from mlts.hal import files, nnfile
from mlts.hal.capabilities_file import CapabilitiesFileError, read_document
from mlts.report.schema import ResultsSchemaError, load_results


@pytest.fixture()
def fifo(tmp_path):
    """A FIFO nobody writes to: opening it for reading in blocking mode would wait forever."""
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


@pytest.fixture(autouse=True)
def _no_hang():
    """A reader that blocks despite the fix would hang the suite: fail it from a watchdog instead."""
    done = threading.Event()

    def watchdog():
        if not done.wait(60):
            os._exit(99)

    threading.Thread(target=watchdog, daemon=True).start()
    yield
    done.set()


@pytest.mark.parametrize("kind", ["/dev/zero", "fifo", "dir"])
def test_read_bytes_refuses_non_regular_files(kind, fifo, tmp_path):
    path = {"/dev/zero": "/dev/zero", "fifo": str(fifo), "dir": str(tmp_path)}[kind]
    with pytest.raises(files.FileReadError) as info:
        files.read_bytes(path, what="a thing", limit=100)
    text = str(info.value)
    assert text.startswith(f"{path}: cannot read a thing: it is a ") and "not a regular file" in text
    assert "\n" not in text


def test_read_bytes_caps_size(tmp_path):
    path = tmp_path / "big"
    path.write_bytes(b"x" * 101)
    with pytest.raises(files.FileReadError, match="101 bytes is more than the 100 allowed"):
        files.read_bytes(path, what="a thing", limit=100)
    path.write_bytes(b"x" * 100)
    assert files.read_bytes(path, what="a thing", limit=100) == b"x" * 100


def test_nnfile_load_refuses_endless_and_blocking_files(fifo):
    for path in ("/dev/zero", str(fifo)):
        with pytest.raises(OSError, match="not a regular file"):
            nnfile.load(path)
        with pytest.raises(OSError, match="not a regular file"):
            nnfile.load(path, use_mmap=False)


def test_results_loader_refuses_devices_and_deep_nesting(fifo, tmp_path):
    for path in ("/dev/zero", fifo):
        with pytest.raises(OSError, match="not a regular file"):
            load_results(path)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ResultsSchemaError, match="nested too deeply"):
        load_results(deep)


def test_capabilities_reader_refuses_fifo(fifo):
    with pytest.raises(CapabilitiesFileError, match="FIFO"):
        read_document(fifo, None)


@pytest.mark.parametrize(
    "args",
    [
        ["inspect", "{fifo}"],
        ["inspect", "/dev/zero"],
        ["report", "{fifo}"],
        ["report", "/dev/zero"],
        ["compare", "/dev/zero", "{fifo}"],
        ["convert", "{fifo}", "-o", "{tmp}/x.nnm"],
        ["convert", "/dev/zero", "-o", "{tmp}/x.nnm"],
    ],
)
def test_cli_bad_files_are_exit_2_with_one_line(args, fifo, tmp_path):
    argv = [a.format(fifo=fifo, tmp=tmp_path) for a in args]
    r = CliRunner().invoke(main, argv)
    assert r.exit_code == 2, r.output
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "not a regular file" in lines[0], r.output
    assert "Traceback" not in r.output and "internal error" not in r.output


def test_cli_deeply_nested_results_are_bad_input(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps({"schema_version": 999}))
    for argv in (["compare", str(deep), str(ok)], ["report", str(deep)]):
        r = CliRunner().invoke(main, argv)
        assert r.exit_code == 2, r.output
        assert "nested too deeply" in r.output and "internal error" not in r.output


def test_onnx_external_data_that_is_a_fifo_is_refused(tmp_path):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from mlts.convert import ConversionError, load_model

    w = numpy_helper.from_array(np.ones((2, 2), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = tmp_path / "m.onnx"
    onnx.save(
        model,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="w.bin",
        size_threshold=0,
    )
    assert load_model(path).graph.initializer[0].name == "w"  # a regular external file loads
    (tmp_path / "w.bin").unlink()
    os.mkfifo(tmp_path / "w.bin")
    with pytest.raises(ConversionError, match="external data.*FIFO"):
        load_model(path)


def test_onnx_external_data_of_a_subgraph_and_of_an_attribute_is_checked_too(tmp_path):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from mlts.convert import ConversionError, load_model

    def branch(name: str, value: float) -> onnx.GraphProto:
        const = numpy_helper.from_array(np.full((2, 2), value, np.float32), f"{name}_c")
        return helper.make_graph(
            [helper.make_node("Constant", [], [f"{name}_out"], value=const)],
            name,
            [],
            [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, [2, 2])],
        )

    graph = helper.make_graph(
        [
            helper.make_node(
                "If", ["cond"], ["y"], then_branch=branch("then", 1.0), else_branch=branch("else", 2.0)
            )
        ],
        "g",
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = tmp_path / "m.onnx"
    onnx.save(
        model,
        str(path),
        save_as_external_data=True,
        location="c.bin",
        size_threshold=0,
        convert_attribute=True,
    )
    load_model(path)  # a regular external file loads
    (tmp_path / "c.bin").unlink()
    os.mkfifo(tmp_path / "c.bin")
    with pytest.raises(ConversionError, match="external data.*FIFO"):
        load_model(path)
