"""Config of the zero-shot head."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ZeroShotConfig:
    """A zero-shot run: each choice question's options scored by image-text similarity; nothing is trained."""

    ava: list[str] | None = None  # abilities; None or [] = every ability in the data (non-choice: not applicable)
    vfm: str = ""  # a VFM whose checkpoint carries a text tower: clip@DIR, hf:DIR of a CLIPModel / SiglipModel ...
    data: str = ""
    out: str = ""
    seed: int = 0  # unused (nothing is random); accepted so every head takes the same options
    device: str = "auto"
    batch_size: int | None = None  # images or labels per forward pass (None: 32)
    template: str = "a photo of a {}."  # prompt around each option text (CLIP's zero-shot form)
    split: str = "test"
    eval_after: bool = True  # always evaluates: a zero-shot run is its predictions
    max_train: int | None = None  # unused (no training)
    progress: bool = True
    force: bool = False  # replace a different run at `out` (atomically; see ava.heads.rundir.ownership)
