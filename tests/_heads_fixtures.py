"""Fixtures for the probe and kNN head tests: hand-made datasets whose features carry the answer, an
in-memory stand-in for the feature cache, and the real synthetic suite extracted with the `pixels` VFM."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

from ava.abilities import ABILITY_KEYS, INDOOR_DEPTH_BINS, get_ability
from ava.data.format import DatasetWriter, Sample

POOL = ("apple", "boat", "cat", "dog", "egg", "fish", "goat", "hat", "ink", "jar", "kite", "lamp")
CHARS = "abcde"


class FakeCache:
    """The FeatureCache interface over a dict of arrays [L, T, D] keyed by image sha256."""

    def __init__(
        self,
        rows: dict[str, np.ndarray],
        layers: tuple[int, ...] = (-1,),
        key: str = "fake0001",
        random_weights: bool = False,
    ) -> None:
        self.rows, self.layers, self.key, self.random_weights = rows, layers, key, random_weights
        first = next(iter(rows.values()))
        self.num_tokens, self.dim = first.shape[1], first.shape[2]
        self.identity = {"key": "fake"}

    def has(self, sha: str) -> bool:
        return sha in self.rows

    def read(self, shas: list[str], layer: int | None = None) -> np.ndarray:
        i = self.layers.index(self.layers[0] if layer is None else layer)
        return np.stack([self.rows[s][i] for s in shas]).astype(np.float32)

    def read_pooled(self, shas: list[str], layer: int | None = None) -> np.ndarray:
        return self.read(shas, layer).mean(1)


def _truth(key: str, rng: np.random.Generator) -> tuple[dict, list[str] | None, np.ndarray | str]:
    """A random truth, the question's options, and the answer as a signal to embed (vector or text)."""
    ability = get_ability(key)
    kind = ability.answer_kind
    if kind == "option":
        if ability.fixed_options:
            options = list(ability.fixed_options)
        else:
            options = list(rng.choice(POOL, size=5, replace=False))
        i = int(rng.integers(len(options)))
        code = POOL.index(options[i]) if options[i] in POOL else i
        return {"index": i, "text": options[i]}, options, np.eye(12)[code % 12] * 3
    if kind == "integer":
        n = int(rng.integers(1, 11))
        return {"value": n}, None, np.array([np.log(n)] * 2)
    if kind == "depth_bin":
        i = int(rng.integers(len(INDOOR_DEPTH_BINS)))
        lo, hi = (float(v) for v in INDOOR_DEPTH_BINS[i].split("-"))
        return {"index": i, "bin": [lo, hi]}, list(INDOOR_DEPTH_BINS), np.array([i / 2.0] * 2)
    if kind == "box":
        x1, y1 = rng.uniform(0, 0.5, 2)
        w, h = rng.uniform(0.2, 0.5, 2)
        box = [float(x1), float(y1), float(x1 + w), float(y1 + h)]
        return {"box": box}, None, np.array(box) * 4
    if kind == "rgb":
        rgb = [int(v) for v in rng.integers(0, 256, 3)]
        return {"rgb": rgb}, None, np.array(rgb) / 64.0
    text = "".join(rng.choice(list(CHARS), size=int(rng.integers(2, 5))))
    return {"text": text}, None, text


def _tokens(signal: np.ndarray | str, tokens: int, dim: int, rng: np.random.Generator, noise: float) -> np.ndarray:
    x = rng.normal(0, noise, (tokens, dim))
    if isinstance(signal, str):  # token t holds character t (one-hot), the rest hold a "no text" marker
        for t in range(tokens):
            x[t, CHARS.index(signal[t]) if t < len(signal) else len(CHARS)] += 3.0
    elif len(signal) == 12:  # a class: one-hot
        x[:, :12] += signal
    else:  # a regression target s as (s, 4 - s): it changes the direction, which cosine kNN sees
        x[:, : 2 * len(signal)] += np.concatenate([signal, 4 - signal])
    return x.astype(np.float32)


