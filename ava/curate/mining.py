"""``ava data build --miner``: hard-negative options chosen while the questions are built (FOCI).

The samplers are those of :mod:`ava.data.choices`; what differs from ``ava data options`` is where the images come
from: a question being built has no dataset image yet, so it hands the miner its picture (the source image, or the
object's box cut from it) by a key. ``cache:VFM`` ranks by a feature cache, which only exists after extraction, so
it is refused here with the way to get it (``ava data options`` on the built dataset).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from PIL import Image

from ava.data.choices import OptionSampler, OptionsError, random_options, ranked_options

ImageLoader = Callable[[], Image.Image]


def check_miner(spec: str) -> str:
    """``spec`` if a build can mine with it; a one-line error otherwise."""
    spec = (spec or "").strip()
    if spec.startswith("cache:"):
        raise OptionsError(
            f"--miner {spec} reads a feature cache, which does not exist before the dataset is built; "
            f"build with --miner random (or clip@DIR), extract, then run `ava data options --miner "
            f"{spec} --cache DIR` on the built dataset"
        )
    if spec != "random" and not spec.startswith("clip@"):
        raise OptionsError(f"unknown miner {spec!r}; a build takes random or clip@<hub-id-or-dir>")
    if spec == "clip@":
        raise OptionsError("--miner 'clip@' names no checkpoint; use clip@<hub-id-or-dir>")
    return spec


class BuildMiner:
    """Ranks an ability's classes for one picture by a CLIP-like checkpoint's text and image towers."""

    def __init__(self, spec: str, device: str = "cpu") -> None:
        from ava.distractors.miners import TextTowerMiner
        from ava.vfm.image_text import DEFAULT_TEMPLATE

        self.spec = check_miner(spec)
        self.tower = TextTowerMiner(spec[len("clip@") :], DEFAULT_TEMPLATE, device=device)
        self.images: dict[str, ImageLoader] = {}  # image key -> its picture, registered by the builders
        self._labels: dict[tuple[str, ...], np.ndarray] = {}
        self._ranked: dict[tuple[str, tuple[str, ...]], list[str]] = {}

    def record(self) -> dict[str, Any]:
        model = self.tower.load()
        return {"miner": self.spec, "template": self.tower.template, "model_type": getattr(model, "model_type", None)}

    def ranking(self, truth: str, classes: Sequence[str], image: str | None = None) -> Sequence[str]:
        if image is None or image not in self.images:
            raise OptionsError(f"miner {self.spec}: no picture given for this question")
        key = (image, tuple(classes))
        if key not in self._ranked:
            model = self.tower.load()
            if key[1] not in self._labels:
                self._labels[key[1]] = model.texts([self.tower.template.format(c) for c in classes])
            x = model.images([self.images[image]()])[0]
            scores = self._labels[key[1]] @ x
            # most similar first; ties by class name, so the ranking does not depend on float noise order
            order = sorted(range(len(classes)), key=lambda i: (-scores[i], classes[i]))
            self._ranked[key] = [classes[i] for i in order]
        return self._ranked[key]

    def sampler(self, ava: str, k: int | None) -> OptionSampler:
        return random_options(None) if k is None else ranked_options(k, self.ranking)


def sampler_factory(
    spec: str, device: str = "cpu"
) -> tuple[Callable[[str, int | None], OptionSampler], BuildMiner | None]:
    """The build's ``Context.sampler`` for ``--miner spec`` and the miner behind it (None for random)."""
    if check_miner(spec) == "random":
        return (lambda ava, k: random_options(k)), None
    miner = BuildMiner(spec, device)
    return miner.sampler, miner
