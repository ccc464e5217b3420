"""The code base keeps its rules: layering of every layer, lint, and types everywhere."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Which project packages each layer may import (ARCHITECTURE: lower layers never import higher ones).
# Every package of mlts is a layer here; a new one fails test_every_package_is_a_layer until it is placed.
FRONT_END = {"mlts.hal", "mlts.errors", "mlts.convert", "mlts.models", "mlts.datasets"}
# The results records sit below both their producers (bench, crash, validate) and their readers (report).
RECORDS = "mlts.records"
TOOLS_BASE = {*FRONT_END, RECORDS, "mlts.ipc", "mlts.runtime", "mlts.bench"}
ALLOWED = {
    "mlts/errors.py": set(),
    "mlts/hal": {"mlts.hal", "mlts.errors"},
    "driver": {"mlts.hal", "driver"},
    # The transport: how a Device is served from its own process and reached (above the HAL's types).
    "mlts/ipc": {"mlts.hal", "mlts.errors", "mlts.ipc"},
    "mlts/runtime": {"mlts.hal", "mlts.errors", "mlts.ipc", "mlts.runtime"},
    "mlts/convert": {"mlts.hal", "mlts.errors", "mlts.convert"},
    "mlts/datasets": {"mlts.hal", "mlts.errors", "mlts.datasets"},
    "mlts/models": {"mlts.hal", "mlts.errors", "mlts.models", "mlts.datasets"},
    "mlts/records": {"mlts.hal", "mlts.errors", RECORDS},
    "mlts/bench": TOOLS_BASE,
    "mlts/calibrate": {*TOOLS_BASE, "mlts.calibrate"},
    # The random-graph check runs each graph on the sample driver's executor too, in this process.
    "mlts/crash": {*TOOLS_BASE, "mlts.crash", "driver.executor"},
    "mlts/validate": {*TOOLS_BASE, "mlts.validate"},
    # Distribution (labs, cluster sharding) drives the tools it spreads over endpoints and workers.
    "mlts/cluster": {*TOOLS_BASE, "mlts.crash", "mlts.validate", "mlts.cluster"},
    "mlts/report": {"mlts.hal", "mlts.errors", RECORDS, "mlts.report"},
    "mlts/commands": {
        *TOOLS_BASE,
        "mlts.calibrate",
        "mlts.crash",
        "mlts.validate",
        "mlts.report",
        "mlts.cluster",
        "mlts.commands",
    },
    "mlts/cli.py": {"mlts.hal", "mlts.errors", "mlts.ipc", "mlts.runtime", "mlts.commands"},
    "mlts/__main__.py": {"mlts.cli"},
    "mlts/__init__.py": set(),
}
# Upward imports that remain to be removed (none: the results document's header comes from mlts.records).
KNOWN_UPWARD: set[tuple[str, str]] = set()
THIRD_PARTY_FOR_DRIVER = {"numpy"}


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def project_imports(names: set[str]) -> set[str]:
    return {n for n in names if n == "mlts" or n.startswith(("mlts.", "driver"))}


def _files(layer: str) -> list[Path]:
    path = ROOT / layer
    return [path] if path.suffix == ".py" else sorted(path.rglob("*.py"))


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layers_import_only_lower_layers(layer):
    if not (ROOT / layer).exists():
        pytest.skip(f"{layer} does not exist (yet)")
    bad = []
    for path in _files(layer):
        rel = str(path.relative_to(ROOT))
        for name in project_imports(imports_of(path)):
            if (rel, name) in KNOWN_UPWARD or (name == "mlts" and layer.startswith("mlts")):
                continue  # (the package root holds only the version)
            if not any(name == a or name.startswith(a + ".") for a in ALLOWED[layer]):
                bad.append(f"{rel} imports {name}")
    assert not bad, "\n".join(bad)


def test_every_package_is_a_layer():
    found = {
        f"mlts/{p.name}"
        for p in (ROOT / "mlts").iterdir()
        if p.suffix == ".py" or (p / "__init__.py").exists()
    }
    assert found <= set(ALLOWED), f"place {sorted(found - set(ALLOWED))} in ALLOWED of tests/test_codebase.py"


def test_the_error_module_imports_nothing_of_the_project():
    assert not project_imports(imports_of(ROOT / "mlts" / "errors.py"))


def test_driver_uses_only_numpy_and_the_standard_library():
    stdlib = set(sys.stdlib_module_names)
    bad = []
    for path in sorted((ROOT / "driver").rglob("*.py")):
        for name in imports_of(path):
            top = name.split(".")[0]
            if top in stdlib or top in THIRD_PARTY_FOR_DRIVER or top in ("driver", "mlts"):
                continue
            bad.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not bad, "\n".join(bad)


def test_nothing_uses_pickle():
    offenders = [
        str(p.relative_to(ROOT))
        for folder in ("mlts", "driver")
        for p in (ROOT / folder).rglob("*.py")
        if {"pickle", "cPickle", "dill", "cloudpickle"} & {n.split(".")[0] for n in imports_of(p)}
    ]
    assert not offenders


# Test modules never import other test modules (that would collect their tests twice); shared
# helpers belong in a kit module (tests/cli/clikit.py, tests/driver/opkit.py, ...).
def test_tests_do_not_import_other_test_modules():
    importing = set()
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if any(n.split(".")[-1].startswith("test_") for n in imports_of(path) if n.startswith("tests.")):
            importing.add(str(path.relative_to(ROOT)))
    assert not importing, f"move the shared helpers into a kit module instead: {sorted(importing)}"


def _tool(name: str) -> str:
    exe = Path(sys.executable).with_name(name)
    found = str(exe) if exe.exists() else shutil.which(name)
    if not found:
        pytest.skip(f"{name} is not installed (it comes with the test extra)")
    return found


def test_ruff_is_clean():
    r = subprocess.run(
        [_tool("ruff"), "check", "--output-format", "concise", "."], cwd=ROOT, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_ruff_format_is_clean():
    """Code, tests, benchmarks and the Python examples in the docs are formatted as `ruff format` would."""
    r = subprocess.run([_tool("ruff"), "format", "--check", "."], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_is_clean_on_every_layer():
    r = subprocess.run([_tool("mypy"), "mlts", "driver"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
