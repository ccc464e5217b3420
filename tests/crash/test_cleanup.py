"""A stress supervisor that is killed or asked to stop leaves no test process and no driver behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

# A supervisor running one long random-graph test; it prints the child's events as JSON lines.
SUPERVISOR = textwrap.dedent(
    """
    import json, sys
    from mlts.crash.supervise import TestSpec, run_isolated

    def show(event):
        print(json.dumps(event), flush=True)

    spec = TestSpec("cleanup", "random-inference", "sample-all", [], duration_s=120.0,
                    params={"ops": 3})
    run_isolated(spec, grace_s=5.0, on_event=show)
    """
)


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(entry))
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        pids = [p for p in pids if _alive(p)]
        if not pids:
            return []
        time.sleep(0.1)
    return pids


def _kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _start_supervisor() -> tuple[subprocess.Popen, int, int]:
    """The supervisor, its test child and the child's driver, once the test is running."""
    # SIGHUP at its default action, as under a terminal, even when this test runs under nohup.
    sup = subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),
    )
    driver = None
    assert sup.stdout is not None
    for line in sup.stdout:
        event = json.loads(line)
        if event["event"] == "driver":
            driver = event["pid"]
        if event["event"] == "ready":
            break
    assert driver is not None, "the test never reported its driver"
    (child,) = _children(sup.pid)
    return sup, child, driver


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGHUP])
def test_children_die_with_their_supervisor(sig):
    sup, child, driver = _start_supervisor()
    try:
        assert _alive(child) and _alive(driver)
        sup.send_signal(sig)
        sup.wait(timeout=30)
        left = _wait_gone([child, driver], 20.0)
        assert not left, f"still running after the supervisor died by {sig.name}: {left}"
    finally:
        _kill_all([sup.pid, child, driver])
        sup.wait()
        if sup.stdout is not None:
            sup.stdout.close()


def test_stress_command_handles_sigterm_like_ctrl_c(tmp_path):
    out = tmp_path / "o"
    cmd = [
        sys.executable,
        "-m",
        "mlts",
        "stress",
        "inference-random-stress",
        "--drivers",
        "^sample-all$",
        "--random-ops",
        "3",
        "--duration",
        "120",
        "--out",
        str(out),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    descendants: list[int] = []
    try:
        end = time.monotonic() + 120
        while time.monotonic() < end:  # until the test child has started its driver
            kids = _children(proc.pid)
            descendants = kids + [g for k in kids for g in _children(k)]
            if len(descendants) >= 2:
                break
            time.sleep(0.1)
        assert len(descendants) >= 2, "the test child and its driver never started"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        left = _wait_gone(descendants, 20.0)
        _kill_all(left)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert b"interrupted by SIGTERM" in err and b"Traceback" not in err
    assert (out / "results.json").exists() and (out / "report.html").exists()
    assert not left, f"left running after SIGTERM: {left}"
