"""Import-only stand-in for `omegaconf` (not installed on the grading image).

verl.utils.config and verl.trainer.ppo.core_algos import DictConfig / ListConfig / OmegaConf for
isinstance checks and annotations; the graded code builds no config from YAML.
"""
__version__ = "0.0.0+infradev-stub"
MISSING = "???"


class DictConfig(dict):
    pass


class ListConfig(list):
    pass


class OmegaConf:
    @staticmethod
    def to_container(cfg, *args, **kwargs):
        return cfg

    @staticmethod
    def create(obj=None, *args, **kwargs):
        return DictConfig(obj or {})

    @staticmethod
    def is_config(obj):
        return isinstance(obj, (DictConfig, ListConfig))


def open_dict(cfg):
    import contextlib

    return contextlib.nullcontext(cfg)


def __getattr__(name):
    raise AttributeError(f"omegaconf stub: omegaconf.{name} is not available on this grading image")
