"""The validation suite on sample-all (everything passes) and on sample-faulty skip_validation (caught), and replay."""

from __future__ import annotations

import json
import os

from mlts.validate import validation
from mlts.validate.replay import replay

from .conftest import outcomes, run_suite

SUBSET = r"^(ADD|CONV_2D|SOFTMAX|IF|WHILE)/|^model ADD|^request ADD.*\[(sync|burst|fenced)\]|alive"


def test_sample_all_passes(make_target):
    cases = run_suite(validation, make_target(), SUBSET)
    counts = outcomes(cases)
    assert counts == {"pass": len(cases)}, [c for c in cases if c.outcome != "pass"][:3]
    names = " ".join(c.name for c in cases)
    for needle in (
        "CONV_2D/",
        "IF/",
        "WHILE/",
        "model ADD",
        "[burst]",
        "[fenced]",
        "operation parameter value",
    ):
        assert needle in names
    assert len(cases) > 60


def test_skipped_validation_is_caught_and_replayed(make_target, tmp_path):
    faulty = make_target("sample-faulty", skip_validation="1")
    cases = run_suite(validation, faulty, r"^ADD/|^request ADD.*\[(sync|burst)\]|alive")
    failing = [c for c in cases if c.outcome == "fail"]
    assert len(failing) >= len(cases) // 2
    # The driver stays alive: the liveness case passes.
    assert [c.outcome for c in cases if "alive" in c.name] == ["pass"]
    model_case = next(c for c in failing if c.name.startswith("ADD/") and c.reproducer)
    doc = json.loads(open(model_case.reproducer).read())
    assert doc["kind"] == "model" and doc["expect"] == {"status": "INVALID_ARGUMENT"}
    assert os.path.exists(os.path.join(os.path.dirname(model_case.reproducer), doc["model"]))
    request_case = next(c for c in failing if "[burst]" in c.name and c.reproducer)
    # Replayed: still failing on the faulty driver, passing on sample-all.
    assert replay(faulty, model_case.reproducer).outcome == "fail"
    assert replay(faulty, request_case.reproducer).outcome == "fail"
    good = make_target()
    assert replay(good, model_case.reproducer).outcome == "pass"
    assert replay(good, request_case.reproducer).outcome == "pass"


def test_a_hanging_driver_is_a_hang_and_the_run_goes_on(make_target):
    target = make_target("sample-faulty", call_timeout=1.5, hang="prepareModel:2")
    cases = run_suite(validation, target, r"^ADD/TENSOR_FLOAT32: operation (input|output) count")
    assert [c.outcome for c in cases][:3] == ["pass", "hang", "pass"], cases
    assert target.restarts >= 1
