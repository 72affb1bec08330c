"""infradev probe library: what a block of code costs on this rank.

    from infradev_probe import measure
    with measure() as m:
        step()
    m.calls["all_reduce"], m.bytes["all_reduce"], m.peak_memory_bytes, m.wall_time_s

Importing this package patches torch.distributed (now, or right after torch.distributed is imported)
so collectives are counted; it never imports torch itself. Load it as a pytest plugin with
`-p infradev_probe.plugin` to get the same figures per test and per rank.
"""

from ._collectives import OPS, install, is_patched
from ._measure import Measurement, measure

install()

__all__ = ["measure", "Measurement", "install", "is_patched", "OPS"]
