"""Option miners: rank an ability's wrong classes by how similar they are to the object each question asks about
(FOCI's hard negatives).

A miner is prepared once per ability (:meth:`Miner.prepare`) over the samples whose options it will choose, and
gives a ranking for :func:`ava.data.choices.ranked_options`: ``ranking(truth, classes, key)`` -> the classes most
similar to the question's object first. ``key`` is :func:`object_key` of the sample: its image, and the object's
box where the question is about one object of a photo (``meta.box``, which ``ava data build`` writes for
recognition), so two questions about two objects of one photo get the distractors of their own objects.

- ``random``: no ranking; :func:`ava.data.choices.random_options` (the paper's sampled lists, FOCI's control).
- ``cache:VFM``: per object, the VFM's cached patch tokens under its box, averaged (each token weighted by the
  share of its cell the box covers; the whole image where there is no box), L2-normalized; each class's prototype
  is the normalized mean of the objects of that class, from every split (a question's own object only shapes its
  own class, which is never a distractor). Objects rank the prototypes by cosine similarity (faiss inner product).
  No text tower needed. A class the dataset declares (``dataset.json`` ``build.classes``) that no object shows has
  no prototype: it is ranked after every class that has one.
- ``clip@<hub-id-or-dir>``: a CLIP-like checkpoint (:mod:`ava.vfm.image_text`): each class label in a prompt
  template is embedded by the text tower, each object (its box cut from the image, or the whole image) by the image
  tower; labels are ranked by cosine similarity (FOCI's own setup). Every class is placed by its name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ava.data.choices import OptionSampler, OptionsError, random_options, ranked_options

if TYPE_CHECKING:
    from ava.data.format import Dataset, Sample

Ranking = Callable[[str, Sequence[str], "str | None"], Sequence[str]]  # (truth, classes, object key)
MINER_FORMS = "random, cache:VFM (with --cache) or clip@<hub-id-or-dir>"


class Miner(Protocol):
    name: str

    def prepare(
        self, dataset: Dataset, ava: str, classes: Sequence[str], samples: Sequence[Sample], depth: int
    ) -> Ranking | None:
        """The ranking of ``classes`` for every image of ``samples`` (at least ``depth`` deep); None: random."""
        ...


def image_key(image: str) -> str:
    """An image's sha256 from its ``images/`` path or the sha256 itself."""
    return Path(image).name.split(".")[0]


def object_box(sample: Sample) -> list[float] | None:
    """The box (x1, y1, x2, y2, normalized in the sample's image) of the one object the question asks about
    (``meta.box``); None when the question is about the whole image, or the box is not four finite numbers inside
    the image with x1 < x2 and y1 < y2."""
    box = (sample.meta or {}).get("box")
    if not isinstance(box, list | tuple) or len(box) != 4 or not all(_finite(v) for v in box):
        return None
    x1, y1, x2, y2 = (float(v) for v in box)
    if not (-0.01 <= x1 < x2 <= 1.01 and -0.01 <= y1 < y2 <= 1.01):
        return None
    return [x1, y1, x2, y2]


