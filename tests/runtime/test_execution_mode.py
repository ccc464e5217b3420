"""The execution path is an enum from the options to the seam; its name is what options and results use."""

from __future__ import annotations

import json

import pytest

from driver.variants import SampleAll
from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError
from mlts.runtime.execution import EXECUTION_MODES, ExecutionMode
from mlts.runtime.session import Session
from tests.runtime.models import add_model


def test_the_paths_and_their_names():
    assert [str(m) for m in EXECUTION_MODES] == ["sync", "async", "fenced", "burst"]
    assert json.dumps({"execution": ExecutionMode.FENCED}) == '{"execution": "fenced"}'
    assert ExecutionMode.parse("burst") is ExecutionMode.BURST


def test_an_unknown_path_is_invalid_argument_naming_the_valid_ones():
    with pytest.raises(HalError) as e:
        ExecutionMode.parse("turbo")
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    assert "'turbo' is not one of sync, async, fenced, burst" in e.value.message
    with pytest.raises(HalError, match="'turbo' is not one of"):
        Session(SampleAll(), add_model(), mode="turbo")  # type: ignore[arg-type]
