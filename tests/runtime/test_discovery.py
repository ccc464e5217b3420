"""Driver discovery: entry points and their fallback, plugin files, duplicates, selection, loading."""

from __future__ import annotations

import textwrap

import pytest

from mlts.hal.loader import FactoryError, load_factory
from mlts.runtime import discovery
from mlts.runtime.discovery import BUILTIN_DRIVERS, DiscoveryError, DriverSpec, discover, select
from tests.runtime.conftest import FAKE_FILE, fake_spec
from tests.runtime.fake_drivers import AddDevice


def test_entry_points_of_the_installed_project():
    specs = discover()
    assert specs["sample-all"].factory == "driver.variants:SampleAll"
    assert specs["sample-all"].source.startswith("entry point ")


def test_fallback_table_when_not_installed(monkeypatch):
    monkeypatch.setattr(discovery, "_entry_points", lambda: [])
    assert discover() == {name: DriverSpec(name, spec, "builtin") for name, spec in BUILTIN_DRIVERS.items()}
    assert discover()["sample-all"].factory == "driver.variants:SampleAll"


def test_default_selection_leaves_out_fault_injection_drivers(monkeypatch):
    monkeypatch.setattr(discovery, "_entry_points", lambda: [])
    assert [s.name for s in select(discover(), None)] == ["sample-all"]
    assert [s.name for s in select(discover(), "sample-(all|faulty)")] == ["sample-all", "sample-faulty"]


def test_duplicate_entry_points(monkeypatch):
    monkeypatch.setattr(discovery, "_entry_points", lambda: [("x", "a:B", "dist1"), ("x", "c:D", "dist2")])
    with pytest.raises(
        DiscoveryError, match="'x' is defined twice: by entry point dist1 .* and by entry point dist2"
    ):
        discover()


def test_plugin_file_classes_are_named_by_their_name_attribute(monkeypatch):
    monkeypatch.setattr(discovery, "_entry_points", lambda: [])
    specs = discover([FAKE_FILE])
    assert {
        "fake-add",
        "fake-kill",
        "fake-hang",
        "fake-broken",
        "fake-buggy",
        "fake-nan",
        "fake-slow",
        "fake-client-key",
        *BUILTIN_DRIVERS,
    } == set(specs)
    assert specs["fake-add"].factory.endswith("fake_drivers.py:AddDevice")
    assert specs["fake-add"].source == f"plugin {FAKE_FILE}"


def test_plugin_clashing_with_a_builtin(tmp_path):
    plugin = tmp_path / "clash.py"
    plugin.write_text(
        textwrap.dedent(
            """
            from tests.runtime.fake_drivers import AddDevice

            class Mine(AddDevice):
                name = "sample-all"
            """
        )
    )
    with pytest.raises(
        DiscoveryError, match=r"'sample-all' is defined twice: by entry point .* and by plugin .*clash.py"
    ):
        discover([plugin])


def test_plugin_errors(tmp_path):
    twice = tmp_path / "twice.py"
    twice.write_text(
        "from tests.runtime.fake_drivers import AddDevice\nclass A(AddDevice): name = 'z'\nclass B(AddDevice): name = 'z'\n"
    )
    with pytest.raises(DiscoveryError, match="defines driver name 'z' twice"):
        discover([twice])
    empty = tmp_path / "empty.py"
    empty.write_text("X = 1\n")
    with pytest.raises(DiscoveryError, match="defines no Device subclass"):
        discover([empty])
    unnamed = tmp_path / "unnamed.py"
    unnamed.write_text(
        "from tests.runtime.fake_drivers import AddDevice\nclass A(AddDevice): name = 'unnamed'\n"
    )
    with pytest.raises(DiscoveryError, match="needs a 'name' class attribute"):
        discover([unnamed])
    with pytest.raises(FactoryError, match="does not exist"):
        discover([tmp_path / "missing.py"])


def test_a_plugin_class_missing_abstract_methods_is_named_with_them(tmp_path):
    half = tmp_path / "half.py"
    half.write_text(
        textwrap.dedent(
            """
            from mlts.hal.interface import Device

            class Npu(Device):
                name = "npu"

                def getCapabilities(self):
                    raise NotImplementedError
            """
        )
    )
    with pytest.raises(DiscoveryError) as e:
        discover([half])
    assert str(e.value) == (
        f"driver plugin {str(half)!r}: class Npu does not define the methods getSupportedOperations and "
        "prepareModel, which every Device must define (see docs/writing-a-driver.md)"
    )
    with pytest.raises(
        FactoryError, match="class Npu does not define the methods getSupportedOperations and"
    ):
        load_factory(str(half))
    prepared = tmp_path / "prepared.py"
    prepared.write_text(
        textwrap.dedent(
            """
            from mlts.hal.interface import PreparedModel
            from tests.runtime.fake_drivers import AddDevice

            class Npu(AddDevice):
                name = "npu"

            class NpuPrepared(PreparedModel):
                pass
            """
        )
    )
    with pytest.raises(
        DiscoveryError, match="class NpuPrepared does not define the method executeSynchronously, "
    ):
        discover([prepared])
    # An abstract base that the file completes is fine.
    based = tmp_path / "based.py"
    based.write_text(
        textwrap.dedent(
            """
            import abc
            from tests.runtime.fake_drivers import AddDevice

            class Base(AddDevice):
                @abc.abstractmethod
                def tune(self): ...

            class Npu(Base):
                name = "npu"

                def tune(self):
                    return None
            """
        )
    )
    assert discover([based])["npu"].factory.endswith("based.py:Npu")


def test_select():
    specs = {n: DriverSpec(n, "m:a", "builtin") for n in ("sample-all", "sample-quant", "npu")}
    assert [s.name for s in select(specs, "^sample-")] == ["sample-all", "sample-quant"]
    assert [s.name for s in select(specs, "npu|all")] == ["npu", "sample-all"]
    with pytest.raises(DiscoveryError, match=r"bad driver regex '\(': missing \)"):
        select(specs, "(")
    with pytest.raises(
        DiscoveryError, match="no driver matches 'gpu'; available: npu, sample-all, sample-quant"
    ):
        select(specs, "gpu")


def test_load_factory_specs():
    assert load_factory("tests.runtime.fake_drivers:AddDevice") is AddDevice
    assert load_factory(fake_spec("AddDevice")).__name__ == "AddDevice"
    with pytest.raises(FactoryError, match="defines 8 Device classes"):
        load_factory(FAKE_FILE)
    with pytest.raises(FactoryError, match="malformed"):
        load_factory("no_colon_here")
    with pytest.raises(FactoryError, match="cannot import module 'no_such_mod'"):
        load_factory("no_such_mod:X")
    with pytest.raises(FactoryError, match="not a class or function"):
        load_factory("mlts.ipc.wire:MAGIC")
