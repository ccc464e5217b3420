"""The child process of one stress test: `python -m mlts.crash.child --report-fd N` (test JSON on stdin).

It runs the test's mode and reports one result event: SUCCESS, or FAILURE
with a one-line reason (a HalError from the driver, a wrong result, a dead
driver process). It never reports CRASH or HANG: the supervisor decides those
from the outside.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import traceback

from mlts.crash.channel import Reporter
from mlts.crash.context import StressContext
from mlts.crash.outcome import StressFailure
from mlts.hal import procctl
from mlts.hal.errors import HalError


def run_test(spec: dict, reporter: Reporter) -> None:
    from mlts.crash.modes import CHILD_MODES

    ctx = StressContext(spec, reporter)
    outcome, reason, died, details = "SUCCESS", None, False, {}
    try:
        mode = CHILD_MODES.get(str(spec.get("mode")))
        if mode is None:
            raise StressFailure(f"unknown mode {spec.get('mode')!r}")
        details = mode(ctx) or {}
    except StressFailure as e:
        outcome, reason, died, details = "FAILURE", e.reason, e.driver_died, e.details
    except HalError as e:
        failure = ctx.failure(e, "driver call failed")
        outcome, reason, died = "FAILURE", failure.reason, failure.driver_died
    except Exception as e:  # a bug on the client side: a failure with its cause, and the traceback in the log
        traceback.print_exc()
        outcome, reason = "FAILURE", f"client error: {type(e).__name__}: {' '.join(str(e).split())}"
    reporter.send(
        "result", outcome=outcome, reason=reason, driver_died=died, iterations=ctx.iterations, details=details
    )
    ctx.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mlts.crash.child")
    parser.add_argument("--report-fd", type=int, required=True)
    parser.add_argument("--parent-pid", type=int, default=None, help="die (SIGKILL) when this parent dies")
    args = parser.parse_args(argv)
    if args.parent_pid is not None:
        # Spawned by a supervisor thread that outlives this process, so the parent-death signal is safe.
        procctl.die_with_parent(args.parent_pid, signal.SIGKILL)
    reporter = Reporter(args.report_fd)
    try:
        spec = json.loads(sys.stdin.read())
    except ValueError as e:
        reporter.send("result", outcome="FAILURE", reason=f"bad test description: {e}")
        return 2
    if not isinstance(spec, dict):
        reporter.send("result", outcome="FAILURE", reason="bad test description: not an object")
        return 2
    run_test(spec, reporter)
    return 0


if __name__ == "__main__":
    sys.exit(main())
