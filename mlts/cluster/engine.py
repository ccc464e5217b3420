"""The engine adapter: run units in this process, or on a Dask distributed cluster.

`--cluster local:N` starts a local cluster of N worker processes (one thread each, each under a
nanny that restarts it when it dies); `--cluster ADDRESS` connects to a running scheduler
(`dask scheduler`, workers started with `dask worker ADDRESS --nthreads 1`). Dask reschedules
the units of a worker that is lost on the others (up to its `allowed-failures`, then the unit
fails with KilledWorker); the client fetches each result as soon as it is done, so a worker lost
later takes nothing finished with it.

Timing units (they measure latency) run after every other unit: each on a worker that offers the
`timing` resource (`dask worker ... --resources timing=1` on one worker per machine; the local
cluster gives it to its first worker), so no two share a machine and nothing else of the run is
running beside them; with no such worker they run one at a time across the cluster.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable
from typing import Any

from mlts.cluster.endpoints import this_host
from mlts.cluster.progress import UnitProgress
from mlts.cluster.units import TOPIC, Unit, UnitOutcome, outcome_from_text, run_unit
from mlts.errors import InputError

INSTALL_HINT = "pip install 'mlts[cluster]'"
MAX_LOCAL_WORKERS = 64
CONNECT_TIMEOUT_S = 20.0
TIMING_RESOURCE = "timing"
_LOCAL = re.compile(r"local:(\d+)")

OnOutcome = Callable[[UnitOutcome], None]


class ClusterError(InputError):
    """A --cluster value that cannot be used: the engine missing, a bad address, no scheduler there."""


def check_cluster_option(value: str) -> str:
    """`value` if it is `local:N` (1 <= N <= 64) or a scheduler address; ClusterError (one line) otherwise."""
    m = _LOCAL.fullmatch(value)
    if value.startswith("local"):
        if m is None or not 1 <= int(m.group(1)) <= MAX_LOCAL_WORKERS:
            raise ClusterError(f"--cluster {value!r}: expected local:N with N from 1 to {MAX_LOCAL_WORKERS}")
        return value
    if not re.fullmatch(r"([a-z]+://)?[^\s/:]+(:\d{1,5})?", value):
        raise ClusterError(
            f"--cluster {value!r}: expected local:N or a scheduler address such as tcp://HOST:8786"
        )
    return value


def _distributed():
    try:
        import distributed
    except ImportError:
        raise ClusterError(
            f"--cluster needs the Dask distributed engine, which is not installed: {INSTALL_HINT}"
        ) from None
    return distributed


def require_engine() -> None:
    """ClusterError (one line saying how to install it) when the engine is not installed."""
    _distributed()


class SerialExecutor:
    """Every unit in this process, one after another (a lab without a cluster)."""

    engine = "in-process"
    scheduler = "none"

    def __enter__(self) -> SerialExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def run(self, units: list[Unit], progress: UnitProgress, on_outcome: OnOutcome) -> None:
        progress.labels.update({u.id: u.label for u in units})
        for unit in sorted(units, key=lambda u: u.timing):
            progress.started(unit.id, None)
            outcome = outcome_from_text(unit, run_unit(unit.to_text()))
            progress.finished(outcome)
            on_outcome(outcome)

    def workers(self) -> list[dict[str, Any]]:
        return [{"address": "this process", "hostname": this_host(), "resources": {}}]

    def timing_isolation(self) -> str:
        return "units ran one at a time in this process"


class DaskExecutor:
    """Units on a Dask distributed cluster: a local one this executor starts and stops, or a scheduler's."""

    engine = "dask"

    def __init__(self, value: str) -> None:
        self.value = check_cluster_option(value)
        self.cluster: Any = None
        self.client: Any = None
        self.scheduler = value
        self._hostnames: dict[str, str] = {}  # worker address -> hostname
        self._token = uuid.uuid4().hex[:8]

    # --- connecting ---------------------------------------------------------------------------------

    def __enter__(self) -> DaskExecutor:
        distributed = _distributed()
        m = _LOCAL.fullmatch(self.value)
        try:
            if m is not None:
                self.cluster = local_cluster(distributed, int(m.group(1)))
                target: Any = self.cluster
            else:
                target = self.value
            self.client = distributed.Client(
                target,
                timeout=CONNECT_TIMEOUT_S,
                set_as_default=False,
                # Results are JSON text: read them as msgpack, never unpickle what a worker sends.
                serializers=["msgpack"],
                deserializers=["msgpack"],
            )
        except (OSError, TimeoutError) as e:
            self.__exit__()
            raise ClusterError(
                f"--cluster {self.value}: cannot reach the scheduler: {' '.join(str(e).split())}"
            ) from None
        self.scheduler = self.client.scheduler.address
        self._refresh_hosts()
        if not self._hostnames:
            self.__exit__()
            raise ClusterError(f"--cluster {self.value}: the scheduler has no worker")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.client is not None:
            try:
                self.client.close()
            except Exception:
                pass
            self.client = None
        if self.cluster is not None:
            try:
                self.cluster.close()
            except Exception:
                pass
            self.cluster = None

    def _refresh_hosts(self) -> None:
        try:
            self._hostnames.update(self.client.run(this_host))
        except Exception:  # a worker restarting right now: the next refresh finds it
            pass

    def _info(self) -> dict[str, Any]:
        return self.client.scheduler_info(n_workers=-1).get("workers", {})

    def workers(self) -> list[dict[str, Any]]:
        self._refresh_hosts()
        return [
            {
                "address": address,
                "host": w.get("host"),
                "hostname": self._hostnames.get(address),
                "nthreads": w.get("nthreads"),
                "resources": dict(w.get("resources") or {}),
            }
            for address, w in sorted(self._info().items())
        ]

    def _has_timing_workers(self) -> bool:
        return any((w.get("resources") or {}).get(TIMING_RESOURCE) for w in self._info().values())

    def timing_isolation(self) -> str:
        if self._has_timing_workers():
            return (
                "timing units ran after every other unit, each on a worker with the `timing` resource "
                "(one per machine), one at a time on each"
            )
        return "timing units ran after every other unit, one at a time across the cluster (no worker offers the `timing` resource)"

    def _workers_on(self, hostname: str) -> list[str]:
        """The network hosts of the workers running on machine `hostname` (a restarted worker keeps its host)."""
        self._refresh_hosts()
        info = self._info()
        return sorted({info[a]["host"] for a, h in self._hostnames.items() if h == hostname and a in info})

    # --- running ------------------------------------------------------------------------------------

    def run(self, units: list[Unit], progress: UnitProgress, on_outcome: OnOutcome) -> None:
        """Every unit, the others first and then the timing ones; `on_outcome` as each one ends."""
        progress.labels.update({u.id: u.label for u in units})

        def on_event(event: Any) -> None:
            _, message = event if isinstance(event, tuple) and len(event) == 2 else (None, event)
            if isinstance(message, dict) and message.get("state") == "started":
                pid = message.get("pid")
                progress.started(
                    str(message.get("id")), message.get("worker"), pid if isinstance(pid, int) else None
                )
            elif isinstance(message, dict) and message.get("state") == "ended":
                progress.ended(str(message.get("id")))

        self.client.subscribe_topic(TOPIC, on_event)
        try:
            self._batch([u for u in units if not u.timing], progress, on_outcome, None)
            timing = [u for u in units if u.timing]
            if timing and self._has_timing_workers():
                self._batch(timing, progress, on_outcome, {TIMING_RESOURCE: 1})
            else:
                for unit in timing:
                    self._batch([unit], progress, on_outcome, None)
        finally:
            try:
                self.client.unsubscribe_topic(TOPIC)
            except Exception:
                pass

    def _batch(
        self, units: list[Unit], progress: UnitProgress, on_outcome: OnOutcome, resources: dict | None
    ) -> None:
        distributed = _distributed()
        futures: dict[Any, Unit] = {}
        try:
            for unit in units:
                kwargs: dict[str, Any] = {}
                if resources:
                    kwargs["resources"] = resources
                if unit.host is not None:
                    hosts = self._workers_on(unit.host)
                    if not hosts:
                        error = f"it needs a worker on {unit.host} (a Unix socket there), and none runs there"
                        outcome = UnitOutcome(unit, ok=False, error=error)
                        progress.finished(outcome)
                        on_outcome(outcome)
                        continue
                    kwargs.update(workers=hosts, allow_other_workers=False)
                key = f"mlts-{unit.kind}-{unit.id}-{self._token}"
                futures[self.client.submit(run_unit, unit.to_text(), key=key, pure=False, **kwargs)] = unit
            for future in distributed.as_completed(list(futures), loop=self.client.loop):
                unit = futures[future]
                outcome = self._outcome(unit, future, progress)
                future.release()
                progress.finished(outcome)
                on_outcome(outcome)
        except BaseException:
            # Interrupted (Ctrl-C): what finished was handed on; the rest is cancelled, not left running.
            try:
                self.client.cancel(list(futures), force=True)
            except Exception:
                pass
            raise

    def _outcome(self, unit: Unit, future: Any, progress: UnitProgress) -> UnitOutcome:
        try:
            outcome = outcome_from_text(unit, future.result())
        except Exception as e:
            name = type(e).__name__
            if name == "KilledWorker":
                why = f"every worker that ran it died ({' '.join(str(e).split())[:300]})"
            else:
                why = f"{name}: {' '.join(str(e).split())[:300]}"
            outcome = UnitOutcome(unit, ok=False, error=why)
        outcome.attempts = progress.attempts(unit.id)
        return outcome


def local_cluster(distributed: Any, n: int) -> Any:
    """A cluster of `n` worker processes on this machine, one thread each; the first offers `timing`."""
    workers = {
        f"mlts-worker-{i}": {
            "cls": distributed.Nanny,
            "options": {
                "nthreads": 1,
                "resources": {TIMING_RESOURCE: 1} if i == 0 else {},
                "silence_logs": logging.ERROR,
                "memory_limit": 0,
            },
        }
        for i in range(n)
    }
    scheduler = {
        "cls": distributed.Scheduler,
        "options": {"dashboard_address": None, "host": "127.0.0.1", "port": 0},
    }
    return distributed.SpecCluster(workers=workers, scheduler=scheduler, silence_logs=logging.ERROR)


def open_executor(cluster: str | None):
    """The executor of `--cluster` (None: this process, one unit after another)."""
    return SerialExecutor() if cluster is None else DaskExecutor(cluster)
