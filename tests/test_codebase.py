"""The code base keeps its rules: layering, lint, and types on the HAL and the driver."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Which top-level packages each layer may import (ARCHITECTURE: lower layers never import higher ones).
ALLOWED = {
    "mlts/hal": {"mlts.hal"},
    "driver": {"mlts.hal", "driver"},
    "mlts/runtime": {"mlts.hal", "mlts.runtime"},
    "mlts/convert": {"mlts.hal", "mlts.convert"},
    "mlts/models": {"mlts.hal", "mlts.models", "mlts.datasets"},
    "mlts/datasets": {"mlts.hal", "mlts.datasets"},
    # Results records: below both the producers (bench, crash) and the readers (report).
    "mlts/records": {"mlts.hal", "mlts.records"},
    "mlts/calibrate": {
        "mlts.hal",
        "mlts.runtime",
        "mlts.convert",
        "mlts.models",
        "mlts.datasets",
        "mlts.bench",
        "mlts.calibrate",
    },
}
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


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layers_import_only_lower_layers(layer):
    bad = []
    for path in sorted((ROOT / layer).rglob("*.py")):
        for name in project_imports(imports_of(path)):
            if name == "mlts" and layer.startswith("mlts"):
                continue  # the package root holds only the version
            if not any(name == a or name.startswith(a + ".") for a in ALLOWED[layer]):
                bad.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not bad, "\n".join(bad)


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


def test_mypy_is_clean_on_hal_and_driver():
    r = subprocess.run([_tool("mypy"), "mlts/hal", "driver"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
