"""The fuzz suite: mutators and minimisers, short campaigns on sample-all, injected bugs caught, replays."""

from __future__ import annotations

import json
import random

import pytest

from mlts.hal import nnfile
from mlts.hal.memory import SharedMemory
from mlts.ipc.service import coverage
from mlts.runtime.discovery import discover
from mlts.runtime.remote import RemoteDevice
from mlts.validate import fuzz, fuzz_atheris, fuzz_seeds, fuzz_targets, reproducer
from mlts.validate.core import SuiteOptions, Target, ValidateError
from mlts.validate.fuzz_mutate import ddmin_bytes, mutate_bytes, mutate_doc, shrink_doc
from mlts.validate.replay import replay


def test_mutations_are_reproducible_from_the_seed():
    seed = fuzz_seeds.frame_seeds()[0]
    a = [mutate_bytes(random.Random(5), seed) for _ in range(3)]
    b = [mutate_bytes(random.Random(5), seed) for _ in range(3)]
    assert a == b and any(m != seed for m in a)
    doc = {"a": [1, 2, 3], "b": {"c": True}}
    assert mutate_doc(random.Random(1), doc) == mutate_doc(random.Random(1), doc)
    assert doc == {"a": [1, 2, 3], "b": {"c": True}}  # the seed document is not touched


def test_delta_debugging_finds_the_culprit():
    data = bytes(range(200)) + b"XY" + bytes(range(100))
    assert ddmin_bytes(data, lambda d: b"XY" in d) == b"XY"
    doc = {"ops": [{"t": 1}, {"t": 99}, {"t": 2}, {"t": 3}]}
    small = shrink_doc(doc, lambda d: any(o["t"] == 99 for o in d["ops"]))
    assert small == {"ops": [{"t": 99}]}


def test_nnm_seeds_decode_and_mutants_keep_a_valid_checksum():
    target = fuzz_targets.ModelTarget()
    for data in target.seeds:
        assert target.inproc(data) is None
        nnfile.decode(data)
    rng = random.Random(0)
    past_checksum = 0
    for _ in range(200):
        try:
            nnfile.decode(target.mutate(rng))
            past_checksum += 1
        except ValueError as e:
            past_checksum += "checksum" not in str(e)
    assert past_checksum > 150  # structure mutations reach the JSON and the validator


def test_an_injected_decoder_bug_is_found_minimised_and_saved(tmp_path, monkeypatch):
    real = fuzz_targets.wire.loads

    def buggy(data: bytes):
        message = real(data)
        if message.get("method") == "getCapabilities" and "id" not in message:
            raise KeyError("id")  # a decoder that forgets a check: not a documented refusal
        return message

    monkeypatch.setattr(fuzz_targets.wire, "loads", buggy)
    monkeypatch.setattr(fuzz_atheris, "available", lambda: False)  # the bug lives in this process only
    found: list = []
    with Target(discover()["sample-all"], str(tmp_path)) as target:
        opts = SuiteOptions(quick=True, fuzz_cases=4000, seed=1, filter="^frames/in-process")
        fuzz.run(target, opts, found.append)
    crash = [r for r in found if "/crash/" in r.name]
    assert crash and crash[0].outcome == "error" and "KeyError" in crash[0].reason
    assert crash[0].reproducer and crash[0].reproducer.endswith(".json")
    saved = reproducer.load(crash[0].reproducer)
    assert saved.kind == "frame" and len(saved.data) < 200  # minimised to about one frame
    assert next(r for r in found if r.name == "frames/in-process").outcome == "fail"


def test_short_campaigns_on_sample_all_find_nothing(tmp_path):
    results: list = []
    with Target(discover()["sample-all"], str(tmp_path)) as target:
        fuzz.run(target, SuiteOptions(quick=True, fuzz_cases=480, seed=2), results.append)
    names = {r.name for r in results}
    for kind in ("models", "requests", "frames", "rings"):
        assert {f"{kind}/in-process", f"{kind}/service"} <= names
    assert all(r.outcome == "pass" for r in results), [(r.name, r.reason) for r in results if r.failed]
    assert all("inputs" in r.reason and "/s" in r.reason for r in results)


def test_every_target_runs_on_the_service():
    for cls in fuzz_targets.TARGETS.values():
        assert cls.service is not fuzz_targets.Target.service, cls.name
    with pytest.raises(NotImplementedError):
        fuzz_targets.Target().service(None, b"")  # type: ignore[arg-type]


