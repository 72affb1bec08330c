import torch
import torch.distributed as dist

from nanoinfra.bucketing import GradBucket
from nanoinfra.models import TinyMLP
from nanoinfra.parallel import DataParallel


def _wrapped(device, **kwargs):
    torch.manual_seed(7)
    return DataParallel(TinyMLP(6, 10, 3).to(device), **kwargs)


def test_buckets_cover_every_parameter(device):
    model = _wrapped(device, bucket_cap_mb=0.0005)
    names = [name for bucket in model.buckets for name in bucket.param_names]
    assert sorted(names) == sorted(name for name, _ in model.module.named_parameters())
    for bucket in model.buckets:
        assert isinstance(bucket, GradBucket)
        assert bucket.buffer.dim() == 1
        assert bucket.buffer.device == device
    assert sum(b.buffer.numel() for b in model.buckets) == sum(p.numel() for p in model.parameters())


def test_default_cap_fits_a_small_model_in_one_bucket(device):
    assert len(_wrapped(device).buckets) == 1


def test_small_cap_gives_several_buckets(device):
    assert len(_wrapped(device, bucket_cap_mb=0.0001).buckets) > 1


def test_sync_with_several_buckets_keeps_shapes(device):
    model = _wrapped(device, bucket_cap_mb=0.0001)
    torch.manual_seed(dist.get_rank())
    model(torch.randn(4, 6, device=device)).sum().backward()
    model.sync_gradients()
    for param in model.parameters():
        assert param.grad is not None and param.grad.shape == param.shape
        assert torch.isfinite(param.grad).all()
