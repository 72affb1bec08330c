import torch
import torch.distributed as dist

from nanoinfra.models import TinyMLP
from nanoinfra.parallel import DataParallel


def _same_on_all_ranks(tensor: torch.Tensor) -> bool:
    gathered = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, tensor.contiguous())
    return all(torch.equal(gathered[0], other) for other in gathered)


def _wrapped(device, bucket_cap_mb=0.0002):
    torch.manual_seed(1234 + dist.get_rank())  # different init per rank on purpose
    return DataParallel(TinyMLP(6, 10, 3).to(device), bucket_cap_mb=bucket_cap_mb)


def test_replicas_start_identical(device):
    model = _wrapped(device)
    for param in model.parameters():
        assert _same_on_all_ranks(param.detach())


def test_forward_shape(device):
    model = _wrapped(device)
    assert model(torch.randn(5, 6, device=device)).shape == (5, 3)


def test_sync_gradients_makes_grads_identical(device):
    model = _wrapped(device)
    torch.manual_seed(dist.get_rank())
    model(torch.randn(4, 6, device=device)).pow(2).mean().backward()
    model.sync_gradients()
    for param in model.parameters():
        assert param.grad is not None and param.grad.shape == param.shape
        assert _same_on_all_ranks(param.grad)


def test_no_sync_then_sync(device):
    model = _wrapped(device)
    torch.manual_seed(dist.get_rank())
    with model.no_sync():
        model(torch.randn(4, 6, device=device)).pow(2).mean().backward()
        model.sync_gradients()
    model(torch.randn(4, 6, device=device)).pow(2).mean().backward()
    model.sync_gradients()
    for param in model.parameters():
        assert param.grad is not None and param.grad.shape == param.shape
        assert _same_on_all_ranks(param.grad)
