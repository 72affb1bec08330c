"""Rank > 0 waits for rank 0's rendezvous store to listen before torch connects to it
(infradev_probe/_rendezvous.py): the wait ends when the port listens, never before; rank 0, other
init methods and remote masters do not wait; init_process_group is wrapped once, on both modules."""

import os
import socket
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "python", "sandbox"))

from infradev_probe import _rendezvous  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def master(monkeypatch):
    port = free_port()
    for name, value in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": "1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    return port


def test_listening_reads_this_namespace_s_sockets(master):
    assert _rendezvous.listening(master) is False
    with socket.socket() as s:
        s.bind(("127.0.0.1", master))
        assert _rendezvous.listening(master) is False  # bound, not listening
        s.listen()
        assert _rendezvous.listening(master) is True


def test_rank_1_returns_only_once_rank_0_listens(master):
    listening_at = []
    sock = socket.socket()

    def rank0():
        time.sleep(0.3)
        sock.bind(("127.0.0.1", master))
        sock.listen()
        listening_at.append(time.monotonic())

    t = threading.Thread(target=rank0)
    t.start()
    try:
        _rendezvous.wait_for_master(("gloo",), {})
        returned = time.monotonic()
    finally:
        t.join()
        sock.close()
    assert listening_at and returned >= listening_at[0]


@pytest.mark.parametrize("args, kwargs, env", [
    (("gloo",), {}, {"RANK": "0"}),
    (("gloo",), {"rank": 0}, {}),
    (("gloo", "tcp://127.0.0.1:1"), {}, {}),
    (("gloo",), {"store": object()}, {}),
    (("gloo",), {}, {"MASTER_ADDR": "10.1.2.3"}),
    (("gloo",), {}, {"TORCHELASTIC_USE_AGENT_STORE": "True"}),
])
def test_nothing_to_wait_for(master, monkeypatch, args, kwargs, env):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    t0 = time.monotonic()
    _rendezvous.wait_for_master(args, kwargs)  # nothing listens on the port: a wait would last WAIT_S
    assert time.monotonic() - t0 < _rendezvous.WAIT_S / 2


def test_init_process_group_wrapped_once_on_both_modules():
    import torch.distributed as dist  # the probe library (imported above) patches it on import
    import torch.distributed.distributed_c10d as c10d

    assert getattr(dist.init_process_group, "_infradev_rendezvous", False)
    assert c10d.init_process_group is dist.init_process_group
    before = dist.init_process_group
    _rendezvous.install([dist, c10d])
    assert dist.init_process_group is before and dist.init_process_group.__wrapped__.__name__ == "init_process_group"
