"""Speed budgets the unit tests used to assert, checked here since the tests' machine may be busy.

usage: python benchmarks/speed_budgets.py [--repeat N]

- validating a MobileNet-sized model (100 ADDs on a 17 MiB pool): 50 ms. A driver validates every
  model it prepares (mlts.hal.validate: linear in the model, reading constant parameters only);
- loading a 17 MiB .nnm file with its checksums off: 0.5 s (the pool is mapped, not copied);
- generating a random 600-operation model (mlts.crash.random_graph, the random-load stress mode): 1 s.

The unit tests check what each does (no copies, a bounded allocation, a valid model). Prints the best
of N runs of each and exits 1 when one is over its budget.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from mlts.crash.random_graph import random_model
from mlts.crash.random_graph.spec import GraphSpec
from mlts.hal import nnfile
from mlts.hal.enums import OperandLifeTime, OperandType, OperationType
from mlts.hal.memory import HostMemory
from mlts.hal.types import DataLocation, Model, Operand, Operation, Subgraph
from mlts.hal.validate import validate_model

VALIDATE_BUDGET_S = 0.05
LOAD_BUDGET_S = 0.5
RANDOM_GRAPH_BUDGET_S = 1.0


def chain_model(layers: int = 100, pool_bytes: int = 17 * 1024 * 1024) -> Model:
    """A chain of `layers` ADDs, each adding a 16 KiB constant from one large pool (MobileNet-sized)."""
    shape, nbytes = (1, 64, 64, 1), 4 * 64 * 64
    f32, lt = OperandType.TENSOR_FLOAT32, OperandLifeTime
    operands = [
        Operand(f32, shape, 1, lifetime=lt.SUBGRAPH_INPUT),
        Operand(OperandType.INT32, (), layers, lifetime=lt.CONSTANT_COPY, location=DataLocation(0, 0, 4)),
    ]
    ops, prev = [], 0
    for k in range(layers):
        const = len(operands)
        ref = DataLocation(0, k * nbytes, nbytes)
        operands.append(Operand(f32, shape, 1, lifetime=lt.CONSTANT_REFERENCE, location=ref))
        out = len(operands)
        last = k == layers - 1
        operands.append(
            Operand(
                f32, shape, 0 if last else 1, lifetime=lt.SUBGRAPH_OUTPUT if last else lt.TEMPORARY_VARIABLE
            )
        )
        ops.append(Operation(OperationType.ADD, (prev, const, 1), (out,)))
        prev = out
    main = Subgraph(tuple(operands), tuple(ops), (0,), (prev,))
    return Model(main, operand_values=bytes(4), pools=(HostMemory(bytearray(pool_bytes)),))


def best_of(repeat: int, fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs of each; the best counts (default 5)")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    model = chain_model()
    validate_model(model)  # warm
    validate_s = best_of(args.repeat, lambda: validate_model(model))
    big = np.random.default_rng(0).integers(0, 255, 17 * 2**20, dtype=np.uint8)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "big.nnm"
        nnfile.write(Model(Subgraph((), (), (), ()), pools=(HostMemory(big.tobytes()),)), path)
        load_s = best_of(args.repeat, lambda: nnfile.load(path, verify_checksums=False))
    spec = GraphSpec(600)
    graph_s = max(best_of(args.repeat, lambda seed=seed: random_model(seed, spec)) for seed in (0, 1, 2))
    ok = True
    for what, took, budget in (
        ("validate_model, 100 ADDs on a 17 MiB pool", validate_s, VALIDATE_BUDGET_S),
        ("nnfile.load of a 17 MiB pool, checksums off", load_s, LOAD_BUDGET_S),
        ("random_model of 600 operations, slowest of seeds 0-2", graph_s, RANDOM_GRAPH_BUDGET_S),
    ):
        verdict = "within" if took <= budget else "OVER"
        ok = ok and took <= budget
        print(
            f"{what}: best of {args.repeat}: {took * 1e3:.1f} ms ({verdict} the {budget * 1e3:g} ms budget)"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
