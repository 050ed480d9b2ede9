"""The shapes an estimate is made from: a VFM's (parameters, tokens, dim, image side) and a dataset's (distinct
images and their size, per ability the train and test samples and the answers a probe chooses among)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from ava.cost.speeds import CostError
from ava.errors import AvaError


@dataclass(frozen=True)
class VFMShape:
    name: str
    params: int
    tokens: int  # every token the forward computes (patches and prefix tokens)
    patch_tokens: int  # the tokens cached per image
    dim: int
    image_size: int
    grid: bool  # the patch tokens have a grid layout (the grid views can be pooled)

    @property
    def forward_flops(self) -> float:
        """FLOP of one image's forward pass: 2 x parameters x tokens (a transformer's matmuls)."""
        return 2.0 * self.params * self.tokens


def vfm_shape(name: str) -> VFMShape:
    """The shape of a registered VFM or one the hub describes (nothing downloaded beyond its config)."""
    from ava.vfm import vfm_facts

    try:
        facts = vfm_facts(name)
    except AvaError as e:
        raise CostError(f"no estimate for --vfm {name!r}: {e}") from None
    if facts.get("params") is None or not facts.get("num_tokens") or not facts.get("dim"):
        raise CostError(f"no estimate for --vfm {name!r}: its parameters, tokens or dim are not known before loading")
    patch = int(facts["num_tokens"])
    return VFMShape(
        name=name,
        params=int(facts["params"]),
        tokens=patch + int(facts.get("prefix_tokens") or 0),
        patch_tokens=patch,
        dim=int(facts["dim"]),
        image_size=int(facts.get("image_size") or 224),
        grid=bool(facts.get("grid")),
    )


@dataclass(frozen=True)
class AbilityCounts:
    train: int
    test: int
    out: int  # answers a probe scores (choice vocabulary) or the regression target's size
    epochs: int  # the LLM head's epochs for this ability


@dataclass
class DataShape:
    path: str
    images: int  # distinct images (what an extraction computes)
    mpix: float  # mean megapixels of a stored image
    abilities: dict[str, AbilityCounts] = field(default_factory=dict)


def data_shape(path: str | os.PathLike[str]) -> DataShape:
    """Counts of a dataset directory, read from its sample files (images are not opened)."""
    from ava.abilities import ABILITIES
    from ava.data.format import Dataset
    from ava.heads.targets import TARGET_DIMS

    ds = Dataset(path)
    images: dict[str, int] = {}
    counts: dict[str, AbilityCounts] = {}
    for ava in ds.abilities():
        samples = ds.samples(ava)
        for s in samples:
            images[s.image] = s.width * s.height
        ability = ABILITIES.get(ava)
        train = [s for s in samples if s.split == "train"]
        if ability.answer_kind in TARGET_DIMS:
            out = TARGET_DIMS[ability.answer_kind]
        else:
            out = max(1, len({s.answer for s in train}))
        test = sum(s.split == "test" for s in samples)
        counts[ava] = AbilityCounts(len(train), test, out, int(ability.epochs))
    mpix = sum(images.values()) / max(1, len(images)) / 1e6
    return DataShape(str(path), len(images), mpix, counts)


def llm_params(name: str) -> float:
    """An LLM's parameters from its registry entry: its random config's shapes, else the size in its name
    (``qwen2-1.5b``); Qwen2-0.5B's when neither says."""
    from ava.heads.llm.llms import LLMS

    spec = LLMS.get(name) if name in LLMS else None
    config = getattr(spec, "random_config", None) if spec is not None else None
    if config:
        h, i, n = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
        return float(n * (4 * h * h + 3 * h * i) + config["vocab_size"] * h)
    match = re.search(r"(\d+(?:\.\d+)?)b\b", f"{getattr(spec, 'hub_id', '') or ''} {name}".lower())
    return float(match.group(1)) * 1e9 if match else 0.494e9
