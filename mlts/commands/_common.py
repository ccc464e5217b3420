"""Options and helpers shared by several commands."""

from __future__ import annotations

import functools
import json
import math
from contextlib import contextmanager

import click

from mlts.errors import EXIT_BAD_INPUT

#: Upper bounds of the duration options (seconds); `--help` shows each option's range.
MAX_BENCHMARK_SECONDS = 86_400.0  # one day per warm-up, timed run or compilation measurement
MAX_STRESS_SECONDS = 604_800.0  # one week per stress test (MLTS runs hours)
MAX_GRACE_SECONDS = 3_600.0
MAX_SEED = 2**32 - 1


class BadInput(click.ClickException):
    """Bad input from the user: one line on stderr and exit status 2 (1 is kept for failed runs)."""

    exit_code = EXIT_BAD_INPUT


class FiniteFloatRange(click.FloatRange):
    """A float in a range that is also finite: NaN passes every comparison, so it is refused here."""

    def convert(self, value, param, ctx):
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return rv


def seconds(lo: float, hi: float, *, lo_open: bool = False) -> FiniteFloatRange:
    """The type of a duration option: finite seconds in [lo, hi] ((lo, hi] with `lo_open`)."""
    return FiniteFloatRange(lo, hi, min_open=lo_open)


SEED = click.IntRange(0, MAX_SEED)


driver_plugin_option = click.option(
    "--driver-plugin",
    "plugin_files",
    multiple=True,
    type=click.Path(dir_okay=False),
    metavar="FILE.py",
    help="A Python file defining a Device subclass to load as a driver (repeatable).",
)


capabilities_option = click.option(
    "--capabilities",
    "capabilities_files",
    multiple=True,
    type=click.Path(dir_okay=False),
    metavar="FILE.json",
    help="A calibrated capabilities file (from mlts calibrate) for the driver it names (repeatable).",
)


