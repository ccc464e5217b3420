"""Lab files: what `load_lab` accepts, and the one-line error (exit 2) for everything else."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from mlts.cli import main
from mlts.cluster.lab import LabError, load_lab
from tests.cli.clikit import one_line_error

TOML = """
[[endpoints]]
name = "board-a"
address = "sockets/a.sock"

[[endpoints]]
name = "quant"
driver = "sample-quant"
options = { max_memory_mb = 512, skip = true }
"""


def write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_toml_lab_in_file_order_with_paths_from_the_files_folder(tmp_path):
    lab = load_lab(write(tmp_path, "lab.toml", TOML))
    assert lab.names() == ["board-a", "quant"]
    a, q = lab.endpoints
    assert a.address == str(tmp_path.resolve() / "sockets" / "a.sock") and a.driver is None
    assert q.driver == "sample-quant" and q.address is None
    assert q.options == {"max_memory_mb": "512", "skip": "1"}


def test_json_lab_as_object_or_bare_list_and_unix_prefix(tmp_path):
    entries = [
        {"name": "a", "address": "unix:/run/a.sock", "driver": "sample-all"},
        {"name": "b", "driver": "x"},
    ]
    for text in (json.dumps({"endpoints": entries}), json.dumps(entries)):
        lab = load_lab(write(tmp_path, "lab.json", text))
        assert [e.address for e in lab.endpoints] == ["/run/a.sock", None]
        assert lab.endpoints[0].driver == "sample-all"


@pytest.mark.parametrize(
    "name, text, says",
    [
        ("lab.yaml", "endpoints: []", "expected a .toml or .json file"),
        ("lab.toml", "[[endpoints]\nname=", "not valid TOML"),
        ("lab.json", "{", "not valid JSON"),
        ("lab.json", "{}", "no `endpoints` list"),
        ("lab.json", '{"endpoints": [], "x": 1}', "unknown key 'x'"),
        ("lab.json", '{"endpoints": []}', "`endpoints` is empty"),
        ("lab.json", '{"endpoints": {"name": "a"}}', "must be a list"),
        ("lab.json", '["a"]', "endpoints[0]: expected a table"),
        ("lab.json", '[{"driver": "sample-all"}]', "endpoints[0]: name None"),
        ("lab.json", '[{"name": "a b", "driver": "sample-all"}]', "name 'a b'"),
        ("lab.json", '[{"name": "a"}]', "give a driver to start, an address"),
        ("lab.json", '[{"name": "a", "driver": "sample-all", "port": 1}]', "unknown key 'port'"),
        (
            "lab.json",
            '[{"name": "a", "driver": "x"}, {"name": "a", "driver": "y"}]',
            "name 'a' is used twice",
        ),
        ("lab.json", '[{"name": "a", "address": "udp://h:1"}]', "udp:// is not a transport of mlts"),
        ("lab.json", '[{"name": "a", "address": "tcp://h"}]', "a port is needed"),
        (
            "lab.json",
            '[{"name": "a", "address": "/s", "tls_ca": "ca.pem"}]',
            "tls_ca goes with a tcp:// address",
        ),
        ("lab.json", '[{"name": "a", "address": "tcp://h:1", "insecure": "yes"}]', "insecure must be true"),
        ("lab.json", '[{"name": "a", "address": 5}]', "address must be a Unix socket path"),
        ("lab.json", '[{"name": "a", "address": "/s", "options": {"k": "v"}}]', "give its options to"),
        ("lab.json", '[{"name": "a", "driver": "x", "options": {"k": [1]}}]', "option k: expected a string"),
        ("lab.json", '[{"name": "a", "driver": "x", "options": {"1k": "v"}}]', "not an identifier"),
        ("lab.json", '[{"name": "a", "driver": ""}]', "driver must be a driver's name"),
    ],
)
def test_bad_lab_files_are_one_line_errors(tmp_path, name, text, says):
    path = write(tmp_path, name, text)
    with pytest.raises(LabError) as caught:
        load_lab(path)
    message = str(caught.value)
    assert says in message and str(path) in message and "\n" not in message


def test_a_lab_that_is_not_a_regular_file(tmp_path):
    with pytest.raises(LabError, match="No such file"):
        load_lab(tmp_path / "missing.toml")
    (tmp_path / "dir.toml").mkdir()
    with pytest.raises(LabError, match="not a regular file"):
        load_lab(tmp_path / "dir.toml")


@pytest.mark.parametrize("command", [["validate"], ["stress", "inference-stress"], ["benchmark"]])
def test_commands_refuse_a_bad_lab_in_one_line_with_status_2(tmp_path, command):
    bad = write(tmp_path, "lab.json", '[{"name": "a"}]')
    result = CliRunner().invoke(main, [*command, "--lab", str(bad), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "give a driver to start" in one_line_error(result)


def test_a_lab_endpoint_with_no_service_behind_its_socket_is_refused(tmp_path):
    lab = write(tmp_path, "lab.json", json.dumps([{"name": "gone", "address": str(tmp_path / "no.sock")}]))
    result = CliRunner().invoke(main, ["validate", "--lab", str(lab), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    line = one_line_error(result)
    assert "endpoint gone" in line and "no driver service listens" in line


def test_lab_drivers_must_be_known_and_lab_excludes_driver_options(tmp_path):
    lab = write(tmp_path, "lab.json", json.dumps([{"name": "a", "driver": "no-such-driver"}]))
    result = CliRunner().invoke(main, ["validate", "--lab", str(lab), "--out", str(tmp_path / "o1")])
    assert result.exit_code == 2 and "unknown driver 'no-such-driver'" in one_line_error(result)
    ok = write(tmp_path, "ok.json", json.dumps([{"name": "a", "driver": "sample-all"}]))
    result = CliRunner().invoke(
        main, ["validate", "--lab", str(ok), "--driver", "sample-all", "--out", str(tmp_path / "o2")]
    )
    assert result.exit_code == 2 and "leave out --driver" in one_line_error(result)