def _execute_seed(ctx: fuzz_targets.ServiceContext, handle: int, t: fuzz_targets.RequestTarget) -> dict:
    pool = SharedMemory.create(t.pool_size, "mlts-test-pool")
    try:
        args = {"prepared": handle, "measure": 0, "deadline": None, "loop_timeout": None, "request": t.doc}
        return ctx.device.call("executeSynchronously", args, [pool.fd], timeout=ctx.timeout)
    finally:
        pool.close()


def test_service_context_prepares_once_per_client_and_again_after_a_restart(make_target, monkeypatch):
    prepares: list[int] = []
    real = RemoteDevice.prepareModel

    def counting(self, model, *args, **kwargs):
        prepares.append(id(model))
        return real(self, model, *args, **kwargs)

    monkeypatch.setattr(RemoteDevice, "prepareModel", counting)
    target = make_target("sample-all")
    ctx = fuzz_targets.ServiceContext(target, 10.0)
    t = fuzz_targets.RequestTarget()
    handle = ctx.prepared(t.model)
    assert type(handle) is int and ctx.prepared(t.model) == handle and len(prepares) == 1
    _execute_seed(ctx, handle, t)  # the handle names a model prepared in this service
    other = fuzz_seeds.request_model()  # an equal model, but another object: prepared on its own
    assert ctx.prepared(other) != handle and len(prepares) == 2
    target.restart("test: a new service")  # the old handles mean nothing there
    fresh = ctx.prepared(t.model)
    assert len(prepares) == 3
    _execute_seed(ctx, fresh, t)
    # A request whose "pools" is not a list is refused by the driver, not a harness crash.
    assert t.service(ctx, json.dumps({**t.doc, "pools": {"fd": 0}}).encode()) is None
    assert t.service(ctx, json.dumps(t.doc).encode()) is None


@pytest.fixture(scope="module")
def accepted_invalid(tmp_path_factory):
    out = tmp_path_factory.mktemp("skip-validation")
    results: list = []
    spec = discover()["sample-faulty"]
    # Seeded mutation: what is tested is the wrong answer, not coverage (which needs a slower service).
    with (
        pytest.MonkeyPatch.context() as patch,
        Target(spec, str(out), options={"skip_validation": "1"}) as target,
    ):
        patch.setattr(coverage, "available", lambda: False)
        opts = SuiteOptions(quick=True, fuzz_cases=100, seed=4, filter="^models/service")
        fuzz.run(target, opts, results.append)
    return results


def test_a_driver_that_skips_validation_gives_wrong_answers(accepted_invalid):
    wrong = [r for r in accepted_invalid if "/wrong/" in r.name]
    assert wrong and wrong[0].outcome == "fail" and "validator refuses" in wrong[0].reason
    assert wrong[0].reproducer.endswith(".json")


def test_the_wrong_answer_replays(accepted_invalid, tmp_path):
    path = next(r.reproducer for r in accepted_invalid if "/wrong/" in r.name)
    with Target(discover()["sample-faulty"], str(tmp_path), options={"skip_validation": "1"}) as target:
        assert replay(target, path).outcome == "fail"
    with Target(discover()["sample-all"], str(tmp_path)) as target:
        again = replay(target, path)
        assert again.outcome == "pass", again.reason


def test_a_ring_image_replays_and_a_garbage_one_is_refused(tmp_path):
    model = fuzz_seeds.request_model()
    image = fuzz_seeds.ring_image([b"\xff" * 40])  # a message no decoder accepts
    path = reproducer.save(str(tmp_path), "fuzz", "hostile ring", "ring", data=image)
    with Target(discover()["sample-all"], str(tmp_path)) as target:
        result = replay(target, path)
        assert result.outcome == "pass", result.reason
        short = reproducer.save(str(tmp_path), "fuzz", "short ring", "ring", data=b"\0" * 10)
        with pytest.raises(ValidateError, match="ring image"):
            replay(target, short)
    assert fuzz_seeds.burst_message(model)  # the seed message itself encodes


@pytest.mark.skipif(not fuzz_atheris.available(), reason="atheris (the fuzz extra) is not installed")
def test_atheris_campaign_runs_coverage_guided():
    runs, seconds, findings = fuzz_atheris.campaign("requests", 300, None, 9)
    assert runs >= 300 and findings == []