def capabilities_options(files: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """Driver name -> {"capabilities": FILE} for each file; a file that cannot be used is a one-line error."""
    from mlts.hal.capabilities_file import CapabilitiesFileError, read_document

    out: dict[str, dict[str, str]] = {}
    for path in files:
        try:
            doc = read_document(path, None)
        except CapabilitiesFileError as e:
            raise BadInput(f"--capabilities {path}: {e}") from None
        if doc.driver in out:
            raise BadInput(f"--capabilities: two files for driver {doc.driver!r}")
        out[doc.driver] = {"capabilities": str(path)}
    return out


def echo_json(doc) -> None:
    click.echo(json.dumps(doc, indent=2))


def progress(message: str) -> None:
    """Progress lines go to stderr so stdout stays machine-readable."""
    click.echo(f"  {message}", err=True)


def _left_out_by_default() -> str:
    from mlts.runtime.discovery import SAMPLE_VARIANTS, TEST_DOUBLES

    return (
        f"every driver but the fault-injection {', '.join(sorted(TEST_DOUBLES))} and the sample "
        f"variants {', '.join(sorted(SAMPLE_VARIANTS))}, which repeat sample-all's kernels; with "
        "--driver-socket, the drivers of those services"
    )


#: The default driver selection, for the --drivers help of every command (name those drivers to run them).
DEFAULT_DRIVERS_HELP = _left_out_by_default()


_driver_socket = click.option(
    "--driver-socket",
    "driver_sockets",
    multiple=True,
    type=click.Path(dir_okay=False),
    metavar="PATH|tcp://HOST:PORT",
    help="Connect to the shared driver service at PATH (see `mlts driver serve`), or on another machine at "
    "tcp://HOST:PORT (TLS; see --tls-ca, --token-file), instead of starting that driver; its drivers are then "
    "the default selection (repeatable).",
)


def _network_setting(ctx: click.Context, param: click.Parameter, value: object) -> object:
    """Every tcp:// address of this command leaves out what these options say (mlts.ipc.net.address)."""
    from mlts.ipc.net import address as addresses

    settings = ctx.meta.setdefault("mlts.net", {})
    settings[param.name] = value
    addresses.set_client_defaults(
        addresses.ClientDefaults(
            ca=settings.get("tls_ca"),
            cert=settings.get("tls_cert"),
            key=settings.get("tls_key"),
            token_file=settings.get("token_file"),
            insecure=bool(settings.get("insecure")),
        )
    )
    return value


_NETWORK_OPTIONS = (
    click.option(
        "--tls-ca",
        metavar="FILE",
        type=click.Path(dir_okay=False),
        expose_value=False,
        callback=_network_setting,
        help="For tcp:// driver services: trust certificates this authority signed (default: the system's "
        "store).",
    ),
    click.option(
        "--tls-cert",
        metavar="FILE",
        type=click.Path(dir_okay=False),
        expose_value=False,
        callback=_network_setting,
        help="For tcp:// driver services that ask for one: this client's certificate (PEM).",
    ),
    click.option(
        "--tls-key",
        metavar="FILE",
        type=click.Path(dir_okay=False),
        expose_value=False,
        callback=_network_setting,
        help="The private key of --tls-cert (default: in that file).",
    ),
    click.option(
        "--token-file",
        metavar="FILE",
        type=click.Path(dir_okay=False),
        expose_value=False,
        callback=_network_setting,
        help="For tcp:// driver services: present the first token of FILE (mode 600).",
    ),
    click.option(
        "--insecure",
        is_flag=True,
        expose_value=False,
        callback=_network_setting,
        help="Talk plaintext to tcp:// driver services on a loopback address (no TLS).",
    ),
)


def network_options(fn):
    """How to reach tcp:// driver services: --tls-ca, --tls-cert, --tls-key, --token-file, --insecure."""
    for option in reversed(_NETWORK_OPTIONS):
        fn = option(fn)
    return fn


def driver_socket_option(fn):
    """--driver-socket PATH|tcp://HOST:PORT, and how to reach network services (`network_options`)."""
    return _driver_socket(network_options(fn))


#: --help of the user model options, shared by every command that takes --model.
INPUT_SHAPE_HELP = (
    "The whole shape of input NAME of your --model files, fixing its symbolic dimensions (ONNX) or the -1 "
    "dimensions of its shape signature (TFLite) (e.g. image=1,3,640,640); repeatable, one per input."
)
INPUT_VALUE_HELP = (
    "A fixed value for input NAME of your --model files (e.g. a sample rate: sample_rate=16000, or "
    "V0,V1,...); the converter folds it into a constant and the references are fed it; repeatable."
)
INPUTS_HELP = (
    "A folder of .npy files for your --model files' inputs: <input>.npy (every sample) or "
    "<input>_<k>.npy (sample k = 0, 1, ...); characters of the input's name other than letters, digits, "
    "'.', '_' and '-' are written '_'; inputs without a file are generated to fit (images, signals, zero "
    "state, token ids)."
)


def user_model_options(fn=None, *, files: bool = True):
    """--input-shape NAME=D0,D1,..., --input-value NAME=V[,V...] and (with `files`) --inputs DIR
    (mlts.bench.user_model); as `@user_model_options` or `@user_model_options(files=False)`."""
    if fn is None:
        return lambda f: user_model_options(f, files=files)

    def shapes(_ctx, _param, specs):
        from mlts.commands.graph import parse_input_shapes

        return parse_input_shapes(specs)

    def values(_ctx, _param, specs):
        from mlts.commands.graph import parse_input_values

        return parse_input_values(specs)

    options = [
        click.option(
            "--input-shape",
            "input_shapes",
            multiple=True,
            metavar="NAME=D0,D1,...",
            callback=shapes,
            help=INPUT_SHAPE_HELP,
        ),
        click.option(
            "--input-value",
            "input_values",
            multiple=True,
            metavar="NAME=V[,V...]",
            callback=values,
            help=INPUT_VALUE_HELP,
        ),
    ]
    if files:
        options.append(
            click.option(
                "--inputs",
                "inputs_dir",
                default=None,
                type=click.Path(file_okay=False),
                metavar="DIR",
                help=INPUTS_HELP,
            )
        )
    for option in reversed(options):
        fn = option(fn)
    return fn


def input_settings(
    input_shapes: dict, input_values: dict, inputs_dir: str | None = None, *, files: bool = True
):
    """The InputSettings of the user model options (an --inputs folder that does not exist is bad input);
    `files`: whether the command takes --inputs."""
    from pathlib import Path

    from mlts.bench.user_model import InputSettings

    if inputs_dir is not None and not Path(inputs_dir).is_dir():
        raise BadInput(f"--inputs {inputs_dir}: no such directory")
    return InputSettings(dict(input_shapes), dict(input_values), inputs_dir, files_option=files)


def qos_options(fn):
    """--priority, --preference, --deadline-ms, --prepare-deadline-ms and --loop-timeout-ms, given to the
    command as one keyword argument, `qos` (mlts.runtime.qos_settings.QosSettings)."""
    options = [
        click.option(
            "--priority",
            type=click.Choice(["low", "medium", "high"]),
            default="medium",
            show_default=True,
            help="Priority of the prepared models, relative to this tool's other models on the driver.",
        ),
        click.option(
            "--preference",
            type=click.Choice(["low-power", "fast-single-answer", "sustained-speed"]),
            default="fast-single-answer",
            show_default=True,
            help="Execution preference given to prepareModel; also steers the partitioner (low-power: powerUsage).",
        ),
        click.option(
            "--deadline-ms",
            type=click.FloatRange(0, 3_600_000, min_open=True),
            default=None,
            metavar="MS",
            help="A deadline this far ahead on every execution (missed: MISSED_DEADLINE_*); preparation "
            "has its own, --prepare-deadline-ms.",
        ),
        click.option(
            "--prepare-deadline-ms",
            type=click.FloatRange(0, 3_600_000, min_open=True),
            default=None,
            metavar="MS",
            help="A deadline this far ahead on every model preparation; the driver may abandon one that "
            "cannot finish in time (MISSED_DEADLINE_*).",
        ),
        click.option(
            "--loop-timeout-ms",
            type=click.FloatRange(0, 15_000),
            default=None,
            metavar="MS",
            help="WHILE loop timeout of every execution (the driver's default, 2000, when not given; at most 15000).",
        ),
    ]

    @functools.wraps(fn)
    def with_qos(*args, priority, preference, deadline_ms, prepare_deadline_ms, loop_timeout_ms, **kwargs):
        qos = _qos_settings(priority, preference, deadline_ms, loop_timeout_ms, prepare_deadline_ms)
        return fn(*args, qos=qos, **kwargs)

    for option in reversed(options):
        with_qos = option(with_qos)
    return with_qos


def _qos_settings(
    priority: str,
    preference: str,
    deadline_ms: float | None,
    loop_timeout_ms: float | None,
    prepare_deadline_ms: float | None = None,
):
    """The QosSettings of the options' values; a bad value is a one-line usage error."""
    from mlts.runtime.qos_settings import QosSettings, preference_named, priority_named

    try:
        return QosSettings(
            priority_named(priority),
            preference_named(preference),
            deadline_ms,
            loop_timeout_ms,
            prepare_deadline_ms,
        )
    except ValueError as e:
        raise click.UsageError(str(e)) from None


def distribution_options(fn):
    """--lab FILE and --cluster ADDRESS (mlts.cluster; docs/cluster.md)."""
    options = [
        click.option(
            "--lab",
            "lab_file",
            default=None,
            type=click.Path(dir_okay=False),
            metavar="FILE",
            help="A lab file (.toml or .json): named driver endpoints to run on, one after another or "
            "spread over --cluster; results name each row's device (docs/cluster.md).",
        ),
        click.option(
            "--cluster",
            "cluster",
            default=None,
            metavar="ADDRESS",
            help="Spread the run's independent units over a Dask cluster: a scheduler address "
            "(tcp://HOST:8786) or local:N (N worker processes here). Needs pip install 'mlts[cluster]'.",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def distribution(lab_file: str | None, cluster: str | None):
    """The lab (or None) and the checked --cluster value; one-line errors (exit 2) for either."""
    from mlts.cluster.engine import check_cluster_option, require_engine
    from mlts.cluster.lab import load_lab

    if cluster is not None:
        check_cluster_option(cluster)
        require_engine()
    return (load_lab(lab_file) if lab_file is not None else None), cluster


trace_option = click.option(
    "--trace",
    "trace_file",
    type=click.Path(dir_okay=False),
    default=None,
    metavar="FILE",
    help="Write the phases of every preparation and execution (IPC, queueing in the driver service, "
    "execution) as Chrome-trace / Perfetto JSON to FILE (open it in ui.perfetto.dev or chrome://tracing).",
)


@contextmanager
def tracing(trace_file: str | None, quiet: bool = False):
    """Record the run into `trace_file` (mlts.runtime.trace) while the block runs; written even if it fails."""
    if trace_file is None:
        yield
        return
    from mlts.runtime.trace import TraceWriter

    writer = TraceWriter(trace_file)
    try:
        yield
    finally:
        events = writer.close()
        if not quiet:
            click.echo(f"trace: {trace_file} ({events} events)", err=True)
