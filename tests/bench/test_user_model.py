"""A user's model file resolved: final input shapes, fixed values, --inputs files, and one-line refusals."""

from __future__ import annotations

import numpy as np
import pytest

from mlts.bench import input_files
from mlts.bench.user_model import InputSettings, UserModelError, graph_inputs, resolve, resolve_all
from mlts.errors import InputError
from tests.bench import usermodels


def test_symbolic_dimensions_beyond_the_batch_need_a_shape(tmp_path):
    path = tmp_path / "dense.onnx"
    usermodels.symbolic_dense(path)
    with pytest.raises(UserModelError) as e:
        resolve_all([path], InputSettings())
    message = str(e.value)
    assert "symbolic dimension 2 ('height')" in message and "--input-shape image=1,3,height,width" in message
    assert "\n" not in message
    ((user, _),) = resolve_all([path], InputSettings({"image": (1, 3, 20, 28)}))
    assert user.shapes == {"image": (1, 3, 20, 28)} and user.convert_shapes() == {"image": (1, 3, 20, 28)}


@pytest.mark.parametrize(
    ("shape", "complaint"),
    [((1, 3, 20), "has 4 dimensions"), ((1, 4, 20, 20), "dimension 1 fixed to 3")],
)
def test_a_shape_that_contradicts_the_model_is_refused(tmp_path, shape, complaint):
    path = tmp_path / "dense.onnx"
    usermodels.symbolic_dense(path)
    with pytest.raises(UserModelError, match=complaint):
        resolve_all([path], InputSettings({"image": shape}))


def test_names_no_model_has_are_refused_with_the_inputs_listed(tmp_path):
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    usermodels.symbolic_dense(a)
    usermodels.rate_scaled(b)
    with pytest.raises(UserModelError) as e:
        resolve_all([a, b], InputSettings(values={"rate": 16000}))
    assert str(e.value) == (
        "--input-value rate: no --model file has an input 'rate' (a.onnx: 'image'; b.onnx: 'audio', 'sample_rate')"
    )
    with pytest.raises(UserModelError, match="--input-shape x: applies to --model files; none is given"):
        resolve_all([], InputSettings({"x": (1,)}))


def test_values_take_the_inputs_type_and_shape(tmp_path):
    path = tmp_path / "rate.onnx"
    usermodels.rate_scaled(path)
    ((user, _),) = resolve_all([path], InputSettings(values={"sample_rate": np.array(16000)}))
    value = user.values["sample_rate"]
    assert value.dtype == np.int64 and value.shape == () and value == 16000
    assert set(user.shapes) == {"audio"}  # fixed inputs are not fed
    with pytest.raises(UserModelError, match="is int64; 16000.5 is not exactly that"):
        resolve_all([path], InputSettings(values={"sample_rate": np.array(16000.5)}))
    with pytest.raises(UserModelError, match=r"2 value\(s\), but input 'sample_rate'.*shape \[\]"):
        resolve_all([path], InputSettings(values={"sample_rate": np.array([1, 2])}))


def test_roles_come_from_what_reads_each_input(tmp_path):
    lstm, tokens = tmp_path / "lstm.onnx", tmp_path / "tokens.onnx"
    roles = {i.name: (i.role, i.vocab) for i in graph_inputs(usermodels.lstm_with_state(lstm))}
    assert roles == {"x": ("", None), "h0": ("state", None)}
    roles = {i.name: (i.role, i.vocab) for i in graph_inputs(usermodels.token_classifier(tokens, vocab=20))}
    assert roles == {"ids": ("tokens", 20)}


@pytest.mark.parametrize(
    ("name", "state"),
    [("h0", True), ("c0", True), ("state", True), ("lstm.hidden", True), ("decoder_cell", True),
     ("encoder_hidden_states", False), ("input", False), ("chunk", False)],
)  # fmt: skip
def test_state_by_name(name, state):
    from mlts.bench.user_model import named_state

    assert named_state(name) is state


def _npy(path, array) -> None:
    np.save(path, array, allow_pickle=False)


