"""What keeping tensors in driver buffers (memory domains) saves: LSTM state and partitioned intermediates.

usage: python benchmarks/memory_domains.py [--driver NAME] [--paths LIST] [--models LIST] [--pairs N]
       [--block N] [--steps N] [--sequences N] [--partition-pairs N] [--partition-block N]
       [--skip-lstm] [--skip-partition] [--instructions] [--instruction-pairs N] [--callgrind-dir DIR]
       [--timeout S]

On a shared or virtual machine the wall time of one way against the other drifts by more than
the difference being measured (two runs of the same tree gave opposite signs, +-25%). So the two
ways are never measured one after the other in long runs: both are prepared up front in one
process and run in many short blocks that alternate, C D D C C D ... (C: the state carried by the
client, D: the state in driver buffers), and each pair of adjacent blocks gives one ratio D/C.
What drifts (the clock, the neighbours' load, the cache) moves both blocks of a pair alike, so
the ratios are steady where the single medians are not. Reported per path:

- wall time per step of each way (the blocks' median), the median of the per-pair ratios D/C and
  its distribution-free 95% confidence interval (order statistics of the binomial(n, 1/2)
  distribution: no assumption on the ratios' distribution);
- the service's CPU time per step of each way (every thread of the driver process,
  /proc/PID/task/*/schedstat, nanoseconds), the client's (this process, `time.process_time_ns`)
  and the two together, each with its ratio and interval: the work a step costs, which a busy
  neighbour moves far less than the wall time;
- the verdict "driver state <= client state" for each measure: `yes` when the interval lies at
  or below 1 (noise cannot make D look no slower when it is slower), `no` when it lies above 1,
  `not shown` when it holds 1; and at the end how many paths gave each verdict, per measure;
- whether the main output of every step is bit for bit the same both ways.

1. asr_float and tts_float (`--models`) step by step on one driver (a private service), on each
   execution path (`--paths`, default sync,async,fenced,burst). Every sequence is cut to a whole
   number of blocks (`--block` steps, at most `--steps` per sequence); both ways step through the
   same frames, carry their state from block to block and reset it at the start of a sequence,
   outside the timed blocks, so a block times steps only. Before any block each way runs
   WARMUP_STEPS steps (first executions, request layouts, every driver buffer written once).
2. mobilenet_v2_0.35_128 partitioned across sample-minimal (ADD, CONCATENATION, CONV_2D) and
   sample-float-slow (the rest), each a private service: intermediates through the client (C)
   against through driver buffers where producer and readers share a driver (D), in alternating
   blocks of `--partition-block` inferences; both services' CPU time is counted.

`--instructions` counts instead what each step executes, in instructions, which no neighbour's
load moves: the service and this client each run under valgrind's callgrind (slow: minutes), with
polling off (MLTS_SOCKET_POLLING_US=0, MLTS_POLLING_STRETCH_US=0, bursts in low-power mode) so
only each call's own work is counted, and `--instruction-pairs` pairs of blocks per path. The
counters of both processes are zeroed before each block and dumped after it (`callgrind_control`,
from a parent process that is not under valgrind). The LSTM part only.

The CPU's model and flags and the load average are printed with the figures. The default run
takes well under a minute; this is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import glob
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

MODELS = ("asr_float", "tts_float")
#: Steps each way runs before anything is measured: enough for every driver buffer to have been
#: written once, so no block pays for binding a request afresh (a buffer's first write changes it).
WARMUP_STEPS = 8
#: The flags of /proc/cpuinfo that decide what the kernels can use.
CPU_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni")
#: Environment of the processes counted under callgrind: no polling, so only each call's work counts.
QUIET_ENV = {
    "MLTS_SOCKET_POLLING_US": "0",
    "MLTS_POLLING_STRETCH_US": "0",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


# ------------------------------------------------------------ statistics


def median_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float | None, float | None]:
    """The median of `values` and a distribution-free `level` confidence interval for it.

    The interval is [x_(l), x_(n+1-l)] of the sorted values, with l the largest rank for which
    P(Binomial(n, 1/2) < l) <= (1 - level) / 2: it holds the true median with probability at least
    `level` whatever the distribution. With too few values for any such interval (n < 6 at 95%) the
    bounds are None.
    """
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    n = len(ordered)
    mid = statistics.median(ordered)
    tail = (1.0 - level) / 2.0
    cumulative = 0.0
    rank = 0  # the largest l with P(B < l) <= tail
    for k in range(n + 1):
        if cumulative > tail:
            break
        rank = k
        cumulative += math.comb(n, k) / 2.0**n
    if rank < 1:
        return mid, None, None
    return mid, ordered[rank - 1], ordered[n - rank]


def verdict(low: float | None, high: float | None) -> str:
    """'yes' when a ratio D/C's interval lies at or below 1, 'no' when above 1, else 'not shown'."""
    if low is None or high is None:
        return "too few pairs"
    if high <= 1.0:
        return "yes"
    if low > 1.0:
        return "no"
    return "not shown"


