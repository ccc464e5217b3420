"""Mutual identity: clients talk only to a service of their own user (or root); services listen only in
folders nobody else can write, and the default folder is made safely.

Cases with another user run a child process as uid 65534 (nobody), so they need root.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
import time

import pytest

from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError
from mlts.ipc import wire
from mlts.ipc.socket_dir import UnsafeFolderError, check_folder, secure_folder
from mlts.runtime.remote import RemoteDevice
from mlts.runtime.shared import SharedService
from tests.runtime.conftest import fake_spec

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="runs a process as another user (needs root)")


def _folder(tmp_path, name: str, mode: int) -> str:
    path = tmp_path / name
    path.mkdir()
    os.chmod(path, mode)
    return str(path)


# ---------------------------------------------------------------- folders


def test_a_folder_of_this_user_closed_to_others_is_accepted(tmp_path):
    check_folder(_folder(tmp_path, "mine", 0o700))
    check_folder(_folder(tmp_path, "readable", 0o755))  # readable is fine: nobody else can write


@pytest.mark.parametrize("mode", [0o770, 0o777, 0o1777, 0o722])
def test_a_folder_others_can_write_is_refused(tmp_path, mode):
    with pytest.raises(UnsafeFolderError, match="writable by others"):
        check_folder(_folder(tmp_path, "open", mode))


def test_a_symbolic_link_and_a_file_are_refused(tmp_path):
    real = _folder(tmp_path, "real", 0o700)
    os.symlink(real, tmp_path / "link")
    with pytest.raises(UnsafeFolderError, match="symbolic link"):
        check_folder(str(tmp_path / "link"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(UnsafeFolderError, match="not a directory"):
        check_folder(str(tmp_path / "file"))


def test_a_parent_others_can_write_without_the_sticky_bit_is_refused(tmp_path):
    parent = _folder(tmp_path, "parent", 0o777)
    child = os.path.join(parent, "sockets")
    os.mkdir(child, 0o700)
    with pytest.raises(UnsafeFolderError, match="a parent of the socket folder .* without the sticky bit"):
        check_folder(child)
    os.chmod(parent, 0o1777)  # as /tmp: others cannot move our folder away
    check_folder(child)


def test_the_default_folder_is_created_private_and_checked(tmp_path):
    folder = secure_folder(str(tmp_path / "run" / "mlts"))
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert secure_folder(folder) == folder  # there already, and ours: used as it is


def test_a_default_folder_open_to_others_is_refused(tmp_path):
    folder = _folder(tmp_path, "mlts", 0o755)
    with pytest.raises(UnsafeFolderError, match="expected 0700"):
        secure_folder(folder)


@needs_root
def test_a_default_folder_another_user_created_first_is_refused(tmp_path):
    os.chmod(tmp_path, 0o755)
    folder = _folder(tmp_path, "mlts-0", 0o700)
    os.chown(folder, NOBODY, NOBODY)  # pre-created by someone else, e.g. in /tmp
    with pytest.raises(UnsafeFolderError, match=f"belongs to uid {NOBODY}, not to this user"):
        secure_folder(folder)


def test_the_service_refuses_to_listen_in_a_folder_others_can_write(tmp_path):
    open_folder = _folder(tmp_path, "open", 0o777)
    with pytest.raises(HalError) as failed:
        SharedService.start(
            fake_spec("AddDevice"),
            socket_path=os.path.join(open_folder, "driver.sock"),
            log_path=str(tmp_path / "svc.log"),
            start_timeout=20,
        )
    assert "writable by others" in failed.value.message
    assert not os.path.exists(os.path.join(open_folder, "driver.sock"))


# ---------------------------------------------------------------- the client checks the service


def _impostor(path: str, ready_w: int) -> None:
    """As uid nobody: listen on `path`, send a valid hello to whoever connects, report what it sends."""
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    os.write(ready_w, b"r")
    conn, _ = listener.accept()
    hello = {"kind": "hello", "protocol": [1, 5], "device": "fake-add", "pid": os.getpid(), "shared": True}
    received = 0
    try:
        conn.sendall(wire.encode_frame(hello))  # the client may have hung up already
    except OSError:
        pass
    conn.settimeout(3.0)
    try:
        while chunk := conn.recv(65536):
            received += len(chunk)
    except OSError:
        pass
    os.write(ready_w, str(received).encode())


@pytest.fixture
def shared_folder():
    """A folder like /tmp (mode 1777) that another user can reach: anyone may create a socket there."""
    folder = tempfile.mkdtemp(prefix="mlts-test-shared-", dir="/tmp")
    os.chmod(folder, 0o1777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@needs_root
def test_a_client_sends_nothing_to_a_service_of_another_user(shared_folder):
    path = os.path.join(shared_folder, "driver.sock")
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the impostor
        try:
            _impostor(path, ready_w)
        finally:
            os._exit(0)
    os.close(ready_w)
    try:
        assert os.read(ready_r, 1) == b"r"
        with pytest.raises(HalError) as refused:
            RemoteDevice.connect(path)
        assert refused.value.status == ErrorStatus.DEVICE_UNAVAILABLE
        assert f"runs as uid {NOBODY}" in refused.value.message
        assert "nothing was sent to it" in refused.value.message
        received = os.read(ready_r, 32)
        assert received == b"0"  # not a byte of any call, model or input
    finally:
        os.close(ready_r)
        os.waitpid(pid, 0)


def test_a_service_of_this_user_is_accepted(tmp_path):
    with SharedService.start(fake_spec("AddDevice"), log_path=str(tmp_path / "svc.log")) as service:
        with RemoteDevice.connect(service.path) as device:
            assert device.process.pid == service.pid  # the kernel's word on who listens
            device.ping()
            time.sleep(0)
