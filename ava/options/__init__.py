"""Hard-negative options for choice questions (FOCI): miners that rank an ability's wrong classes per image
(:mod:`ava.options.miners`: ``random``, ``cache:VFM``, ``clip@DIR``), the question forms (:mod:`ava.options.prompt`:
the list replaced in place, or FOCI's prompt), and the dataset rewrite behind ``ava data options``
(:mod:`ava.options.rewrite`). The samplers themselves are the shared interface of :mod:`ava.data.options`, which
``ava data build`` uses too.
"""

from __future__ import annotations

from ava.options.miners import (
    MINER_FORMS,
    CacheMiner,
    Miner,
    RandomMiner,
    TextTowerMiner,
    mined_options,
    parse_miner,
)
from ava.options.rewrite import OptionsResult, rewrite_options

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
