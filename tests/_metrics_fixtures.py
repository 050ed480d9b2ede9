"""One hand-made sample per ability (two variants each), and a tiny dataset directory built from them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PIL import Image

from ava.abilities import (
    DTD_TEXTURES,
    EMOTIONS,
    INDOOR_DEPTH_BINS,
    ORIENTATION_VIEWS,
    REL_DEPTH_ANSWERS,
    SPATIAL_ANSWERS,
    format_options,
    get_ability,
)
from ava.data.format import DatasetWriter, Sample

WIDTH, HEIGHT = 20, 10  # non-square, so pixel boxes normalize x and y differently

_OPTIONS: dict[str, list[str]] = {
    "fine_grained": ["Black-footed Albatross", "Laysan Albatross", "Sooty Albatross"],
    "abs_depth": list(INDOOR_DEPTH_BINS),
    "rel_depth": list(REL_DEPTH_ANSWERS),
    "orientation": list(ORIENTATION_VIEWS),
    "recognition": ["cat", "dog", "car"],
    "action": ["running", "jumping rope", "jumping"],
    "texture": list(DTD_TEXTURES),
    "spatial": list(SPATIAL_ANSWERS),
    "scene": ["kitchen", "bedroom", "beach"],
    "emotion": list(EMOTIONS),
}
# (variant 0, variant 1) truths per non-option ability, and option indices per option ability
_TRUTHS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "localization": ({"box": [0.1, 0.2, 0.55, 0.8]}, {"box": [0.5, 0.5, 0.9, 0.7]}),
    "counting": ({"value": 7}, {"value": 25}),
    "ocr": ({"text": "EXIT 12"}, {"text": "Welcome to the grand hotel"}),
    "color": ({"rgb": [12, 200, 3]}, {"rgb": [250, 250, 250]}),
}
_INDEX = {
    "fine_grained": (1, 0),
    "abs_depth": (2, 0),
    "rel_depth": (1, 0),
    "orientation": (1, 8),
    "recognition": (2, 0),
    "action": (1, 2),
    "texture": (30, 0),
    "spatial": (1, 2),
    "scene": (0, 2),
    "emotion": (4, 0),
}


def make_sample(key: str, variant: int = 0, *, image: str = "00/00.png", split: str | None = "test") -> Sample:
    ability = get_ability(key)
    options = _OPTIONS.get(key)
    meta: dict[str, Any] = {"source": f"src{variant}"}
    if options is not None:
        index = _INDEX[key][variant]
        truth: dict[str, Any] = {"index": index, "text": options[index]}
        if key == "abs_depth":
            lo, hi = options[index].split("-")
            truth = {"index": index, "bin": [float(lo), float(hi)]}
            meta["scene_type"] = "indoor"
        answer = options[index]
    else:
        truth = _TRUTHS[key][variant]
        answer = str(next(iter(truth.values())))
    question = ability.question_templates[0].format(
        object="thing", a="cup", b="plate", family="bird", options=format_options(options or [], ability.option_style)
    )
    return Sample(
        id=f"{key}-{variant}",
        ava=key,
        image=image,
        width=WIDTH,
        height=HEIGHT,
        question=question,
        answer=answer,
        truth=truth,
        options=options,
        split=split,
        meta=meta,
    )


def build_dataset(root: Path, keys: list[str], *, info: dict[str, Any] | None = None) -> Path:
    """A dataset with two test samples per ability and one train sample (variant 0 copy) per ability."""
    info = info if info is not None else {"split": {"made_by": "ava", "test_frac": 0.2, "seed": 0}}
    with DatasetWriter(root, info=info) as writer:
        rel = writer.add_image(Image.new("RGB", (WIDTH, HEIGHT), (90, 30, 200)))
        for key in keys:
            for variant in (0, 1):
                writer.add_sample(make_sample(key, variant, image=rel))
            train = make_sample(key, 0, image=rel, split="train")
            train.id = f"{key}-train"
            writer.add_sample(train)
    return root
