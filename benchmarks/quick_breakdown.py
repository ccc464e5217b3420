"""Where a benchmark run's time goes: wall and CPU seconds per phase, per model and in all.

usage: python benchmarks/quick_breakdown.py [--json FILE] [--top N] -- [mlts benchmark options]

Runs `mlts benchmark` in this process with the given options (e.g. `--quick --drivers 'sample-all$'
--out DIR`) and records every progress phase the runner announces (building zoo models, convert,
onnxruntime reference outputs, golden outputs, compilation timings, prepare, warm-up and timing,
accuracy, ...). For each phase it prints the wall seconds and the CPU seconds of this process and
of its child processes (the driver process and any worker pools: live children read from /proc,
finished ones from os.times), summed over models, then the slowest models. The time from the last
phase to the end (writing results and the report) is the phase "report". With --out, the last line counts what ended the timed runs, warm-ups and compilation
timings (early stop: precise/stable, or the bound). CPU above wall means
several cores worked; CPU well below wall on a busy machine means waiting for a core.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict

_TICK = os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
        except OSError:
            continue
    return out


def _tree_cpu(pid: int) -> float:
    """CPU seconds of the live descendants of `pid` (not pid itself)."""
    total = 0.0
    todo = _children(pid)
    while todo:
        child = todo.pop()
        try:
            with open(f"/proc/{child}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / _TICK
        except (OSError, IndexError, ValueError):
            continue
        todo += _children(child)
    return total


def cpu_now() -> tuple[float, float]:
    """(CPU seconds of this process, of its children: finished ones and live descendants)."""
    t = os.times()
    return t.user + t.system, t.children_user + t.children_system + _tree_cpu(os.getpid())


def phase_kind(phase: str) -> str:
    """A phase name without its counts: "golden outputs for 100 images ..." -> "golden outputs"."""
    for kind in (
        "golden outputs",
        "accuracy over",
        "sequences step by step",
        "whole sequences",
        "building",
        "built",
    ):
        if kind in phase:
            return kind
    return phase


class Recorder:
    """A Progress that forwards to another and records (model, backend, phase) wall/CPU durations."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.rows: list[dict] = []
        self.current: tuple[str, str, str] | None = None
        self.t0 = time.monotonic()
        self.cpu0 = cpu_now()

    def _close_phase(self) -> None:
        now, cpu = time.monotonic(), cpu_now()
        if self.current is not None:
            model, backend, phase = self.current
            self.rows.append(
                {
                    "model": model,
                    "backend": backend,
                    "phase": phase_kind(phase),
                    "wall": now - self.t0,
                    "cpu_self": cpu[0] - self.cpu0[0],
                    "cpu_children": cpu[1] - self.cpu0[1],
                }
            )
        self.t0, self.cpu0 = now, cpu

    def plan(self, *a, **k):
        return self.inner.plan(*a, **k)

    def phase(self, model: str, backend: str, phase: str) -> None:
        self._close_phase()
        self.current = (model, backend, phase)
        self.inner.phase(model, backend, phase)

    def advance(self, *a, **k):
        return self.inner.advance(*a, **k)

    def unit_done(self):
        return self.inner.unit_done()

    def log(self, message: str):
        return self.inner.log(message)

    def close(self) -> None:
        self._close_phase()
        self.current = ("-", "-", "report")
        self.inner.close()

    def finish(self) -> None:
        self._close_phase()
        self.current = None


def summarise(rows: list[dict], top: int) -> str:
    by_phase: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    by_model: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for r in rows:
        key = r["phase"] if r["backend"] in ("-",) else f"{r['phase']} [{_kind(r['backend'])}]"
        for table, k in ((by_phase, key), (by_model, r["model"])):
            table[k][0] += r["wall"]
            table[k][1] += r["cpu_self"]
            table[k][2] += r["cpu_children"]
    wall = sum(v[0] for v in by_phase.values())
    lines = [f"{'phase':<52} {'wall s':>8} {'cpu self':>9} {'cpu kids':>9}"]
    for k, (w, s, c) in sorted(by_phase.items(), key=lambda kv: -kv[1][0]):
        lines.append(f"{k[:52]:<52} {w:8.1f} {s:9.1f} {c:9.1f}")
    lines.append(f"{'total':<52} {wall:8.1f}")
    lines.append("")
    lines.append(f"{'model':<52} {'wall s':>8} {'cpu self':>9} {'cpu kids':>9}")
    for k, (w, s, c) in sorted(by_model.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"{k[:52]:<52} {w:8.1f} {s:9.1f} {c:9.1f}")
    return "\n".join(lines)


def stop_counts(mlts_args: list[str]) -> str | None:
    """What ended the timed runs, warm-ups and compilation timings of the run's results (--out DIR)."""
    if "--out" not in mlts_args or mlts_args.index("--out") + 1 >= len(mlts_args):
        return None
    path = os.path.join(mlts_args[mlts_args.index("--out") + 1], "results.json")
    try:
        with open(path) as f:
            rows = json.load(f).get("results", [])
    except (OSError, ValueError):
        return None
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in rows:
        for part in ("run", "warmup"):
            stopped = (r.get(part) or {}).get("stopped")
            if stopped:
                counts[part][stopped] += 1
        for timing in ("without_cache", "save_to_cache", "prepare_from_cache"):
            stopped = ((r.get("compilation") or {}).get(timing) or {}).get("stopped")
            if stopped:
                counts["compilation timings"][stopped] += 1
    if not counts:
        return None
    parts = [f"{k}: " + ", ".join(f"{n} {why}" for why, n in sorted(v.items())) for k, v in counts.items()]
    return "stopped by: " + "; ".join(parts)


def _kind(backend: str) -> str:
    return "onnxruntime" if "onnxruntime" in backend else "driver"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the per-phase rows here")
    parser.add_argument("--top", type=int, default=12, help="slowest models to list")
    parser.add_argument("mlts_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    mlts_args = [a for a in args.mlts_args if a != "--"]

    import mlts.commands._progress as progress_module
    from mlts.cli import main as cli_main

    made: list[Recorder] = []
    original = progress_module.make_progress

    def make_progress(quiet: bool, verbose: bool):
        made.append(Recorder(original(quiet, verbose)))
        return made[-1]

    progress_module.make_progress = make_progress
    start = time.monotonic()
    try:
        cli_main(["benchmark", *mlts_args], standalone_mode=False)
    except SystemExit:
        pass
    total = time.monotonic() - start
    if not made:
        print("quick_breakdown: the benchmark did not start", file=sys.stderr)
        return 1
    made[0].finish()
    rows = made[0].rows
    print(summarise(rows, args.top))
    print(f"\nwall clock of the whole command: {total:.1f} s; load: {os.getloadavg()}")
    stops = stop_counts(mlts_args)
    if stops:
        print(stops)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"total_s": total, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
