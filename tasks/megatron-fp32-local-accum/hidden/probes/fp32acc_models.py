"""Models for the probes (a module of its own: `conftest` is not an importable name in every layout)."""

import torch


class Net(torch.nn.Module):
    """Three bf16 linear layers (`layers.0.weight`, `layers.0.bias`, ...), and a `head` module so
    that names have more than one shape."""

    def __init__(self, dim=24, layers=3):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(dim, dim, bias=True) for _ in range(layers)])
        self.head = torch.nn.Linear(dim, 8, bias=False)
