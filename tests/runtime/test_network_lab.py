"""A lab file with a tcp:// endpoint, the command-line options that reach network services, and where the
results rows say their driver ran."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from driver.variants import SampleAll
from mlts.cli import main
from mlts.cluster.endpoints import endpoint_of, stamp_benchmark
from mlts.cluster.lab import load_lab
from mlts.cluster.targets import lab_section, lab_targets
from mlts.ipc.net import address as addresses
from tests.ipc.netkit import TOKEN, NetService, make_certs, token_file


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def service(certs, tmp_path):
    svc = NetService(
        SampleAll(), cert=certs.server_cert, key=certs.server_key, token_file=token_file(tmp_path, TOKEN)
    )
    yield svc
    svc.close()


@pytest.fixture(autouse=True)
def _no_defaults_left_behind():
    yield
    addresses.set_client_defaults(addresses.ClientDefaults())


def test_a_lab_endpoint_at_a_tcp_address(service, certs, tmp_path):
    lab_dir = tmp_path / "lab"
    lab_dir.mkdir()
    token_file(lab_dir, TOKEN, "board.token")
    (lab_dir / "ca.pem").write_text(open(certs.ca).read())
    (lab_dir / "lab.toml").write_text(
        f'[[endpoints]]\nname = "board-a"\naddress = "{service.address}"\ndriver = "sample-all"\n'
        'tls_ca = "ca.pem"\ntoken_file = "board.token"\n\n'
        '[[endpoints]]\nname = "cpu"\ndriver = "sample-all"\n'
    )
    lab = load_lab(lab_dir / "lab.toml")
    assert lab.endpoints[0].transport == "tcp+tls"
    targets = lab_targets(lab)
    board = targets[0]
    assert board.driver == "sample-all" and board.host is None  # reached from any worker
    assert addresses.parse(board.socket).ca == str(lab_dir / "ca.pem")
    where = board.endpoint()
    assert (where.transport, where.address) == ("tcp+tls", service.address)
    section = lab_section(lab, targets).to_json()
    assert section["devices"][0]["endpoint"]["transport"] == "tcp+tls"
    assert "board.token" not in json.dumps(section)  # rows say where the driver is, not this machine's files
    # The driver announced must be the one the lab names.
    (lab_dir / "wrong.toml").write_text(
        f'[[endpoints]]\nname = "b"\naddress = "{service.address}"\ndriver = "sample-quant"\n'
        'tls_ca = "ca.pem"\ntoken_file = "board.token"\n'
    )
    with pytest.raises(Exception, match="serves driver 'sample-all', not 'sample-quant'"):
        lab_targets(load_lab(lab_dir / "wrong.toml"))


def test_rows_record_the_network_endpoint():
    remote = endpoint_of("sample-all", "tcp://board-a:7700?ca=/x/ca.pem")
    assert (remote.host, remote.transport, remote.address) == ("board-a", "tcp+tls", "tcp://board-a:7700")
    loop = endpoint_of("sample-all", "tcp://127.0.0.1:7700?insecure=1", client_host="lab-pc")
    assert (loop.host, loop.transport) == ("lab-pc", "tcp")
    doc = stamp_benchmark(
        {"results": [{"backend": "driver:sample-all/sync"}]}, {"sample-all": "tcp://board-a:7700?insecure=0"}
    )
    assert doc["results"][0]["endpoint"]["transport"] == "tcp+tls"


def test_devices_through_the_command_line_options(service, certs, tmp_path):
    tok = token_file(tmp_path, TOKEN, "mine")
    runner = CliRunner()
    ok = runner.invoke(
        main,
        ["devices", "--driver-socket", service.address, "--tls-ca", certs.ca, "--token-file", tok, "--json"],
    )
    assert ok.exit_code == 0, ok.output
    assert "sample-all" in ok.output
    refused = runner.invoke(main, ["devices", "--driver-socket", service.address, "--tls-ca", certs.ca])
    assert refused.exit_code != 0
    assert "no token" in refused.output and len(refused.output.strip().splitlines()) == 1