def pair_orders(pairs: int) -> list[tuple[str, str]]:
    """The order of the two ways in each pair: C D, D C, C D, ... (drift within a pair hits both
    orders alike)."""
    return [("C", "D") if k % 2 == 0 else ("D", "C") for k in range(pairs)]


def block_cuts(lengths: Sequence[int], steps: int, block: int) -> list[tuple[int, int]]:
    """The blocks to run, as (sequence index, first step), one pass over the sequences: each
    sequence cut to at most `steps` steps, then to a whole number of `block`-step blocks."""
    cuts = []
    for s, length in enumerate(lengths):
        usable = min(length, steps) // block * block
        cuts += [(s, first) for first in range(0, usable, block)]
    return cuts


# ------------------------------------------------------------ the machine


def cpu_line() -> str:
    """The CPU's model, logical CPUs and the flags of CPU_FLAGS it has."""
    from mlts.records.environment import cpu_flags

    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    model = value.strip()
                    break
    except OSError:
        pass
    flags = cpu_flags() or set()
    have = [f for f in CPU_FLAGS if f in flags] or ["(flags unknown)"]
    return f"CPU: {model}, {os.cpu_count()} logical CPUs; flags {' '.join(have)}"


def load_line() -> str:
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "load average: unknown"
    return f"load average: {one:.2f} {five:.2f} {fifteen:.2f} (1, 5, 15 min)"


class ProcessClock:
    """The CPU time of every thread of process `pid` (ns), from /proc/PID/task/*/schedstat.

    A thread that ends takes its time with it, so `read` also returns the set of threads it saw:
    a block during which that set changed is left out of the CPU figures (the service keeps its
    threads between calls, so this does not happen in a steady run).
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def read(self) -> tuple[int, frozenset[str]] | None:
        total = 0
        try:
            tasks = os.listdir(f"/proc/{self.pid}/task")
        except OSError:
            return None
        seen = []
        for tid in tasks:
            try:
                with open(f"/proc/{self.pid}/task/{tid}/schedstat", encoding="ascii") as f:
                    total += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                continue  # ended meanwhile: the set below differs from the next reading's
            seen.append(tid)
        return total, frozenset(seen)


class Clocks:
    """Wall time, this process's CPU time and the service processes' CPU time around one block."""

    def __init__(self, pids: Sequence[int]) -> None:
        self.services = [ProcessClock(p) for p in pids]

    def start(self) -> tuple:
        return time.perf_counter(), time.process_time_ns(), [c.read() for c in self.services]

    def stop(self, started: tuple) -> tuple[float, int, int | None]:
        """(wall s, client CPU ns, service CPU ns or None when a service's threads changed)."""
        wall0, cpu0, svc0 = started
        wall = time.perf_counter() - wall0
        cpu = time.process_time_ns() - cpu0
        service: int | None = 0
        for clock, before in zip(self.services, svc0, strict=True):
            after = clock.read()
            if before is None or after is None or before[1] != after[1] or service is None:
                service = None
                continue
            service += after[0] - before[0]
        return wall, cpu, service


@dataclass
class Blocks:
    """What the blocks of one way measured."""

    steps: list[int] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)  # s per block
    client_cpu: list[int] = field(default_factory=list)  # ns per block
    service_cpu: list[int | None] = field(default_factory=list)  # ns per block (None: not counted)
    total_cpu: list[int | None] = field(default_factory=list)  # both processes' (None: not counted)

    def add(self, steps: int, measured: tuple[float, int, int | None]) -> None:
        self.steps.append(steps)
        self.wall.append(measured[0])
        self.client_cpu.append(measured[1])
        self.service_cpu.append(measured[2])
        self.total_cpu.append(None if measured[2] is None else measured[1] + measured[2])


