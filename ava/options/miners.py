"""Option miners: rank an ability's wrong classes by how similar they are to each image (FOCI's hard negatives).

A miner is prepared once per ability (:meth:`Miner.prepare`) over the samples whose options it will choose, and
gives a ranking for :func:`ava.data.options.ranked_options`: ``ranking(truth, classes, image)`` -> the classes most
similar to ``image`` first. ``image`` is the sample's image key (its ``images/`` path or sha256).

- ``random``: no ranking; :func:`ava.data.options.random_options` (the paper's sampled lists, FOCI's control).
- ``cache:VFM``: each class's centroid is the mean of its train samples' L2-normalized mean-pooled features in a
  feature cache (``--cache``); each image ranks the centroids by cosine similarity (faiss inner product). No text
  tower needed; the classes without a train sample have no centroid and are never offered as negatives.
- ``clip@<hub-id-or-dir>``: a CLIP-like checkpoint (:mod:`ava.vfm.image_text`): each class label in a prompt
  template is embedded by the text tower, each image by the image tower; labels are ranked by cosine similarity
  (FOCI's own setup).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ava.data.options import OptionSampler, OptionsError, random_options, ranked_options

if TYPE_CHECKING:
    from ava.data.format import Dataset, Sample

Ranking = Callable[[str, Sequence[str], "str | None"], Sequence[str]]
MINER_FORMS = "random, cache:VFM (with --cache) or clip@<hub-id-or-dir>"


class Miner(Protocol):
    name: str

    def prepare(self, dataset: Dataset, ava: str, classes: Sequence[str], samples: Sequence[Sample],
                depth: int) -> Ranking | None:  # fmt: skip
        """The ranking of ``classes`` for every image of ``samples`` (at least ``depth`` deep); None: random."""
        ...


def image_key(image: str) -> str:
    """An image's sha256 from its ``images/`` path or the sha256 itself."""
    return Path(image).name.split(".")[0]


def _lookup(name: str, table: dict[str, list[str]]) -> Ranking:
    def ranking(truth: str, classes: Sequence[str], image: str | None = None) -> Sequence[str]:
        if image is None:
            raise OptionsError(f"miner {name} ranks classes per image, and no image was given")
        found = table.get(image_key(image))
        if found is None:
            raise OptionsError(f"miner {name} has no ranking for image {image!r} (not among the samples prepared)")
        return found

    return ranking


def _rank(name: str, classes: Sequence[str], centres: np.ndarray, keys: Sequence[str], x: np.ndarray,
          depth: int) -> Ranking:  # fmt: skip
    """Rank ``classes`` (rows of ``centres``) for every image row of ``x`` by inner product (faiss, exact)."""
    import faiss

    index = faiss.IndexFlatIP(centres.shape[1])
    index.add(np.ascontiguousarray(centres, np.float32))
    _, ids = index.search(np.ascontiguousarray(x, np.float32), min(depth, len(classes)))
    table = {key: [classes[j] for j in row if j >= 0] for key, row in zip(keys, ids, strict=True)}
    return _lookup(name, table)


class RandomMiner:
    name = "random"

    def prepare(self, dataset: Dataset, ava: str, classes: Sequence[str], samples: Sequence[Sample],
                depth: int) -> Ranking | None:  # fmt: skip
        return None


@dataclass
class CacheMiner:
    """Class centroids of the train split in a VFM's cached feature space (see the module docstring)."""

    vfm: str
    cache: str
    layer: int | None = None
    name: str = field(init=False)

    def __post_init__(self) -> None:
        self.name = f"cache:{self.vfm}"
        self._cache: Any = None

    def _open(self) -> Any:
        if self._cache is None:
            from ava.cache import open_cache

            self._cache = open_cache(self.cache, self.vfm)
        return self._cache

    def prepare(self, dataset: Dataset, ava: str, classes: Sequence[str], samples: Sequence[Sample],
                depth: int) -> Ranking:  # fmt: skip
        from ava.heads.features import read_pooled_views

        cache = self._open()
        train = [s for s in dataset.samples(ava) if s.split == "train"]
        if not train:
            raise OptionsError(f"miner {self.name}: ability {ava!r} has no train samples to take class centroids "
                               f"from; split the dataset first (`ava data split {dataset.root}`)")  # fmt: skip
        unique = {s.image_sha256: s for s in [*samples, *train]}
        rows = list(unique.values())
        x = read_pooled_views(cache, rows, [self.layer], ["mean"])["mean"].astype(np.float32)
        x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
        row_of = {sha: i for i, sha in enumerate(unique)}
        members: dict[str, list[int]] = {}
        for s in train:
            members.setdefault(truth_text(s), []).append(row_of[s.image_sha256])
        have = [c for c in classes if c in members]
        centres = np.stack([x[members[c]].mean(0) for c in have])
        centres /= np.maximum(np.linalg.norm(centres, axis=1, keepdims=True), 1e-12)
        return _rank(self.name, have, centres, list(unique), x, depth)


