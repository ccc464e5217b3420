"""Run suites on a Target: each case reported as it ends, a suite that breaks recorded, the rest going on."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict

from mlts.hal.errors import HalError
from mlts.validate.core import CaseResult, SuiteOptions, Target, ValidateError, is_hang, load_suite
from mlts.validate.results import ValidateSection


def run_suites(
    target: Target,
    suites: Sequence[str],
    options: SuiteOptions,
    on_case: Callable[[CaseResult], None] = lambda c: None,
    on_suite: Callable[[str], None] = lambda s: None,
) -> ValidateSection:
    """Every case of every suite in `suites`; a suite that raises is an error line, never the end of the run.

    A driver that hangs or dies outside any case (while a suite sets up) costs that suite only: the
    target is restarted and the next suite starts on a fresh driver.
    """
    cases: list[CaseResult] = []
    errors: list[str] = []
    t0 = time.perf_counter()

    def emit(case: CaseResult) -> None:
        cases.append(case)
        on_case(case)

    for name in suites:
        on_suite(name)
        try:
            module = load_suite(name)
            module.run(target, options, emit)
        except KeyboardInterrupt:
            # What was gathered is kept: the outputs are written and the run counts as failed.
            errors.append(f"{name}: interrupted after {sum(c.suite == name for c in cases)} cases")
            break
        except ValidateError as e:
            errors.append(f"{name}: {e}")
        except HalError as e:
            kind = "hung" if is_hang(e) else "failed"
            errors.append(
                f"{name}: the driver {kind} outside a case: {e.status.name}: {' '.join(e.message.split())}"
            )
            target.restart(f"{name}: the driver {kind} outside a case")
        except Exception as e:  # a broken suite must not lose what the others gathered
            where = traceback.extract_tb(e.__traceback__)[-1]
            errors.append(f"{name}: {type(e).__name__}: {e} (at {where.filename}:{where.lineno})")
            target.restart(f"{name}: the suite broke ({type(e).__name__})")
    return ValidateSection(
        driver=target.name,
        suites=tuple(suites),
        cases=tuple(cases),
        seconds=time.perf_counter() - t0,
        restarts=target.restarts,
        restart_reasons=tuple(target.restart_reasons),
        options={
            k: v for k, v in asdict(options).items() if k != "shard"
        },  # a shard is the cluster's business
        errors=tuple(errors),
    )
