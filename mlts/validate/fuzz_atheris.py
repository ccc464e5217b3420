"""Coverage-guided in-process fuzzing with atheris (libFuzzer for Python), run as a child process.

`campaign(target, cases, seconds, seed)` starts `python -m mlts.validate.fuzz_atheris`,
which instruments mlts.hal (the decoders and validators the service runs), seeds libFuzzer
with the target's seeds and runs the target's in-process check on every input. Mutation is
libFuzzer's own (checksums of .nnm mutants repaired) mixed with the target's structure-aware
mutator. Findings are written to a JSON lines file (the first input of each distinct one)
instead of stopping the run, so one campaign reports every bug it meets. This module imports
nothing from mlts at the top: atheris must instrument mlts.hal before it is first imported.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from typing import Any


def available() -> bool:
    """Whether atheris is installed (the `fuzz` extra)."""
    return importlib.util.find_spec("atheris") is not None


def campaign(name: str, cases: int | None, seconds: float | None, seed: int) -> tuple[int, float, list]:
    """Run target `name` under atheris; (inputs run, seconds libFuzzer ran, findings)."""
    from mlts.validate.fuzz_targets import TARGETS, Finding

    with tempfile.TemporaryDirectory(prefix="mlts-atheris-") as work:
        corpus = os.path.join(work, "corpus")
        os.makedirs(corpus)
        for k, data in enumerate(TARGETS[name]().seeds):
            with open(os.path.join(corpus, f"seed-{k}"), "wb") as f:
                f.write(data)
        found_path = os.path.join(work, "findings.jsonl")
        argv = [
            sys.executable,
            "-m",
            "mlts.validate.fuzz_atheris",
            name,
            found_path,
            corpus,
            f"-seed={seed % (2**31 - 1) + 1}",
            "-max_len=65536",
            "-rss_limit_mb=4096",
            "-print_final_stats=1",
        ]
        if cases is not None:
            argv.append(f"-runs={cases}")
        if seconds is not None:
            argv.append(f"-max_total_time={max(1, int(seconds))}")
        limit = (seconds or 0) + 60 + (cases or 0) / 50
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=limit,
            env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
        )
        runs, took = _runs(proc.stderr)
        findings = []
        if os.path.exists(found_path):
            with open(found_path, encoding="utf-8") as f:
                for line in f:
                    d = json.loads(line)
                    findings.append(Finding(d["kind"], d["detail"], bytes.fromhex(d["data"]), d["key"]))
        if proc.returncode not in (0,) and runs == 0:
            tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
            raise RuntimeError(f"atheris campaign of {name} failed (exit {proc.returncode}): {tail}")
        return runs, took, findings


def _runs(stderr: str) -> tuple[int, float]:
    """Inputs run and seconds taken, from libFuzzer's closing lines."""
    done = re.search(r"Done (\d+) runs in (\d+) second", stderr)
    if done:
        return int(done.group(1)), max(1.0, float(done.group(2)))
    m = re.search(r"stat::number_of_executed_units:\s*(\d+)", stderr)
    return (int(m.group(1)) if m else 0), 0.0


def main(argv: list[str]) -> None:  # pragma: no cover - runs in the child under libFuzzer
    import random

    import atheris

    with atheris.instrument_imports(include=["mlts.hal"]):
        from mlts.validate import fuzz_seeds
        from mlts.validate.fuzz_targets import TARGETS

    name, found_path = argv[1], argv[2]
    target = TARGETS[name]()
    seen: set[str] = set()

    def test_one_input(data: bytes) -> None:
        found = target.inproc(data)
        if found is not None and found.key not in seen:
            seen.add(found.key)
            record: dict[str, Any] = {
                "kind": found.kind,
                "detail": found.detail,
                "key": found.key,
                "data": found.data.hex(),
            }
            with open(found_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")

    def mutator(data: bytes, max_size: int, seed: int) -> bytes:
        rng = random.Random(seed)
        if rng.random() < 0.5:
            out = atheris.Mutate(data, max_size)
            return fuzz_seeds.fix_checksum(out) if name == "models" else out
        return target.mutate(rng)[:max_size]

    atheris.Setup([argv[0], *argv[3:]], test_one_input, custom_mutator=mutator)
    atheris.Fuzz()


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv)
