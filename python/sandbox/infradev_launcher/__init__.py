"""The rank launcher behind infradev_launch.py (stdlib only: it never imports torch or pytest)."""
