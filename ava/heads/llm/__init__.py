"""The paper's LLM head: ``mlp2x_gelu`` connector + a causal LM (default Qwen2-0.5B) with LoRA, trained on
cached VFM patch features (or, for parity and speed baselines, on features computed online).

Importing this package is light; torch/transformers load when ``train``/``evaluate``/``align`` run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ava.heads.base import HeadSpec
from ava.heads.llm import align as _align_module  # noqa: F401 (loaded first: see below)
from ava.heads.llm.config import AlignConfig, InstructConfig, LLMHeadConfig

# Loading a submodule binds its name on the package. The submodule ``align`` (light: torch loads inside its
# functions) is loaded above, so the function ``align`` defined below keeps the name for good, and
# ``from ava.heads.llm import align`` gives the function even after ``ava.heads.llm.align`` was imported.


def train(config: LLMHeadConfig) -> Path:
    """Train (resumably) one head per ability, or one joint head with ``config.joint``, and, when
    ``config.eval_after``, evaluate; returns the run directory."""
    from ava.heads.llm.per_ability import train as _train

    return _train(config)


def evaluate(run_dir: str | Path, split: str = "test", **options: Any) -> dict[str, Any]:
    """Decode and score a run's abilities on ``split``; options: decode, max_eval, batch_size, device."""
    from ava.heads.llm.per_ability import evaluate as _per_ability
    from ava.heads.llm.per_ability import is_per_ability

    if is_per_ability(run_dir):
        return _per_ability(run_dir, split, **options)
    from ava.heads.llm.evaluate import evaluate as _evaluate

    return _evaluate(run_dir, split, **options)


def align(config: AlignConfig) -> Path:
    """Connector pre-training on image-caption pairs (the paper's stage 1)."""
    from ava.heads.llm.align import align as _align

    return _align(config)


def instruct(config: InstructConfig) -> Path:
    """Full fine-tuning of the LLM and the connector on instruction conversations (the paper's stage 2)."""
    from ava.heads.llm.stage2 import instruct as _instruct

    return _instruct(config)


SPEC = HeadSpec(
    name="llm",
    description="mlp2x_gelu connector + causal LM with LoRA (the paper's protocol), on cached features",
    config_cls=LLMHeadConfig,
    train=train,
    evaluate=evaluate,
)

__all__ = ["SPEC", "AlignConfig", "InstructConfig", "LLMHeadConfig", "align", "evaluate", "instruct", "train"]
