"""What every benchmark and stress run adds to its results document, at each checkpoint and at the end.

- `environment.load`: the machine's load before, during and after (mlts.bench.machine_load);
- `noise`: whether the run was noisy, why, and a headline (mlts.bench.noise);
- `summary`: verdicts passed, failures, the geometric mean ratio and the noise flag
  (mlts.bench.run_summary);
- `completion`: {"complete", "interrupted", "planned", "done", "reason"}: a file written while the
  run went on, or by an interrupted run, says how far it got, so no reader takes it for a whole run.
"""

from __future__ import annotations

from typing import Any

from mlts.bench.machine_load import LoadMonitor
from mlts.bench.noise import decide
from mlts.bench.run_summary import summarize
from mlts.records import ResultsDocument
from mlts.records.run_sections import check_run_sections


def completion(done: int, planned: int, *, finished: bool, interrupted: str | None) -> dict[str, Any]:
    """The `completion` section: complete when the run finished uninterrupted with all it planned."""
    planned = max(planned, done)
    if interrupted is not None:
        reason = f"interrupted by {interrupted} after {done} of {planned}"
    elif not finished:
        reason = f"in progress: {done} of {planned} written so far (the run did not end)"
    elif done < planned:
        reason = f"ended after {done} of {planned}"
    else:
        reason = f"all {planned} done"
    return {
        "complete": finished and interrupted is None and done >= planned,
        "interrupted": interrupted is not None,
        "planned": planned,
        "done": done,
        "reason": reason,
    }


class RunRecord:
    """Samples the load from `start()` and writes load, noise, summary and completion into documents."""

    def __init__(self, own_load: float, monitor: LoadMonitor | None = None) -> None:
        self.own_load = own_load
        self.monitor = monitor or LoadMonitor()
        self._stopped = False

    def start(self) -> RunRecord:
        self.monitor.start()
        return self

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            self.monitor.stop()

    def annotate(
        self, doc: dict, planned: int, *, finished: bool = False, interrupted: str | None = None
    ) -> dict:
        """`doc` (a benchmark or stress document, changed in place and returned) with the four sections.

        `finished` or `interrupted` (the signal's name): the run is over, the `after` sample is taken.
        """
        if finished or interrupted is not None:
            self.stop()
        load = self.monitor.record()
        environment = doc.setdefault("environment", {})
        environment["load"] = load
        document = ResultsDocument.from_json(doc)
        cores = environment.get("usable_cores") or environment.get("cores") or 1
        noise = decide(load, int(cores), self.own_load, document.rows, document.kind)
        doc["noise"] = noise
        doc["summary"] = summarize(document, noise["noisy"])
        doc["completion"] = completion(
            len(document.results), planned, finished=finished, interrupted=interrupted
        )
        check_run_sections(doc)  # what this mlts writes, it reads back
        return doc
