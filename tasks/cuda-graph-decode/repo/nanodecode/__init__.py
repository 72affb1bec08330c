"""nanodecode: a tiny decoder, its KV cache and a one-token-per-step decode engine."""

from .config import DecoderConfig
from .engine import DecodeEngine
from .model import TinyDecoder
from .runtime import resolve_device
from .sampling import sample

__all__ = ["DecoderConfig", "DecodeEngine", "TinyDecoder", "resolve_device", "sample"]
