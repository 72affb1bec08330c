"""nanorl: a deliberately small RL training stack in which one trainer rank updates a policy and
rollout ranks generate with a copy of it, kept current by :class:`nanorl.weight_sync.WeightSync`."""

__all__ = ["policy", "runtime", "weight_sync", "loop"]