def per_step_ratios(c: Blocks, d: Blocks, what: str) -> list[float]:
    """D/C of each pair for `what` ("wall", "client_cpu", "service_cpu", "total_cpu"), per step; pairs
    with a missing figure are left out."""
    ratios = []
    for k in range(len(c.steps)):
        a, b = getattr(c, what)[k], getattr(d, what)[k]
        if a is None or b is None or a <= 0:
            continue
        ratios.append((b / d.steps[k]) / (a / c.steps[k]))
    return ratios


def per_step(blocks: Blocks, what: str, scale: float) -> float | None:
    """The median over blocks of `what` per step, times `scale`."""
    values = [
        v / n * scale for v, n in zip(getattr(blocks, what), blocks.steps, strict=True) if v is not None
    ]
    return statistics.median(values) if values else None


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _ratio(ratios: list[float]) -> tuple[str, str]:
    if not ratios:
        return "-", "no pairs"
    mid, low, high = median_interval(ratios)
    shown = f"{mid:.3f} [{_fmt(low)}, {_fmt(high)}]"
    return shown, verdict(low, high)


#: What `report` prints: (Blocks field, name, scale to the unit, digits, unit).
MEASURES = (
    ("wall", "wall time", 1e3, 3, "ms"),
    ("service_cpu", "service CPU", 1e-3, 1, "us"),
    ("client_cpu", "client CPU", 1e-3, 1, "us"),
    ("total_cpu", "CPU of both", 1e-3, 1, "us"),
)


def tally(verdicts: dict[str, list[str]]) -> list[str]:
    """One line per measure: how many comparisons showed driver state <= client state."""
    lines = []
    for _, name, _, _, _ in MEASURES:
        said = verdicts.get(name, [])
        counts = {v: said.count(v) for v in dict.fromkeys(said)}
        shown = ", ".join(f"{v} {n}" for v, n in counts.items()) or "none"
        lines.append(f"  {name:<12} driver state <= client state: {shown} (of {len(said)})")
    return lines


def report(
    label: str,
    c: Blocks,
    d: Blocks,
    unit: str,
    equal: bool | None,
    names: tuple[str, str] = ("client state", "driver state"),
    verdicts: dict[str, list[str]] | None = None,
) -> list[str]:
    """The lines of one comparison: wall time, service, client and total CPU time per `unit` of each
    way (named `names`) and the paired ratios with their intervals and verdicts (also appended to
    `verdicts[measure]` when given)."""
    lines = [f"{label}: {len(c.steps)} pairs of blocks ({sum(c.steps)} {unit}s each way)"]
    for what, name, scale, digits, u in MEASURES:
        shown, said = _ratio(per_step_ratios(c, d, what))
        if verdicts is not None:
            verdicts.setdefault(name, []).append(said)
        lines.append(
            f"  {name + ' ' + u + '/' + unit:<24} {names[0]} {_fmt(per_step(c, what, scale), digits):>9}  "
            f"{names[1]} {_fmt(per_step(d, what, scale), digits):>9}  D/C {shown:<26} D<=C: {said}"
        )
    if equal is not None:
        lines.append(f"  main output bit for bit equal: {'yes' if equal else 'NO'}")
    return lines


# ------------------------------------------------------------ the LSTM models


