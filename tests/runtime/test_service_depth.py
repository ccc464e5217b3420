"""IF/WHILE nested deeper than the documented limit is INVALID_ARGUMENT (never a RecursionError), on a
service that validates first and on one that leaves validation to the driver."""

from __future__ import annotations

import numpy as np
import pytest

from mlts.hal import nnfile
from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError
from mlts.hal.memory import SharedMemory
from mlts.hal.validate import MAX_NESTING, validate_model
from mlts.runtime.shared import SharedService
from mlts.validate.control_flow_mutations import nested_if_model
from mlts.validate.request_mutations import valid_request


def test_the_limit_is_exact():
    validate_model(nested_if_model(MAX_NESTING))
    with pytest.raises(HalError) as refused:
        validate_model(nested_if_model(MAX_NESTING + 1))
    assert refused.value.status == ErrorStatus.INVALID_ARGUMENT
    assert f"{MAX_NESTING + 1} levels deep; at most {MAX_NESTING} levels" in refused.value.message


@pytest.mark.parametrize("prevalidate", [True, False])
def test_a_thousand_nested_ifs_are_invalid_argument(tmp_path, prevalidate):
    args = [] if prevalidate else ["--no-prevalidate"]
    with (
        SharedService.start(
            "driver.variants:SampleAll", log_path=str(tmp_path / "svc.log"), service_args=args
        ) as service,
        service.connect() as device,
    ):
        data = nnfile.encode(nested_if_model(1000))
        memory = SharedMemory.frozen(data)
        try:
            with pytest.raises(HalError) as refused:
                device.call("prepareModel", {"model": {"fd": 0, "size": len(data)}}, [memory.fd])
        finally:
            memory.close()
        assert refused.value.status == ErrorStatus.INVALID_ARGUMENT
        assert f"at most {MAX_NESTING} levels of control flow" in refused.value.message
        # The deepest model allowed prepares and runs: 1.5 + 1.5 at the bottom of 64 IFs.
        deepest = nested_if_model(MAX_NESTING)
        prepared = device.prepareModel(deepest)
        request = valid_request(deepest, [b"\x01", np.float32(1.5).tobytes()])
        prepared.executeSynchronously(request)
        assert np.frombuffer(request.pools[1].buffer, np.float32, 1)[0] == 3.0
        prepared.close()
    with open(service.log_path) as f:
        assert "RecursionError" not in f.read()
