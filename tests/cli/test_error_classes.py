"""Every class of error a command can raise: one line and its exit status, or an internal error."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from mlts.cli import main
from mlts.errors import EXIT_BAD_INPUT, EXIT_FAILURE, EXIT_INTERNAL, InputError, MltsError
from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError

RAISED: dict[str, BaseException] = {
    "input": InputError("--foo 3: expected\n  a number in [0, 1]"),
    "failure": MltsError("2 of 3 tests failed"),
    "hal": HalError(ErrorStatus.DEVICE_UNAVAILABLE, "the driver service died"),
    "os": FileNotFoundError(2, "No such file or directory", "/nonexistent/model.onnx"),
    "value": ValueError("an internal check"),
    "key": KeyError("missing_field"),
    "runtime": RuntimeError("unexpected state"),
}


@pytest.fixture()
def raising_command():
    @click.command("raise-for-test")
    @click.argument("kind")
    def cmd(kind: str) -> None:
        raise RAISED[kind]

    main.add_command(cmd)
    try:
        yield
    finally:
        main.commands.pop("raise-for-test", None)


@pytest.mark.parametrize(
    "kind, status, text",
    [
        ("input", EXIT_BAD_INPUT, "Error: --foo 3: expected a number in [0, 1]"),
        ("failure", EXIT_FAILURE, "Error: 2 of 3 tests failed"),
        ("hal", EXIT_FAILURE, "Error: DEVICE_UNAVAILABLE: the driver service died"),
        ("os", EXIT_BAD_INPUT, "Error: /nonexistent/model.onnx: No such file or directory"),
    ],
)
def test_user_facing_errors_are_one_line_with_their_status(raising_command, kind, status, text):
    r = CliRunner().invoke(main, ["raise-for-test", kind])
    assert r.exit_code == status, r.output
    assert r.output.strip().splitlines() == [text]


@pytest.mark.parametrize(
    "kind, name", [("value", "ValueError"), ("key", "KeyError"), ("runtime", "RuntimeError")]
)
def test_anything_else_is_an_internal_error_with_a_distinct_status(raising_command, kind, name):
    r = CliRunner().invoke(main, ["raise-for-test", kind])
    assert r.exit_code == EXIT_INTERNAL not in (EXIT_BAD_INPUT, EXIT_FAILURE, 0)
    (line,) = r.output.strip().splitlines()
    assert line.startswith(f"Error: internal error: {name}: ") and line.endswith(
        "(run with -v for the traceback)"
    )
    assert "Traceback" not in r.output


def test_verbose_shows_the_traceback_and_keeps_the_status(raising_command):
    r = CliRunner().invoke(main, ["-v", "raise-for-test", "runtime"])
    assert r.exit_code == EXIT_INTERNAL
    assert "Traceback" in r.output and "unexpected state" in r.output
    r = CliRunner().invoke(main, ["-v", "raise-for-test", "input"])
    assert r.exit_code == EXIT_BAD_INPUT and "Traceback" in r.output


def test_every_error_type_of_the_project_is_user_facing():
    from mlts.bench.sources import ModelSelectionError
    from mlts.calibrate.measure import CalibrationError
    from mlts.calibrate.workloads import WorkloadError
    from mlts.convert.errors import ConversionError
    from mlts.crash.outcome import StressFailure
    from mlts.crash.suite import StressConfigError
    from mlts.datasets.imageset import DatasetError
    from mlts.hal.capabilities_file import CapabilitiesFileError
    from mlts.hal.loader import FactoryError
    from mlts.hal.nnfile import NnFileError
    from mlts.ipc.wire import WireError
    from mlts.models.zoo import UnknownModelError
    from mlts.report.schema import ResultsSchemaError
    from mlts.runtime.allowlist import AllowlistError
    from mlts.runtime.discovery import DiscoveryError

    bad_input = [
        ModelSelectionError,
        WorkloadError,
        ConversionError,
        StressConfigError,
        DatasetError,
        CapabilitiesFileError,
        FactoryError,
        NnFileError,
        UnknownModelError,
        ResultsSchemaError,
        AllowlistError,
        DiscoveryError,
        CalibrationError,
    ]
    assert all(issubclass(c, InputError) and issubclass(c, ValueError) for c in bad_input)
    failures = [StressFailure, WireError]
    assert all(issubclass(c, MltsError) and not issubclass(c, InputError) for c in failures)


def test_real_bad_input_exits_2_in_one_line(tmp_path):
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"not a model")
    r = CliRunner().invoke(main, ["convert", str(bad), "-o", str(tmp_path / "x.nnm")])
    assert r.exit_code == EXIT_BAD_INPUT, r.output
    assert len(r.output.strip().splitlines()) == 1
    r = CliRunner().invoke(main, ["stress", "no-such-mode"])
    assert r.exit_code == EXIT_BAD_INPUT and "modes:" in r.output


def test_stress_help_lists_every_mode_and_drivers_help_names_the_left_out_drivers():
    from mlts.crash.suite import MODES
    from mlts.runtime.discovery import NOT_SELECTED_BY_DEFAULT

    text = " ".join(CliRunner().invoke(main, ["stress", "--help"]).output.split())
    assert all(mode in text for mode in MODES)
    for command in ("stress", "benchmark"):
        # click wraps the help at hyphens too: compare without any whitespace.
        text = "".join(CliRunner().invoke(main, [command, "--help"]).output.split())
        assert all(name in text for name in NOT_SELECTED_BY_DEFAULT), command


def test_q_means_quick_everywhere():
    for command in ("benchmark", "stress"):
        option = next(p for p in main.commands[command].params if "-q" in p.opts)
        assert option.name == "quick", command
