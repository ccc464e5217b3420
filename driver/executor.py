"""The executor: a plan built once at prepare time, run for every request.

The plan holds, per operation, the kernel's `run` closure (weights already
packed), where each input comes from, and after which step each temporary
can be dropped, so intermediate tensors live no longer than needed. It also
keeps the arrays the kernels packed through `driver.ops._base.packed`, keyed
by (operation index, name): what the compilation cache stores, and what a
plan built from the cache is given instead of packing again.

Two engines run a plan. The reference interpreter (`Plan._run_steps`) walks
the steps in a loop and runs every plan: with IF and WHILE, with sizes known
only at run time (checked before each step allocates), with model inputs
left without a value, and timing each operation when asked. A plan whose
every size is checked in advance (a static plan within its memory budget)
runs on the fast engine instead: its steps as one compiled straight-line
function (`driver.straight_line`) whose runs of bindable kernels are chunks
of compiled calls (`driver.bound_steps`). Both give the same results and the
same errors, word for word. Preparing one operation's
kernel and checking its results live in `driver.operation_kernel`.

Floating point: TENSOR_FLOAT16 operations are computed in float32 and rounded
to float16 (`driver.ops._adapt`). A model with relaxComputationFloat32toFloat16
runs exactly like the same model without it, in float32, as NNAPI's CPU
executor does: the flag permits float16 range and precision, it does not
require them, and float32 results are within the relaxed (fp16) tolerance.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from driver import control_flow, shapes
from driver.bound_steps import Chunk
from driver.budget import ExecutionMemory
from driver.control_flow import CONTROL_FLOW, referenced_subgraphs
from driver.operands import constant_value, dtype_of
from driver.operation_kernel import (  # noqa: F401  (the plan's public helpers, imported from here too)
    Checkpoint,
    check_output,
    describe_args,
    kernel_failed,
    no_kernel,
    op_name,
    operation_label,
    output_count_error,
    prepare_operation,
    relabel,
    type_name,
)
from driver.ops._base import Binding, PackedArrays, packing_step
from driver.ops._workspace import CURRENT as _CURRENT
from driver.ops._workspace import Workspace, WorkspacePool, current
from driver.straight_line import StraightRun, compile_steps
from mlts.hal.enums import ErrorStatus, OperandLifeTime
from mlts.hal.errors import HalError
from mlts.hal.extensions import ExtensionSpec
from mlts.hal.types import LOOP_TIMEOUT_DEFAULT_NS, Model


@dataclass(slots=True)
class Step:
    index: int
    type: int
    run: Callable[[Sequence[Any]], list[np.ndarray]]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    release: tuple[int, ...]  # temporaries whose last reader is this step
    out_dtypes: tuple[np.dtype, ...]  # what each output must be, looked up once at prepare
    out_shapes: tuple[tuple[int, ...] | None, ...]  # each output's declared shape when fully known
    declared: tuple[tuple[int, ...], ...] = ()  # the output operands' dimensions (0: unknown)
    control: control_flow.ControlStep | None = None  # IF/WHILE: runs referenced subgraphs
    number: int = 0  # the step's number across subgraphs (main first): keys packed arrays and buffers
    label: str = ""  # how errors name the operation (operation_label), made once at prepare
    single: bool = False  # exactly one output (the common case, checked without a loop)
    direct: Callable[[Sequence[Any]], list[np.ndarray]] = (
        no_kernel  # `run` when every model input has a value
    )
    binding: Binding | None = None  # how `direct` runs inside a chunk of compiled calls (bound_steps)


def step_offset(model: Model, sub_index: int) -> int:
    """Plans number steps across subgraphs (main first, then referenced in order): the cache's keys."""
    if sub_index < 0:
        return 0
    return len(model.main.operations) + sum(len(g.operations) for g in model.referenced[:sub_index])


def total_steps(model: Model) -> int:
    return len(model.main.operations) + sum(len(g.operations) for g in model.referenced)


#: The longest plan compiled into one straight-line function (longer ones run the step loop).
MAX_STRAIGHT_STEPS = 4096


