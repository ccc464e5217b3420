"""`mlts benchmark` as users drive it: output folders, --json, a user's image folder, bad input."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from mlts.cli import main
from tests.cli.clikit import FAST, one_line_error, tiny_conv_model

CLASSES = ["cat", "dog", "fish", "bird"]


def classifier(path) -> None:
    """[1, 3, 8, 8] image -> 3x3 conv to 4 channels -> global average pool -> [1, 4] softmax scores."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    shape = numpy_helper.from_array(np.array([1, 4], np.int64), "shape")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["c"], ["g"]),
        helper.make_node("Reshape", ["g", "shape"], ["r"]),
        helper.make_node("Softmax", ["r"], ["y"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "classifier",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [w, shape],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 10
    onnx.save(model, str(path))


def image_folder(root, labels: list[str], truth: list[str], count: int = 3):
    from PIL import Image

    root.mkdir()
    rng = np.random.default_rng(2)
    for i in range(count):
        pixels = rng.integers(0, 256, size=(12, 12, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(root / f"img-{i}.png")
    (root / "labels.txt").write_text("\n".join(labels) + "\n")
    (root / "ground_truth_labels.txt").write_text("\n".join(truth) + "\n")
    return root


@pytest.fixture()
def runner():
    return CliRunner()


@pytest.fixture()
def tiny(tmp_path):
    p = tmp_path / "tiny.onnx"
    tiny_conv_model(p)
    return p


def test_existing_results_are_kept_unless_force(runner, tiny, tmp_path):
    out = tmp_path / "res"
    args = ["benchmark", "--model", str(tiny), "--out", str(out), "--images", "1", *FAST]
    assert runner.invoke(main, args).exit_code == 0
    first = (out / "results.json").read_bytes()
    line = one_line_error(runner.invoke(main, args))
    assert "already holds results.json" in line and "--force" in line
    assert (out / "results.json").read_bytes() == first
    r = runner.invoke(main, [*args, "--force"])
    assert r.exit_code == 0, r.output
    assert (out / "results.json").read_bytes() != first


def test_out_that_is_a_file_is_refused(runner, tiny, tmp_path):
    target = tmp_path / "file"
    target.write_text("keep me")
    line = one_line_error(runner.invoke(main, ["benchmark", "--model", str(tiny), "--out", str(target)]))
    assert "is not a directory" in line and target.read_text() == "keep me"


def test_json_prints_the_document_and_nothing_else(runner, tiny, tmp_path):
    r = runner.invoke(
        main,
        ["benchmark", "--model", str(tiny), "--out", str(tmp_path / "o"), "--images", "1", "--json", *FAST],
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["schema_version"] == 3 and doc == json.loads((tmp_path / "o" / "results.json").read_text())


def test_quiet_prints_nothing(runner, tiny, tmp_path):
    r = runner.invoke(
        main,
        ["benchmark", "--model", str(tiny), "--out", str(tmp_path / "o"), "--images", "1", "--quiet", *FAST],
    )
    assert r.exit_code == 0 and r.stdout == "" and r.stderr == ""


def test_user_image_folder_scores_against_its_ground_truth(runner, tmp_path):
    model = tmp_path / "classifier.onnx"
    classifier(model)
    folder = image_folder(tmp_path / "images", CLASSES, ["dog", "cat", "bird"])
    out = tmp_path / "o"
    r = runner.invoke(
        main, ["benchmark", "--model", str(model), "--dataset", str(folder), "--out", str(out), *FAST]
    )
    assert r.exit_code == 0, r.output
    rows = json.loads((out / "results.json").read_text())["results"]
    # Every backend runs the same 3 images, so the top-k figures can only be multiples of 1/3 and
    # the driver (within CTS tolerance of onnxruntime) scores as onnxruntime does.
    topks = [row["accuracy"]["topk"] for row in rows]
    assert all(t["labels"] == "ground_truth" and t["n"] == 3 for t in topks)
    assert topks[0]["top4"] == 1.0 and topks[0]["top1"] == topks[1]["top1"]
    assert all(row["dataset"]["size"] == 3 for row in rows)


@pytest.mark.parametrize(
    ("labels", "truth", "expected"),
    [
        (CLASSES + ["horse"], ["dog", "cat", "bird"], "has 5 classes; the model outputs 4"),
        (CLASSES, ["dog", "cat", "zebra"], "zebra"),
        (CLASSES, ["dog", "cat"], "2"),
    ],
)
def test_dataset_that_does_not_fit_is_a_one_line_error(runner, tmp_path, labels, truth, expected):
    model = tmp_path / "classifier.onnx"
    classifier(model)
    folder = image_folder(tmp_path / "images", labels, truth)
    r = runner.invoke(
        main,
        ["benchmark", "--model", str(model), "--dataset", str(folder), "--out", str(tmp_path / "o"), *FAST],
    )
    assert expected in one_line_error(r)


def test_empty_missing_and_corrupt_dataset_folders(runner, tmp_path, tiny):
    empty = tmp_path / "empty"
    empty.mkdir()
    base = ["benchmark", "--model", str(tiny), "--out", str(tmp_path / "o"), *FAST]
    assert "empty" in one_line_error(runner.invoke(main, [*base, "--dataset", str(empty)]))
    missing = tmp_path / "missing"
    assert "no such directory" in one_line_error(runner.invoke(main, [*base, "--dataset", str(missing)]))
    folder = image_folder(tmp_path / "images", CLASSES, ["dog", "cat", "bird"])
    (folder / "img-1.png").write_bytes(b"not an image at all")
    assert "img-1.png" in one_line_error(runner.invoke(main, [*base, "--dataset", str(folder)]))
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_bad_durations_are_usage_errors(runner, value):
    r = runner.invoke(main, ["benchmark", "--duration", value])
    assert r.exit_code == 2 and "Traceback" not in r.output


WRONG_RESULTS_PLUGIN = '''
import numpy as np
from driver.variants import SampleAll


class Reversed(SampleAll):
    """The sample driver, except that every output comes back reversed along its last axis."""

    name = "reversed"

    def __init__(self):
        super().__init__()
        self.name = "reversed"

    def prepareModel(self, model, *args, **kwargs):
        prepared = super().prepareModel(model, *args, **kwargs)
        plan = prepared.plan
        run, run_into = plan.run, plan.run_into

        def reverse(outputs):
            return [np.ascontiguousarray(o[..., ::-1]) for o in outputs]

        # The driver takes a plan's results through a sink (run_into for a checked static plan).
        def wrong_run(inputs, *rest, sink=None, **options):
            if sink is None:
                return reverse(run(inputs, *rest, **options))
            return run(inputs, *rest, sink=lambda outputs: sink(reverse(outputs)), **options)

        plan.run = wrong_run
        plan.run_into = lambda inputs, checkpoint, sink: run_into(
            inputs, checkpoint, lambda outputs: sink(reverse(outputs))
        )
        return prepared
'''


def test_wrong_results_break_mltss_validation_rule(runner, tmp_path):
    model = tmp_path / "classifier.onnx"
    classifier(model)
    plugin = tmp_path / "reversed.py"
    plugin.write_text(WRONG_RESULTS_PLUGIN)
    out = tmp_path / "o"
    args = [
        "benchmark",
        "--model",
        str(model),
        "--driver-plugin",
        str(plugin),
        "--drivers",
        "reversed|sample-all",
    ]
    r = runner.invoke(main, [*args, "--images", "12", "--out", str(out), *FAST])
    line = one_line_error(r)
    assert "1 of 3 runs broke an accuracy limit" in line and "reversed" in line
    rows = {row["backend"]: row for row in json.loads((out / "results.json").read_text())["results"]}
    ref, good, bad = rows["cpu:onnxruntime"], rows["driver:sample-all"], rows["driver:reversed"]
    # Golden labels come from the float64 reference, which onnxruntime and the sample driver agree with.
    assert ref["accuracy"]["topk"]["top1"] == good["accuracy"]["topk"]["top1"] == 1.0
    assert good["validation_errors"] == []
    assert bad["accuracy"]["topk"]["top1"] < 0.95
    assert "MLTS validation rule" in bad["validation_errors"][0]["message"]
    assert bad["validation_errors"][0]["metric"] == "top1_below_reference"
    assert bad["accuracy"]["vs_reference"]["cts_pass"] is False
    assert good["verdict"]["pass"] and not bad["verdict"]["pass"]


def capabilities_file(path, driver="sample-all", exec_time=0.5):
    doc = {
        "format": "mlts-capabilities",
        "version": 1,
        "driver": driver,
        "created_utc": "2026-11-21T20:00:00+00:00",
        "capabilities": {
            "operand_performance": {"TENSOR_FLOAT32": {"exec_time": exec_time, "power_usage": 0.25}}
        },
    }
    path.write_text(json.dumps(doc))
    return path


def test_calibrated_capabilities_reach_the_driver_and_the_results(runner, tiny, tmp_path):
    caps = capabilities_file(tmp_path / "caps.json")
    out = tmp_path / "o"
    args = [
        "benchmark",
        "--model",
        str(tiny),
        "--capabilities",
        str(caps),
        "--out",
        str(out),
        "--images",
        "1",
    ]
    r = runner.invoke(main, [*args, *FAST])
    assert r.exit_code == 0, r.output
    reported = json.loads((out / "results.json").read_text())["capabilities"]["sample-all"]
    assert reported["source"].startswith("calibrated") and str(caps) in reported["source"]
    f32 = next(e for e in reported["operand_performance"] if e["type"] == "TENSOR_FLOAT32")
    assert (f32["exec_time"], f32["power_usage"]) == (0.5, 0.25)
    other = next(e for e in reported["operand_performance"] if e["type"] == "TENSOR_INT32")
    assert other["exec_time"] == pytest.approx(1.1)  # not measured: the default stays
    shown = runner.invoke(
        main, ["devices", "--drivers", "^sample-all$", "--capabilities", str(caps), "--json"]
    )
    assert json.loads(shown.stdout)[0]["capabilities_source"]["kind"] == "calibrated"


def test_a_bad_capabilities_file_is_a_one_line_error(runner, tiny, tmp_path):
    bad = capabilities_file(tmp_path / "caps.json", exec_time=-1)
    line = one_line_error(
        runner.invoke(main, ["benchmark", "--model", str(tiny), "--capabilities", str(bad)])
    )
    assert "caps.json" in line and "exec_time" in line
