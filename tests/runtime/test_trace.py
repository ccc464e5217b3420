"""`--trace FILE`: phases of preparations and executions as Chrome-trace / Perfetto JSON."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from click.testing import CliRunner

from mlts.cli import main
from mlts.errors import InputError
from mlts.hal import trace
from mlts.runtime.discovery import discover, open_device
from mlts.runtime.session import Session
from mlts.runtime.trace import TraceWriter, merge
from tests.cli.clikit import FAST, tiny_conv_model
from tests.runtime.models import add_model

F = np.float32


def _x(name, cat, ts, dur, pid=1, tid=1, **args):
    return {"name": name, "cat": cat, "ph": "X", "ts": ts, "dur": dur, "pid": pid, "tid": tid, "args": args}


def test_an_execution_is_split_into_ipc_queue_execute_ipc():
    call = _x("execute/sync", "execution", 100.0, 50.0)
    service = [
        _x("queue", "service", 110.0, 5.0, pid=2, tid=7, client_pid=1),
        _x("execute", "service", 115.0, 30.0, pid=2, tid=7, client_pid=1),
        _x("execute", "service", 400.0, 30.0, pid=2, tid=7, client_pid=1),  # another call's
        _x("execute", "service", 112.0, 3.0, pid=2, tid=7, client_pid=9),  # another client's
    ]
    events = merge([call, *service], tool_pid=1)
    phases = [(e["name"], e["ts"], e["dur"]) for e in events if e["cat"] == "phase"]
    assert phases == [
        ("ipc", 100.0, 10.0),
        ("queue", 110.0, 5.0),
        ("execute", 115.0, 30.0),
        ("ipc", 145.0, 5.0),
    ]
    assert all(e["pid"] == 1 and e["tid"] == 1 for e in events if e["cat"] == "phase")
    # Without the service's side (a service that does not trace), the call stands alone.
    assert [e for e in merge([call], tool_pid=1) if e["cat"] == "phase"] == []


def test_a_traced_run_through_a_private_service(tmp_path):
    path = tmp_path / "run.json"
    with TraceWriter(path):
        device = open_device(discover()["sample-all"], log_path=str(tmp_path / "driver.log"))
        try:
            for mode in ("sync", "burst"):
                with Session(device, add_model(), mode=mode) as session:
                    for _ in range(3):
                        session.run([np.ones((2, 3), F), np.ones((2, 3), F)])
        finally:
            device.close()
    assert not trace.enabled and trace.ENV not in os.environ
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    for e in complete:  # what a trace viewer needs of a complete event
        assert isinstance(e["name"], str) and e["ts"] >= 0 and e["dur"] >= 0
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
    names = {e["args"]["name"] for e in events if e["ph"] == "M"}
    assert names == {"mlts (tool)", "driver service sample-all"}
    tool = os.getpid()
    calls = [e for e in complete if e["pid"] == tool and e["cat"] == "execution"]
    assert [e["name"] for e in calls] == ["execute/sync"] * 3 + ["execute/burst"] * 3
    assert len([e for e in complete if e["pid"] == tool and e["name"] == "prepare"]) == 2
    service = [e for e in complete if e["pid"] != tool]
    assert len([e for e in service if e["name"] == "prepareModel"]) == 2
    assert len([e for e in service if e["name"] == "execute"]) == 6
    # Every execution has its phases on the tool's track, inside it, in order.
    for call in calls:
        phases = [
            e
            for e in complete
            if e["cat"] == "phase"
            and e["tid"] == call["tid"]
            and call["ts"] <= e["ts"] <= call["ts"] + call["dur"]
        ]
        assert phases[0]["name"] == "ipc" and phases[-1]["name"] == "ipc"
        assert "execute" in [p["name"] for p in phases]
        if call["name"] == "execute/sync":
            assert [p["name"] for p in phases] == ["ipc", "queue", "execute", "ipc"]
        end = call["ts"] + call["dur"]
        assert all(call["ts"] <= p["ts"] and p["ts"] + p["dur"] <= end + 1e-3 for p in phases)


def test_trace_file_checks(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        TraceWriter(tmp_path / "no" / "such" / "t.json")
    (tmp_path / "d").mkdir()
    with pytest.raises(InputError, match="not a regular file"):
        TraceWriter(tmp_path / "d")


def test_benchmark_trace_option(tmp_path):
    model = tmp_path / "tiny.onnx"
    tiny_conv_model(model)
    out, trace_file = tmp_path / "o", tmp_path / "t.json"
    args = ["benchmark", "--model", str(model), "--drivers", "^sample-all$", "--images", "1"]
    args += ["--out", str(out), *FAST, "--no-compilation", "--trace", str(trace_file)]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    events = json.loads(trace_file.read_text())["traceEvents"]
    assert any(e.get("name") == "execute/sync" for e in events)
    assert any(e.get("name") == "queue" for e in events)
    bad = CliRunner().invoke(main, [*args[:-1], str(tmp_path / "missing" / "t.json"), "--force"])
    assert bad.exit_code == 2 and "--trace" in bad.output and "Traceback" not in bad.output
