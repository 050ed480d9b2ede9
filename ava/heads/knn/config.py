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
    # pooled views tried with k (picked together on held-out): "mean" over the patch tokens, and "gridN" = the mean
    # plus N x N cell means of the token grid (keeps coarse position); views the token layout cannot take are skipped
    pools: list[str] = field(default_factory=lambda: ["mean", "grid2", "grid4"])
    # how (view, k) is picked: "loo" = leave-one-out over all of train (a kNN gets it for free, and a 10% slice of
    # a small train set is too few samples to choose among 9 candidates); "heldout" = a heldout_frac slice
    selection: str = "loo"
    heldout_frac: float = 0.1
    progress: bool = True
    force: bool = False  # replace a different run at `out` (atomically; see ava.heads.rundir.ownership)
