"""The extensions allowlist: its format, where it is found, and the runtime refusing what it does not allow."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from driver.variants import SampleAll
from mlts.cli import main
from mlts.hal import example_extension as E
from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError
from mlts.runtime import allowlist
from mlts.runtime.allowlist import ALL, AllowlistError, check_model, load, parse
from mlts.runtime.session import Session
from tests.extensions.kit import gelu_model


@pytest.fixture(autouse=True)
def _isolated_config(tmp_path, monkeypatch):
    monkeypatch.setenv("MLTS_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setattr(allowlist, "_selected", None)


def test_parse_entries_comments_and_clients_without_extensions() -> None:
    table = parse(
        "# who may use what\n\nmlts com.example.mlts.activations  # the bundled tools\n"
        "/opt/vendor/bin/app\ncom.foo.bar org.a.b org.c.d\ncom.foo.bar org.e.f\n",
        "test",
    )
    assert table.entries == {
        "mlts": frozenset({E.NAME}),
        "/opt/vendor/bin/app": frozenset({ALL}),
        "com.foo.bar": frozenset({"org.a.b", "org.c.d", "org.e.f"}),
    }
    assert table.allowed(["mlts"], E.NAME)
    assert not table.allowed(["mlts"], "org.a.b")
    assert table.allowed(["/opt/vendor/bin/app"], "anything.at.all")
    assert not table.allowed(["someone.else"], E.NAME)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("mlts activations\n", r"f:1: extension name 'activations' is not a reverse-domain"),
        ("\n\n./relative/path\n", r"f:3: '\./relative/path' is neither a program path"),
        ("mlts com.example..x\n", r"f:1: extension name"),
        ("9lives com.a.b\n", r"f:1: '9lives' is neither"),
    ],
)
def test_malformed_lines_name_the_file_and_line(text: str, match: str) -> None:
    with pytest.raises(AllowlistError, match=match):
        parse(text, "f")


def test_default_allows_the_bundled_tools_the_bundled_extension_only() -> None:
    table = load()
    assert table.source == "built-in default"
    check_model(gelu_model())  # the running client is `mlts`
    with pytest.raises(HalError, match="not allowed for client 'someone.else'") as e:
        check_model(gelu_model(), clients=["someone.else"])
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT


def test_config_dir_file_is_used_and_can_refuse(tmp_path) -> None:
    config = tmp_path / "config"
    config.mkdir()
    path = config / allowlist.FILE_NAME
    path.write_text("mlts org.other.ext\n")
    with pytest.raises(HalError) as e:
        check_model(gelu_model())
    message = str(e.value)
    assert E.NAME in message and str(path) in message and "\n" not in message
    path.write_text("mlts\n")  # no extensions listed: every extension
    check_model(gelu_model())


def test_models_without_extensions_never_read_the_file(tmp_path) -> None:
    from mlts.hal.builder import ModelBuilder
    from mlts.hal.enums import OperandType as T
    from mlts.hal.enums import OperationType

    allowlist.select_file(None)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / allowlist.FILE_NAME).write_text("not a valid line!\n")
    b = ModelBuilder()
    x = b.add_input(T.TENSOR_FLOAT32, (2,))
    y = b.add_operand(T.TENSOR_FLOAT32, (2,))
    b.add_operation(OperationType.RELU, [x], [y])
    b.mark_outputs(y)
    check_model(b.build())
    with pytest.raises(HalError, match="not a reverse-domain"):
        check_model(gelu_model())


def test_the_session_refuses_a_model_the_client_may_not_use(tmp_path) -> None:
    path = tmp_path / "allow.txt"
    path.write_text("/some/other/program\n")
    allowlist.select_file(str(path))
    with pytest.raises(HalError, match=f"extension '{E.NAME}' is not allowed.*{path}"):
        Session(SampleAll(), gelu_model())
    path.write_text(f"mlts {E.NAME}\n")
    session = Session(SampleAll(), gelu_model("tanh"))
    try:
        (y,), _ = session.run([np.array([[1, 2, 3], [-1, -2, -3]], dtype=np.float32)])
        assert y.shape == (2, 3) and y[0, 0] == pytest.approx(0.8411920, rel=1e-6)
    finally:
        session.close()


def test_cli_refuses_a_malformed_allowlist_in_one_line(tmp_path) -> None:
    bad = tmp_path / "bad"
    bad.write_text("mlts not_reverse_domain\n")
    r = CliRunner().invoke(main, ["--extensions-allowlist", str(bad), "models", "--json"])
    assert r.exit_code == 2  # bad input
    assert f"{bad}:1:" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(main, ["--extensions-allowlist", str(tmp_path / "missing"), "models", "--json"])
    assert r.exit_code == 2 and "missing" in r.output
