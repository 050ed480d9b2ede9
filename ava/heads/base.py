"""What every head provides, so ``ava head train|eval`` and ``ava report`` treat them alike.

A head package (``ava/heads/<name>/``) has a ``config.py`` (a dataclass), a ``model.py`` (the module or
index), and registers a :class:`HeadSpec` in :data:`ava.heads.HEADS`.

A *run directory* is what training writes and what reports read::

    RUN/
      config.json                 # the resolved config (head, vfm, abilities, data, cache, seed, ...)
      run.json                    # {"head", "vfm", "abilities", "random_weights", "split": {...}, "cache_key"}
      results_<split>.json        # the ``ava score`` results schema, plus the "run" block above
      predictions_<split>.jsonl   # one line per sample: id, ava, prediction (raw reply), parsed, truth, score
      ...                         # head-specific weights (safetensors), logs, checkpoints
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class HeadSpec:
    name: str
    description: str
    config_cls: type
    # train(config) -> run directory. It also evaluates on the test split when config.eval_after is true.
    train: Callable[[Any], Path]
    # evaluate(run_dir, split, **options) -> results dict (the ``ava score`` schema)
    evaluate: Callable[..., dict[str, Any]]
