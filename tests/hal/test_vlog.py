"""MLTS_VLOG: tags as NNAPI's debug.nn.vlog, each turning on one part's verbose log."""

from __future__ import annotations

import io
import logging

import numpy as np
import pytest

from driver.variants import SampleAll
from mlts.hal import vlog
from mlts.runtime.discovery import discover, open_device
from mlts.runtime.session import Session
from tests.runtime.models import add_model

F = np.float32


@pytest.fixture
def tags():
    """Turn tags on for one test; everything back as the environment says afterwards."""
    yield vlog.enable
    vlog.enable()


@pytest.mark.parametrize(
    "text, on, unknown",
    [
        ("", set(), ()),
        ("0", set(), ()),
        ("1", set(vlog.TAGS), ()),
        ("all", set(vlog.TAGS), ()),
        ("execution,driver", {"execution", "driver"}, ()),
        ("model compilation", {"model", "compilation"}, ()),
        (" cpuexe:manager ,", {"cpuexe", "manager"}, ()),
        ("execution,bogus,ALL", {"execution"}, ("bogus", "ALL")),  # tags are lower case, as NNAPI's
        ("bogus all", set(vlog.TAGS), ("bogus",)),
    ],
)
def test_parse(text, on, unknown):
    assert vlog.parse(text) == (frozenset(on), unknown)


def test_enable_sets_each_tags_logger(tags, caplog):
    with caplog.at_level(logging.WARNING, logger=vlog.PREFIX):
        assert tags("compilation, nope") == {"compilation"}
    assert "unknown tag(s) nope ignored" in caplog.text
    assert vlog.on("compilation") and not vlog.on("execution")
    assert vlog.logger("compilation").isEnabledFor(logging.DEBUG)
    assert not vlog.logger("execution").isEnabledFor(logging.DEBUG)


def test_tags_log_their_part_only(tags, caplog):
    tags("execution,cpuexe")
    with caplog.at_level(logging.DEBUG, logger=vlog.PREFIX):
        with Session(SampleAll(), add_model()) as session:
            session.run([np.ones((2, 3), F), np.ones((2, 3), F)])
    names = {r.name for r in caplog.records}
    assert names == {"mlts.vlog.execution", "mlts.vlog.cpuexe"}
    text = caplog.text
    assert "sample-all sync:" in text and "output shapes [[2, 3]]" in text
    assert "operation 0 ADD:" in text
    caplog.clear()
    tags("0")
    with caplog.at_level(logging.DEBUG, logger=vlog.PREFIX):
        with Session(SampleAll(), add_model()) as session:
            session.run([np.ones((2, 3), F), np.ones((2, 3), F)])
    assert caplog.records == []


def test_cpuexe_times_are_not_returned_unless_asked(tags):
    tags("cpuexe")
    with Session(SampleAll(), add_model()) as session:
        _, result = session.run([np.ones((2, 3), F), np.ones((2, 3), F)])
    assert result.operation_times is None


def test_stderr_handler_formats_tag_and_pid(tags):
    tags("model")
    stream = io.StringIO()
    root = logging.getLogger(vlog.PREFIX)
    saved = list(root.handlers), root.propagate
    for handler in saved[0]:
        root.removeHandler(handler)
    try:
        handler = vlog.configure_stderr(stream)
        assert handler is not None and vlog.configure_stderr(stream) is handler  # once per process
        SampleAll().prepareModel(add_model())
        assert "VLOG model[" in stream.getvalue() and "valid model: 1 operations" in stream.getvalue()
    finally:
        root.removeHandler(handler)
        for h in saved[0]:
            root.addHandler(h)
        root.propagate = saved[1]


def test_a_driver_service_inherits_the_tags(tmp_path, monkeypatch):
    monkeypatch.setenv(vlog.ENV, "driver")
    log = tmp_path / "driver.log"
    device = open_device(discover()["sample-all"], log_path=str(log))
    try:
        with Session(device, add_model()) as session:
            session.run([np.ones((2, 3), F), np.ones((2, 3), F)])
    finally:
        device.close()
    text = log.read_text()
    assert "sample-all prepareModel: 1 operations" in text
    assert "sample-all executeSynchronously:" in text
