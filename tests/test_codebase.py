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


# ------------------------------------------------------------ private names stay private

# `obj._attr` of another module that is a documented public API despite its name.
PUBLIC_UNDERSCORE_ATTRIBUTES = {
    # The standard library's way to end a forked child at once, without cleanup or atexit handlers.
    ("os", "_exit"),
}


def _package_of(rel: str) -> str:
    return ".".join(Path(rel).parts[:-1])


def _is_module(package: str, name: str) -> bool:
    base = ROOT.joinpath(*package.split("."))
    return (base / f"{name}.py").is_file() or (base / name / "__init__.py").is_file()


def _may_use_private_of(importer: str, package: str) -> bool:
    """A package's private modules serve the package itself and the package that holds it (the sample
    driver's engine uses the helper modules of its kernels' package, driver.ops), never another one."""
    return importer == package or importer.startswith(package + ".") or importer == package.rpartition(".")[0]


def _private_members(tree: ast.AST) -> set[str]:
    """The private attribute names a module defines itself: set on self or cls, declared in a class body
    (functions, annotations, assignments, __slots__), or assigned on any object."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id in ("self", "cls"):
                names.add(node.attr)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(item.target.id)
                elif isinstance(item, ast.Assign):
                    for target in item.targets:
                        if not isinstance(target, ast.Name):
                            continue
                        names.add(target.id)
                        if target.id == "__slots__" and isinstance(item.value, (ast.Tuple, ast.List)):
                            names.update(e.value for e in item.value.elts if isinstance(e, ast.Constant))
    return {n for n in names if n.startswith("_")}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_module_of(dotted: str) -> str | None:
    """The package holding the first private module of a dotted name (`a.b._c.d` -> `a.b`), else None."""
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if _private(part):
            return ".".join(parts[:i])
    return None


def private_reach(rel: str, source: str) -> list[str]:
    """Where the module at `rel` (a path under the project root) with `source` imports or touches
    another module's private names."""
    tree = ast.parse(source)
    importer = _package_of(rel)
    own = _private_members(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            holder = _private_module_of(node.module)
            if holder is not None and not _may_use_private_of(importer, holder):
                found.append(f"{rel}:{node.lineno}: imports from {node.module}, private to {holder}")
            for alias in node.names:
                if not _private(alias.name):
                    continue
                if _is_module(node.module, alias.name) and _may_use_private_of(importer, node.module):
                    continue
                found.append(f"{rel}:{node.lineno}: imports {alias.name} from {node.module}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                holder = _private_module_of(alias.name)
                if holder is not None and not _may_use_private_of(importer, holder):
                    found.append(f"{rel}:{node.lineno}: imports {alias.name}, private to {holder}")
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue
            if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
                continue
            if node.attr in own:
                continue  # the module's own private member, on an object of its own
            if isinstance(owner, ast.Name) and (owner.id, node.attr) in PUBLIC_UNDERSCORE_ATTRIBUTES:
                continue
            found.append(f"{rel}:{node.lineno}: touches {ast.unparse(owner)}.{node.attr}")
    return found


def test_no_module_reaches_into_another_modules_private_names():
    """Where two modules need the same helper, it is public in one of them."""
    bad = [
        hit
        for folder in ("mlts", "driver")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for hit in private_reach(str(path.relative_to(ROOT)), path.read_text(encoding="utf-8"))
    ]
    assert not bad, "\n".join(bad)


def test_the_private_reach_check_finds_what_it_should():
    source = (
        "from mlts.report._html_sections import charts_section\n"  # a private module of another package
        "from mlts.hal.codec import _obj\n"  # a private name
        "from mlts.runtime import _not_a_module\n"
        "from mlts.hal import _opspecs\n"  # a private module of another package
        "import mlts.hal._opspecs\n"
        "from driver.ops import _bind\n"  # driver.ops's helper module: not the runtime's
        "import os\n"
        "class Mine:\n"
        "    def __init__(self):\n"
        "        self._own = 1\n"
        "    def _helper(self):\n"
        "        return super()._helper()\n"
        "def f(m: Mine, other):\n"
        "    os._exit(0)\n"
        "    return m._own, m._helper(), other._theirs\n"
    )
    found = private_reach("mlts/runtime/example.py", source)
    assert [hit.split(": ", 1)[1] for hit in found] == [
        "imports from mlts.report._html_sections, private to mlts.report",
        "imports _obj from mlts.hal.codec",
        "imports _not_a_module from mlts.runtime",
        "imports _opspecs from mlts.hal",
        "imports mlts.hal._opspecs, private to mlts.hal",
        "imports _bind from driver.ops",
        "touches other._theirs",
    ]
    # The sample driver's engine may use its kernels' package's helper modules; those modules each other's.
    assert private_reach("driver/bound_steps.py", "from driver.ops import _bind\n") == []
    assert private_reach("driver/ops/add.py", "from driver.ops._fast import gemm\n") == []


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
