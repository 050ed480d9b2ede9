"""kNN head: cosine neighbours of L2-normalized pooled features (mean, or mean plus grid cells) in a faiss index (see
:mod:`ava.heads.knn.model` for the voting and averaging rules, :mod:`ava.heads.knn.train` for k selection)."""

from __future__ import annotations

from typing import Any

from ava.heads.base import HeadSpec
from ava.heads.knn.config import KNNConfig


def _train(config: KNNConfig) -> Any:
    from ava.heads.knn.train import train

    return train(config)


def _evaluate(run_dir: Any, split: str = "test", **options: Any) -> dict[str, Any]:
    from ava.heads.knn.train import evaluate

    return evaluate(run_dir, split, **options)


SPEC = HeadSpec(
    name="knn",
    description="k nearest neighbours (faiss, cosine on pooled features); pooled view and k picked by leave-one-out "
    "(on a stratified subsample of train above 4000 rows)",
    config_cls=KNNConfig,
    train=_train,
    evaluate=_evaluate,
)

__all__ = ["SPEC", "KNNConfig"]
