"""Step-by-step sequence runs: state carried within a sequence, reset between them, warm-up excluded."""

from __future__ import annotations

import numpy as np
import pytest

from mlts.bench import recurrent


class _Accumulator:
    """A fake step model: inputs (x, total) -> outputs (total + x, total + x); records every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[np.ndarray, np.ndarray]] = []

    def __call__(self, feed):
        x, total = feed
        self.calls.append((x.copy(), total.copy()))
        new = total + x
        return [new, new.copy()], ("extra", len(self.calls))


SIG = recurrent.StepSignature(
    feature_input=0, main_output=0, states=((1, 1, (1, 2)),), output_names=("y", "total")
)


def test_state_is_carried_within_a_sequence_and_reset_between_sequences():
    seqs = [np.arange(6, dtype=np.float32).reshape(3, 2), np.ones((2, 2), np.float32)]
    step = _Accumulator()
    run = recurrent.run_sequences(step, SIG, 2, seqs, warmup_s=0)
    np.testing.assert_array_equal(run.outputs[0][0][:, 0], [[0, 1], [2, 4], [6, 9]])  # running sums
    np.testing.assert_array_equal(run.outputs[1][0][:, 0], [[1, 1], [2, 2]])  # starts again from zero
    assert [c[1].tolist() for c in step.calls] == [[[0, 0]], [[0, 1]], [[2, 4]], [[0, 0]], [[1, 1]]]
    assert len(run.samples) == 5 and all(s >= 0 for s in run.samples)
    assert len(run.sequence_seconds) == 2 and run.sequence_seconds[0] == pytest.approx(sum(run.samples[:3]))
    assert run.extras[-1] == ("extra", 5)


def test_warm_up_steps_are_not_timed_and_do_not_leak_state():
    seqs = [np.full((2, 2), 3.0, np.float32)]
    step = _Accumulator()
    ticks = iter(range(100))  # a fake clock: one second per reading, so 5 s of warm-up is 5 steps
    run = recurrent.run_sequences(step, SIG, 2, seqs, warmup_s=5, clock=lambda: float(next(ticks)))
    assert len(step.calls) == 7 and len(run.samples) == 2
    assert run.warmup_calls == 5 and run.warmup_seconds == 5.0
    # Warm-up wraps around the first sequence with its own carried state, then state is reset.
    assert step.calls[4][1].tolist() == [[12, 12]] and step.calls[5][1].tolist() == [[0, 0]]
    np.testing.assert_array_equal(run.outputs[0][0][:, 0], [[3, 3], [6, 6]])


def test_scores_and_validation_errors():
    golden = [np.eye(4)[[0, 1, 2, 3, 3]].reshape(5, 1, 4)]  # phones 0 1 2 3 3
    good = recurrent.SequenceRun(
        [0.1] * 5, [0.5], [[golden[0].astype(np.float32), np.zeros((5, 1, 2))]], [None] * 5
    )
    bad_scores = golden[0].copy()
    bad_scores[1] = [[0, 0, 0, 1]]  # one wrong phone in five frames: PER 20%
    bad = recurrent.SequenceRun([0.1] * 5, [0.5], [[bad_scores, np.ones((5, 1, 2))]], [None] * 5)
    ok = recurrent.score("asr_float", SIG, good, golden, None)
    assert ok["vs_golden"]["metric"]["name"] == "PhoneErrorRate"
    assert ok["vs_golden"]["metric"]["phone_error_rate"] == 0 and recurrent.validation_errors(ok) == []
    assert "vs_reference" not in ok
    res = recurrent.score("asr_float", SIG, bad, golden, good)
    assert res["vs_golden"]["metric"]["phone_error_rate"] == pytest.approx(20.0)
    assert res["vs_reference"]["outputs"]["total"]["max_abs_error"] == 1.0
    errors = recurrent.validation_errors(res)
    messages = [e["message"] for e in errors]
    assert (
        len(errors) >= 2
        and any("golden" in m for m in messages)
        and any("onnxruntime" in m for m in messages)
    )
    assert {e["metric"] for e in errors} == {"PhoneErrorRate vs_golden", "PhoneErrorRate vs_reference"}


def test_latency_fields_are_per_step():
    run = recurrent.SequenceRun([0.001, 0.002, 0.003], [0.003, 0.003], [[], []], [None] * 3, 4, 0.5)
    fields = recurrent.latency_fields(run, 0.5)
    assert fields["steps"] == 3 and fields["sequences"] == 2 and fields["warmup_steps"] == 4
    assert fields["warmup"].to_json() == {"iterations": 4, "seconds": 0.5, "target_seconds": 0.5}
    assert fields["latency_ms"].samples == pytest.approx([1.0, 2.0, 3.0])
    assert fields["latency_unit"] == "step" and fields["latency_ms"].median == pytest.approx(2.0)


def test_a_warm_up_rule_ends_the_step_warm_up_once_the_steps_have_settled():
    from mlts.bench.stopping import StableRule

    seqs = [np.full((2, 2), 3.0, np.float32)]
    # one reading per step (and one at the start): the first 5 steps take 3 s each, then 1 s each
    gaps = iter([3.0] * 6 + [1.0] * 200)
    now = [0.0]

    def clock() -> float:
        now[0] += next(gaps)
        return now[0]

    rule = StableRule(within=0.05, window=10, min_calls=20)
    run = recurrent.run_sequences(_Accumulator(), SIG, 2, seqs, warmup_s=1000, clock=clock, warmup_rule=rule)
    # after 20 steps the window before the last holds five 3 s steps (median 2 s against 1 s); after
    # 21 only four: its median is 1 s, the last window's too
    assert run.warmup_stopped == "stable" and run.warmup_calls == 21 and len(run.samples) == 2
    fields = recurrent.latency_fields(run, 1000, warmup_rule=rule)
    assert fields["warmup"].stopped == "stable" and fields["warmup"].stop_rule["window"] == 10
    # without the rule the same steps run to the bound
    gaps = iter([3.0] * 6 + [1.0] * 200)
    now[0] = 0.0
    run = recurrent.run_sequences(_Accumulator(), SIG, 2, seqs, warmup_s=30, clock=clock)
    assert run.warmup_stopped == "bound" and run.warmup_seconds >= 30
    assert recurrent.latency_fields(run, 30)["warmup"].stop_rule is None
