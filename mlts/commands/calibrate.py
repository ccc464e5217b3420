"""`mlts calibrate`: measure the getCapabilities numbers of a driver and write capabilities.json."""

from __future__ import annotations

from pathlib import Path

import click

from mlts.commands._common import (
    BadInput,
    driver_plugin_option,
    driver_socket_option,
    input_settings,
    progress,
    qos_options,
    qos_settings,
    user_model_options,
)


@click.command("calibrate")
@click.option("--driver", "driver_name", required=True, metavar="NAME", help="The driver to calibrate.")
@click.option(
    "-o",
    "--output",
    default=None,
    type=click.Path(dir_okay=False),
    metavar="FILE.json",
    help="Where to write the capabilities file (default: capabilities-<driver>.json).",
)
@click.option(
    "--models",
    "models_regex",
    default=None,
    metavar="REGEX",
    help="Only the reference workloads whose name matches (default: all, unless --model is given).",
)
@click.option(
    "--model",
    "model_args",
    multiple=True,
    metavar="FILE.onnx|FILE.tflite[:TYPE]",
    help="Your ONNX or TFLite model as a workload of operand TYPE, e.g. net.onnx:TENSOR_FLOAT32 "
    "(default: inferred from its float32/uint8/int8 tensors; repeatable); a .tflite model's CPU "
    "run is LiteRT's. An .nnm file is skipped: it has no CPU baseline to compare with.",
)
@user_model_options(files=False)
@click.option(
    "--threads",
    default=1,
    show_default=True,
    type=click.IntRange(1, 256),
    help="Threads for the driver's math and for onnxruntime's intra-op pool; both get the same.",
)
@click.option("--quick", is_flag=True, help="Short runs: 0.2 s warm-up, then 0.5 s and 5 calls timed.")
@click.option(
    "--relaxed",
    is_flag=True,
    help="The driver computes relaxed float32 models in float16: also measure relaxed_scalar/relaxed_tensor.",
)
@click.option("--in-process", is_flag=True, help="Load the driver in this process instead of its own.")
@driver_plugin_option
@driver_socket_option
@qos_options
def calibrate(
    driver_name: str,
    output: str | None,
    models_regex: str | None,
    model_args: tuple[str, ...],
    input_shapes: dict,
    input_values: dict,
    threads: int,
    quick: bool,
    relaxed: bool,
    in_process: bool,
    plugin_files: tuple[str, ...],
    driver_sockets: tuple[str, ...],
    priority: str,
    preference: str,
    deadline_ms: float | None,
    prepare_deadline_ms: float | None,
    loop_timeout_ms: float | None,
) -> None:
    """Measure the PerformanceInfo numbers a driver should report from getCapabilities.

    Each reference workload (float MobileNets and one LSTM step of asr_float
    and tts_float for TENSOR_FLOAT32 and FLOAT32, the _quant MobileNets for
    TENSOR_QUANT8_ASYMM, the _quant_signed ones for TENSOR_QUANT8_ASYMM_SIGNED,
    an If (if_select) for ifPerformance and a Loop (while_refine) for
    whilePerformance) runs on onnxruntime's CPU provider and on the driver with the same inputs
    and thread count: a warm-up (1 s), then a timed run (at least 3 s and 10
    calls). exec_time is the driver's median latency over the CPU's; power_usage
    the driver's energy per call over the CPU's (RAPL when readable, else CPU
    time: the driver process plus this one). A type's numbers are the geometric
    mean over its workloads; types without a measured workload are listed as
    not measured and keep the driver's defaults. Noisy runs (median CI beyond
    ±5%) or ratios of one type differing by more than 2x are reported as
    warnings and the file says "confident": false.
    """
    from mlts.calibrate.measure import CalibrationConfig, CalibrationError
    from mlts.calibrate.measure import calibrate as run_calibration
    from mlts.calibrate.workloads import WorkloadError, default_workloads, parse_model_arguments
    from mlts.hal.capabilities_file import CapabilitiesFileError, default_path, write_capabilities_file
    from mlts.hal.errors import HalError
    from mlts.records.environment import environment
    from mlts.runtime.discovery import DiscoveryError, discover

    try:
        specs = discover(plugin_files, driver_sockets)
        if driver_name not in specs:
            raise BadInput(f"unknown driver {driver_name!r}; available: {', '.join(sorted(specs)) or 'none'}")
        workloads = default_workloads(models_regex) if models_regex is not None or not model_args else []
        workloads += parse_model_arguments(
            model_args, input_settings(input_shapes, input_values, files=False)
        )
        qos = qos_settings(priority, preference, deadline_ms, loop_timeout_ms, prepare_deadline_ms).to_dict()
        config = CalibrationConfig(threads=threads, in_process=in_process, relaxed=relaxed, qos=qos)
        config = config.quick() if quick else config
        doc = run_calibration(
            specs[driver_name], workloads, config, log=progress, environment=environment(threads)
        )
        path = Path(output) if output is not None else Path(f"capabilities-{driver_name}.json")
        write_capabilities_file(path, doc)
    except (WorkloadError, DiscoveryError, CapabilitiesFileError) as e:
        raise BadInput(" ".join(str(e).split())) from None
    except (CalibrationError, HalError, OSError) as e:
        raise click.ClickException(" ".join(str(e).split())) from None
    for line in summary_lines(doc):
        click.echo(line)
    click.echo(f"capabilities: {path}")
    try:
        click.echo(
            f"the driver reads {default_path(driver_name)}, or the file its option capabilities=PATH names"
        )
    except CapabilitiesFileError:
        pass  # a driver name that cannot be a file name has no default location


def summary_lines(doc: dict) -> list[str]:
    """The table (type, exec_time, power_usage, workloads), then what was not measured, skipped and noisy."""
    caps = doc["capabilities"]
    entries = dict(caps["operand_performance"])
    entries.update(
        {k: caps[k] for k in ("relaxed_scalar", "relaxed_tensor", "if", "while") if caps.get(k) is not None}
    )
    lines = [f"{'type':<28} {'exec_time':>10} {'power_usage':>12}  workloads"]
    for name, perf in entries.items():
        workloads = ", ".join(doc["spread"][name]["workloads"])
        lines.append(f"{name:<28} {perf['exec_time']:>10.3f} {perf['power_usage']:>12.3f}  {workloads}")
    lines.append(f"power_usage from: {doc['power_source']}")
    lines.append(f"not measured (driver defaults kept): {', '.join(doc['not_measured'])}")
    for rec in doc["measurements"]:
        if rec["status"] != "ok":
            lines.append(f"skipped {rec['workload']} ({rec['operand_type']}): {rec['reason']}")
    for warning in doc["warnings"]:
        lines.append(f"warning: {warning}")
    if not doc["confident"]:
        lines.append("not confident: the machine was noisy or the workloads disagree (see the warnings)")
    return lines
