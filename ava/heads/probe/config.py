"""Configs of the probe heads (``probe-linear`` and ``probe-attn``)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ProbeConfig:
    """A probe run: one small head per ability, picked from a grid on a held-out slice of train."""

    ava: list[str] | None = None  # abilities; None or [] = every ability in the data
    vfm: str = ""
    data: str = ""
    cache: str = ""
    out: str = ""
    seed: int = 0
    device: str = "auto"
    epochs: int | None = None  # None: enough epochs for ~`steps` optimizer steps (within the head's range)
    lr: float | None = None  # one learning rate instead of the grid `lrs`
    batch_size: int | None = None  # None: 128 (mean pooling) / 64 (tokens)
    layer: int | None = None  # one cached layer instead of trying last vs all cached layers
    split: str = "test"  # the split evaluated after training
    eval_after: bool = True
    max_train: int | None = None
    pooling: str = "mean"  # "mean" (probe-linear) or "attn" (probe-attn)
    lrs: list[float] = field(default_factory=lambda: [1e-3, 3e-3, 1e-2, 3e-2])
    # pooled views the linear probe tries (picked on held-out with the lr): "mean" over all patch tokens, and
    # "gridN" = the mean plus the means of N x N cells of the token grid, which keep coarse position (the
    # mean alone cannot say where things are). Views the cache's token layout cannot take are skipped.
    # grid2 is not a default: its cells are sums of grid4 cells (the same linear information), and every extra
    # candidate costs time and makes the pick on a small held-out slice noisier.
    # The attentive probe pools the tokens itself and ignores this.
    pools: list[str] = field(default_factory=lambda: ["mean", "grid4"])
    cell_rank: int = 64  # gridN views: each cell mean is reduced to this many principal components of train
    ocr_lrs: list[float] = field(default_factory=lambda: [3e-3, 1e-2])  # the CTC reader's grid (it costs more)
    weight_decay: float = 1e-4
    heads: int = 4  # attention heads (learned queries) of the attentive pooling
    steps: int = 500  # target number of optimizer steps when epochs is None
    heldout_frac: float = 0.1
    # train tokens up to this size (float32) are held whole and standardized once; larger sets are gathered and
    # standardized batch by batch from the ability's held features, on the device they are held on
    max_memory_gb: float = 4.0
    progress: bool = True
    force: bool = False  # replace a different run at `out` (atomically; see ava.heads.rundir.ownership)


@dataclass
class AttnProbeConfig(ProbeConfig):
    """The attentive probe: learned queries pool the patch tokens before the linear layer."""

    pooling: str = "attn"
    lrs: list[float] = field(default_factory=lambda: [3e-3, 1e-2])
