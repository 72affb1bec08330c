"""Import-only stand-in for `tensordict` (not installed on the grading image).

verl.protocol and verl.utils.torch_functional import TensorDict at module level; the graded code
never builds one: constructing it raises.
"""
__version__ = "0.0.0+infradev-stub"


class TensorDictBase:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("tensordict stub: TensorDict is not available on this grading image")


class TensorDict(TensorDictBase):
    pass


class NonTensorData(TensorDictBase):
    pass


class NonTensorStack(TensorDictBase):
    pass


def __getattr__(name):
    raise AttributeError(f"tensordict stub: tensordict.{name} is not available on this grading image")
