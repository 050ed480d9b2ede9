"""ava: atomic visual ability fingerprints of frozen vision foundation models (AVA-Bench)."""

from ava.torchvision_fix import install as _install_torchvision_fix

__version__ = "0.1.0"

_install_torchvision_fix()  # imports nothing; see ava/torchvision_fix.py
