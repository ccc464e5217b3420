"""The leftover-process check sees this test run's processes, orphans included, and nobody else's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests._procs import RUN_MARKER, our_processes

SLEEPER = "import time; time.sleep(60)"


def _orphan(env: dict[str, str]) -> int:
    """Start a sleeping Python whose command line names mlts.ipc.service, re-parented away from us.

    The shell that starts it exits at once, so the sleeper is nobody's child here: exactly
    the state a leaked driver service is in after its client died.
    """
    out = subprocess.run(
        ["sh", "-c", f'"{sys.executable}" -c "{SLEEPER}" mlts.ipc.service >/dev/null 2>&1 & echo $!'],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    )
    return int(out.stdout.strip())


def _listed(pid: int) -> bool:
    return any(line.split(":", 1)[0] == str(pid) for line in our_processes("mlts.ipc.service"))


def test_only_this_runs_processes_are_reported():
    foreign_env = {k: v for k, v in os.environ.items() if k != RUN_MARKER}
    other_run_env = dict(os.environ, **{RUN_MARKER: "another-test-run"})
    pids = {
        "ours": _orphan(dict(os.environ)),
        "foreign": _orphan(foreign_env),
        "other run": _orphan(other_run_env),
    }
    try:
        deadline = time.monotonic() + 60  # a bound for a busy machine: the loop ends when it is listed
        while not _listed(pids["ours"]) and time.monotonic() < deadline:
            time.sleep(0.05)  # until the orphan has exec'd Python
        assert _listed(pids["ours"]), "an orphaned process of this run must be found"
        assert not _listed(pids["foreign"]), "a process without this run's marker is someone else's"
        assert not _listed(pids["other run"]), "another test run's process is not ours"
        # A child of this process counts even when it was started with a clean environment.
        child = subprocess.Popen([sys.executable, "-c", SLEEPER, "mlts.ipc.service"], env=foreign_env)
        try:
            deadline = time.monotonic() + 60
            while not _listed(child.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _listed(child.pid)
        finally:
            child.kill()
            child.wait(5)
        assert not _listed(child.pid)
    finally:
        for pid in pids.values():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
