"""A short stress suite spread over two Dask workers, one of them killed as it starts its second unit:
the lost unit runs again elsewhere, nothing that finished is lost, and the merged document has the
tests, outcomes and schema of a single-machine run."""

from __future__ import annotations

import os
import signal
import time

import pytest

from mlts.cluster import run as distributed
from mlts.cluster.progress import UnitProgress
from mlts.cluster.targets import spec_targets
from mlts.crash.suite import StressConfig, run_stress
from mlts.records import ResultsDocument
from mlts.runtime.discovery import discover
from tests._procs import our_processes

MODES = ["model-load-random-stress", "inference-random-stress", "memory-mapped-model-load-stress"]
MODELS = ["mobilenet_v1_0.25_128"]
CONFIG = StressConfig(duration_s=0.3, grace_s=20.0, random_count=2, random_ops=4)


class KillOnSecondUnit(UnitProgress):
    """Kills a worker process (SIGKILL) as it starts a unit after it has finished one: deterministic,
    whatever the order the scheduler picks."""

    def __init__(self) -> None:
        super().__init__(0, "test", emit=lambda line: None)
        self.finished_on: set[str] = set()
        self.killed: tuple[str, str, int] | None = None

    def started(self, unit_id, worker, pid=None):
        super().started(unit_id, worker, pid)
        if self.killed is None and worker in self.finished_on and pid is not None:
            self.killed = (unit_id, worker, pid)
            os.kill(pid, signal.SIGKILL)

    def ended(self, unit_id):
        self.finished_on.add(self.running.get(unit_id, ""))
        super().ended(unit_id)


@pytest.fixture
def no_orphans():
    def ours():
        return our_processes("mlts.crash.child", "mlts.ipc.service")

    before = set(ours())
    yield
    deadline = time.monotonic() + 15
    while (left := set(ours()) - before) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"processes left running: {left}"


def key(record: dict) -> tuple:
    return record["test"], record["outcome"], record["expected"], record["as_expected"]


def test_stress_on_a_cluster_survives_a_killed_worker(cluster_address, no_orphans):
    single = run_stress(MODES, ["sample-all"], MODELS, CONFIG, lambda m: None, checkpoint=lambda d: None)
    checkpoints: list[dict] = []
    progress = KillOnSecondUnit()
    merged = distributed.stress(
        modes=MODES,
        targets=spec_targets([discover()["sample-all"]]),
        models=MODELS,
        config=CONFIG,
        lab=None,
        cluster=cluster_address,
        say=lambda line: None,
        quiet=True,
        checkpoint=checkpoints.append,
        progress=progress,
    )
    assert progress.killed is not None, "no worker started a second unit"
    killed_unit = progress.killed[0]
    # The same tests with the same outcomes, in the same order; every test passed.
    assert [key(r) for r in merged["results"]] == [key(r) for r in single["results"]]
    assert all(r["outcome"] == "SUCCESS" for r in merged["results"])
    doc = ResultsDocument.from_json(merged)
    assert doc.kind == "stress" and set(merged) == set(single) | {"cluster"}
    assert {k for r in merged["results"] for k in r} - {k for r in single["results"] for k in r} == {
        "endpoint"
    }
    assert merged["config"] == {**single["config"]}
    units = {u.id: u for u in doc.section("cluster").units}
    assert units[killed_unit].attempts == 2 and units[killed_unit].status == "done"
    assert all(u.status == "done" for u in units.values())
    # Nothing that finished was lost: every checkpoint only added tests to the one before.
    counts = [len(c["results"]) for c in checkpoints]
    assert counts == sorted(counts) and counts[-1] == len(MODES)
