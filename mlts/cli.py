"""The `mlts` command line: thin click commands that call one library function each and print."""

from __future__ import annotations

import sys
import traceback

import click

from mlts import __version__
from mlts.errors import EXIT_BAD_INPUT, EXIT_FAILURE, EXIT_INTERNAL, MltsError


def _one_line_errors() -> tuple[type[BaseException], ...]:
    """What the CLI reports as one line: mlts's own errors, a driver's HalError and the system's OSError."""
    from mlts.hal.errors import HalError

    return (MltsError, HalError, OSError)


def exit_status(e: BaseException) -> int:
    """The exit status of a one-line error: an MltsError's own, 2 for an OSError (a path the user gave), else 1."""
    if isinstance(e, MltsError):
        return e.exit_status
    if isinstance(e, OSError):
        return EXIT_BAD_INPUT
    return EXIT_FAILURE


class OneLineError(click.ClickException):
    """An error printed as "Error: <message>" with the exit status it was given."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.exit_code = status  # type: ignore[misc]  # click declares it on the class


class MltsGroup(click.Group):
    """Turns errors raised by commands into one-line messages (`-v` shows the traceback).

    MltsError, HalError and OSError are the user's to act on: their message and exit status 2 (bad
    input) or 1 (a failed run). Anything else is a bug in mlts: "internal error: ..." and status 70.
    """

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except BrokenPipeError:
            # The reader went away (`mlts inspect x.nnm | head`): stop quietly, like other tools.
            import os

            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            sys.exit(0)
        except KeyboardInterrupt:
            click.echo("mlts: interrupted", err=True)
            sys.exit(130)
        except Exception as e:
            if (ctx.obj or {}).get("verbose", False):
                traceback.print_exc()
            if isinstance(e, _one_line_errors()):
                raise OneLineError(_one_line(e), exit_status(e)) from None
            raise OneLineError(
                f"internal error: {type(e).__name__}: {_one_line(e)} (run with -v for the traceback)",
                EXIT_INTERNAL,
            ) from None


def _one_line(e: BaseException) -> str:
    text = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
    if isinstance(e, OSError) and e.filename:
        text = f"{e.filename}: {e.strerror or text}"
    return " ".join(text.split()) or type(e).__name__


@click.group(cls=MltsGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="Show tracebacks on errors.")
@click.option(
    "--extensions-allowlist",
    "extensions_allowlist",
    default=None,
    metavar="FILE",
    help="Which clients may use which vendor extensions (one 'CLIENT [EXTENSION...]' per line; "
    "default: <config dir>/extensions_allowlist, else the bundled tools may use com.example.mlts.activations).",
)
@click.version_option(__version__, prog_name="mlts")
@click.pass_context
def main(ctx: click.Context, verbose: bool, extensions_allowlist: str | None) -> None:
    """MLTS-style benchmark suite for NN-HAL-style drivers.

    Converts ONNX models to NN graphs, runs them on drivers (each in its own
    process) and on onnxruntime's CPU provider, and compares latency and
    accuracy.
    """
    ctx.ensure_object(dict)
    ctx.obj["verbose"] = verbose
    from mlts.hal import vlog

    vlog.configure_stderr()  # MLTS_VLOG's tags, if any, on stderr (docs/logging.md)
    if extensions_allowlist is not None:
        from mlts.runtime.allowlist import select_file

        try:
            select_file(extensions_allowlist)
        except ValueError as e:
            raise OneLineError(str(e), EXIT_BAD_INPUT) from None  # a bad file is bad input


from mlts.commands import benchmark as _benchmark  # noqa: E402
from mlts.commands import calibrate as _calibrate  # noqa: E402
from mlts.commands import compare as _compare  # noqa: E402
from mlts.commands import devices as _devices  # noqa: E402
from mlts.commands import driver as _driver  # noqa: E402
from mlts.commands import graph as _graph  # noqa: E402
from mlts.commands import models as _models  # noqa: E402
from mlts.commands import report as _report  # noqa: E402
from mlts.commands import stress as _stress  # noqa: E402
from mlts.commands import validate as _validate  # noqa: E402

for _cmd in (
    _models.models,
    _devices.devices,
    _graph.convert_cmd,
    _graph.inspect_cmd,
    _benchmark.benchmark,
    _compare.compare,
    _report.report,
    _stress.stress,
    _calibrate.calibrate,
    _driver.driver,
    _validate.validate_cmd,
):
    main.add_command(_cmd)
