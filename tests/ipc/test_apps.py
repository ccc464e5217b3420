"""Apps: connections of one program under one user are one app; identities come from the kernel."""

from __future__ import annotations

from mlts.ipc.peer import Peer
from mlts.ipc.service.apps import AppRegistry, app_identity


def test_one_program_of_one_user_is_one_app_and_others_are_not() -> None:
    apps = AppRegistry()
    first = apps.join(Peer(100, 1000, 1000, "/usr/bin/python3"))
    second = apps.join(Peer(101, 1000, 1000, "/usr/bin/python3"))  # another process of the same program
    other_program = apps.join(Peer(102, 1000, 1000, "/opt/vendor/bin/app"))
    other_user = apps.join(Peer(103, 1001, 1001, "/usr/bin/python3"))
    hidden = apps.join(Peer(104, 1001, 1001, None))  # an executable the service cannot read: by uid
    hidden_too = apps.join(Peer(105, 1001, 1001, None))
    assert first == second
    assert len({first, other_program, other_user, hidden}) == 4
    assert hidden == hidden_too
    assert apps.count() == 4


def test_a_peer_without_credentials_is_an_app_per_connection() -> None:
    apps = AppRegistry()
    remote = Peer()  # another machine: no pid, no uid
    assert app_identity(remote) is None
    assert apps.join(remote) != apps.join(remote)
    assert apps.count() == 0


def test_an_app_that_left_comes_back_under_a_new_number() -> None:
    apps = AppRegistry()
    peer = Peer(100, 1000, 1000, "/usr/bin/python3")
    number = apps.join(peer)
    assert apps.join(peer) == number
    apps.leave(peer)
    apps.leave(peer)
    assert apps.count() == 0
    assert apps.join(peer) != number
    apps.leave(Peer(7, 7, 7, "/never/joined"))  # harmless