@dataclass
class TextTowerMiner:
    """Labels in a prompt template by the text tower, images by the image tower (FOCI's CLIP ranking)."""

    source: str
    template: str = "a photo of a {}."
    device: str = "cpu"
    batch_size: int = 32
    name: str = field(init=False)

    def __post_init__(self) -> None:
        self.name = f"clip@{self.source}"
        self._model: Any = None

    def load(self) -> Any:
        """The checkpoint, loaded once (a checkpoint without a text tower is refused here, by name)."""
        if self._model is None:
            from ava.vfm.image_text import load_image_text

            self._model = load_image_text(self.source, device=self.device, batch_size=self.batch_size,
                                          what=f"miner {self.name}",
                                          local_form="--miner clip@/path/to/dir")  # fmt: skip
        return self._model

    def prepare(self, dataset: Dataset, ava: str, classes: Sequence[str], samples: Sequence[Sample],
                depth: int) -> Ranking:  # fmt: skip
        model = self.load()
        labels = model.texts([self.template.format(c) for c in classes])
        unique = {s.image_sha256: s for s in samples}
        images = []
        for start in range(0, len(unique), 256):  # a bounded number of decoded images at a time
            chunk = list(unique.values())[start : start + 256]
            images.append(model.images([dataset.load_image(s) for s in chunk]))
        x = np.concatenate(images) if images else np.zeros((0, labels.shape[1]), np.float32)
        return _rank(self.name, list(classes), labels, list(unique), x, depth)


def truth_text(sample: Sample) -> str:
    truth = sample.truth or {}
    if "text" in truth:
        return str(truth["text"])
    if sample.options and "index" in truth:
        return sample.options[int(truth["index"])]
    raise OptionsError(f"sample {sample.ava}/{sample.id}: its truth {truth!r} names no option text")


def parse_miner(spec: str, *, cache: str | None = None, template: str | None = None, device: str = "cpu",
                batch_size: int = 32) -> Miner:  # fmt: skip
    """A miner from its command-line form (:data:`MINER_FORMS`); a wrong form is a one-line error."""
    spec = (spec or "").strip()
    if spec == "random":
        return RandomMiner()
    if spec.startswith("cache:"):
        vfm = spec[len("cache:") :].strip()
        if not vfm:
            raise OptionsError("--miner 'cache:' names no VFM; use cache:VFM, e.g. cache:effnet-lite0")
        if not cache:
            raise OptionsError(f"--miner {spec} reads a feature cache: give it with --cache DIR (where "
                               f"`ava cache extract --vfm {vfm}` wrote its features)")  # fmt: skip
        return CacheMiner(vfm, str(cache))
    if spec.startswith("clip@"):
        source = spec[len("clip@") :].strip()
        if not source:
            raise OptionsError("--miner 'clip@' names no checkpoint; use clip@<hub-id-or-dir>")
        from ava.vfm.image_text import DEFAULT_TEMPLATE

        return TextTowerMiner(source, template or DEFAULT_TEMPLATE, device=device, batch_size=batch_size)
    raise OptionsError(f"unknown miner {spec!r}; use {MINER_FORMS}")


def mined_options(miner: Miner, dataset: Dataset, ava: str, classes: Sequence[str], samples: Sequence[Sample],
                  k: int) -> OptionSampler:  # fmt: skip
    """The :class:`~ava.data.options.OptionSampler` of ``miner`` for one ability (what ``ava data build`` asks for a
    mined option list): ``sampler(truth, classes, rng, image=sample.image)`` for each of ``samples``."""
    ranking = miner.prepare(dataset, ava, classes, samples, depth=k)
    return random_options(k) if ranking is None else ranked_options(k, ranking)
