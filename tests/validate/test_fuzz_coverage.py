"""Coverage-guided fuzzing of the driver: the service measures the driver's own coverage (`--coverage`,
atheris's instrumentation recorded in the service process) and the campaign keeps the inputs that
reached new features."""

from __future__ import annotations

import random

import pytest

from mlts.hal.errors import HalError
from mlts.ipc.service import coverage
from mlts.runtime.process import DriverProcess
from mlts.runtime.remote import RemoteDevice
from mlts.validate import fuzz
from mlts.validate.core import SuiteOptions
from mlts.validate.fuzz_targets import Finding
from mlts.validate.fuzz_targets import Target as FuzzTarget
from tests.runtime.models import add_model

needs_atheris = pytest.mark.skipif(
    not coverage.available(), reason="atheris (the fuzz extra) is not installed"
)


@needs_atheris
def test_the_service_reports_the_features_the_driver_reaches(tmp_path) -> None:
    process = DriverProcess.start(
        "driver.variants:SampleAll",
        log_path=str(tmp_path / "svc.log"),
        service_args=["--no-prevalidate", "--coverage"],
        start_timeout=180.0,
    )
    with RemoteDevice(process) as device:
        assert process.hello["coverage"] is True
        first = device.call("coverageReport", {})
        assert first["modules"][0] == "driver" and "mlts.hal.validate" in first["modules"]
        assert first["features"] == first["new"] > 0
        for _ in range(3):  # the same model again and again: its paths are known after the first
            device.prepareModel(add_model((3,))).close()
        again = device.call("coverageReport", {})
        assert again["new"] > 0
        device.prepareModel(add_model((3,))).close()
        assert device.call("coverageReport", {})["new"] == 0
        with pytest.raises(HalError):  # an invalid model: the driver's validation, new paths in it
            device.prepareModel(add_model((3,), out_dims=(4,)))
        report = device.call("coverageReport", {})
        assert report["new"] > 0 and report["features"] == again["features"] + report["new"]


def test_a_service_without_coverage_does_not_answer_coverage_reports(tmp_path) -> None:
    with RemoteDevice(
        DriverProcess.start("driver.variants:SampleAll", log_path=str(tmp_path / "s.log"))
    ) as d:
        assert d.process.hello["coverage"] is False
        with pytest.raises(HalError, match="not implemented by this service"):
            d.call("coverageReport", {})


class _Scripted(FuzzTarget):
    """A fuzz target whose inputs are counters; `mutate_from` marks what it was given."""

    name = "scripted"

    def __init__(self) -> None:
        super().__init__()
        self.seeds = [b"seed"]
        self.made = 0
        self.parents: list[bytes] = []

    def mutate(self, rng: random.Random) -> bytes:
        self.made += 1
        return b"m%d" % self.made

    def mutate_from(self, rng: random.Random, data: bytes) -> bytes:
        self.parents.append(data)
        self.made += 1
        return b"k%d" % self.made

    def service(self, ctx, data: bytes) -> Finding | None:
        return None


class _Ctx:
    """Reports new features for the inputs numbered in `rewarding` (by the order they were sent)."""

    def __init__(self, rewarding: set[int]) -> None:
        self.rewarding, self.sent, self.total = rewarding, 0, 100

    def features(self) -> tuple[int, int]:
        new = 7 if self.sent in self.rewarding else 0
        self.sent += 1
        self.total += new
        return self.total, new


class _FakeTarget:
    restarts = 0
    out_dir = "unused"


def test_inputs_that_reach_new_features_are_kept_and_mutated_further() -> None:
    t, ctx, results = _Scripted(), _Ctx({1, 3}), []  # report 0 is the warm-up before the first input
    fuzz._guided(_FakeTarget(), ctx, t, fuzz.Budget(40, None), 5, results.append)  # type: ignore[arg-type]
    (case,) = results
    assert case.outcome == "pass" and "coverage-guided: 114 driver features, 2 inputs kept" in case.reason
    assert t.parents and set(t.parents) <= {b"m1", b"m3", b"k3"}  # only kept inputs are mutated further
    assert ctx.sent == 41


def test_the_fuzz_suite_guides_the_drivers_campaigns_by_coverage_where_it_can(
    make_target, monkeypatch
) -> None:
    seen: list[str] = []
    monkeypatch.setattr(fuzz, "_guided", lambda target, ctx, t, *a: seen.append(f"guided {t.name}"))
    monkeypatch.setattr(fuzz, "_service", lambda target, ctx, t, *a: seen.append(f"plain {t.name}"))
    monkeypatch.setattr(fuzz, "_in_process", lambda *a: None)
    target = make_target()
    monkeypatch.setattr(coverage, "available", lambda: True)
    fuzz.run(target, SuiteOptions(quick=True, fuzz_cases=50), lambda r: None)
    assert seen == ["guided models", "guided requests", "plain frames", "guided rings", "plain clients"]
    seen.clear()
    monkeypatch.setattr(coverage, "available", lambda: False)
    fuzz.run(target, SuiteOptions(quick=True, fuzz_cases=50), lambda r: None)
    assert seen == ["plain models", "plain requests", "plain frames", "plain rings", "plain clients"]
