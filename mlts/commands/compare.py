"""`mlts compare OLD.json NEW.json`: latency and accuracy changes between two benchmark runs, or the
cases whose outcome changed between two `mlts validate` runs."""

from __future__ import annotations

from typing import NoReturn

import click

from mlts.commands._common import EXIT_BAD_INPUT, echo_json
from mlts.errors import InputError
from mlts.report import terminal

EXIT_REGRESSION = 1


@click.command("compare")
@click.argument("old_path", metavar="OLD.json")
@click.argument("new_path", metavar="NEW.json")
@click.option(
    "--threshold",
    default="0.05",
    show_default=True,
    metavar="FRACTION",
    help="Smallest relative latency change that counts (0.05 = 5%); a finite number >= 0.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON instead of text.")
def compare(old_path: str, new_path: str, threshold: str, as_json: bool) -> None:
    """Compare two benchmark results files, model by model and backend by backend.

    For each driver row (model x driver) in both files, the verdict is decided
    on the driver's median divided by onnxruntime's median of the same model
    in the same file, measured in the same run under the same load: the change
    of that ratio, new/old - 1, with a log-normal 95% interval. "slower" when
    the whole interval is above the threshold, "faster" when it is below
    -threshold, else "same"; so a machine that got busier, which slows both
    backends, is not a regression of the driver. The absolute medians, their
    change and its conservative interval [new_lo/old_hi - 1, new_hi/old_lo - 1]
    are shown as information. A driver row whose reference did not run in
    one file is "not judged". Also top-1..top-5 changes, new validation
    errors and rows that started failing; rows in only one file are listed as
    added or removed. Step-by-step models are compared per step. The
    reference backend (onnxruntime) getting slower or faster is shown as
    information, not a regression of the driver. Warnings name every run option
    that differs (quick against full, threads, images, sequences, warm-up,
    duration) and every recorded package version, CPU property or onnxruntime
    exactness verdict that differs (on stderr with --json; the JSON has them as
    config_warnings and environment_warnings).

    Two `mlts validate` results files: the cases whose outcome changed
    (newly failing, fixed, other changes), cases only in one run, and suites
    that could not run; a case that passed (or was skipped) and now fails,
    errs or hangs is a regression. A validate run and a benchmark run have
    nothing in common to compare.

    \b
    Exit status:
      0  no significant regression
      1  a significant regression: a "slower" ratio, a row that started
         failing, a new validation error, or top-1 down by more than 0.05;
         for validate runs, a newly failing case or a suite that no longer runs
      2  a file cannot be read (missing, not JSON, another schema version),
         the two files have no model x backend (or validate case) in common
         (two files without rows included),
         or an option is bad: one line on stderr, "mlts compare: <reason>"
         (click's own usage errors exit 2 as well)
    """
    from mlts.report.compare import compare_results, format_comparison
    from mlts.report.schema import load_document
    from mlts.report.validate_compare import compare_validate, format_validate_comparison, involves_validate

    try:
        value = _threshold(threshold)
        old, new = load_document(old_path), load_document(new_path)
        if involves_validate(old, new):
            result = compare_validate(old, new, labels=(old_path, new_path))
            lines = format_validate_comparison(result)
        else:
            result = compare_results(old, new, value, labels=(old_path, new_path))
            lines = format_comparison(result)
    except OSError as e:
        _bad_input(f"{e.filename}: {e.strerror}" if e.filename and e.strerror else str(e))
    except (ValueError, RecursionError) as e:
        _bad_input(str(e) or type(e).__name__)
    # Names and reasons come from the files: control characters (ANSI escapes, U+202E) never reach the terminal.
    if as_json:
        echo_json(result)
        for line in (
            result.get("run_warnings", []) + result["config_warnings"] + result["environment_warnings"]
        ):
            click.echo(f"mlts compare: warning: {terminal.escape(line)}", err=True)
    else:
        for line in lines:
            click.echo(terminal.escape(line))
    if result["regressions"]:
        raise click.exceptions.Exit(EXIT_REGRESSION)


def _threshold(text: str) -> float:
    """--threshold parsed here rather than by click, so a bad value is one line like every other error."""
    from mlts.report.compare import check_threshold

    try:
        value = float(text)
    except ValueError:
        raise InputError(f"--threshold: expected a number such as 0.05, got {text!r}") from None
    try:
        return check_threshold(value)
    except ValueError:
        raise InputError(f"--threshold: expected a finite fraction >= 0 (0.05 = 5%), got {text!r}") from None


def _bad_input(reason: str) -> NoReturn:
    click.echo(f"mlts compare: {terminal.escape(' '.join(reason.split()))}", err=True)
    raise click.exceptions.Exit(EXIT_BAD_INPUT)
