"""Config of the kNN head."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class KNNConfig:
    """A kNN run: cosine neighbours among train features, k picked per ability on a held-out slice of train."""

    ava: list[str] | None = None  # abilities; None or [] = every ability in the data
    vfm: str = ""
    data: str = ""
    cache: str = ""
    out: str = ""
    seed: int = 0
    device: str = "auto"  # "cuda" puts the faiss index on all GPUs when faiss has GPU support
    epochs: int | None = None  # unused (no training); accepted so every head takes the same options
    lr: float | None = None  # unused
    batch_size: int | None = None  # queries per faiss search call (None: 4096)
    layer: int | None = None  # the cached layer (None: the cache's default layer)
    split: str = "test"
    eval_after: bool = True
    max_train: int | None = None
    k: list[int] | int | None = field(default_factory=lambda: [1, 5, 20])  # candidates; one int = no choice
    heldout_frac: float = 0.1
    progress: bool = True
