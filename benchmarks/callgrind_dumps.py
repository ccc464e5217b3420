"""Counting a script's instructions between two markers with valgrind's callgrind, for the benchmarks.

A benchmark that counts instructions runs itself again as a child under callgrind
(`--zero-before=getsid --dump-before=getpgid`: the child calls `os.getsid(0)` where counting starts
and `os.getpgid(0)` where a count ends, two libc calls nothing else in its loop makes), prints one line
per counted item, and reads one dump per line: `run_counted` does that, `totals` reads a dump's
instruction count and `top` the functions of most self instructions in it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence


def totals(dump: str) -> int:
    """The instructions a callgrind dump counted."""
    with open(dump) as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise RuntimeError(f"{dump}: no totals line")


def top(dump: str, count: int, per: int) -> list[str]:
    """The `count` functions of most self instructions, divided by `per`, from callgrind_annotate."""
    annotate = shutil.which("callgrind_annotate")
    if annotate is None:
        return ["  (callgrind_annotate not found)"]
    cmd = [annotate, "--inclusive=no", "--threshold=100", "--auto=no", dump]
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    rows, total = [], totals(dump)
    for line in out.splitlines():
        found = re.match(r"\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(.*)$", line)
        if found is None or "PROGRAM TOTALS" in line:
            continue
        n = int(found.group(1).replace(",", ""))
        if n >= 0.995 * total:  # the frames a dump taken mid-run charges with everything
            continue
        rows.append(f"  {n / per:>12,.0f} {100 * n / total:5.1f}%  {found.group(2)[:110]}")
        if len(rows) >= count:
            break
    return rows


def run_counted(
    script: str,
    child_args: Sequence[str],
    names: Sequence[str],
    keep: str,
    timeout: float,
    report: Callable[[str, str], None],
) -> int:
    """Run `script --child CHILD_ARGS` under callgrind; for each line it prints that starts with one
    of `names`, call `report(line, dump path)` with that item's dump. Returns the exit status (2:
    no valgrind, 1: the child failed or left too few dumps). `keep`: a folder for the dumps."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        print("valgrind is not installed: no instruction counts", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="mlts-callgrind-") as tmp:
        where = keep or tmp
        os.makedirs(where, exist_ok=True)
        out = os.path.join(where, "callgrind.out")
        cmd = [
            valgrind, "--tool=callgrind", f"--callgrind-out-file={out}.%p", "--zero-before=getsid",
            "--dump-before=getpgid", "--dump-instr=no", "--compress-strings=no", sys.executable,
            os.path.abspath(script), "--child", *child_args,
        ]  # fmt: skip
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        lines = [line for line in run.stdout.splitlines() if line.split(" ", 1)[0] in names]
        if run.returncode != 0 or len(lines) != len(names):
            sys.stderr.write(run.stdout[-2000:] + run.stderr[-4000:])
            return 1
        dumps = sorted(
            (p for p in os.listdir(where) if p.startswith("callgrind.out.") and p.count(".") == 3),
            key=lambda p: int(p.rsplit(".", 1)[1]),
        )
        if len(dumps) < len(lines):
            sys.stderr.write(f"expected {len(lines)} callgrind dumps, found {len(dumps)}\n")
            return 1
        for line, dump in zip(lines, dumps, strict=False):
            report(line, os.path.join(where, dump))
    return 0
