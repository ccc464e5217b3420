"""Labs of two endpoints (two shared driver services on Unix sockets started here): validate and
benchmark run on each, rows name their device, the report and `mlts compare` keep the devices apart."""

from __future__ import annotations

import json
import socket

import pytest
from click.testing import CliRunner

from mlts.cli import main
from mlts.records import ResultsDocument
from mlts.runtime.discovery import BUILTIN_DRIVERS
from mlts.runtime.shared import SharedService

FILTER = r"^ADD/TENSOR_FLOAT32: (sync|async)$"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """Two services of sample-all, each on a socket of its own, and the lab file naming them."""
    folder = tmp_path_factory.mktemp("lab")
    services = [
        SharedService.start(
            BUILTIN_DRIVERS["sample-all"], name="sample-all", socket_path=str(folder / f"{n}.sock")
        )
        for n in ("a", "b")
    ]
    path = folder / "lab.json"
    # Relative addresses are taken from the lab file's folder.
    path.write_text(
        json.dumps(
            {
                "endpoints": [
                    {"name": "board-a", "address": "a.sock"},
                    {"name": "board-b", "address": "unix:b.sock", "driver": "sample-all"},
                ]
            }
        )
    )
    try:
        yield path, [s.path for s in services]
    finally:
        for s in services:
            s.stop()


def test_validate_on_each_endpoint_of_a_lab(lab, tmp_path):
    path, sockets = lab
    out = tmp_path / "v"
    result = CliRunner().invoke(
        main, ["validate", "--lab", str(path), "--suite", "operations", "--filter", FILTER, "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    doc = ResultsDocument.from_json(json.loads((out / "results.json").read_text()))
    section = doc.validate
    by_device = {
        d: sorted((c.name, c.outcome) for c in section.cases if c.device == d) for d in ("board-a", "board-b")
    }
    assert (
        by_device["board-a"]
        == by_device["board-b"]
        == [("ADD/TENSOR_FLOAT32: async", "pass"), ("ADD/TENSOR_FLOAT32: sync", "pass")]
    )
    lab_section = doc.section("lab")
    assert [d.name for d in lab_section.devices] == ["board-a", "board-b"]
    for device, sock in zip(lab_section.devices, sockets, strict=True):
        assert (device.driver, device.endpoint.transport, device.endpoint.address) == (
            "sample-all",
            "unix",
            sock,
        )
        assert device.endpoint.host == socket.gethostname()
    page = (out / "report.html").read_text()
    assert "board-a (sample-all)" in page and "board-b (sample-all)" in page
    # Compared with itself: every case of each device matched to the same device's.
    compared = CliRunner().invoke(
        main, ["compare", str(out / "results.json"), str(out / "results.json"), "--json"]
    )
    assert compared.exit_code == 0
    assert (
        json.loads(compared.stdout)["added"] == []
        and json.loads(compared.stdout)["summary"]["new"]["cases"] == 4
    )


def test_benchmark_on_each_endpoint_shows_devices_side_by_side(lab, tmp_path):
    path, sockets = lab
    out = tmp_path / "b"
    args = [
        "benchmark",
        "--lab",
        str(path),
        "--models",
        "^mobilenet_v1_0.25_128$",
        "--no-compilation",
        "--images",
        "3",
    ]
    args += ["--warmup", "0", "--duration", "0", "--iterations", "2", "--out", str(out), "--quiet"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    raw = json.loads((out / "results.json").read_text())
    doc = ResultsDocument.from_json(raw)
    rows = [(r.backend, r.endpoint.name, r.endpoint.transport, r.endpoint.address) for r in doc.rows]
    # Each device with the reference measured beside it and its driver row, in lab order.
    assert rows == [
        ("cpu:onnxruntime", "board-a", "in-process", None),
        ("driver:sample-all", "board-a", "unix", sockets[0]),
        ("cpu:onnxruntime", "board-b", "in-process", None),
        ("driver:sample-all", "board-b", "unix", sockets[1]),
    ]
    assert all(r.ok for r in doc.rows)
    page = (out / "report.html").read_text()
    assert "Devices side by side" in page and "mobilenet_v1_0.25_128 @ board-b" in page
    csv = (out / "results.csv").read_text().splitlines()
    assert csv[0].endswith(",endpoint,host,transport") and csv[2].endswith(
        f",board-a,{socket.gethostname()},unix"
    )
    compared = CliRunner().invoke(
        main, ["compare", str(out / "results.json"), str(out / "results.json"), "--json"]
    )
    backends = [r["backend"] for r in json.loads(compared.stdout)["rows"]]
    assert backends == [
        "cpu:onnxruntime@board-a",
        "driver:sample-all@board-a",
        "cpu:onnxruntime@board-b",
        "driver:sample-all@board-b",
    ]