class StateWay:
    """One way of carrying a recurrent model's state, on a Session of its own: on the client, or in
    driver buffers (mlts.runtime.driver_state.DriverState)."""

    def __init__(self, device, model, sig, mode: str, in_driver: bool, n_inputs: int) -> None:
        from mlts.runtime.driver_state import DriverState
        from mlts.runtime.session import Session

        self.sig = sig
        self.n_inputs = n_inputs
        self.session = Session(device, model, mode=mode)
        self.state: DriverState | None = None
        try:
            if in_driver:
                self.state = DriverState(self.session, sig.states)
        except BaseException:
            self.session.close()
            raise
        self.run = self.session.run if self.state is None else self.state.step
        self.carried: list = []

    def reset(self) -> None:
        import numpy as np

        self.carried = [np.zeros(shape, np.float32) for _, _, shape in self.sig.states]
        if self.state is not None:
            self.state.reset()

    def feed(self, x) -> list:
        import numpy as np

        feed = [np.empty(0, np.float32)] * self.n_inputs
        feed[self.sig.feature_input] = x
        for (i, _, _), value in zip(self.sig.states, self.carried, strict=True):
            feed[i] = value  # ignored for state kept in the driver
        return feed

    def block(self, frames) -> list:
        """Steps over `frames` ([steps, features]) from the carried state; the main outputs."""
        states, main, run = self.sig.states, self.sig.main_output, self.run
        out = []
        for x in frames:
            outs, _ = run(self.feed(x[None]))
            if self.state is None:
                self.carried = [outs[o] for _, o, _ in states]
            out.append(outs[main])
        return out

    def close(self) -> None:
        if self.state is not None:
            self.state.close()
        self.session.close()


def _ways(device, name: str, mode: str) -> tuple[dict[str, StateWay], object]:
    from mlts.bench import recurrent
    from mlts.convert import convert
    from mlts.models import zoo

    entry = zoo.get(name)
    conv = convert(zoo.load(name))
    sig = recurrent.StepSignature.of(entry, conv)
    ways: dict[str, StateWay] = {}
    try:
        for key, in_driver in (("C", False), ("D", True)):
            ways[key] = StateWay(device, conv.model, sig, mode, in_driver, len(conv.inputs))
    except BaseException:
        for way in ways.values():
            way.close()
        raise
    return ways, sig


def warm(ways: dict[str, StateWay], seqs: Sequence) -> None:
    """Both ways' first steps (first executions, request layouts, bursts, buffers written once)."""
    for way in ways.values():
        way.reset()
        way.block(seqs[0][:WARMUP_STEPS])


def lstm_blocks(
    ways: dict[str, StateWay],
    seqs: Sequence,
    cuts: Sequence[tuple[int, int]],
    block: int,
    pairs: int,
    measure: Callable[[str, Callable[[], list]], None],
) -> bool:
    """Run `pairs` pairs of blocks of both ways (order from `pair_orders`), walking `cuts` cyclically
    (both ways step through the same frames); `measure(way, run)` runs and times one block. Returns
    whether every block's main outputs were bit for bit the same both ways."""
    equal = True
    for k, order in enumerate(pair_orders(pairs)):
        s, first = cuts[k % len(cuts)]
        frames = seqs[s][first : first + block]
        outs = {}
        for key in order:
            way = ways[key]
            if first == 0:
                way.reset()  # outside the timed block: a block times steps only
            elif k == 0 or cuts[(k - 1) % len(cuts)] != (s, first - block):
                raise AssertionError("blocks must follow each other within a sequence")
            got: list = []
            measure(key, lambda way=way, got=got, frames=frames: got.extend(way.block(frames)))
            outs[key] = got
        equal = equal and all(
            a is not None and b is not None and a.tobytes() == b.tobytes()
            for a, b in zip(outs["C"], outs["D"], strict=True)
        )
    return equal


