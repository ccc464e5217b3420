"""Shared fixtures of the runtime tests: fake driver specs and a running fake ADD driver."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlts.runtime.remote import RemoteDevice

FAKE_FILE = str(Path(__file__).with_name("fake_drivers.py"))


def fake_spec(cls: str) -> str:
    """The factory spec of class `cls` of fake_drivers.py."""
    return f"{FAKE_FILE}:{cls}"


@pytest.fixture
def add_device(tmp_path):
    """A RemoteDevice serving AddDevice; stopped after the test."""
    device = RemoteDevice.start(
        fake_spec("AddDevice"), name="fake-add", log_path=str(tmp_path / "driver.log")
    )
    yield device
    device.close()