def test_input_files_give_samples_and_shapes(tmp_path):
    model = tmp_path / "dense.onnx"
    usermodels.symbolic_dense(model)
    folder = tmp_path / "inputs"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for k in range(3):
        _npy(folder / f"image_{k}.npy", rng.standard_normal((1, 3, 12, 16)))  # float64: cast to float32
    ((user, _),) = resolve_all([model], InputSettings(inputs_dir=str(folder)))
    assert user.shapes == {"image": (1, 3, 12, 16)}  # the symbolic H and W from the files
    assert user.files is not None and user.files.samples == 3
    x = user.files.value("image", 2)
    assert x.dtype == np.float32 and x.shape == (1, 3, 12, 16)


def test_file_names_of_inputs_with_odd_characters(tmp_path):
    assert input_files.file_stem("encoder/state:0") == "encoder_state_0"
    assert input_files.file_stem("x.1") == "x.1"


@pytest.mark.parametrize(
    ("files", "complaint"),
    [
        ({"image_0.npy": (1, 3, 8, 8), "image_2.npy": (1, 3, 8, 8)}, "image_1.npy is missing"),
        ({"image.npy": (1, 3, 8, 8), "image_0.npy": (1, 3, 8, 8)}, "both image.npy and indexed files"),
        ({"image.npy": (1, 4, 8, 8)}, r"shape \[1, 4, 8, 8\], but input .image. takes \[1, 3, 8, 8\]"),
        ({"picture.npy": (1, 3, 8, 8)}, "names no input of the --model files"),
    ],
)
def test_bad_input_folders_are_one_line_errors(tmp_path, files, complaint):
    model = tmp_path / "dense.onnx"
    usermodels.symbolic_dense(model)
    folder = tmp_path / "inputs"
    folder.mkdir()
    for name, shape in files.items():
        _npy(folder / name, np.ones(shape, np.float32))
    with pytest.raises(InputError, match=complaint):
        resolve_all([model], InputSettings({"image": (1, 3, 8, 8)}, inputs_dir=str(folder)))


def test_hostile_and_wrong_files_are_refused(tmp_path):
    model = tmp_path / "rate.onnx"
    usermodels.rate_scaled(model, samples=16)
    folder = tmp_path / "inputs"
    folder.mkdir()
    np.save(folder / "audio.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    settings = InputSettings(values={"sample_rate": np.array(8000)}, inputs_dir=str(folder))
    with pytest.raises(input_files.InputFilesError, match="not a .npy array file"):
        resolve_all([model], settings)
    (folder / "audio.npy").write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(input_files.InputFilesError, match="audio.npy: not a .npy array file"):
        resolve_all([model], settings)
    _npy(folder / "audio.npy", np.ones((1, 16), np.int32))
    with pytest.raises(input_files.InputFilesError, match="int32 values, but input 'audio' is float32"):
        resolve_all([model], settings)
    _npy(folder / "audio.npy", np.full((1, 16), np.inf))
    with pytest.raises(input_files.InputFilesError, match="not finite"):
        resolve_all([model], settings)


def test_all_zero_samples_are_not_timed(tmp_path):
    model = tmp_path / "rate.onnx"
    usermodels.rate_scaled(model, samples=16)
    folder = tmp_path / "inputs"
    folder.mkdir()
    _npy(folder / "audio_0.npy", np.ones((1, 16), np.float32))
    _npy(folder / "audio_1.npy", np.zeros((16,), np.float32))  # a missing batch dimension of 1 is added
    settings = InputSettings(values={"sample_rate": np.array(8000)}, inputs_dir=str(folder))
    with pytest.raises(UserModelError, match="every input of sample 1 is all zeros"):
        resolve_all([model], settings)


def test_an_nnm_file_keeps_its_inputs(tmp_path):
    from mlts.convert import convert
    from mlts.hal import nnfile

    onnx_path, nnm = tmp_path / "dense.onnx", tmp_path / "dense.nnm"
    usermodels.symbolic_dense(onnx_path)
    conv = convert(onnx_path, input_shapes={"image": (1, 3, 8, 8)})
    nnfile.write(
        conv.model, nnm, metadata={"inputs": "image:1x3x8x8:float32", "outputs": "maps:1x1x8x8:float32"}
    )
    user, loaded = resolve(nnm, InputSettings())
    assert user.is_nnm and [(i.name, i.dims) for i in user.inputs] == [("image", (1, 3, 8, 8))]
    with pytest.raises(UserModelError, match="dense.nnm is an NN graph file"):
        resolve_all([nnm], InputSettings({"image": (1, 3, 8, 8)}))
