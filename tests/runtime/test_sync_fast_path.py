"""The synchronous client's direct path (a compact call sent without an argument dictionary, the reply
read by the calling thread): every request still validated by the driver, threads still served."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from mlts.hal.enums import ErrorStatus, MeasureTiming
from mlts.hal.errors import HalError
from mlts.hal.types import DataLocation, Request, RequestArgument
from mlts.runtime.shared import SharedService
from tests.runtime.conftest import fake_spec
from tests.runtime.models import add_model
from tests.runtime.servicekit import _out, _pool, _request


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    log = tmp_path_factory.mktemp("sync-fast") / "svc.log"
    svc = SharedService.start(fake_spec("AddDevice"), name="fake-add", log_path=str(log))
    yield svc
    assert svc.stop() == 0
    assert "Traceback" not in log.read_text()


def _compact_count(device) -> int:
    return device.service_status()["you"]["compact_calls"]


def test_a_changed_request_of_the_same_shape_is_refused_after_many_valid_ones(service):
    with service.connect() as dev:
        prepared = dev.prepareModel(add_model())
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        pool = _pool(x, 2 * x)
        good = _request(pool)
        for _ in range(20):
            result = prepared.executeSynchronously(good, MeasureTiming.YES)
            np.testing.assert_array_equal(_out(pool), 3 * x)
        assert result.output_shapes[0].dimensions == (2, 3)
        compact = _compact_count(dev)
        assert compact == 20  # every call was compact (the first one after a mapMemories call)
        # The same shapes, but the output's region runs past the end of the pool: refused every time.
        past_end = Request(good.inputs, (RequestArgument(False, DataLocation(0, 240, 24), ()),), good.pools)
        for _ in range(2):
            with pytest.raises(HalError) as e:
                prepared.executeSynchronously(past_end)
            assert e.value.status == ErrorStatus.INVALID_ARGUMENT
        # A pool index the request does not have, and an input of the wrong rank.
        bad_pool = Request(
            (RequestArgument(False, DataLocation(1, 0, 24), (2, 3)), good.inputs[1]), good.outputs, good.pools
        )
        bad_rank = Request(
            (RequestArgument(False, DataLocation(0, 0, 24), (6,)), good.inputs[1]), good.outputs, good.pools
        )
        for bad in (bad_pool, bad_rank):
            with pytest.raises(HalError) as e:
                prepared.executeSynchronously(bad)
            assert e.value.status == ErrorStatus.INVALID_ARGUMENT
        assert _compact_count(dev) == compact + 4  # the refused ones travelled compact too
        # The connection goes on: the valid request still runs.
        np.frombuffer(pool.buffer, np.float32, 6, 128)[:] = 0
        prepared.executeSynchronously(good)
        np.testing.assert_array_equal(_out(pool), 3 * x)
        prepared.close()
        pool.close()


def test_threads_sharing_a_connection_each_get_their_own_result(service):
    with service.connect() as dev:
        prepared = dev.prepareModel(add_model())
        errors: list[BaseException] = []
        start = threading.Barrier(3)

        def client(k: int) -> None:
            try:
                x = np.full((2, 3), float(k), np.float32)
                pool = _pool(x, x)
                request = _request(pool)
                start.wait()
                for n in range(60):
                    np.frombuffer(pool.buffer, np.float32, 6, 0)[:] = k + n
                    prepared.executeSynchronously(request)
                    np.testing.assert_array_equal(_out(pool), np.full((2, 3), 2 * k + n, np.float32))
                pool.close()
            except BaseException as e:  # reported by the main thread
                errors.append(e)

        threads = [threading.Thread(target=client, args=(k,)) for k in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        assert not any(t.is_alive() for t in threads)
        prepared.close()
