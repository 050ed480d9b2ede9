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


@dataclass(frozen=True)
class LLMShape:
    hidden: int
    intermediate: int
    layers: int
    kv: int  # the key/value projections' width (grouped-query attention)
    vocab: int

    @property
    def params(self) -> float:
        """Parameters: attention and MLP of every layer, and the embedding."""
        h = self.hidden
        return float(self.layers * (2 * h * h + 2 * h * self.kv + 3 * h * self.intermediate) + self.vocab * h)

    def lora_params(self, r: int) -> float:
        """LoRA of rank ``r`` on the 7 linears of every layer (q, k, v, o, gate, up, down)."""
        h, i, kv = self.hidden, self.intermediate, self.kv
        return float(self.layers * r * (2 * h + 2 * (h + kv) + 2 * h + 3 * (h + i)))


QWEN2_05B = "random-qwen2-0.5b"  # the registry's build of Qwen2-0.5B's exact shapes


def llm_shape(name: str) -> LLMShape | None:
    """An LLM's shapes: its registry entry's random config (Qwen2-0.5B's for ``qwen2-0.5b``), else the config of
    its hub id when the hub's files are on this machine already (nothing is downloaded); None when neither."""
    from ava.heads.llm.llms import LLMS

    spec = LLMS.get(name) if name in LLMS else None
    config = dict(getattr(spec, "random_config", None) or {})
    if not config and spec is not None and spec.hub_id == "Qwen/Qwen2-0.5B" and QWEN2_05B in LLMS:
        config = dict(LLMS.get(QWEN2_05B).random_config)
    if not config:
        try:
            from transformers import AutoConfig

            config = AutoConfig.from_pretrained(getattr(spec, "hub_id", None) or name, local_files_only=True).to_dict()
        except Exception:  # noqa: BLE001 - not on this machine, or not a causal LM's config: no shapes
            return None
    try:
        h, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
        kv = h * int(config.get("num_key_value_heads") or heads) // heads
        return LLMShape(
            h, int(config["intermediate_size"]), int(config["num_hidden_layers"]), kv, int(config["vocab_size"])
        )
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None


def llm_params(name: str) -> float:
    """An LLM's parameters (:func:`llm_shape`), else the size in its name (``qwen2-1.5b``), else Qwen2-0.5B's."""
    from ava.heads.llm.llms import LLMS

    shape = llm_shape(name)
    if shape is not None:
        return shape.params
    spec = LLMS.get(name) if name in LLMS else None
    match = re.search(r"(\d+(?:\.\d+)?)b\b", f"{getattr(spec, 'hub_id', '') or ''} {name}".lower())
    return float(match.group(1)) * 1e9 if match else 0.494e9
