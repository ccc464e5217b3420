"""Rows of LSTM runs with the recurrent state kept in driver buffers (`mlts benchmark --state-in-driver`).

For each driver backend that ran the sequences with the state on the client,
the same sequences run again with the state in driver buffers (memory
domains, mlts.runtime.driver_state): only the step input and the step output
cross shared memory. The row says how much per-step latency that saved
against the client-state row and whether the outputs are bit for bit the same.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from mlts.bench import recurrent
from mlts.bench.backends import REFERENCE_KEY, Backend, driver_timing, error_row, measured_row
from mlts.hal.errors import HalError
from mlts.records import BenchmarkRow


def run_in_driver(session, sig: recurrent.StepSignature, n_inputs: int, seqs, warmup_s: float):
    """The sequences step by step with the state in driver buffers of `session`'s device."""
    from mlts.runtime.driver_state import DriverState

    state = DriverState(session, sig.states)
    try:
        return recurrent.run_sequences(state.step, sig, n_inputs, seqs, warmup_s, reset=state.reset)
    finally:
        state.close()


def bit_equal(a: recurrent.SequenceRun, b: recurrent.SequenceRun, index: int) -> bool:
    """Output `index` of every sequence identical bit for bit in both runs."""
    return len(a.outputs) == len(b.outputs) and all(
        (xa := x[index]) is not None
        and (ya := y[index]) is not None
        and np.array_equal(xa.view(np.uint8), ya.view(np.uint8))
        for x, y in zip(a.outputs, b.outputs, strict=True)
    )


def state_rows(
    scored: Any,
    model: Any,
    collected: Any,
    devices: dict,
    config: Any,
    run_state: Callable[[Any], recurrent.SequenceRun],
    family: str,
) -> list[BenchmarkRow]:
    """One row per driver backend that ran with client state: the same run with the state in the driver."""
    rows = []
    for backend, client_run in collected.runs.items():
        if backend.is_reference or backend.partitioned:
            continue
        label = backend.with_state_in_driver().label
        try:
            driver = Backend(backend, devices)
            watch = driver.memory_watch()
            session = driver.open_session(model, config)
            try:
                run = run_state(session)
            finally:
                session.close()
            memory = watch.result()
        except HalError as e:
            rows.append(error_row(scored.model, family, label, config, f"state in driver: {e}", backend.mode))
            continue
        against = collected.runs[REFERENCE_KEY]
        accuracy = recurrent.score(scored.step_name, scored.sig, run, scored.golden, against)
        fields = recurrent.latency_fields(run, config.warmup_s)
        client_median = recurrent.latency_fields(client_run, config.warmup_s)["latency_ms"].median
        rows.append(
            measured_row(
                scored.model,
                label,
                config,
                execution=backend.mode,
                family=family,
                dataset={"name": f"{scored.step_name}-sequences", "size": len(run.outputs), "labels": None},
                **fields,
                driver_timing_us=driver_timing(run.extras),
                accuracy=accuracy,
                validation_errors=recurrent.validation_errors(accuracy),
                compilation=None,
                memory_mb=memory,
                device_memory={
                    "state_in_driver": True,
                    "client_state_backend": backend.label,
                    "client_state_median_ms": client_median,
                    "step_latency_saved_ms": client_median - fields["latency_ms"].median,
                    "bit_equal_to_client_state": bit_equal(run, client_run, scored.sig.main_output),
                },
            )
        )
    return rows
