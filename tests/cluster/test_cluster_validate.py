"""`mlts validate --cluster ADDRESS`: suites split into case-group shards over two worker processes,
merged into the same document as a single-machine run, with the same outcomes."""

from __future__ import annotations

import json

from click.testing import CliRunner

from mlts.cli import main
from mlts.records import ResultsDocument

# A few case groups of each sharded suite: ADD and MUL models in validation and operations.
FILTER = r"^(model )?(ADD|MUL)/TENSOR_FLOAT32: |^driver alive"
ARGS = ["--driver", "sample-all", "--suite", "validation,operations", "--filter", FILTER]


def run(tmp_path, name: str, *extra: str) -> dict:
    out = tmp_path / name
    result = CliRunner().invoke(main, ["validate", *ARGS, *extra, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return json.loads((out / "results.json").read_text())


def test_cluster_validate_matches_a_single_machine_run(tmp_path, cluster_address):
    single = run(tmp_path, "single")
    merged = run(tmp_path, "cluster", "--cluster", cluster_address)
    one, many = ResultsDocument.from_json(single), ResultsDocument.from_json(merged)
    # Same schema: the same keys everywhere, the cluster section added.
    assert set(merged) - set(single) == {"cluster"} and set(single) <= set(merged)
    assert set(merged["validate"]) == set(single["validate"])
    assert {k for c in merged["validate"]["cases"] for k in c} == {
        k for c in single["validate"]["cases"] for k in c
    }
    assert merged["validate"]["options"] == single["validate"]["options"]
    # Same cases, each with the same outcome, and none twice.
    names = [(c.suite, c.name) for c in many.validate.cases]
    assert len(names) == len(set(names))
    assert many.validate.outcomes() == one.validate.outcomes()
    assert {s for s, _ in names} == {"validation", "operations"}
    assert many.validate.endpoint.transport == one.validate.endpoint.transport == "unix"
    cluster = many.section("cluster")
    assert cluster.engine == "dask" and len(cluster.workers) == 2
    assert len({u.worker for u in cluster.units}) == 2, "both workers ran units"
    assert all(u.status == "done" for u in cluster.units)
    shards = [u.label for u in cluster.units if u.label.startswith("validate operations")]
    assert len(shards) == 4  # two per worker
    assert [c.outcome for c in many.validate.cases if c.name == "driver alive after the invalid inputs"] == [
        "pass"
    ]