def _lstm(
    device, pid: int, name: str, mode: str, a: argparse.Namespace, verdicts: dict[str, list[str]]
) -> list[str]:
    from mlts.datasets import speech

    seqs = speech.sequences(name, a.sequences)
    cuts = block_cuts([len(s) for s in seqs], a.steps, a.block)
    if not cuts:
        raise SystemExit(
            f"--block {a.block} is longer than every sequence of {name} (cut to --steps {a.steps})"
        )
    ways, _ = _ways(device, name, mode)
    try:
        warm(ways, seqs)
        clocks = Clocks([pid])
        blocks = {"C": Blocks(), "D": Blocks()}

        def measure(key: str, run: Callable[[], list]) -> None:
            started = clocks.start()
            run()
            blocks[key].add(a.block, clocks.stop(started))

        equal = lstm_blocks(ways, seqs, cuts, a.block, a.pairs, measure)
    finally:
        for way in ways.values():
            way.close()
    return report(f"{name} {mode}", blocks["C"], blocks["D"], "step", equal, verdicts=verdicts)


# ------------------------------------------------------------ the partitioned model


def _partition(a: argparse.Namespace, log_dir: str) -> list[str]:
    import numpy as np

    from mlts.convert import convert
    from mlts.models import zoo
    from mlts.runtime.discovery import discover, open_device
    from mlts.runtime.partitioned import open_partitioned

    specs = discover()
    conv = convert(zoo.load("mobilenet_v2_0.35_128"))
    shape = tuple(int(d) for d in conv.model.main.operands[conv.model.main.input_indexes[0]].dimensions)
    x = np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float32)
    names = ("sample-minimal", "sample-float-slow")
    devices = {n: open_device(specs[n], log_path=f"{log_dir}/{n}.log") for n in names}
    lines = []
    try:
        sessions = {}
        try:
            for key, flag in (("C", False), ("D", True)):
                sessions[key] = open_partitioned(devices, conv.model, driver_buffers=flag)
            outs = {key: s.run([x])[0][0] for key, s in sessions.items()}  # and warm both up
            clocks = Clocks([d.process.pid for d in devices.values()])
            blocks = {"C": Blocks(), "D": Blocks()}
            for order in pair_orders(a.partition_pairs):
                for key in order:
                    started = clocks.start()
                    for _ in range(a.partition_block):
                        sessions[key].run([x])
                    blocks[key].add(a.partition_block, clocks.stop(started))
            kept = sessions["D"].describe()["driver_buffers"]
            steps = len(sessions["D"].plan.steps)
            lines.append(
                f"mobilenet_v2_0.35_128 over {', '.join(names)}: {steps} steps, "
                f"{len(kept['operands'])} intermediates kept in driver buffers, {len(kept['refused'])} refused; "
                "C: intermediates through the client, D: through driver buffers"
            )
            equal = outs["C"].tobytes() == outs["D"].tobytes()
            lines += report(
                "  partitioned", blocks["C"], blocks["D"], "inference", equal, ("via client", "via buffers")
            )
        finally:
            for s in sessions.values():
                s.close()
    finally:
        for d in devices.values():
            d.close()
    return lines


# ------------------------------------------------------------ instructions (callgrind)


def _callgrind_totals(path: str) -> int:
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise RuntimeError(f"{path}: no totals line")


