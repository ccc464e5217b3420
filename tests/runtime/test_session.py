"""Session over remote and in-process devices: exact ADD results, pool reuse, unknown output sizes."""

from __future__ import annotations

import numpy as np
import pytest

from mlts.hal.errors import HalError
from mlts.runtime.discovery import DriverSpec, discover, open_device
from mlts.runtime.remote import RemoteDevice
from mlts.runtime.session import ALIGNMENT, Session
from tests.runtime.conftest import fake_spec
from tests.runtime.models import add_model


def _inputs(seed: int, shape=(2, 3)) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(2)]


def test_session_remote_exact_and_pool_reused(add_device):
    with Session(add_device, add_model()) as session:
        for seed in range(3):
            a, b = _inputs(seed)
            (out,), result = session.run([a, b])
            np.testing.assert_array_equal(out, a + b)
            assert out.dtype == np.float32 and out.shape == (2, 3)
            assert result.timing.time_on_device == 1
        assert len(add_device._memories) == 1
        with pytest.raises(HalError, match="input 1 has dtype float64"):
            session.run([a, b.astype(np.float64)])
        with pytest.raises(HalError, match="the model has 2 inputs, 1 arrays"):
            session.run([a])
    assert not add_device._memories  # the pool was freed in the driver


def test_unknown_output_size_grows_the_pool_and_retries(add_device):
    model = add_model(dims=(64, 1), dims_b=(1, 64), out_dims=(0, 0))
    with Session(add_device, model) as session:
        a = np.arange(64, dtype=np.float32).reshape(64, 1)
        b = np.arange(64, dtype=np.float32).reshape(1, 64)
        (out,), result = session.run([a, b])
        np.testing.assert_array_equal(out, a + b)
        assert result.output_shapes[0].dimensions == (64, 64)
        (out,), _ = session.run([a, b])  # the learnt size is kept: no retry needed
        np.testing.assert_array_equal(out, a + b)


def test_regions_are_aligned(add_device):
    with Session(add_device, add_model(dims=(3,))) as session:
        request = session._request([np.ones(3, np.float32)] * 2).request
        assert all(arg.location.offset % ALIGNMENT == 0 for arg in request.inputs + request.outputs)


@pytest.mark.parametrize(
    "spec", [DriverSpec("fake-add", fake_spec("AddDevice"), "plugin"), discover()["sample-all"]]
)
def test_in_process_mode_gives_the_same_outputs(spec, tmp_path):
    inputs = _inputs(7, (4, 5))
    outputs = []
    for in_process in (True, False):
        device = open_device(spec, in_process=in_process, log_path=str(tmp_path / f"{in_process}.log"))
        assert isinstance(device, RemoteDevice) is not in_process
        try:
            with Session(device, add_model(dims=(4, 5))) as session:
                outputs.append(session.run(inputs)[0][0])
        finally:
            device.close()
    np.testing.assert_array_equal(outputs[0], outputs[1])
    np.testing.assert_array_equal(outputs[0], inputs[0] + inputs[1])
