"""A static plan's steps as one straight-line Python function: the executor's per-operation floor.

The plan's reference interpreter (`Plan._run_steps`) walks the steps in a loop: per operation it
loads the step's fields, gathers the arguments from a list of operand values by index and stores the
result back. For a plan whose
sizes are all checked in advance the same work can be written out once, operation by operation,
with every operand value in a local variable, and compiled: what is left per operation is the
checkpoint, the kernel call and the result's shape and dtype check.

The generated source holds only integers the plan chose (operand, step and operation indexes) and
names made from them; every object (steps, constants, declared shapes and dtypes) is reached through
the function's globals, so no text of a model ever becomes code. Each kernel is looked up on its
step at every call (`step.direct`), so replacing a step's kernel takes effect as in the loop.
Errors are the loop's, word for word: the kernel's HalError relabelled with the operation, any other
exception a GENERAL_FAILURE naming the operation and its inputs, a result of the wrong shape or type
reported by `check_output`.

Runs of consecutive steps whose kernels bind their compiled calls (driver.bound_steps) are written
as one call of their `Chunk`, with the steps' own code after it for a run the chunk declines.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from driver.bound_steps import Chunk, find_chunks
from driver.operation_kernel import check_output, kernel_failed, output_count_error, relabel
from mlts.hal.errors import HalError

# run(inputs, checkpoint, ws) -> outputs: inputs in the plan's input order, all with a value; a workspace.
StraightRun = Callable[[Sequence[Any], Any, Any], list]


def _checked(step: Any, results: Sequence[Any], operands: Sequence[Any]) -> list:
    """A multi-output step's results, each checked against its operand (the loop's `_store`)."""
    if len(results) != len(step.outputs):
        raise output_count_error(step, results)
    out = []
    for idx, want, declared, arr in zip(step.outputs, step.out_dtypes, step.out_shapes, results, strict=True):
        if declared is None or arr.shape != declared or arr.dtype != want:
            arr = check_output(step, idx, operands[idx], want, arr)
        out.append(arr)
    return out


def compile_steps(
    steps: Sequence[Any],
    input_indexes: Sequence[int],
    output_indexes: Sequence[int],
    template: Sequence[Any],
    operands: Sequence[Any],
    bind: bool = True,
    chunks_found: list[Chunk] | None = None,
) -> StraightRun:
    """The straight-line function of a static plan's steps (no IF or WHILE; see the module docstring);
    with `bind`, runs of steps whose kernels bind their compiled calls become `Chunk`s (appended to
    `chunks_found`, when given, in the order they run)."""
    names: dict[str, Any] = {
        "HalError": HalError,
        "check_output": check_output,
        "_relabel": relabel,
        "_failed": kernel_failed,
        "_count_error": output_count_error,
        "_checked": _checked,
        "_operands": operands,
    }
    inputs = set(input_indexes)
    written = {i for st in steps for i in st.outputs}

    def value(i: int) -> str:
        """How the code names operand i: a local for inputs and results, a global for the rest."""
        if i in inputs or i in written:
            return f"v{i}"
        names[f"c{i}"] = template[i]
        return f"c{i}"

    def step_lines(s: int, st: Any) -> list[str]:
        names[f"st{s}"] = st
        args = ", ".join(value(i) for i in st.inputs)
        out = [
            "    if checkpoint is not None:",
            f"        checkpoint({int(st.index)})",
            f"    ws.step = {int(st.number)}",
            f"    a = [{args}]",
            "    try:",
            f"        r = st{s}.direct(a)",
            "    except HalError as e:",
            f"        raise _relabel(st{s}, e) from None",
            "    except Exception as e:",
            f"        raise _failed(st{s}, a, e) from None",
        ]
        if st.single:
            idx = int(st.outputs[0])
            names[f"S{s}"], names[f"D{s}"] = st.out_shapes[0], st.out_dtypes[0]
            out += [
                "    if len(r) != 1:",
                f"        raise _count_error(st{s}, r)",
                "    x = r[0]",
                "    d = x.dtype",
                f"    if x.shape != S{s} or (d is not D{s} and d != D{s}):",
                f"        x = check_output(st{s}, {idx}, _operands[{idx}], D{s}, x)",
                f"    v{idx} = x",
            ]
        else:
            targets = "".join(f"v{int(i)}, " for i in st.outputs)
            out.append(
                f"    {targets}= _checked(st{s}, r, _operands)"
                if targets
                else f"    _checked(st{s}, r, _operands)"
            )
        for i in st.release:
            if i in inputs or i in written:
                out.append(f"    v{int(i)} = None")
        return out

    lines = ["def run(inputs, checkpoint, ws):"]
    if input_indexes:
        lines.append(f"    {', '.join(f'v{i}' for i in input_indexes)}, = inputs")
    for i in sorted(written - inputs):
        lines.append(f"    v{i} = None")
    chunks = find_chunks(steps, inputs, written, output_indexes, operands, template) if bind else {}
    if chunks_found is not None:
        chunks_found.extend(chunk for _, (_, chunk) in sorted(chunks.items()))
    s = 0
    while s < len(steps):
        found = chunks.get(s)
        if found is None:
            lines += step_lines(s, steps[s])
            s += 1
            continue
        end, chunk = found
        names[f"B{s}"] = chunk
        ext = "".join(f", v{int(i)}" for i in chunk.externals)
        lines += [f"    o = B{s}(ws, checkpoint{ext})", "    if o is None:"]
        for k in range(s, end):
            lines += ["    " + line for line in step_lines(k, steps[k])]
        lines.append("    else:")
        if chunk.needed:
            lines.append(f"        {''.join(f'v{int(i)}, ' for i in chunk.needed)}= o")
        released = {int(i) for st in steps[s:end] for i in st.release if i in chunk.externals}
        lines += [f"        v{i} = None" for i in sorted(released)] or ["        pass"]
        s = end
    lines.append(f"    return [{', '.join(value(i) for i in output_indexes)}]")
    code = compile("\n".join(lines) + "\n", "<driver plan>", "exec")
    exec(code, names)  # noqa: S102  (the source above holds only the plan's own integers)
    run: StraightRun = names["run"]
    return run
