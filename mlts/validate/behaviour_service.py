"""Behaviour cases about the service under hostile clients: one client must never take it down, stall
it or starve the others (mlts.validate.service_attacks does the attacking).

- unsealed burst rings: rings that can shrink are refused (INVALID_ARGUMENT), and shrinking them
  afterwards leaves the service serving;
- a client that never reads its replies: another client's executions keep their pace (no call of
  it waits anywhere near a send timeout, and their median stays within twice the one without);
- a quota hog: a process holding every connection it can get, or a client allocating every driver
  buffer it can, still leaves room for another client; with --full also a 4 KiB request whose WHILE
  loop doubles a tensor, which must end in RESOURCE_EXHAUSTED (or its loop timeout) while others run.

They need a service with several clients: a shared service the target starts (or the user's,
`--driver-socket`).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import threading
import time

from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError
from mlts.hal.types import BufferDesc, BufferRole
from mlts.runtime.execution import execute
from mlts.validate.behaviour_isolation import simple_case
from mlts.validate.control_flow_mutations import doubling_request, doubling_while_model
from mlts.validate.core import CaseBody, SuiteOptions, Target
from mlts.validate.service_attacks import Flood, add_model, hog_buffers, timed_runs, unsealed_rings

#: How long the non-reading client floods, and the longest wait of another client's call it allows.
FLOOD_S = 2.0
STALL_S = 1.0
#: Connections the hog process tries to hold.
HOG_CONNECTIONS = 256
#: Driver buffers of 1 MiB the hog tries to hold.
HOG_BUFFERS = 2048
BOMB_LOOP_TIMEOUT_NS = 15_000_000_000


def _victim_runs(target: Target, what: str) -> str | None:
    """None when a new client of the service still prepares and runs a model; else why not."""
    try:
        other = target.new_client()
    except HalError as e:
        return f"{what}: a new client cannot connect ({e.status.name}: {e.message})"
    try:
        model, request = simple_case()
        prepared = other.prepareModel(model)
        execute(prepared, request)
        prepared.close()
    except HalError as e:
        return f"{what}: another client's execution failed ({e.status.name}: {e.message})"
    finally:
        other.close()
    return None


def case_unsealed_rings(target: Target) -> str | None:
    attacker = target.new_client()
    try:
        model, _ = simple_case()
        prepared = attacker.prepareModel(model)
        problem = unsealed_rings(attacker, prepared.handle)
    finally:
        attacker.close()
    after = _victim_runs(target, "after a client shrank its burst rings")
    return "; ".join(p for p in (problem, after) if p) or None


def case_non_reading_client(target: Target) -> str | None:
    victim = target.new_client()
    try:
        model, request = simple_case()
        prepared = victim.prepareModel(model)
        timed_runs(prepared, request, 0.3)  # warm up
        before = timed_runs(prepared, request, 0.6)
        with Flood(target.shared_service().path, model, request) as flood:
            time.sleep(0.3)  # the flood has filled its socket by now
            during = timed_runs(prepared, request, FLOOD_S)
        after = timed_runs(prepared, request, 0.6)
        prepared.close()
    finally:
        victim.close()
    if flood.errors:
        return f"the flooding client could not set up: {flood.errors[0]}"
    if not during:
        return "no execution of another client finished while a client did not read its replies"
    worst = max(during)
    if worst >= STALL_S:
        return (
            f"an execution of another client took {worst:.2f} s while a client did not read its replies "
            "(a worker waited for that client?)"
        )
    quiet, flooded = statistics.median(before + after), statistics.median(during)
    if flooded > 2 * quiet + 0.005:
        return (
            f"another client's median execution took {flooded * 1e3:.2f} ms while a client did not read its "
            f"replies, {quiet * 1e3:.2f} ms without (more than twice)"
        )
    return None


def _hold_connections(target: Target) -> tuple[subprocess.Popen[str], int]:
    path = target.shared_service().path
    child = subprocess.Popen(
        [sys.executable, "-m", "mlts.validate.service_attacks", "connections", path, str(HOG_CONNECTIONS)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    line = child.stdout.readline() if child.stdout is not None else ""
    try:
        return child, int(line)
    except ValueError:
        return child, 0


def case_quota_hog(target: Target, options: SuiteOptions) -> str | tuple[str, str] | None:
    problems: list[str] = []
    child, held = _hold_connections(target)
    try:
        problem = _victim_runs(target, f"while another process held {held} connections")
        if problem:
            problems.append(problem)
    finally:
        if child.stdin is not None:
            child.stdin.close()
        child.wait(30)
    problems += _buffer_hog(target)
    if not options.quick:
        problems += _memory_bomb(target)
    return "; ".join(problems) or None


def _buffer_hog(target: Target) -> list[str]:
    hog = target.new_client()
    try:
        model = add_model((512, 512))  # 1 MiB per buffer
        prepared = hog.prepareModel(model)
        held, refusal = hog_buffers(hog, prepared, HOG_BUFFERS)
        try:
            if not held:
                return []  # no memory domains: nothing to hog
            other = target.new_client()
            try:
                mine = other.prepareModel(model)
                try:
                    other.allocate(BufferDesc(), [mine], [BufferRole(0, 0)], []).close()
                except HalError as e:
                    return [
                        f"a client holding {len(held)} driver buffers of 1 MiB left none for another client "
                        f"({e.status.name}: {e.message})"
                    ]
            finally:
                other.close()
        finally:
            for buffer in held:
                buffer.close()
    finally:
        hog.close()
    return []


def _memory_bomb(target: Target) -> list[str]:
    hog = target.new_client()
    outcome: list[object] = []
    try:
        prepared = hog.prepareModel(doubling_while_model())
        request = doubling_request(1024, 40, output_elements=16)  # 4 KiB that would double 40 times
        done = threading.Event()

        def bomb() -> None:
            start = time.monotonic()
            try:
                execute(prepared, request, loop_timeout=BOMB_LOOP_TIMEOUT_NS)
                outcome.append("succeeded")
            except HalError as e:
                outcome.append(e)
            outcome.append(time.monotonic() - start)
            done.set()

        thread = threading.Thread(target=bomb, daemon=True)
        thread.start()
        problem = _victim_runs(target, "while a client's WHILE loop doubled a tensor")
        thread.join(BOMB_LOOP_TIMEOUT_NS / 1e9 + 30)
    finally:
        hog.close()
    problems = [problem] if problem else []
    if not outcome:
        return problems + ["a WHILE loop doubling a tensor did not end within its loop timeout"]
    result = outcome[0]
    if result == "succeeded":
        problems.append("a WHILE loop doubling a 4 KiB tensor 40 times succeeded (4 PiB?)")
    elif isinstance(result, HalError) and result.status not in (
        ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT,
        ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT,
        ErrorStatus.MISSED_DEADLINE_TRANSIENT,
        ErrorStatus.MISSED_DEADLINE_PERSISTENT,
    ):
        problems.append(
            f"a WHILE loop doubling a tensor ended with {result.status.name} ({result.message}), not "
            "RESOURCE_EXHAUSTED_* (or its loop timeout)"
        )
    return problems


def cases(target: Target, options: SuiteOptions) -> list[tuple[str, CaseBody]]:
    return [
        ("service: unsealed burst rings refused", lambda: case_unsealed_rings(target)),
        ("service: a client that does not read its replies", lambda: case_non_reading_client(target)),
        ("service: a quota hog leaves room for others", lambda: case_quota_hog(target, options)),
    ]
