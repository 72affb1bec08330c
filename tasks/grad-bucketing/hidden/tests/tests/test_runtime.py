import torch

from nanoinfra import runtime


def test_cpu_and_gloo_by_default(monkeypatch):
    monkeypatch.delenv("NANOINFRA_DEVICE", raising=False)
    monkeypatch.delenv("NANOINFRA_BACKEND", raising=False)
    assert runtime.resolve_device() == torch.device("cpu")
    assert runtime.resolve_backend() == "gloo"


def test_backend_override(monkeypatch):
    monkeypatch.setenv("NANOINFRA_BACKEND", "mpi")
    assert runtime.resolve_backend(torch.device("cpu")) == "mpi"


def test_rank_and_world_size_match_the_process_group():
    import torch.distributed as dist

    assert runtime.world_size() == dist.get_world_size()
    assert runtime.rank() == dist.get_rank()
