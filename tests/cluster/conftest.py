"""One local Dask cluster for the module's tests (two worker processes, the first offering `timing`),
reached by its scheduler address as a remote one would be; its workers carry the test run's marker."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def cluster_address():
    distributed = pytest.importorskip(
        "distributed", reason="the cluster extra is not installed (pip install 'mlts[cluster]')"
    )
    from mlts.cluster.engine import local_cluster

    cluster = local_cluster(distributed, 2)
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close()
