"""Distractors: hard-negative options for choice questions (FOCI).

Miners rank an ability's wrong classes per image (:mod:`ava.distractors.miners`: ``random``, ``cache:VFM``,
``clip@DIR``); :mod:`ava.distractors.prompt` writes the question forms (the option list replaced in place, or
FOCI's prompt); :mod:`ava.distractors.rewrite` is the dataset rewrite behind ``ava data options``. The choice
lists themselves are sampled through the shared interface of :mod:`ava.data.choices`, which ``ava data build``
uses too.
"""

from __future__ import annotations

from ava.distractors.miners import (
    MINER_FORMS,
    CacheMiner,
    Miner,
    RandomMiner,
    TextTowerMiner,
    mined_options,
    parse_miner,
)
from ava.distractors.rewrite import OptionsResult, rewrite_options

__all__ = [
    "MINER_FORMS",
    "CacheMiner",
    "Miner",
    "OptionsResult",
    "RandomMiner",
    "TextTowerMiner",
    "mined_options",
    "parse_miner",
    "rewrite_options",
]
