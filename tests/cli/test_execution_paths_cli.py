"""`mlts benchmark --execution` (one row per path) and `mlts driver serve` with `--driver-socket`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from mlts.cli import main
from tests.cli.clikit import tiny_conv_model

FAST = ["--warmup", "0", "--duration", "0", "--iterations", "2", "--no-compilation", "--images", "1"]


@pytest.fixture()
def tiny(tmp_path):
    p = tmp_path / "tiny.onnx"
    tiny_conv_model(p)
    return p


def test_every_execution_path_is_a_row_with_equal_accuracy(tiny, tmp_path):
    r = CliRunner().invoke(
        main,
        [
            "benchmark",
            "--model",
            str(tiny),
            "--drivers",
            "^sample-all$",
            "--execution",
            "all",
            "--out",
            str(tmp_path / "o"),
            "--json",
            *FAST,
        ],
    )
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["results"]
    drivers = {row["backend"]: row for row in rows if row["backend"].startswith("driver:")}
    assert sorted(drivers) == [
        "driver:sample-all",
        "driver:sample-all/async",
        "driver:sample-all/burst",
        "driver:sample-all/fenced",
    ]
    assert [drivers[b]["execution"] for b in sorted(drivers)] == ["sync", "async", "burst", "fenced"]
    errors = {b: row["accuracy"]["vs_reference"]["max_abs_error"] for b, row in drivers.items()}
    assert len(set(errors.values())) == 1, errors  # the same outputs on every path
    assert all(row["status"] == "ok" for row in rows)


def test_bad_execution_path_is_a_usage_error():
    r = CliRunner().invoke(main, ["benchmark", "--execution", "bursty"])
    assert r.exit_code == 2 and "bursty" in r.output
    r = CliRunner().invoke(main, ["benchmark", "--burst-polling-us", "-1"])
    assert r.exit_code == 2 and "--burst-polling-us" in r.output


def test_low_power_burst_row(tiny, tmp_path):
    args = ["benchmark", "--model", str(tiny), "--drivers", "^sample-all$", "--execution", "burst"]
    r = CliRunner().invoke(
        main, [*args, "--burst-polling-us", "0", "--out", str(tmp_path / "o"), "--json", *FAST]
    )
    assert r.exit_code == 0, r.output
    rows = [row for row in json.loads(r.stdout)["results"] if row["backend"].startswith("driver:")]
    assert [(row["backend"], row["execution"], row["status"]) for row in rows] == [
        ("driver:sample-all/burst", "burst", "ok")
    ]


def test_driver_serve_shares_one_service_and_stops_cleanly(tiny, tmp_path):
    path = str(tmp_path / "svc" / "sample-all.sock")
    serve = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from mlts.cli import main; main()",
            "driver",
            "serve",
            "sample-all",
            "--socket",
            path,
        ],
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(path) and time.monotonic() < deadline and serve.poll() is None:
            time.sleep(0.05)
        assert os.path.exists(path)
        assert oct(os.stat(path).st_mode & 0o777) == "0o600"
        r = CliRunner().invoke(main, ["devices", "--driver-socket", path, "--json"])
        assert r.exit_code == 0, r.output
        (info,) = json.loads(r.stdout)
        assert info["name"] == "sample-all" and info["source"] == f"service {path}"
        r = CliRunner().invoke(
            main,
            ["benchmark", "--model", str(tiny), "--driver-socket", path, "--out", str(tmp_path / "o"), *FAST],
        )
        assert r.exit_code == 0, r.output
        r = CliRunner().invoke(main, ["devices", "--driver-socket", str(tmp_path / "nothing.sock")])
        assert r.exit_code == 1 and "no driver service listens on" in r.output
    finally:
        serve.send_signal(signal.SIGTERM)
        _, err = serve.communicate(timeout=15)
    assert serve.returncode == 0, err.decode()
    assert not os.path.exists(path)
    assert b"stopped by SIGTERM" in err


def test_driver_serve_unknown_driver(tmp_path):
    r = CliRunner().invoke(main, ["driver", "serve", "no-such-driver", "--socket", str(tmp_path / "s")])
    assert r.exit_code == 2 and "unknown driver 'no-such-driver'" in r.output
