"""Build the zoo models a run needs and the cache lacks, several at a time, before the run starts.

A zoo model is built on first use (zoo.model_path); a first benchmark of the whole zoo would build
some thirty models one after the other, most of the time on one core and without a word. This
builds the missing ones in worker processes (one per CPU, at most `workers`), float models first
and then the 8-bit models quantized from them, and reports each as it lands. Workers are spawned,
not forked (the caller may hold threads), and write through the same locked, atomic cache step, so
a concurrent run or a later `model_path` sees each model whole or not at all.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence

from mlts.models import zoo


def missing(names: Sequence[str]) -> list[str]:
    """The zoo models among `names` whose cached file does not exist yet (valid or not is checked on use)."""
    return [n for n in dict.fromkeys(names) if not zoo.cache_path(zoo.get(n)).is_file()]


def _build(name: str) -> tuple[str, float]:
    t0 = time.monotonic()
    zoo.model_path(name)
    return name, time.monotonic() - t0


def default_workers() -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 4))


def build_missing(
    names: Sequence[str], report: Callable[[str], None] = print, workers: int | None = None
) -> list[str]:
    """Build every model of `names` missing from the cache (the float models quantized ones are made
    from too); report each as it is built. Returns the names built. A failed build is left for
    its first use to report (one line, as for any model)."""
    wanted = list(dict.fromkeys(names))
    need = set(missing(wanted))
    for n in list(need):
        base = zoo.get(n).float_name
        if base is not None and base not in wanted and missing([base]):
            need.add(base)
    if not need:
        return []
    order = [m.name for m in zoo.list_models() if m.name in need]
    waves = [[n for n in order if zoo.get(n).float_name is None], [n for n in order if zoo.get(n).float_name]]
    workers = workers or default_workers()
    report(
        f"building {len(order)} zoo model(s) not in the cache yet ({zoo.cache_dir()}), "
        f"{min(workers, len(order))} at a time; later runs reuse them"
    )
    done: list[str] = []
    t0 = time.monotonic()
    for wave in (w for w in waves if w):
        if workers == 1 or len(wave) == 1:
            for n in wave:
                _note(_safe(n), done, len(order), report)
            continue
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(min(workers, len(wave)), mp_context=context) as pool:
            futures = {pool.submit(_build, n): n for n in wave}
            for future in as_completed(futures):
                try:
                    result: tuple[str, float | None] = future.result()
                except Exception:  # noqa: BLE001 - reported again, in one line, where the model is used
                    result = (futures[future], None)
                _note(result, done, len(order), report)
    report(f"built {len(done)} zoo model(s) in {time.monotonic() - t0:.0f} s")
    return done


def _safe(name: str) -> tuple[str, float | None]:
    try:
        return _build(name)
    except Exception:  # noqa: BLE001
        return name, None


def _note(
    result: tuple[str, float | None], done: list[str], total: int, report: Callable[[str], None]
) -> None:
    name, seconds = result
    if seconds is None:
        report(f"  could not build {name} (its run will say why)")
        return
    done.append(name)
    report(f"  built {name} in {seconds:.0f} s ({len(done)}/{total})")
