"""Targets for the validate tests: a driver by name and fault options, closed after each test."""

from __future__ import annotations

import pytest

from mlts.runtime.discovery import discover
from mlts.validate.core import SuiteOptions, Target


@pytest.fixture()
def make_target(tmp_path):
    made: list[Target] = []

    def make(name: str = "sample-all", call_timeout: float = 20.0, **options: str) -> Target:
        target = Target(discover()[name], str(tmp_path / "repro"), call_timeout=call_timeout, options=options)
        made.append(target)
        return target

    yield make
    for target in made:
        target.close()


def run_suite(module, target: Target, filter: str | None = None, **kw) -> list:
    cases: list = []
    module.run(target, SuiteOptions(filter=filter, **kw), cases.append)
    return cases


def outcomes(cases) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in cases:
        out[c.outcome] = out.get(c.outcome, 0) + 1
    return out