def _finite(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and bool(np.isfinite(v))


def object_key(sample: Sample) -> str:
    """What a miner ranks classes for: the sample's image, and its object's box where it has one."""
    box = object_box(sample)
    sha = sample.image_sha256
    return sha if box is None else f"{sha}#" + ",".join(f"{v:.4f}" for v in box)


def _lookup(name: str, table: dict[str, list[str]]) -> Ranking:
    def ranking(truth: str, classes: Sequence[str], key: str | None = None) -> Sequence[str]:
        if key is None:
            raise OptionsError(f"miner {name} ranks classes per question, and no question key was given")
        found = table.get(key) or table.get(image_key(key))
        if found is None:
            raise OptionsError(f"miner {name} has no ranking for {key!r} (not among the samples prepared)")
        return found

    return ranking


def _rank(
    name: str,
    classes: Sequence[str],
    centres: np.ndarray,
    keys: Sequence[str],
    x: np.ndarray,
    depth: int,
    last: Sequence[str] = (),
) -> Ranking:
    """Rank ``classes`` (rows of ``centres``) for every row of ``x`` by inner product (faiss, exact); ``last``
    (classes without a row) follow every ranked class."""
    import faiss

    index = faiss.IndexFlatIP(centres.shape[1])
    index.add(np.ascontiguousarray(centres, np.float32))
    _, ids = index.search(np.ascontiguousarray(x, np.float32), min(depth, len(classes)))
    table = {key: [classes[j] for j in row if j >= 0] + list(last) for key, row in zip(keys, ids, strict=True)}
    return _lookup(name, table)


def box_weights(box: Sequence[float], grid: tuple[int, int], size: tuple[int, int], preprocess: str) -> np.ndarray:
    """Per token of a ``grid`` (rows, cols) of cells over the model's input, the share of the box it holds: each
    cell weighted by the area of the box it covers (a box smaller than a cell: that cell alone). ``box`` is
    normalized in the sample's image of ``size`` (w, h), which the cache's ``preprocess`` mode made the input
    from: ``pad`` (centred on a square), or ``processor`` (most processors: the short side scaled to the input,
    the centre cut; for other processors the cells are only near the object)."""
    w, h = size
    side = max(w, h) if preprocess == "pad" else min(w, h)
    ox, oy = (side - w) / 2, (side - h) / 2
    x1, y1, x2, y2 = (
        (box[0] * w + ox) / side,
        (box[1] * h + oy) / side,
        (box[2] * w + ox) / side,
        (box[3] * h + oy) / side,
    )
    rows, cols = grid
    edges_x, edges_y = np.arange(cols + 1) / cols, np.arange(rows + 1) / rows
    wx = np.clip(np.minimum(x2, edges_x[1:]) - np.maximum(x1, edges_x[:-1]), 0, None)
    wy = np.clip(np.minimum(y2, edges_y[1:]) - np.maximum(y1, edges_y[:-1]), 0, None)
    weights = np.outer(wy, wx).ravel()
    if weights.sum() <= 0:  # the box lies outside what the input shows (a processor's crop): its nearest cell
        cx, cy = np.clip((x1 + x2) / 2, 0, 1 - 1e-9), np.clip((y1 + y2) / 2, 0, 1 - 1e-9)
        weights = np.zeros(rows * cols)
        weights[int(cy * rows) * cols + int(cx * cols)] = 1.0
    return weights / weights.sum()


def object_features(
    cache: Any, samples: Sequence[Sample], layer: int | None, chunk: int = 256
) -> dict[str, np.ndarray]:
    """Per :func:`object_key` of ``samples``: the cached tokens under the object's box, averaged by
    :func:`box_weights`, or the image's mean token where there is no box; L2-normalized, float32."""
    from ava.heads.features import read_pooled_views, require_cached, token_grid

    require_cached(cache, list(samples))
    first = {object_key(s): s for s in reversed(samples)}
    whole = [s for k, s in first.items() if object_box(s) is None]
    boxed = [s for k, s in first.items() if object_box(s) is not None]
    out: dict[str, np.ndarray] = {}
    if whole:
        x = read_pooled_views(cache, whole, [layer], ["mean"])["mean"]
        out.update({object_key(s): row for s, row in zip(whole, x, strict=True)})
    if boxed:
        grid = token_grid(cache)
        if grid is None:
            raise OptionsError(
                f"cache {getattr(cache, 'key', '?')}: its {cache.num_tokens} tokens have no grid "
                "layout, so the tokens under an object's box cannot be found"
            )
        mode = str((getattr(cache, "spec", None) or {}).get("preprocess") or "pad")
        boxed.sort(key=lambda s: s.image_sha256)  # the questions of one image read its tokens once
        for start in range(0, len(boxed), chunk):
            part = boxed[start : start + chunk]
            shas = list(dict.fromkeys(s.image_sha256 for s in part))
            tokens = cache.read(shas, layer=layer)
            row = {sha: i for i, sha in enumerate(shas)}
            for s in part:
                weights = box_weights(object_box(s), grid, (s.width, s.height), mode)  # type: ignore[arg-type]
                out[object_key(s)] = weights.astype(np.float32) @ np.asarray(tokens[row[s.image_sha256]], np.float32)
    for key, v in out.items():
        v = np.asarray(v, np.float32)
        if not np.isfinite(v).all():
            raise OptionsError(f"cache {getattr(cache, 'key', '?')}: the features of {key} hold NaN or inf")
        out[key] = v / max(float(np.linalg.norm(v)), 1e-12)
    return out


class RandomMiner:
    name = "random"

    def prepare(
        self, dataset: Dataset, ava: str, classes: Sequence[str], samples: Sequence[Sample], depth: int
    ) -> Ranking | None:
        return None


@dataclass
class CacheMiner:
    """Class prototypes of the objects in a VFM's cached feature space (see the module docstring)."""

    vfm: str
    cache: str
    layer: int | None = None
    name: str = field(init=False)

    def __post_init__(self) -> None:
        self.name = f"cache:{self.vfm}"
        self._cache: Any = None
        self.unplaced: dict[str, list[str]] = {}  # ability -> classes no object shows (ranked last)

    def _open(self) -> Any:
        if self._cache is None:
            from ava.cache import open_cache

            self._cache = open_cache(self.cache, self.vfm)
        return self._cache

    def prepare(
        self, dataset: Dataset, ava: str, classes: Sequence[str], samples: Sequence[Sample], depth: int
    ) -> Ranking:
        cache = self._open()
        labelled = list(dataset.samples(ava))  # every split: a class seen only in test has a prototype too
        features = object_features(cache, [*samples, *labelled], self.layer)
        members: dict[str, list[np.ndarray]] = {}
        for s in labelled:
            members.setdefault(truth_text(s), []).append(features[object_key(s)])
        placed = [c for c in classes if c in members]
        self.unplaced[ava] = [c for c in classes if c not in members]
        if not placed:
            raise OptionsError(
                f"miner {self.name}: no question of {ava!r} names one of its classes as its answer; "
                "no prototype can be made"
            )
        centres = np.stack([np.mean(members[c], axis=0) for c in placed])
        centres /= np.maximum(np.linalg.norm(centres, axis=1, keepdims=True), 1e-12)
        keys = list(dict.fromkeys(object_key(s) for s in samples))
        x = np.stack([features[k] for k in keys]) if keys else np.zeros((0, centres.shape[1]), np.float32)
        return _rank(self.name, placed, centres, keys, x, depth + 1, last=self.unplaced[ava])


@dataclass
class TextTowerMiner:
    """Labels in a prompt template by the text tower, objects by the image tower (FOCI's CLIP ranking)."""

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

            self._model = load_image_text(
                self.source,
                device=self.device,
                batch_size=self.batch_size,
                what=f"miner {self.name}",
                local_form="--miner clip@/path/to/dir",
            )
        return self._model

    def prepare(
        self, dataset: Dataset, ava: str, classes: Sequence[str], samples: Sequence[Sample], depth: int
    ) -> Ranking:
        model = self.load()
        labels = model.texts([self.template.format(c) for c in classes])
        unique = {object_key(s): s for s in samples}
        images = []
        for start in range(0, len(unique), 256):  # a bounded number of decoded images at a time
            chunk = list(unique.values())[start : start + 256]
            images.append(model.images([_object_picture(dataset, s) for s in chunk]))
        x = np.concatenate(images) if images else np.zeros((0, labels.shape[1]), np.float32)
        return _rank(self.name, list(classes), labels, list(unique), x, depth + 1)


def _object_picture(dataset: Dataset, sample: Sample) -> Any:
    """What the image tower embeds: the object's box cut from the sample's image, or the whole image."""
    image = dataset.load_image(sample)
    box = object_box(sample)
    if box is None:
        return image
    w, h = image.size
    x1, y1 = max(0, int(box[0] * w)), max(0, int(box[1] * h))
    x2, y2 = min(w, max(x1 + 1, round(box[2] * w))), min(h, max(y1 + 1, round(box[3] * h)))
    return image.crop((x1, y1, x2, y2))


def truth_text(sample: Sample) -> str:
    truth = sample.truth or {}
    if "text" in truth:
        return str(truth["text"])
    if sample.options and "index" in truth:
        return sample.options[int(truth["index"])]
    raise OptionsError(f"sample {sample.ava}/{sample.id}: its truth {truth!r} names no option text")


def parse_miner(
    spec: str, *, cache: str | None = None, template: str | None = None, device: str = "cpu", batch_size: int = 32
) -> Miner:
    """A miner from its command-line form (:data:`MINER_FORMS`); a wrong form is a one-line error."""
    spec = (spec or "").strip()
    if spec == "random":
        return RandomMiner()
    if spec.startswith("cache:"):
        vfm = spec[len("cache:") :].strip()
        if not vfm:
            raise OptionsError("--miner 'cache:' names no VFM; use cache:VFM, e.g. cache:effnet-lite0")
        if not cache:
            raise OptionsError(
                f"--miner {spec} reads a feature cache: give it with --cache DIR (where "
                f"`ava cache extract --vfm {vfm}` wrote its features)"
            )
        return CacheMiner(vfm, str(cache))
    if spec.startswith("clip@"):
        source = spec[len("clip@") :].strip()
        if not source:
            raise OptionsError("--miner 'clip@' names no checkpoint; use clip@<hub-id-or-dir>")
        from ava.vfm.image_text import DEFAULT_TEMPLATE

        return TextTowerMiner(source, template or DEFAULT_TEMPLATE, device=device, batch_size=batch_size)
    raise OptionsError(f"unknown miner {spec!r}; use {MINER_FORMS}")


def mined_options(
    miner: Miner, dataset: Dataset, ava: str, classes: Sequence[str], samples: Sequence[Sample], k: int
) -> OptionSampler:
    """The :class:`~ava.data.choices.OptionSampler` of ``miner`` for one ability (what ``ava data build`` asks for a
    mined option list): ``sampler(truth, classes, rng, image=object_key(sample))`` for each of ``samples``."""
    ranking = miner.prepare(dataset, ava, classes, samples, depth=k)
    return random_options(k) if ranking is None else ranked_options(k, ranking)
