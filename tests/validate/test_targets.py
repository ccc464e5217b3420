"""Targets served at a socket, raw frames replayed, and the wrong-result oracle for the operations suite."""

from __future__ import annotations

import importlib.util
import json

import pytest

from mlts.ipc import wire
from mlts.runtime.discovery import discover
from mlts.runtime.shared import SharedService
from mlts.validate import behaviour, reproducer, validation
from mlts.validate.core import Target
from mlts.validate.replay import replay

from .conftest import outcomes, run_suite


@pytest.mark.parametrize("prevalidate", [True, False])
def test_socket_target(tmp_path, prevalidate):
    spec = discover()["sample-faulty"]
    args = [] if prevalidate else ["--no-prevalidate"]
    with SharedService.start(
        spec.factory, name=spec.name, options={"skip_validation": "1"}, service_args=args
    ) as svc:
        served = discover(sockets=[svc.path])["sample-faulty"]
        with Target(served, str(tmp_path)) as target:
            assert target.raw_available is (not prevalidate)
            cases = run_suite(validation, target, r"^ADD/TENSOR_FLOAT32: operation input count")
            if prevalidate:
                # The service checks for the driver: the suite says how to reach the driver's own checks.
                assert [c.outcome for c in cases] == ["skip"] and "--no-prevalidate" in cases[0].reason
            else:
                assert outcomes(cases).get("fail", 0) >= 1
            stable = run_suite(behaviour, target, "^queries stable")
            assert [c.outcome for c in stable] == ["pass"]
        assert svc.alive()


def test_frame_replay(make_target, tmp_path):
    target = make_target()
    frames = [
        b"garbage that is not a frame",
        wire.FIXED_HEADER.pack(wire.MAGIC, 1, 0, 2**31, 0),  # a header announcing 2 GiB
        wire.encode_frame({"kind": "call", "id": 1, "method": "prepareModel", "args": {"model": {"fd": 3}}}),
    ]
    for n, data in enumerate(frames):
        path = reproducer.save(str(tmp_path), "fuzz", f"frame {n}", "frame", data=data)
        assert json.loads(open(path).read())["data"].endswith(".frame")
        assert replay(target, path).outcome == "pass"
        bare = path[: -len(".json")] + ".frame"
        assert replay(target, bare).outcome == "pass"


@pytest.mark.skipif(
    importlib.util.find_spec("mlts.validate.operations") is None, reason="operations suite absent"
)
def test_wrong_result_for_one_operation_is_caught(make_target):
    from mlts.validate import operations

    bad = run_suite(operations, make_target("sample-faulty", wrong_op="ADD"), r"^(ADD|MUL)/TENSOR_FLOAT32")
    add_failed = [c for c in bad if c.name.startswith("ADD/") and c.failed]
    mul = [c for c in bad if c.name.startswith("MUL/")]
    assert add_failed and all(not c.failed for c in mul)
