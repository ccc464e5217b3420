"""LSTM state kept in driver buffers: outputs and final state bit for bit those of client-carried state."""

from __future__ import annotations

import numpy as np
import pytest

from mlts.bench import recurrent
from mlts.bench.state_rows import bit_equal, run_in_driver
from mlts.convert import convert
from mlts.datasets import speech
from mlts.models import zoo
from mlts.runtime.discovery import discover, open_device
from mlts.runtime.driver_state import DriverState
from mlts.runtime.session import Session


@pytest.fixture(scope="module")
def device(tmp_path_factory):
    dev = open_device(discover()["sample-all"], log_path=str(tmp_path_factory.mktemp("sd") / "drv.log"))
    yield dev
    dev.close()


@pytest.mark.parametrize("name", ["asr_float", "tts_float"])
def test_state_in_driver_is_bit_equal_to_client_state(device, name):
    entry = zoo.get(name)
    conv = convert(zoo.load(name))
    sig = recurrent.StepSignature.of(entry, conv)
    n_inputs = len(conv.inputs)
    seqs = [s[:4] for s in speech.sequences(name, 2)]
    with Session(device, conv.model) as session:
        client = recurrent.run_sequences(session.run, sig, n_inputs, seqs, 0.0)
        driver = run_in_driver(session, sig, n_inputs, seqs, 0.0)
        # Final state of the last sequence: read back from the driver, equal to the client's.
        state = DriverState(session, sig.states)
        try:
            state.reset()
            feed = [np.empty(0, np.float32)] * n_inputs
            outs = None
            for x in seqs[-1]:
                feed[sig.feature_input] = x[None]
                outs, _ = state.step(feed)
            in_driver = state.state()
        finally:
            state.close()
    assert bit_equal(driver, client, sig.main_output)
    assert outs is not None
    carried = [np.zeros(shape, np.float32) for _, _, shape in sig.states]
    with Session(device, conv.model) as session:
        for x in seqs[-1]:
            feed = [np.empty(0, np.float32)] * n_inputs
            feed[sig.feature_input] = x[None]
            for (i, _, _), v in zip(sig.states, carried, strict=True):
                feed[i] = v
            client_outs, _ = session.run(feed)
            carried = [client_outs[o] for _, o, _ in sig.states]
    for a, b in zip(in_driver, carried, strict=True):
        assert a.tobytes() == b.tobytes()
    # The state outputs stayed in the driver: not read back, so not scored.
    assert all(outs[o] is None for _, o, _ in sig.states)
    assert outs[sig.main_output] is not None