class Plan:
    """A validated model (or one of its referenced subgraphs) compiled for the NumPy executor.

    `packed` (from the compilation cache) gives every operation's packed arrays instead of computing
    them; every one of them must be asked for. `self.packed` holds the arrays the plan uses until
    `release_packed` (the driver's call once a preparation has written its cache); with
    `keep_packed=False` (no cache will be written) it never holds them, so each matrix a kernel packs
    and lets go of is freed at once, and `packed_names` lists them.
    A plan for main builds one plan per referenced subgraph (shared by every IF/WHILE naming it);
    steps are numbered across subgraphs (`step_offset`), which keys the packed arrays and the
    workspace buffers. `progress(step number)`, when given, is called before each operation is
    prepared; it may raise to abandon the preparation (the driver's deadline check).
    """

    def __init__(
        self,
        model: Model,
        packed: Mapping[tuple[int, str], np.ndarray] | None = None,
        extensions: Sequence[ExtensionSpec] = (),
        *,
        sub_index: int = -1,
        shared: _Shared | None = None,
        progress: Callable[[int], None] | None = None,
        keep_packed: bool = True,
        bind: bool = True,
    ) -> None:
        self.model = model
        self._bind = bind  # False: the compiled calls of a run are never bound (each step runs alone)
        self.sub_index = sub_index
        top = shared is None
        if shared is None:
            shared = _Shared(packed, extensions, progress)
            if not keep_packed:
                shared.record = _NamesOnly()
        self.packed: PackedArrays = shared.record
        self._packed_names: tuple[tuple[int, str], ...] | None = None  # set by `release_packed`
        sub = model.subgraph(sub_index)
        self.sub = sub
        self.workspaces = WorkspacePool()
        self.input_indexes = sub.input_indexes
        self.output_indexes = sub.output_indexes
        # Values available before the first step: constants and omitted operands.
        self.constants: dict[int, Any] = {}
        for i, operand in enumerate(sub.operands):
            if operand.lifetime in (OperandLifeTime.CONSTANT_COPY, OperandLifeTime.CONSTANT_REFERENCE):
                self.constants[i] = constant_value(model, operand)
            elif operand.lifetime == OperandLifeTime.NO_VALUE:
                self.constants[i] = None
            elif operand.lifetime == OperandLifeTime.SUBGRAPH:
                self.constants[i] = None  # the step holds the subgraph's plan
        # What every run's operand values start from: the constants, None for everything else.
        self._template: list[Any] = [None] * len(sub.operands)
        for i, v in self.constants.items():
            self._template[i] = v
        last_read: dict[int, int] = {}
        for s, op in enumerate(sub.operations):
            for i in op.inputs:
                last_read[i] = s
        keep = set(self.output_indexes) | set(self.constants)
        # Operands a request (or an enclosing IF/WHILE) may leave without a value.
        inputs = set(self.input_indexes)
        may_lack = inputs | {i for i, v in self.constants.items() if v is None}
        base = step_offset(model, sub_index)
        self.steps: list[Step] = []
        for s, op in enumerate(sub.operations):
            release = tuple(i for i in set(op.inputs) if last_read.get(i) == s and i not in keep)
            out_dtypes = tuple(dtype_of(sub.operands[i].type) for i in op.outputs)
            out_shapes = tuple(_known_shape(sub.operands[i].dimensions) for i in op.outputs)
            declared = tuple(tuple(sub.operands[i].dimensions) for i in op.outputs)
            step = Step(
                s, op.type, no_kernel, op.inputs, op.outputs, release, out_dtypes, out_shapes, declared
            )
            if shared.progress is not None:
                shared.progress(base + s)  # may abandon the preparation (a deadline passed)
            step.number = base + s
            step.single = len(op.outputs) == 1
            step.label = operation_label(s, op.type, sub_index, model)
            if op.type in CONTROL_FLOW:
                plans = [shared.plan(model, r) for r in referenced_subgraphs(model, sub, op)]
                step.control = control_flow.build(op, plans, len(op.outputs))
            else:
                with packing_step(base + s, self.packed, shared.cached):
                    kernel = prepare_operation(model, s, shared.extensions, sub_index)
                step.run = kernel.run
                if not any(i in may_lack for i in op.inputs):
                    # Every input is a constant or another operation's result: never without a value.
                    step.run = kernel.fast
                step.direct = step.run
                if not any(i in may_lack and i not in inputs for i in op.inputs):
                    # Only model inputs may lack a value: a run whose inputs all have one skips the check.
                    step.direct = kernel.fast
                step.binding = kernel.binding
            self.steps.append(step)
        self._control = any(st.control is not None for st in self.steps)
        self._straight: StraightRun | None = None  # compiled by `warm` or the first checked run
        self._straight_tried = False
        self._chunks: list[Chunk] = []  # the straight-line function's bound runs (driver.bound_steps)
        self.memory_budget = shapes.DEFAULT_MEMORY_BUDGET
        self._output_of = {idx: k for k, idx in enumerate(self.output_indexes)}
        self._declared_outputs = tuple(tuple(sub.operands[i].dimensions) for i in self.output_indexes)
        self._static_sizes(sub)
        if top and not keep_packed:
            self.release_packed()
        if top and packed is not None:
            unused = sorted(set(packed) - set(self.packed_names))
            if unused:
                step_no, name = unused[0]
                raise HalError(
                    ErrorStatus.GENERAL_FAILURE,
                    f"the compilation cache holds {len(unused)} packed array(s) no operation asked for "
                    f"(first: {name!r} of operation {step_no})",
                )

    def _budget(self, output_limits: Sequence[int | None] | None) -> shapes.Budget:
        return shapes.Budget(self.memory_budget, self._output_of, output_limits, self._declared_outputs)

    def _static_sizes(self, sub) -> None:
        """When every tensor's shape is declared, what every execution would check is known now:
        the peak bytes held at once and each model output's size (the fast path of `shape_pass`)."""
        self._static = all(
            st.control is None and all(o is not None for o in st.out_shapes) for st in self.steps
        )
        self._static_inputs: tuple[tuple[int, ...], ...] | None = None
        self._static_peak = 0
        self._static_output_bytes: tuple[int, ...] = ()
        if not self._static:
            return
        outs = [sub.operands[i] for i in self.output_indexes]
        if not all(o.dimensions and all(o.dimensions) for o in outs):
            self._static = False
            return
        self._static_output_bytes = tuple(shapes.nbytes(tuple(o.dimensions), dtype_of(o.type)) for o in outs)
        held: dict[int, int] = {}
        for st in self.steps:
            for idx, known, dtype in zip(st.outputs, st.out_shapes, st.out_dtypes, strict=True):
                assert known is not None  # a static plan
                size = shapes.nbytes(known, dtype)
                self._static_peak = max(self._static_peak, size + sum(held.values()))
                held[idx] = size
            for idx in st.release:
                held.pop(idx, None)
        self._static_predicted: list[list[shapes.Shape] | None] = [
            [o for o in st.out_shapes if o is not None] for st in self.steps
        ]
        # A referenced subgraph runs checked in advance when its inputs have the declared shapes.
        ins = [sub.operands[i].dimensions for i in self.input_indexes]
        if all(d and all(d) for d in ins):
            self._static_inputs = tuple(tuple(d) for d in ins)

    def _static_fits(self, output_limits: Sequence[int | None] | None) -> bool:
        """A static plan within the memory budget whose outputs fit their buffers: nothing to check per run."""
        if not self._static or self._static_peak > self.memory_budget:
            return False
        if output_limits is not None:
            for need, limit in zip(self._static_output_bytes, output_limits, strict=False):
                if limit is not None and need > limit:
                    return False
        return True

    def shape_pass(
        self, inputs: Sequence[np.ndarray | None], output_limits: Sequence[int | None] | None = None
    ) -> list[list[shapes.Shape] | None]:
        """Each step's output shapes where they are known without running anything, checked
        against the output buffers (`output_limits`, bytes per model output) and the memory budget.

        Raises OUTPUT_INSUFFICIENT_SIZE or RESOURCE_EXHAUSTED_PERSISTENT before any kernel runs.
        """
        if self._static_fits(output_limits):
            return self._static_predicted
        budget = self._budget(output_limits)
        values: dict[int, Any] = dict(self.constants)
        known: dict[int, shapes.Shape] = {i: np.shape(v) for i, v in self.constants.items() if v is not None}
        for idx, arr in zip(self.input_indexes, inputs, strict=True):
            values[idx] = arr
            if arr is not None:
                known[idx] = np.shape(arr)
        held: dict[int, int] = {}
        predicted: list[list[shapes.Shape] | None] = []
        for step in self.steps:
            out = shapes.infer(
                step.type,
                step.declared,
                [known.get(i) for i in step.inputs],
                [values.get(i) for i in step.inputs],
            )
            predicted.append(out)
            if out is not None:
                for idx, shape, dtype in zip(step.outputs, out, step.out_dtypes, strict=True):
                    held[idx] = budget.check(step.label, idx, shape, dtype, sum(held.values()))
                    known[idx] = shape
            for idx in step.release:
                held.pop(idx, None)
        budget.raise_if_short()
        return predicted

    def run(
        self,
        inputs: Sequence[np.ndarray | None],
        checkpoint: Checkpoint | None = None,
        loop_timeout_ns: int | None = None,
        output_limits: Sequence[int | None] | None = None,
        op_times: list[tuple[int, int]] | None = None,
        *,
        checked: bool = False,
        predicted: list[list[shapes.Shape] | None] | None = None,
        sink: Callable[[list[np.ndarray]], Any] | None = None,
        workspace: Workspace | None = None,
    ) -> Any:
        """Run the plan on the model inputs (in input_indexes order); returns the outputs.

        `checkpoint` is called before every operation, inside referenced subgraphs too; a WHILE loop
        running longer than `loop_timeout_ns` (default 2 s) ends in MISSED_DEADLINE_TRANSIENT.
        Sizes are checked before they are allocated: first every shape known in advance
        (`shape_pass`), then before each step the shapes its rule gives on the real inputs.
        The run holds one workspace of reused buffers (see `driver.ops._workspace`) from start to
        end; concurrent runs of this plan each hold their own. Results that live in it are copied.
        `op_times`, when given, gets (operation index, ns) appended for every operation of this
        subgraph as it runs, the kernel call only; an IF or WHILE counts once, its referenced
        subgraphs' operations included in its time (mlts.hal.operation_times).

        A caller that already did the checks says so: `checked` when `static_fits(output_limits)`
        held, `predicted` when it ran `shape_pass(inputs, output_limits)` itself (its result).
        With `sink`, the run returns `sink(outputs)`, called while the workspace is still held, so
        results that live in it are read in place (the driver copies them to the request's pools).
        With `workspace`, the run uses that one (a burst's own, kept for its life: its caller runs one
        execution on it at a time) instead of one of the plan's pool.
        """
        timeout = LOOP_TIMEOUT_DEFAULT_NS if loop_timeout_ns is None else loop_timeout_ns
        fast = checked or self._static_fits(output_limits)
        if not fast and predicted is None:
            predicted = self.shape_pass(inputs, output_limits)
        ws = self.workspaces.acquire() if workspace is None else workspace
        token = _CURRENT.set(ws)
        try:
            if fast and not self._control:  # a static plan never has IF or WHILE steps
                outputs = self._run_static(inputs, checkpoint, ws, op_times)
            else:
                ctx = control_flow.RunContext(checkpoint, timeout, ExecutionMemory(self.memory_budget))
                outputs = self._run_steps(inputs, ctx, ws, output_limits, predicted, fast, op_times)
            if sink is not None:
                return sink(outputs)
            owns = ws.owns
            for k, o in enumerate(outputs):
                if owns(o):
                    outputs[k] = np.array(o, copy=True)
            return outputs
        finally:
            _CURRENT.reset(token)
            ws.step = -1
            if workspace is None:
                self.workspaces.release(ws)

    def run_into(
        self,
        inputs: Sequence[np.ndarray | None],
        checkpoint: Checkpoint | None,
        sink: Callable[[list], Any],
        workspace: Workspace | None = None,
    ) -> Any:
        """`run(inputs, checkpoint, checked=True, sink=sink, workspace=workspace)` without the other
        options: the repeated execution of a static plan whose sizes the caller found checked
        (`static_fits`)."""
        workspaces = self.workspaces
        if workspace is not None:
            ws = workspace
        else:
            try:
                ws = workspaces.free.pop()  # `acquire`'s common case, inlined
            except IndexError:
                ws = workspaces.acquire()
        token = _CURRENT.set(ws)
        try:
            straight = self._straight
            if straight is not None and len(inputs) == len(self.input_indexes):
                # `_run_static`'s fast engine, inlined (one call per execution): every input has a value.
                for arr in inputs:
                    if arr is None:
                        break
                else:
                    return sink(straight(inputs, checkpoint, ws))
            return sink(self._run_static(inputs, checkpoint, ws))
        finally:
            _CURRENT.reset(token)
            ws.step = -1
            if workspace is None:
                workspaces.free.append(ws)  # `release`

    def static_fits(self, output_limits: Sequence[int | None] | None) -> bool:
        """True when every size of a run with these output buffers is checked already (a static plan
        within the memory budget whose outputs fit): then `run(..., checked=True)` checks nothing."""
        return self._static_fits(output_limits)

    def run_in(self, inputs: Sequence[Any], ctx: control_flow.RunContext) -> list[np.ndarray]:
        """Run with the context of the enclosing execution (what IF and WHILE call for their subgraphs).

        The enclosing run's workspace serves this subgraph's steps too (their buffers are keyed by
        step numbers across subgraphs); what the subgraph returns is copied out of it, so a WHILE
        body's next iteration never overwrites a value it reads.
        """
        ws = current()
        want = self._static_inputs
        # Checked in advance when its shapes are the declared ones and its peak fits what is left of the
        # execution's budget (the enclosing subgraphs' tensors count too).
        fast = (
            want is not None
            and self._static
            and self._static_peak <= ctx.memory.room()
            and all(np.shape(a) == d for a, d in zip(inputs, want, strict=True))
        )
        if fast and not self._control:
            outputs = self._run_static(inputs, ctx.checkpoint, ws, ctx=ctx)
        else:
            outputs = self._run_steps(inputs, ctx, ws, None, None, fast)
        if ws is None:
            return outputs
        return [np.array(o, copy=True) if isinstance(o, np.ndarray) and ws.owns(o) else o for o in outputs]

    def _run_steps(
        self,
        inputs: Sequence[Any],
        ctx: control_flow.RunContext,
        ws,
        output_limits: Sequence[int | None] | None,
        predicted: list[list[shapes.Shape] | None] | None,
        checked: bool,
        op_times: list[tuple[int, int]] | None = None,
    ) -> list:
        """The steps; `checked`: every size was checked in advance (a static plan), none per step.

        Values live in a list indexed by operand (constants filled in at prepare); every operation
        is dispatched at one place below, and a static plan's step does no more than gather its
        arguments, call its kernel and check what it returned against the declared shape and type.
        """
        values = self._template.copy()
        for idx, arr in zip(self.input_indexes, inputs, strict=True):
            values[idx] = arr
        checkpoint = ctx.checkpoint
        memory = ctx.memory
        if not checked:
            budget = shapes.Budget(memory.limit, self._output_of, output_limits, self._declared_outputs)
            held: dict[int, int] = {}  # this subgraph's tensors, also counted in `memory`
        try:
            for step in self.steps:
                if checkpoint is not None:
                    checkpoint(step.index)
                if ws is not None:
                    ws.step = step.number
                args = [values[i] for i in step.inputs]
                if not checked:
                    self._check_step(step, args, predicted, budget, memory.live)
                try:
                    if op_times is None:
                        results = step.run(args) if step.control is None else step.control(args, ctx)
                    else:
                        t0 = time.perf_counter_ns()
                        results = step.run(args) if step.control is None else step.control(args, ctx)
                        op_times.append((step.index, time.perf_counter_ns() - t0))
                except HalError as e:
                    raise relabel(step, e) from None
                except Exception as e:
                    raise kernel_failed(step, args, e) from None
                if len(results) != len(step.outputs):
                    raise output_count_error(step, results)
                if step.single:
                    arr = results[0]
                    idx = step.outputs[0]
                    if arr.shape != step.out_shapes[0] or arr.dtype != step.out_dtypes[0]:
                        arr = check_output(step, idx, self.sub.operands[idx], step.out_dtypes[0], arr)
                    values[idx] = arr
                else:
                    for idx, want, declared_shape, arr in zip(
                        step.outputs, step.out_dtypes, step.out_shapes, results, strict=True
                    ):
                        if declared_shape is None or arr.shape != declared_shape or arr.dtype != want:
                            arr = check_output(step, idx, self.sub.operands[idx], want, arr)
                        values[idx] = arr
                if not checked:
                    # Steps without a rule are checked once their (input-bounded) result exists; what the
                    # execution holds in every subgraph counts.
                    for idx in step.outputs:
                        arr = values[idx]
                        size = budget.check(step.label, idx, arr.shape, arr.dtype, memory.live, outputs=False)
                        memory.hold(size - held.get(idx, 0))
                        held[idx] = size
                for idx in step.release:
                    values[idx] = None
                    if not checked:
                        memory.drop(held.pop(idx, 0))
        finally:
            if not checked:
                memory.drop(sum(held.values()))  # the caller counts what it keeps of the outputs
        return [values[i] for i in self.output_indexes]

    def _run_static(
        self,
        inputs: Sequence[Any],
        checkpoint: Checkpoint | None,
        ws,
        op_times: list[tuple[int, int]] | None = None,
        ctx: control_flow.RunContext | None = None,
    ) -> list:
        """A plan without IF or WHILE whose sizes were all checked in advance.

        The plan has two engines: this fast one, its steps compiled into one straight-line function
        whose runs of bindable kernels are chunks of compiled calls (driver.straight_line,
        driver.bound_steps), and the reference interpreter, `_run_steps`, which runs every plan.
        The straight-line function serves every run whose inputs all have a value and whose
        operations are not timed one by one; those runs, and a plan too long to compile, go to the
        interpreter (with nothing left to check).
        """
        if len(inputs) != len(self.input_indexes):
            raise HalError(
                ErrorStatus.GENERAL_FAILURE,
                f"the plan takes {len(self.input_indexes)} inputs, {len(inputs)} were given",
            )
        if op_times is None and ws is not None:
            straight = self._straight
            if straight is None and not self._straight_tried:
                straight = self._compile_straight()
            if straight is not None:
                for arr in inputs:
                    if arr is None:
                        break
                else:
                    return straight(inputs, checkpoint, ws)
        if ctx is None:
            ctx = control_flow.RunContext(
                checkpoint, LOOP_TIMEOUT_DEFAULT_NS, ExecutionMemory(self.memory_budget)
            )
        return self._run_steps(inputs, ctx, ws, None, None, True, op_times)

    @property
    def packed_names(self) -> tuple[tuple[int, str], ...]:
        """The (step number, name) of every array the kernels packed, also after `release_packed`."""
        return tuple(self.packed) if self._packed_names is None else self._packed_names

    def release_packed(self) -> None:
        """Let go of the packed arrays once preparation is over (the compilation cache, which stores
        them, is written): what the kernels read they hold themselves (GEMM weights as their panels
        only, driver.ops._fast.GemmWeights), so a matrix only the record still held is freed.
        `packed_names` still lists them."""
        self._packed_names = self.packed_names
        self.packed.clear()

    def warm(self, ws: Workspace | None = None) -> bool:
        """Do now, at preparation, what the first execution of a static plan would do: compile its
        straight-line function, bind its runs of compiled calls into a workspace (their output
        buffers and scratch allocated there) and write that workspace's buffers once, so their pages
        are resident. `ws` None: a new workspace, put in the plan's pool for the first execution
        (a burst passes its own). Results do not change: every buffer is written by the run that
        reads it, as in any later execution.

        Nothing is done (False) for a plan whose sizes are not all fixed by the model, with IF or
        WHILE, or over its memory budget: its executions allocate on first use as they check sizes.
        Steps outside the bound runs allocate their outputs on first use as before.
        """
        if self._control or not self._static_fits(None):
            return False
        if self._straight is None and not self._straight_tried:
            self._compile_straight()
        if self._straight is None:
            return False
        if not self._chunks:
            return True  # nothing to bind: the steps allocate their own outputs on first use
        pooled = ws is None
        if ws is None:
            ws = self.workspaces.acquire()
        try:
            for chunk in self._chunks:
                try:
                    chunk.bind_into(ws)
                except Exception:  # noqa: BLE001  (the first run binds again and reports it as before)
                    continue
            ws.touch()
        finally:
            if pooled:
                self.workspaces.release(ws)
        return True

    def _compile_straight(self) -> StraightRun | None:
        """The steps as one compiled function (driver.straight_line), made on the first checked run;
        None for a plan too long to be worth compiling (the loop runs it)."""
        straight = None
        if len(self.steps) <= MAX_STRAIGHT_STEPS:
            try:
                chunks: list[Chunk] = []
                straight = compile_steps(
                    self.steps,
                    self.input_indexes,
                    self.output_indexes,
                    self._template,
                    self.sub.operands,
                    bind=self._bind,
                    chunks_found=chunks,
                )
                self._chunks = chunks
            except (SyntaxError, RecursionError, MemoryError, ValueError):
                straight = None  # a function Python will not compile: the loop runs the plan as well
        self._straight = straight
        self._straight_tried = True
        return straight

    def _check_step(
        self,
        step: Step,
        args: list,
        predicted: list[list[shapes.Shape] | None] | None,
        budget: shapes.Budget,
        live: int,
    ) -> None:
        """Before a step of a plan not checked in advance: its output sizes, where a rule knows them,
        against the budget with `live` bytes held by the execution already."""
        out = predicted[step.index] if predicted is not None else None
        if out is None and step.control is None:
            out = shapes.infer(step.type, step.declared, [np.shape(a) for a in args], args)
        if out is not None:
            for idx, shape, dtype in zip(step.outputs, out, step.out_dtypes, strict=True):
                budget.check(step.label, idx, shape, dtype, live)
            budget.raise_if_short()