class Callgrind:
    """Zeroes and dumps the counters of processes running under callgrind (`callgrind_control`)."""

    def __init__(self, control: str) -> None:
        self.control = control

    def _all(self, option: str, pids: Sequence[int]) -> None:
        procs = [
            subprocess.Popen(
                [self.control, option, str(p)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
            for p in pids
        ]
        for p, proc in zip(pids, procs, strict=True):
            _, err = proc.communicate(timeout=120)
            if proc.returncode != 0:
                raise RuntimeError(f"callgrind_control {option} {p}: {err.decode(errors='replace').strip()}")

    def instrument(self, pids: Sequence[int]) -> None:
        """Turn instrumentation on (the processes start with it off: their start-up runs faster)."""
        self._all("--instr=on", pids)

    def zero(self, pids: Sequence[int]) -> None:
        self._all("-z", pids)

    def dump(self, pids: Sequence[int]) -> None:
        self._all("-d", pids)


def _newest_dump(prefix: str, seen: set[str]) -> str:
    """The dump file of `prefix` not seen before (callgrind numbers each dump: PREFIX.N)."""
    fresh = [p for p in glob.glob(prefix + ".*") if p not in seen and p.rsplit(".", 1)[1].isdigit()]
    if len(fresh) != 1:
        raise RuntimeError(f"expected one new callgrind dump of {prefix}, found {len(fresh)}")
    seen.add(fresh[0])
    return fresh[0]


def _instruction_child(a: argparse.Namespace) -> int:
    """Under callgrind: the LSTM blocks against the service at `--socket`, each block bracketed by
    the parent (this process writes `zero`/`dump WAY STEPS` and waits for `ok` on stdin)."""
    from mlts.datasets import speech
    from mlts.runtime.discovery import discover, open_device
    from mlts.runtime.execution import set_burst_polling

    set_burst_polling(0)
    specs = discover(sockets=[a.socket])
    device = open_device(specs[a.driver])

    def ask(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
        if sys.stdin.readline().strip() != "ok":
            raise SystemExit("the parent stopped answering")

    try:
        for name in a.models:
            seqs = speech.sequences(name, a.sequences)
            cuts = block_cuts([len(s) for s in seqs], a.steps, a.block)
            if not cuts:
                raise SystemExit(f"--block {a.block} is longer than every sequence of {name}")
            for mode in a.paths:
                ways, _ = _ways(device, name, mode)
                try:
                    warm(ways, seqs)

                    def measure(
                        key: str, run: Callable[[], list], name: str = name, mode: str = mode
                    ) -> None:
                        ask("zero")
                        run()
                        ask(f"dump {name} {mode} {key} {a.block}")

                    equal = lstm_blocks(ways, seqs, cuts, a.block, a.instruction_pairs, measure)
                    ask(f"equal {name} {mode} {int(equal)}")
                finally:
                    for way in ways.values():
                        way.close()
    finally:
        device.close()
    return 0


def _instructions(a: argparse.Namespace, argv: Sequence[str]) -> int:
    valgrind, control = shutil.which("valgrind"), shutil.which("callgrind_control")
    if valgrind is None or control is None:
        print("valgrind (with callgrind_control) is not installed: no instruction counts", file=sys.stderr)
        return 2
    from mlts.runtime.discovery import discover

    specs = discover()
    if a.driver not in specs or specs[a.driver].socket is not None:
        print(f"--driver {a.driver}: not a driver this script can start under valgrind", file=sys.stderr)
        return 2
    env = {**os.environ, **QUIET_ENV}
    cg = Callgrind(control)
    with tempfile.TemporaryDirectory(prefix="mlts-md-callgrind-") as tmp:
        sock = os.path.join(tmp, "service.sock")
        dumps = tmp if a.callgrind_dir is None else a.callgrind_dir
        if a.callgrind_dir is not None:
            os.makedirs(dumps, exist_ok=True)
            stale = glob.glob(os.path.join(dumps, "service.cg*")) + glob.glob(
                os.path.join(dumps, "client.cg*")
            )
            if stale:
                print(
                    f"--callgrind-dir {dumps}: holds dumps of an earlier run; give an empty folder",
                    file=sys.stderr,
                )
                return 2
        svc_out, cli_out = os.path.join(dumps, "service.cg"), os.path.join(dumps, "client.cg")
        common = [
            valgrind,
            "--tool=callgrind",
            "--instr-atstart=no",
            "--dump-instr=no",
            "--compress-strings=no",
        ]
        service_cmd = [
            *common,
            f"--callgrind-out-file={svc_out}",
            f"--log-file={svc_out}.log",
            sys.executable,
            "-m",
            "mlts.ipc.service",
            "--factory",
            specs[a.driver].factory,
            "--name",
            a.driver,
            "--socket",
            sock,
            "--parent-pid",
            str(os.getpid()),
        ]
        with open(os.path.join(tmp, "service.log"), "wb") as log:
            service = subprocess.Popen(service_cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)
        child = None
        try:
            deadline = time.monotonic() + a.timeout
            while not os.path.exists(sock):
                if service.poll() is not None or time.monotonic() > deadline:
                    with open(os.path.join(tmp, "service.log"), "rb") as f:
                        sys.stderr.write(f.read()[-3000:].decode(errors="replace"))
                    print("the service under valgrind did not start", file=sys.stderr)
                    return 1
                time.sleep(0.5)
            child_cmd = [*common, f"--callgrind-out-file={cli_out}", f"--log-file={cli_out}.log"]
            child_cmd += [sys.executable, os.path.abspath(__file__)]
            child_cmd += [*argv, "--child", "--socket", sock]
            child = subprocess.Popen(
                child_cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True, bufsize=1
            )
            return _bracket(a, cg, service.pid, child, svc_out, cli_out)
        finally:
            if child is not None and child.poll() is None:
                child.kill()
                child.wait()
            service.terminate()
            try:
                service.wait(60)
            except subprocess.TimeoutExpired:
                service.kill()
                service.wait()


def _bracket(
    a: argparse.Namespace, cg: Callgrind, service_pid: int, child, svc_out: str, cli_out: str
) -> int:
    """Answer the child's requests: zero both processes' counters, or dump them and note the counts."""
    pids = (service_pid, child.pid)
    seen_svc: set[str] = set(glob.glob(svc_out + ".*"))
    seen_cli: set[str] = set(glob.glob(cli_out + ".*"))
    counts: dict[tuple[str, str], dict[str, list[tuple[int, int, int]]]] = {}
    instrumented = False
    print(cpu_line())
    print(load_line())
    print(
        f"instructions per step under callgrind (polling off), {a.instruction_pairs} pairs of "
        f"{a.block}-step blocks per path; C: state on the client, D: state in driver buffers"
    )
    print(
        f"{'model':<10} {'path':<7} {'client C':>11} {'client D':>11} {'service C':>11} {'service D':>11} "
        f"{'total C':>11} {'total D':>11} {'D/C':>7}  bit-equal"
    )
    assert child.stdin is not None and child.stdout is not None
    for line in child.stdout:
        words = line.split()
        if not words:
            continue
        if words[0] == "zero":
            if not instrumented:
                cg.instrument(pids)
                instrumented = True
            cg.zero(pids)
        elif words[0] == "dump":
            cg.dump(pids)
            name, mode, key, steps = words[1], words[2], words[3], int(words[4])
            svc_dump, cli_dump = _newest_dump(svc_out, seen_svc), _newest_dump(cli_out, seen_cli)
            svc, cli = _callgrind_totals(svc_dump), _callgrind_totals(cli_dump)
            counts.setdefault((name, mode), {"C": [], "D": []})[key].append((steps, cli, svc))
            if a.callgrind_dir is not None:  # which dump is which block
                with open(os.path.join(a.callgrind_dir, "blocks.txt"), "a", encoding="utf-8") as index:
                    index.write(f"{name} {mode} {key} {steps} steps: {svc_dump} {cli_dump}\n")
        elif words[0] == "equal":
            name, mode = words[1], words[2]
            print(instruction_row(name, mode, counts[(name, mode)], words[3] == "1"), flush=True)
        else:
            sys.stdout.write(line)
            continue
        child.stdin.write("ok\n")
        child.stdin.flush()
    if counts:
        print("instructions per step, over every model and path:")
        for row in instruction_tally(counts):
            print(row)
    return child.wait(a.timeout)


def _instructions_per_step(ways: dict[str, list[tuple[int, int, int]]], key: str, part: int) -> float:
    """Instructions per step of way `key`'s blocks ((steps, client, service) each): part 1 the client's,
    2 the service's."""
    rows = ways[key]
    return sum(r[part] for r in rows) / sum(r[0] for r in rows)


def instruction_tally(counts: dict[tuple[str, str], dict[str, list[tuple[int, int, int]]]]) -> list[str]:
    """How many paths took no more instructions per step with driver state, per process and both."""
    lines = []
    for label, parts in (("client", (1,)), ("service", (2,)), ("both", (1, 2))):
        fewer = sum(
            sum(_instructions_per_step(ways, "D", p) for p in parts)
            <= sum(_instructions_per_step(ways, "C", p) for p in parts)
            for ways in counts.values()
        )
        lines.append(f"  {label:<8} driver state <= client state on {fewer} of {len(counts)} paths")
    return lines


def instruction_row(name: str, mode: str, ways: dict[str, list[tuple[int, int, int]]], equal: bool) -> str:
    def per_step(key: str, part: int) -> float:
        return _instructions_per_step(ways, key, part)

    cli_c, cli_d, svc_c, svc_d = per_step("C", 1), per_step("D", 1), per_step("C", 2), per_step("D", 2)
    total_c, total_d = cli_c + svc_c, cli_d + svc_d
    return (
        f"{name:<10} {mode:<7} {cli_c:>11,.0f} {cli_d:>11,.0f} {svc_c:>11,.0f} {svc_d:>11,.0f} "
        f"{total_c:>11,.0f} {total_d:>11,.0f} {total_d / total_c:>7.4f}  {'yes' if equal else 'NO'}"
    )


# ------------------------------------------------------------ main


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--driver", default="sample-all")
    p.add_argument("--paths", default="sync,async,fenced,burst", help="execution paths, comma separated")
    p.add_argument("--models", default=",".join(MODELS), help="LSTM models, comma separated")
    p.add_argument("--pairs", type=_positive, default=24, help="pairs of blocks per path (LSTM)")
    p.add_argument("--block", type=_positive, default=8, help="steps per block (LSTM)")
    p.add_argument("--steps", type=_positive, default=40, help="steps per sequence at most (LSTM)")
    p.add_argument("--sequences", type=_positive, default=2)
    p.add_argument("--partition-pairs", type=_positive, default=12, help="pairs of blocks (partitioned)")
    p.add_argument("--partition-block", type=_positive, default=2, help="inferences per block (partitioned)")
    p.add_argument("--skip-lstm", action="store_true")
    p.add_argument("--skip-partition", action="store_true")
    p.add_argument(
        "--instructions", action="store_true", help="count instructions under callgrind instead (slow)"
    )
    p.add_argument("--instruction-pairs", type=_positive, default=3, help="pairs of blocks per path counted")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds the valgrind run may take")
    p.add_argument(
        "--callgrind-dir",
        help="keep the callgrind dumps here (one per block and process, for callgrind_annotate)",
    )
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--socket", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    from mlts.runtime.execution import EXECUTION_MODES

    a.paths = [m.strip() for m in a.paths.split(",") if m.strip()]
    unknown = [m for m in a.paths if m not in EXECUTION_MODES]
    if unknown or not a.paths:
        p.error(f"--paths: choose among {', '.join(EXECUTION_MODES)}")
    a.models = [m.strip() for m in a.models.split(",") if m.strip()]
    if not a.models or any(m not in MODELS for m in a.models):
        p.error(f"--models: choose among {', '.join(MODELS)}")
    if a.child:
        return _instruction_child(a)
    if a.instructions:
        return _instructions(a, [x for x in argv if x != "--instructions"])

    from mlts.hal.errors import HalError
    from mlts.runtime.discovery import discover, open_device

    print(cpu_line())
    print(load_line(), flush=True)
    with tempfile.TemporaryDirectory(prefix="mlts-md-bench-") as log_dir:
        try:
            if not a.skip_lstm:
                specs = discover()
                if a.driver not in specs:
                    p.error(f"--driver {a.driver}: unknown; known: {', '.join(sorted(specs))}")
                device = open_device(specs[a.driver], log_path=f"{log_dir}/driver.log")
                try:
                    print(
                        f"LSTM steps on {a.driver}: state on the client (C) against in driver buffers (D), "
                        f"blocks of {a.block} steps alternating C D, D C, ...; ratios D/C per pair, "
                        "median [distribution-free 95% interval]"
                    )
                    pid = device.process.pid
                    verdicts: dict[str, list[str]] = {}
                    for name in a.models:
                        for mode in a.paths:
                            for line in _lstm(device, pid, name, mode, a, verdicts):
                                print(line, flush=True)
                    print("LSTM verdicts over every model and path:")
                    for line in tally(verdicts):
                        print(line)
                finally:
                    device.close()
            if not a.skip_partition:
                for line in _partition(a, log_dir):
                    print(line, flush=True)
        except HalError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    print(load_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
