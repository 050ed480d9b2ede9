"""The built-in synthetic AVA suite: all 14 abilities rendered offline with exact ground truth.

``generate(SynthConfig(out=...))`` writes an ava dataset, already split 80/20 per class or answer bin. One
generator per ability lives in ``ava/synth/abilities/``; shared drawing in ``shapes.py`` and ``textures.py``;
difficulty knobs in ``core.KNOBS``.
"""

from ava.synth.core import KNOBS, Knobs, SynthConfig
from ava.synth.generate import generate

__all__ = ["KNOBS", "Knobs", "SynthConfig", "generate"]
