"""Import-only stand-in for `ray` (not installed on the grading image).

verl/__init__.py imports verl.protocol, which imports ray at module level. The graded code
(verl/utils/groupwise.py, verl/trainer/ppo/core_algos.py) never calls ray: any use raises.
"""
__version__ = "0.0.0+infradev-stub"


class ObjectRef:  # used in annotations only
    pass


def __getattr__(name):
    raise AttributeError(f"ray stub: ray.{name} is not available on this grading image")
