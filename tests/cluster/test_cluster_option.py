"""--cluster: bad values and a missing engine are one line with exit status 2, before any work."""

from __future__ import annotations

import sys

import pytest
from click.testing import CliRunner

from mlts.cli import main
from mlts.cluster.engine import ClusterError, check_cluster_option
from tests.cli.clikit import one_line_error


@pytest.mark.parametrize(
    "value", ["local:1", "local:64", "tcp://10.0.0.5:8786", "sched.example:8786", "tls://h:1"]
)
def test_good_cluster_values(value):
    assert check_cluster_option(value) == value


@pytest.mark.parametrize("value", ["local:0", "local:65", "local", "local:x", "tcp://a b", "http://h/x", ""])
def test_bad_cluster_values(value):
    with pytest.raises(ClusterError):
        check_cluster_option(value)


@pytest.mark.parametrize(
    "command", [["validate", "--driver", "sample-all"], ["stress", "inference-stress"], ["benchmark"]]
)
def test_bad_cluster_value_on_each_command(tmp_path, command):
    result = CliRunner().invoke(main, [*command, "--cluster", "local:0", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert "expected local:N" in one_line_error(result)
    assert not (tmp_path / "o").exists()


def test_without_the_engine_cluster_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    result = CliRunner().invoke(
        main, ["validate", "--driver", "sample-all", "--cluster", "local:2", "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 2
    line = one_line_error(result)
    assert "pip install 'mlts[cluster]'" in line and "not installed" in line