#: What a `_NamesOnly` record holds for every packed array.
_NOT_KEPT = np.empty(0, dtype=np.uint8)
_NOT_KEPT.flags.writeable = False


class _NamesOnly(dict):
    """The record of packed arrays of a plan that keeps none (`keep_packed=False`): each name is kept
    (an operation asking for one twice is still caught), with an empty placeholder for its array."""

    def __setitem__(self, key: tuple[int, str], value: np.ndarray) -> None:
        super().__setitem__(key, _NOT_KEPT)


class _Shared:
    """What a plan and the plans of its referenced subgraphs share: packed arrays, the driver's
    extensions and one plan per subgraph."""

    def __init__(
        self,
        cached: Mapping[tuple[int, str], np.ndarray] | None,
        extensions: Sequence[ExtensionSpec],
        progress: Callable[[int], None] | None = None,
    ) -> None:
        self.cached = cached
        self.extensions = extensions
        self.progress = progress  # called with each step's number before it is prepared
        self.record: PackedArrays = {}
        self.plans: dict[int, Plan] = {}

    def plan(self, model: Model, index: int) -> Plan:
        # The validator rejects cycles among subgraph references, so this recursion ends.
        if index not in self.plans:
            self.plans[index] = Plan(model, self.cached, sub_index=index, shared=self)
        return self.plans[index]


def _known_shape(dims: Sequence[int]) -> tuple[int, ...] | None:
    """`dims` when every dimension is known (the fast path of the output check), else None."""
    return tuple(dims) if dims and all(dims) else None


def run_model(
    model: Model,
    inputs: Sequence[np.ndarray],
    extensions: Sequence[ExtensionSpec] = (),
    loop_timeout_ns: int | None = None,
) -> list[np.ndarray]:
    """Validate, prepare and run `model` once on NumPy inputs (a convenience for tests and tools)."""
    from mlts.hal.validate import validate_model

    validate_model(model)
    plan = Plan(model, extensions=extensions)
    sub = model.main
    cast = []
    for idx, arr in zip(sub.input_indexes, inputs, strict=True):
        cast.append(np.ascontiguousarray(arr, dtype=dtype_of(sub.operands[idx].type)))
    return [np.array(o, copy=True) for o in plan.run(cast, loop_timeout_ns=loop_timeout_ns)]
