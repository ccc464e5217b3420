"""The `fuzz` suite: models, requests, wire frames and burst rings, mutated, in-process and on the driver;
and hostile clients of the driver's service (`fuzz_clients`: unsealed rings shrunk under a burst,
clients that do not read their replies, buffer and connection hogs), on the service only.

For each decoder target (`fuzz_targets`) two campaigns run from the same seeds:

- in-process, through the functions the service decodes and validates that input with:
  coverage-guided by atheris when it is installed (`pip install 'mlts[fuzz]'`; the run is a
  child process, `fuzz_atheris`), else seeded random mutation; thousands of inputs a second;
- against the driver's service (one that does not pre-validate): crash (the service dies),
  hang (no answer within the call timeout) and wrong answer (an input the reference
  validator refuses is accepted) are findings. Models, requests and burst rings reach the
  driver itself: where atheris is installed (and the driver is not someone else's service)
  that campaign is coverage-guided by the driver's own coverage, measured inside the
  service process (`mlts.ipc.service.coverage`, `--coverage`): after each input the
  service says how many new features of the driver it reached, and inputs that reached
  some are kept and mutated further; else it is seeded random mutation.

Budget: `--fuzz-cases N` inputs or `--fuzz-seconds S` in all, split evenly over the targets
--filter selects, then 80% in-process and 20% on the service when both of a target's
campaigns run (a quick run: 2000 inputs). Every distinct finding is minimised (delta debugging on
the bytes) and saved as a reproducer in the run's folder for `mlts validate --replay`. Each
campaign is one case whose reason gives its inputs, inputs per second and engine.
"""

from __future__ import annotations

import functools
import json
import random
import time
from collections.abc import Callable

from mlts.hal import codec, nnfile
from mlts.hal.memory import HostMemory
from mlts.validate import fuzz_atheris, fuzz_targets, reproducer
from mlts.validate.core import COVERAGE, CaseResult, SuiteOptions, Target
from mlts.validate.fuzz_clients import ClientTarget
from mlts.validate.fuzz_targets import Finding, ServiceContext
from mlts.validate.fuzz_targets import Target as FuzzTarget

#: Every target by name: the decoders' four, then hostile clients of the service.
TARGETS: dict[str, type[FuzzTarget]] = {**fuzz_targets.TARGETS, ClientTarget.name: ClientTarget}

SUITE = "fuzz"
QUICK_CASES = 2000
FULL_CASES = 20000
#: Share of a target's inputs that go to the service (the rest run in-process).
SERVICE_SHARE = 0.2
#: Tries the minimiser may spend on one finding (in-process / against the service).
MINIMISE_TRIES = 400
MINIMISE_SERVICE_TRIES = 40
#: atheris (a child process that takes seconds to start) runs campaigns at least this big.
ATHERIS_MIN_CASES = 5000
ATHERIS_MIN_SECONDS = 10.0
#: The targets whose service campaign sends its inputs to the driver (coverage can guide them).
DRIVER_TARGETS = ("models", "requests", "rings")
#: Share of a coverage-guided campaign's inputs mutated from the kept ones (the rest from the seeds).
KEPT_SHARE = 0.5


class Budget:
    """Inputs or seconds one campaign may use."""

    def __init__(self, cases: int | None, seconds: float | None) -> None:
        self.cases = cases
        self.seconds = seconds
        self.start = time.monotonic()
        self.done = 0

    def more(self) -> bool:
        if self.cases is not None and self.done >= self.cases:
            return False
        return self.seconds is None or time.monotonic() - self.start < self.seconds

    def elapsed(self) -> float:
        return time.monotonic() - self.start


