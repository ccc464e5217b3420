"""A user's 640x640 detector through `mlts benchmark --quick`, from an empty cache: how long, and where.

usage: python benchmarks/user_detector.py [--size 640] [--width 1] [--keep DIR] [-- extra mlts benchmark options]

Builds the synthetic DB-style text detector of `benchmarks/detector_model.py` (MobileNetV3-like
backbone, feature pyramid with nearest Resize, MaxPool context branch, two ConvTranspose
upsamplings, a [1, 1, size, size] probability map) and runs

    mlts benchmark --model det.onnx --drivers '^sample-all$' --quick

with MLTS_CACHE_DIR in a new empty folder (so the onnxruntime reference and the float64 golden
outputs are computed, not read), through benchmarks/quick_breakdown.py: wall and CPU seconds per
phase, then the run's wall clock against the goal of GOAL_S on a 2-core machine, and the verdict
the driver row got (it must pass, by the dense-map error rule). Meant for a quiet machine: on a
loaded one the figures say little.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL_S = 120.0
ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=640, help="input height and width (multiple of 32)")
    parser.add_argument("--width", type=int, default=1, help="channel multiplier of the detector")
    parser.add_argument("--keep", default=None, help="keep the model, cache and results in this folder")
    parser.add_argument("extra", nargs=argparse.REMAINDER, help="more mlts benchmark options after --")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import onnx

    from benchmarks.detector_model import detector

    with tempfile.TemporaryDirectory(prefix="mlts-user-detector-") as tmp:
        base = Path(args.keep) if args.keep else Path(tmp)
        base.mkdir(parents=True, exist_ok=True)
        model = base / "det.onnx"
        onnx.save(detector(args.size, args.width), str(model))
        cache = base / "cache"
        if cache.exists() and any(cache.iterdir()):
            print(f"user_detector: {cache} is not empty; give a new --keep folder", file=sys.stderr)
            return 2
        out = base / "results"
        extra = [a for a in args.extra if a != "--"]
        command = [
            sys.executable,
            str(ROOT / "benchmarks" / "quick_breakdown.py"),
            "--",
            "--model", str(model), "--drivers", "^sample-all$", "--quick", "--out", str(out), "--force", *extra,
        ]  # fmt: skip
        env = {**os.environ, "MLTS_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
        t0 = time.perf_counter()
        code = subprocess.run(command, env=env, check=False).returncode
        wall = time.perf_counter() - t0
        print(
            f"\n{args.size}x{args.size} detector, empty cache: {wall:.1f} s in all (goal: under {GOAL_S:.0f} s)"
        )
        results = out / "results.json"
        if results.is_file():
            for row in json.loads(results.read_text())["results"]:
                verdict = row.get("verdict") or {}
                print(
                    f"  {row['backend']}: {row['status']}, verdict "
                    f"{verdict.get('pass', '-')} ({verdict.get('rule_name', 'none')}), "
                    f"{(row.get('dataset') or {}).get('size')} inputs"
                )
        return code if code else (0 if wall < GOAL_S else 1)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
