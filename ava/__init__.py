"""ava: atomic visual ability fingerprints of frozen vision foundation models (AVA-Bench)."""

__version__ = "0.1.0"