def distinct_image(n: int) -> Image.Image:
    """A 4 x 4 image unique to ``n`` (< 2**24): colour (n % 256, n // 256 % 256, 7), and from n = 65536 on one more
    pixel holding n // 65536 (the images of smaller n are unchanged)."""
    image = Image.new("RGB", (4, 4), (n % 256, n // 256 % 256, 7))
    if n >= 65536:
        image.putpixel((3, 3), (n // 65536 % 256, 7, 7))
    return image


def handmade(
    root: Path,
    abilities: tuple[str, ...] = ABILITY_KEYS,
    n: int | dict[str, int] = 60,
    tokens: int = 6,
    dim: int = 16,
    noise: float = 0.3,
    seed: int = 0,
    layers: int = 1,
) -> tuple[Path, FakeCache]:
    """A dataset (80/20 split) whose features encode each sample's answer, and a FakeCache holding them; ``n``
    samples per ability (or per ability as given), every sample with an image of its own."""
    rng = np.random.default_rng(seed)
    rows: dict[str, np.ndarray] = {}
    with DatasetWriter(root, info={"source": "handmade", "synthetic": True, "split": {"made_by": "synthetic"}}) as w:
        for key in abilities:
            count = n[key] if isinstance(n, dict) else n
            for i in range(count):
                truth, options, signal = _truth(key, rng)
                rel = w.add_image(distinct_image(len(rows)))
                sha = Path(rel).name.split(".")[0]
                rows[sha] = np.stack([_tokens(signal, tokens, dim, rng, noise) for _ in range(layers)])
                split = "train" if i < int(0.8 * count) else "test"
                answer = str(truth.get("text", truth))
                w.add_sample(
                    Sample(
                        id=f"{key}-{i}",
                        ava=key,
                        image=rel,
                        width=4,
                        height=4,
                        question="q?",
                        answer=answer,
                        truth=truth,
                        options=options,
                        split=split,
                    )
                )
    layer_ids = tuple(range(-layers, 0))
    return root, FakeCache(rows, layers=layer_ids)


def positional(root: Path, n: int = 100, dim: int = 8, noise: float = 0.3, seed: int = 0) -> tuple[Path, FakeCache]:
    """A spatial dataset whose answer is only *where* a marker sits: 16 tokens on a 4 x 4 grid, answer i puts the
    same marker vector on a random token of quadrant i. The mean over tokens is the same for every answer (chance
    for a mean probe); grid cells (``grid2``: one per quadrant, ``grid4``: one per token) separate them."""
    from ava.abilities import SPATIAL_ANSWERS

    rng = np.random.default_rng(seed)
    marker = np.zeros(dim)
    marker[:2] = 3.0
    rows: dict[str, np.ndarray] = {}
    options = list(SPATIAL_ANSWERS)
    with DatasetWriter(root, info={"source": "positional", "synthetic": True, "split": {"made_by": "synthetic"}}) as w:
        for i in range(n):
            answer = i % len(options)
            x = rng.normal(0, noise, (4, 4, dim))
            row, col = 2 * (answer // 2) + rng.integers(2), 2 * (answer % 2) + rng.integers(2)
            x[row, col] += marker
            x = x.reshape(16, dim)
            rel = w.add_image(Image.new("RGB", (4, 4), (i % 256, i // 256, 9)))
            rows[Path(rel).name.split(".")[0]] = x[None].astype(np.float32)
            w.add_sample(
                Sample(
                    id=f"pos-{i}",
                    ava="spatial",
                    image=rel,
                    width=4,
                    height=4,
                    question="q?",
                    answer=options[answer],
                    truth={"index": answer, "text": options[answer]},
                    options=options,
                    split="train" if i < int(0.8 * n) else "test",
                )
            )
    return root, FakeCache(rows, key="fakepos1")


# -- the synthetic suite through the real cache ----------------------------------------------------------
# colour (inside a red box: found by the attentive probe), counting and spatial (answers in where things are:
# the linear probe's and kNN's grid-cell views), scene and depth (classes differ in overall colour)
PIXEL_ABILITIES = ("color", "counting", "spatial", "scene", "abs_depth")
_SYNTH: dict[str, tuple[Path, Path]] = {}


def synth_pixels(base: Path, per_ava: int = 200) -> tuple[Path, Path]:
    """(dataset, cache): synthetic sets of PIXEL_ABILITIES, extracted with the `pixels` VFM.

    Built once per test session (memoized here, so the probe and kNN test modules share it)."""
    if "pixels" not in _SYNTH:
        from ava.cache import ExtractConfig, extract
        from ava.synth import SynthConfig, generate

        data, cache = base / "synth", base / "cache"
        generate(
            SynthConfig(out=str(data), per_ava=per_ava, ava=list(PIXEL_ABILITIES), size=224, seed=0), progress=False
        )
        extract(
            ExtractConfig(vfm="pixels", data=str(data), cache=str(cache), layers=(-1,), device="cpu", progress=False)
        )
        _SYNTH["pixels"] = (data, cache)
    return _SYNTH["pixels"]


def majority_baseline(data: Path, ava: str, split: str = "test") -> float:
    """The metric of the majority answer of train (choice), or the train median (counts, colour)."""
    from ava.abilities.parsers import format_reply
    from ava.data.format import Dataset
    from ava.heads.targets import mean_score, option_text, question_options

    ds = Dataset(data)
    ability = get_ability(ava)
    train, test = ds.samples(ava, split="train"), ds.samples(ava, split=split)
    kind = ability.answer_kind
    if kind == "option":
        texts = [option_text(ability, s) for s in train]
        top = max(sorted(set(texts)), key=texts.count)
        replies = [
            format_reply(ability, question_options(ability, s).index(top), options=question_options(ability, s))
            for s in test
        ]
    elif kind == "integer":
        replies = [format_reply(ability, int(np.median([s.truth["value"] for s in train])))] * len(test)
    elif kind == "rgb":
        replies = [format_reply(ability, tuple(np.median([s.truth["rgb"] for s in train], axis=0)))] * len(test)
    elif kind == "box":
        replies = [format_reply(ability, tuple(np.median([s.truth["box"] for s in train], axis=0)))] * len(test)
    else:  # depth bins and texts: the most frequent answer
        answers = [str(s.truth.get("text", s.truth.get("bin"))) for s in train]
        top = max(sorted(set(answers)), key=answers.count)
        value = top if kind == "text" else float(np.mean(json.loads(top)))
        replies = [format_reply(ability, value, options=s.options) for s in test]
    return mean_score(ability, test, replies)