def _budgets(options: SuiteOptions, campaigns: int) -> tuple[int | None, float | None]:
    """Per campaign: (inputs, seconds)."""
    if options.fuzz_seconds is not None:
        cases = None if options.fuzz_cases is None else max(1, options.fuzz_cases // campaigns)
        return cases, options.fuzz_seconds / campaigns
    total = (
        options.fuzz_cases
        if options.fuzz_cases is not None
        else (QUICK_CASES if options.quick else FULL_CASES)
    )
    return max(1, total // campaigns), None


def run(target: Target, options: SuiteOptions, emit: Callable[[CaseResult], None]) -> None:
    """Run the fuzz campaigns on `target`; one case per campaign plus one per distinct finding."""
    whole = options.unsharded()
    plan = [(n, [e for e in TARGETS[n].engines if whole.wants(f"{n}/{e}")]) for n in TARGETS]
    plan = [(n, engines) for n, engines in plan if engines]
    # Budgets and seeds come from the whole suite's plan, so a shard's campaigns are the same ones.
    cases, seconds = _budgets(options, max(1, len(plan)))  # per target
    timeout = min(target.call_timeout, 10.0)
    ctx = ServiceContext(target, timeout)
    # The driver's own coverage guides its campaigns where it can be measured (atheris installed).
    guided = ServiceContext(target, timeout, COVERAGE) if target.coverage_available else None
    for k, (name, all_engines) in enumerate(plan):
        engines = [e for e in all_engines if options.wants(f"{name}/{e}")]
        if not engines:
            continue
        fuzz_target = TARGETS[name]()
        seed = options.seed * 1_000_003 + k
        # A target's budget: 80% in-process and 20% on the service when both run.
        share = (
            {"in-process": 1 - SERVICE_SHARE, "service": SERVICE_SHARE}
            if len(all_engines) == 2
            else {all_engines[0]: 1.0}
        )
        for engine in engines:
            n_cases = None if cases is None else max(1, int(cases * share[engine]))
            if fuzz_target.max_inputs is not None:
                most = fuzz_target.max_inputs[0 if options.quick else 1]
                n_cases = most if n_cases is None else min(n_cases, most)
            n_seconds = None if seconds is None else seconds * share[engine]
            if engine == "in-process":
                _in_process(target, fuzz_target, Budget(n_cases, n_seconds), seed, emit)
            elif guided is not None and name in DRIVER_TARGETS:
                _guided(target, guided, fuzz_target, Budget(n_cases, n_seconds), seed, emit)
            else:
                _service(target, ctx, fuzz_target, Budget(n_cases, n_seconds), seed, emit)


def _summary(n: int, budget: Budget, engine: str, findings: int, seconds: float | None = None) -> str:
    took = budget.elapsed() if seconds is None else seconds
    rate = n / took if took > 0 else 0.0
    return f"{n} inputs, {rate:.0f}/s ({engine}); {findings} distinct finding(s)"


def _in_process(target: Target, t: FuzzTarget, budget: Budget, seed: int, emit: Callable) -> None:
    name = f"{t.name}/in-process"
    took: float | None = None
    if fuzz_atheris.available() and (
        (budget.cases or 0) >= ATHERIS_MIN_CASES or (budget.seconds or 0) >= ATHERIS_MIN_SECONDS
    ):
        n, took, findings = fuzz_atheris.campaign(t.name, budget.cases, budget.seconds, seed)
        engine = "atheris, coverage-guided"
    else:
        rng = random.Random(seed)
        by_key: dict[str, Finding] = {}
        n = 0
        while budget.more():
            data = t.mutate(rng)
            found = t.inproc(data)
            n += 1
            budget.done += 1
            if found is not None and found.key not in by_key:
                by_key[found.key] = found
        engine = "seeded random mutation"
        findings = list(by_key.values())
    _close_campaign(
        target,
        t,
        name,
        findings,
        t.inproc,
        MINIMISE_TRIES,
        emit,
        _summary(n, budget, engine, len(findings), took),
        budget,
    )


def _close_campaign(
    target: Target,
    t: FuzzTarget,
    name: str,
    findings: list[Finding],
    rerun: Callable[[bytes], Finding | None],
    tries: int,
    emit: Callable,
    summary: str,
    budget: Budget,
) -> None:
    """Minimise and report each finding (rerunning inputs with `rerun`), then the campaign's own case."""
    for f in findings:
        small = t.minimise(f.data, functools.partial(_reproduces, rerun, f.key), tries)
        _report(target, t, name, Finding(f.kind, f.detail, small, f.key), len(f.data), emit)
    outcome = "pass" if not findings else "fail"
    emit(CaseResult(SUITE, name, outcome, summary, None, budget.elapsed()))


def _reproduces(rerun: Callable[[bytes], Finding | None], key: str, data: bytes) -> bool:
    """Whether `data` still gives a finding of the same bug (`key`) when run again."""
    found = rerun(data)
    return found is not None and found.key == key


def _service(
    target: Target, ctx: ServiceContext, t: FuzzTarget, budget: Budget, seed: int, emit: Callable
) -> None:
    name = f"{t.name}/service"
    rng = random.Random(seed ^ 0x5EED)
    findings: dict[str, Finding] = {}
    n = 0
    while budget.more():
        data = t.mutate(rng)
        found = _service_once(target, ctx, t, data)
        n += 1
        budget.done += 1
        if found is not None and found.key not in findings:
            findings[found.key] = found
    _close_campaign(
        target,
        t,
        name,
        list(findings.values()),
        lambda d: _service_once(target, ctx, t, d),
        MINIMISE_SERVICE_TRIES,
        emit,
        _summary(n, budget, "driver service, no pre-validation", len(findings)),
        budget,
    )


def _guided(
    target: Target, ctx: ServiceContext, t: FuzzTarget, budget: Budget, seed: int, emit: Callable
) -> None:
    """The service campaign guided by the driver's coverage: each input's new features (the service's
    `coverageReport`) decide whether it is kept, and kept inputs are mutated further."""
    name = f"{t.name}/service"
    rng = random.Random(seed ^ 0x5EED)
    findings: dict[str, Finding] = {}
    kept: list[bytes] = []
    n = 0
    features = 0
    restarts = target.restarts
    ctx.features()  # the service starts (and instruments the driver) before the first input counts
    budget.start = time.monotonic()
    while budget.more():
        data = t.mutate_from(rng, rng.choice(kept)) if kept and rng.random() < KEPT_SHARE else t.mutate(rng)
        found = _service_once(target, ctx, t, data)
        n += 1
        budget.done += 1
        if found is not None and found.key not in findings:
            findings[found.key] = found
        if target.restarts != restarts:  # a new driver process: its coverage starts again
            restarts = target.restarts
            ctx.features()
            continue
        report = ctx.features()
        if report is not None:
            features = max(features, report[0])
            if report[1] > 0:
                kept.append(data)
    _close_campaign(
        target,
        t,
        name,
        list(findings.values()),
        lambda d: _service_once(target, ctx, t, d),
        MINIMISE_SERVICE_TRIES,
        emit,
        _summary(
            n,
            budget,
            f"driver service, no pre-validation, coverage-guided: {features} driver features, "
            f"{len(kept)} inputs kept",
            len(findings),
        ),
        budget,
    )


def _service_once(target: Target, ctx: ServiceContext, t: FuzzTarget, data: bytes) -> Finding | None:
    try:
        found = t.service(ctx, data)
    except Exception as e:  # the harness itself must not stop the campaign
        found = Finding("crash", f"{type(e).__name__}: {e}"[:300], data, f"harness:{type(e).__name__}")
    if found is not None and found.kind in ("crash", "hang"):
        target.restart(
            f"fuzz: {t.name}: the driver {'hung' if found.kind == 'hang' else 'crashed'} on an input"
        )
    return found


OUTCOME = {"crash": "error", "hang": "hang", "wrong": "fail"}


def _report(target: Target, t: FuzzTarget, campaign: str, f: Finding, original: int, emit: Callable) -> None:
    case = f"{campaign}/{f.kind}/{f.key}"
    path, note = save_finding(target.out_dir, t.name, case, f)
    reason = f"{f.detail} (minimised {original} -> {len(f.data)} bytes{'; ' + note if note else ''})"
    emit(CaseResult(SUITE, case, OUTCOME[f.kind], reason, path))


def save_finding(out_dir: str, kind: str, case: str, f: Finding) -> tuple[str | None, str]:
    """Write a reproducer of finding `f`; (its path or None, a note on what could not be saved)."""
    expect = {"status": "INVALID_ARGUMENT"} if f.kind == "wrong" else {}
    note = f"{f.kind}: {f.detail}"
    if kind == "frames":
        return reproducer.save(out_dir, SUITE, case, "frame", data=f.data, expect=expect, note=note), ""
    if kind == "rings":
        return reproducer.save(out_dir, SUITE, case, "ring", data=f.data, expect=expect, note=note), ""
    if kind == "clients":
        return _raw(
            out_dir, case, f.data, ".clients", note
        ), "a client behaviour (not replayable; see the note)"
    if kind == "models":
        try:
            model = nnfile.decode(f.data).model
            return reproducer.save(out_dir, SUITE, case, "model", model=model, expect=expect, note=note), ""
        except ValueError as e:
            return _raw(out_dir, case, f.data, ".nnm", note), f"not a decodable .nnm ({e}); raw bytes saved"
    from mlts.validate.fuzz_seeds import request_model

    try:
        doc = json.loads(f.data)
        pools = [HostMemory(bytearray(d["size"])) for d in codec.request_pool_descs(doc)]
        request = codec.request_from_dict(doc, pools)
        path = reproducer.save(
            out_dir,
            SUITE,
            case,
            "request",
            model=request_model(),
            request=request,
            expect=expect,
            note=note,
            execution={"mode": "sync", "measure": False, "loop_timeout": None},
        )
        return path, ""
    except Exception as e:
        return _raw(
            out_dir, case, f.data, ".json.txt", note
        ), f"the request cannot be rebuilt ({e}); its JSON saved"


def _raw(out_dir: str, case: str, data: bytes, suffix: str, note: str) -> str:
    import os

    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{SUITE}-{reproducer.slug(case)}{suffix}")
    with open(path, "wb") as fh:
        fh.write(data)
    return path
