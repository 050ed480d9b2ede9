"""Zero-shot head: a VFM whose checkpoint has a text tower (CLIP, SigLIP, SigLIP-2, MetaCLIP-2, ...) answers each
choice question by the option whose text embedding is closest to the image embedding (FOCI's upper bound for a VLM
built on that encoder). Nothing is trained; results and predictions have the files of every head, so ``ava report``
ranks it beside the trained heads. Abilities that are not choice questions are recorded as not applicable."""

from __future__ import annotations

from typing import Any

from ava.heads.base import HeadSpec
from ava.heads.zero_shot.config import ZeroShotConfig


def _train(config: ZeroShotConfig) -> Any:
    from ava.heads.zero_shot.train import train

    return train(config)


def _evaluate(run_dir: Any, split: str = "test", **options: Any) -> dict[str, Any]:
    from ava.heads.zero_shot.train import evaluate

    return evaluate(run_dir, split, **options)


SPEC = HeadSpec(
    name="zero-shot",
    description="no training: image-text similarity over each choice question's options (VFMs with a text tower)",
    config_cls=ZeroShotConfig,
    train=_train,
    evaluate=_evaluate,
)

__all__ = ["SPEC", "ZeroShotConfig"]
