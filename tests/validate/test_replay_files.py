"""`mlts validate --replay` reads hostile files safely: headers and sizes first, nesting bounded, pools
counted before they are made, FIFOs refused at once; each is one line and exit status 2."""

from __future__ import annotations

import json
import os
import resource
import time

import pytest
from click.testing import CliRunner

from mlts.cli import main
from mlts.hal import nnfile
from mlts.validate import reproducer
from mlts.validate.reproducer import MAX_POOLS, ReproducerError, request_from_doc
from tests.runtime.models import add_model


def _peak_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _sidecar(tmp_path, **fields) -> str:
    doc = {
        "format": reproducer.FORMAT,
        "version": reproducer.VERSION,
        "suite": "s",
        "case": "c",
        "kind": "frame",
        "model": None,
        "data": None,
        "raw": True,
        "expect": {},
    }
    doc.update(fields)
    path = tmp_path / "case.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_a_huge_sparse_nnm_is_refused_without_being_read(tmp_path):
    path = tmp_path / "huge.nnm"
    with open(path, "wb") as f:
        f.truncate(10 << 30)  # 10 GiB of holes
    before = _peak_kib()
    start = time.monotonic()
    with pytest.raises(ReproducerError, match="more than the 268435456 allowed"):
        reproducer.load(str(path))
    assert time.monotonic() - start < 2
    assert _peak_kib() - before < 32 * 1024


def test_an_nnm_header_is_checked_before_the_rest_is_read(tmp_path):
    path = tmp_path / "zeros.nnm"
    with open(path, "wb") as f:
        f.truncate(200 << 20)  # within the size limit, but not a model
    before = _peak_kib()
    with pytest.raises(ReproducerError, match=r"not an mlts \.nnm file \(its first bytes are b'\\x00"):
        reproducer.load(str(path))
    assert _peak_kib() - before < 32 * 1024  # the 200 MiB were never read


def test_deeply_nested_json_is_a_clear_error(tmp_path):
    deep = "[" * 200_000 + "]" * 200_000
    path = tmp_path / "deep.json"
    path.write_text('{"format": "mlts-validate-reproducer", "version": 1, "request": ' + deep + "}")
    with pytest.raises(ReproducerError, match="nested too deeply"):
        reproducer.load(str(path))
    nested = {"inputs": [], "outputs": [], "pools": []}
    for _ in range(100_000):
        nested = {"inputs": [nested], "outputs": [], "pools": []}
    with pytest.raises(ReproducerError):
        request_from_doc(nested)


def test_a_request_with_100000_pools_is_refused_before_any_is_made(tmp_path):
    fds_before = len(os.listdir("/proc/self/fd"))
    doc = {"inputs": [], "outputs": [], "pools": [{"size": 4, "data": None}] * 100_000}
    with pytest.raises(ReproducerError, match=f"100000 pools; at most {MAX_POOLS} are supported"):
        request_from_doc(doc)
    huge = {"inputs": [], "outputs": [], "pools": [{"size": 200 << 20, "data": None}] * 2}
    with pytest.raises(ReproducerError, match="bytes in all"):
        request_from_doc(huge)
    # Nothing was opened and kept (a descriptor another thread closes meanwhile only lowers the count).
    assert len(os.listdir("/proc/self/fd")) <= fds_before


def test_a_fifo_is_refused_at_once(tmp_path):
    fifo = tmp_path / "case.frame"
    os.mkfifo(fifo)
    start = time.monotonic()
    with pytest.raises(ReproducerError, match="FIFO"):
        reproducer.load(str(fifo))
    data = tmp_path / "data.frame"
    os.mkfifo(data)
    with pytest.raises(ReproducerError, match="FIFO"):
        reproducer.load(_sidecar(tmp_path, data="data.frame"))
    assert time.monotonic() - start < 2


@pytest.fixture(scope="module")
def runner():
    return CliRunner()


@pytest.mark.parametrize("name", ["deep.json", "huge.nnm", "pools.json"])
def test_the_cli_says_it_in_one_line_with_status_2(runner, tmp_path, name):
    path = tmp_path / name
    if name == "deep.json":
        path.write_text('{"format": "mlts-validate-reproducer", "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    elif name == "huge.nnm":
        with open(path, "wb") as f:
            f.truncate(2 << 30)
    else:
        nnfile.write(add_model(), tmp_path / "m.nnm")
        path = tmp_path / "pools.json"
        request = {"inputs": [], "outputs": [], "pools": [{"size": 1, "data": None}] * 100_000}
        path.write_text(
            json.dumps(
                {
                    "format": reproducer.FORMAT,
                    "version": 1,
                    "suite": "s",
                    "case": "c",
                    "kind": "request",
                    "model": "m.nnm",
                    "data": None,
                    "request": request,
                    "expect": {},
                }
            )
        )
    result = runner.invoke(main, ["validate", "--driver", "sample-all", "--replay", str(path)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.output
    assert ("nested too deeply", "more than", "at most 64")[
        ["deep.json", "huge.nnm", "pools.json"].index(name)
    ] in errors[0]
