"""Zoo models missing from the cache are built before a run, in worker processes, each reported."""

from __future__ import annotations

from mlts.models import prebuild, zoo

FAST = ["gelu_mlp_block", "iterative_refinement"]  # quick to build


def test_missing_models_are_built_in_workers_and_reported(tmp_path, monkeypatch):
    monkeypatch.setenv("MLTS_CACHE_DIR", str(tmp_path))
    assert prebuild.missing(FAST) == FAST
    lines: list[str] = []
    built = prebuild.build_missing(FAST, lines.append, workers=2)
    assert sorted(built) == sorted(FAST)
    assert prebuild.missing(FAST) == []
    assert "building 2 zoo model(s)" in lines[0] and "2 at a time" in lines[0]
    assert any(f"built {FAST[0]}" in line for line in lines) and lines[-1].startswith("built 2 zoo model(s)")
    # Built in other processes, read here: the same bytes a build in this process gives.
    for name in FAST:
        assert zoo.load(name).SerializeToString() == zoo.get(name).build().SerializeToString()
    # Nothing missing: nothing built, nothing said.
    lines.clear()
    assert prebuild.build_missing(FAST, lines.append) == [] and lines == []


def test_a_quantized_model_brings_its_float_model_first(tmp_path, monkeypatch):
    monkeypatch.setenv("MLTS_CACHE_DIR", str(tmp_path))
    order: list[str] = []
    monkeypatch.setattr(prebuild, "_build", lambda name: (order.append(name), (name, 0.0))[1])
    built = prebuild.build_missing(["mobilenet_v1_0.25_128_quant"], lambda _: None, workers=1)
    assert order == built == ["mobilenet_v1_0.25_128", "mobilenet_v1_0.25_128_quant"]
