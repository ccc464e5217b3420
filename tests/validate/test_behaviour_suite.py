"""The behaviour suite: sample-all passes; each behavioural fault of sample-faulty is caught by its case."""

from __future__ import annotations

import pytest

from mlts.validate import behaviour

from .conftest import outcomes, run_suite


def test_sample_all_passes(make_target):
    cases = run_suite(behaviour, make_target())
    assert outcomes(cases) == {"pass": len(cases)}, [c for c in cases if c.outcome != "pass"]
    assert len(cases) >= 20


@pytest.mark.parametrize(
    ("option", "case"),
    [
        ({"unstable_capabilities": "1"}, "queries stable across restarts"),
        ({"ignore_deadlines": "1"}, "deadline: passed [sync]"),
        ({"ignore_deadlines": "1"}, "deadline: prepareModel"),
        ({"token_cache": "1"}, "cache: token of another client"),
        ({"ignore_deadlines": "1"}, "deadline: passed [fenced]"),
        ({"ignore_deadlines": "1"}, "deadline: passed [burst]"),
        ({"ignore_priority": "1"}, "priority: HIGH overtakes queued LOW"),
        ({"ignore_priority": "1"}, "priority: a bad one refused by the driver"),
        ({"no_preemption": "1"}, "priority: HIGH overtakes queued LOW"),
        ({"client_priority": "1"}, "priority: another client's HIGH preempts LOW"),
    ],
)
def test_fault_is_caught(make_target, option, case):
    import re

    cases = run_suite(behaviour, make_target("sample-faulty", **option), "^" + re.escape(case) + "$")
    assert [(c.name, c.outcome) for c in cases] == [(case, "fail")], cases
