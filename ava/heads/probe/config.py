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
    ocr_lrs: list[float] = field(default_factory=lambda: [3e-3, 1e-2])  # the CTC reader's grid (it costs more)
    weight_decay: float = 1e-4
    heads: int = 4  # attention heads (learned queries) of the attentive pooling
    steps: int = 500  # target number of optimizer steps when epochs is None
    heldout_frac: float = 0.1
    max_memory_gb: float = 4.0  # token features above this are streamed from the cache per batch
    progress: bool = True


@dataclass
class AttnProbeConfig(ProbeConfig):
    """The attentive probe: learned queries pool the patch tokens before the linear layer."""

    pooling: str = "attn"
    lrs: list[float] = field(default_factory=lambda: [3e-3, 1e-2])
