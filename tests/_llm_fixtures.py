"""Tiny data for the LLM-head tests: a learnable 2-option set (rel_depth form), its feature cache, a tiny LLM.

The images are 56x56 with a red and a blue filled box; the nearer object (the answer) is drawn much larger,
so even a tiny random VFM's patch tokens carry the answer. Half the samples answer "red", half "blue".
"""

from __future__ import annotations

import random
from pathlib import Path

from PIL import Image, ImageDraw

from ava.abilities import REL_DEPTH_ANSWERS, format_options, get_ability
from ava.data.format import DatasetWriter, Sample

VFM = "tiny-siglip"
LLM = "tiny-random-qwen2"


def _image(rng: random.Random, nearer: str) -> Image.Image:
    im = Image.new("RGB", (56, 56), (128, 128, 128))
    d = ImageDraw.Draw(im)
    big, small = rng.randint(22, 28), rng.randint(6, 9)
    sizes = {"red": big if nearer == "red" else small, "blue": big if nearer == "blue" else small}
    left_first = rng.random() < 0.5
    for colour, x0 in (("red", 2 if left_first else 30), ("blue", 30 if left_first else 2)):
        s = sizes[colour]
        y0 = rng.randint(2, 54 - s)
        d.rectangle([x0, y0, x0 + s, y0 + s], fill=(220, 20, 20) if colour == "red" else (20, 20, 220))
    return im


def make_rel_depth(root: Path, n: int = 48, seed: int = 0) -> Path:
    """A split rel_depth dataset of ``n`` samples (2 of every 8 are test), balanced red/blue in both splits."""
    rng = random.Random(seed)
    ability = get_ability("rel_depth")
    template = ability.question_templates[0]
    with DatasetWriter(
        root,
        info={"source": "llm-head test fixture", "synthetic": True, "split": {"made_by": "synthetic", "seed": seed}},
    ) as w:
        for i in range(n):
            nearer = REL_DEPTH_ANSWERS[i % 2]
            rel = w.add_image(_image(rng, nearer))
            question = template.format(a="cup", b="box", options=format_options(REL_DEPTH_ANSWERS))
            w.add_sample(
                Sample(
                    id=f"s{i:03d}",
                    ava="rel_depth",
                    image=rel,
                    width=56,
                    height=56,
                    question=question,
                    answer=nearer,
                    truth={"index": i % 2, "text": nearer},
                    split="test" if i % 8 in (3, 6) else "train",
                )
            )
    return root


def make_cache(data: Path, cache: Path, vfm: str = VFM) -> Path:
    from ava.cache import ExtractConfig, extract

    extract(ExtractConfig(vfm=vfm, data=str(data), cache=str(cache), progress=False, device="cpu", codec="fp16"))
    return cache


# A question and a reference answer of every ability, in the shapes the release uses (for the label-mask test).
ANSWERS = {
    "option": "front right",
    "integer": "12",
    "depth_bin": "2-3",
    "box": "[0.120, 0.300, 0.550, 0.800]",
    "rgb": "(12, 200, 3)",
    "text": "Hello World 42",
}


def example(ability_key: str) -> tuple[str, str]:
    """(question, answer) of ``ability_key`` built from its own template."""
    ability = get_ability(ability_key)
    options = list(ability.fixed_options) or ["alpha", "beta", "gamma"]
    if ability.answer_kind == "depth_bin":
        options = ["1-2", "2-3", "3-4"]
    fields = {"object": "red car", "a": "cup", "b": "box", "family": "bird"}
    question = ability.question_templates[0].format(options=format_options(options, ability.option_style), **fields)
    answer = options[1] if ability.answer_kind == "option" else ANSWERS[ability.answer_kind]
    return question, answer
