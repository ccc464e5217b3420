"""The behaviour and fuzz suites' hostile clients find a service that lets one client hurt the others.

The hardened service passes them (test_behaviour_suite runs them on sample-all); here a service
started without its per-client protections, or with too few connections for one process, is caught.
"""

from __future__ import annotations

import random

import pytest

from mlts.runtime.discovery import discover, socket_spec
from mlts.runtime.shared import SharedService
from mlts.validate import behaviour, fuzz
from mlts.validate.core import SuiteOptions, Target
from mlts.validate.fuzz_clients import KINDS, ClientTarget

from .conftest import run_suite


@pytest.fixture
def user_service(tmp_path):
    """A user's service (--driver-socket) that lets one process hold every connection."""
    svc = SharedService.start(
        "driver.variants:SampleAll",
        log_path=str(tmp_path / "svc.log"),
        service_args=["--max-clients", "6", "--max-clients-per-pid", "64", "--max-clients-per-uid", "64"],
    )
    yield svc
    svc.stop()


def test_the_quota_hog_catches_a_service_one_process_can_fill(user_service, tmp_path):
    target = Target(socket_spec(user_service.path), str(tmp_path / "repro"))
    try:
        cases = run_suite(behaviour, target, "^service: a quota hog")
    finally:
        target.close()
    assert [(c.name, c.outcome) for c in cases] == [("service: a quota hog leaves room for others", "fail")]
    assert "while another process held 6 connections: a new client cannot connect" in cases[0].reason


def test_the_client_behaviours_take_turns_and_each_runs_clean_on_sample_all(tmp_path):
    target = ClientTarget()
    rng = random.Random(3)
    kinds = [target.mutate(rng)[0] for _ in range(2 * len(KINDS))]
    assert kinds == list(range(len(KINDS))) * 2
    results: list = []
    with Target(discover()["sample-all"], str(tmp_path)) as t:
        fuzz.run(t, SuiteOptions(quick=True, seed=5, filter="^clients"), results.append)
    assert [(r.name, r.outcome) for r in results] == [("clients/service", "pass")], results
    assert results[0].reason.startswith(f"{len(KINDS)} inputs")
