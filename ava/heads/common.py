"""Helpers shared by the heads trained on cached features (probes, kNN, and whatever else wants them).

What lives here is what every such head does the same way: pick the abilities of a run, cap and split the
train samples deterministically (a held-out slice for model selection), join samples to cache rows, turn a
sample's structured truth into a training target and a prediction back into a reply (through
``ava.abilities.parsers.format_reply``, so every head is scored exactly like ``ava score``), and write the
run directory of :mod:`ava.heads.base`.

Targets, by answer kind (``value`` is what a head predicts for one sample):

- ``option``: the option text; a head predicts a score per vocabulary entry, and the reply is the best-scoring
  option among *this question's* options (per-question option lists differ between samples).
- ``integer`` (counting): ``log(count)``; the reply is the rounded count, at least 1.
- ``depth_bin`` (absolute depth): ``log(metres)`` of the bin midpoint; the reply is the option bin whose
  midpoint is nearest to the predicted metres.
- ``rgb`` (colour): RGB / 255; the reply is the clipped, rounded sRGB triple.
- ``box`` (localization): normalized x1, y1, x2, y2; corners are reordered before the reply.
- ``text`` (OCR): the string itself.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ava.errors import AvaError

if TYPE_CHECKING:
    from ava.abilities import Ability
    from ava.data.format import Dataset, Sample

REGRESSION_KINDS = ("integer", "depth_bin", "rgb", "box")
TARGET_DIMS = {"integer": 1, "depth_bin": 1, "rgb": 3, "box": 4}


# -- devices and seeds ----------------------------------------------------------------------------------
def resolve_device(device: str) -> str:
    """``"auto"`` becomes ``"cuda"`` when torch sees a GPU, else ``"cpu"``; a CUDA device asked for where there is
    none is a user error (the VFM loader's rule, shared)."""
    from ava.vfm.model import resolve_device as _resolve

    return str(_resolve(device))


# -- abilities and samples ------------------------------------------------------------------------------
def select_abilities(dataset: Dataset, ava: Sequence[str] | None) -> list[str]:
    """The ability keys of a run: the requested ones (validated, canonical), or all present in the data."""
    from ava.abilities import get_ability

    present = dataset.abilities()
    if not ava:
        if not present:
            raise AvaError(f"dataset {dataset.root} has no samples (no samples/*.jsonl)")
        return present
    keys = []
    for name in ava:
        key = get_ability(name).key
        if key not in present:
            raise AvaError(f"dataset {dataset.root} has no samples for ability {key!r}; present: {present}")
        if key not in keys:
            keys.append(key)
    return keys


def _rank(sample: Sample, salt: str) -> str:
    return hashlib.sha256(f"{salt}|{sample.ava}|{sample.id}".encode()).hexdigest()


def stable_order(samples: Sequence[Sample], salt: str) -> list[Sample]:
    """Samples in a pseudo-random order that depends only on their keys and ``salt`` (not on input order)."""
    return sorted(samples, key=lambda s: _rank(s, salt))


def train_samples(dataset: Dataset, ava: str, max_train: int | None, seed: int) -> list[Sample]:
    """The train split of one ability, capped at ``max_train`` by a deterministic draw."""
    samples = dataset.samples(ava, split="train")
    if not samples:
        splits = sorted({str(s.split) for s in dataset.samples(ava)})
        raise AvaError(
            f"dataset {dataset.root}: ability {ava!r} has no train samples (splits present: {splits}); "
            f"run `ava data split {dataset.root}` first"
        )
    if max_train is not None and len(samples) > max_train:
        samples = stable_order(samples, f"cap{seed}")[:max_train]
    return stable_order(samples, f"order{seed}")


def holdout_split(samples: Sequence[Sample], frac: float = 0.1, seed: int = 0) -> tuple[list[Sample], list[Sample]]:
    """(fit, held-out): a deterministic ``frac`` slice of train for model selection (at least one each side)."""
    ordered = stable_order(samples, f"holdout{seed}")
    if len(ordered) < 2:
        return list(ordered), list(ordered)
    n_held = min(len(ordered) - 1, max(1, round(frac * len(ordered))))
    return ordered[n_held:], ordered[:n_held]


def question_options(ability: Ability, sample: Sample) -> list[str]:
    """The options of this question (the sample's own list, or the ability's fixed one)."""
    from ava.abilities.parsers import sample_options

    if options := sample_options(ability, sample.options):
        return options
    raise AvaError(f"sample {sample.ava}/{sample.id}: a {ability.answer_kind} question without options")


# -- targets --------------------------------------------------------------------------------------------
def _truth(sample: Sample, field: str) -> Any:
    if field not in sample.truth:
        raise AvaError(f"sample {sample.ava}/{sample.id}: truth {sample.truth!r} has no {field!r}")
    return sample.truth[field]


def option_text(ability: Ability, sample: Sample) -> str:
    """The true option's text of a choice question."""
    if "text" in sample.truth:
        return str(sample.truth["text"])
    return question_options(ability, sample)[int(_truth(sample, "index"))]


def bin_midpoint(label: str) -> float:
    """Metres at the middle of a depth bin written ``"2-3"`` (the parsers' reading); an option that is no bin is an
    error here, since a head cannot regress onto it."""
    from ava.abilities.parsers import bin_midpoint as _midpoint

    mid = _midpoint(label)
    if mid is None:
        raise AvaError(f"depth option {label!r} is not a bin like '2-3'")
    return mid


def depth_metres(ability: Ability, sample: Sample) -> float:
    if "bin" in sample.truth:
        lo, hi = sample.truth["bin"]
        return (float(lo) + float(hi)) / 2
    return bin_midpoint(question_options(ability, sample)[int(_truth(sample, "index"))])


def regression_target(ability: Ability, sample: Sample) -> np.ndarray:
    """The regression target of one sample (see the module docstring), float32."""
    kind = ability.answer_kind
    if kind == "integer":
        return np.array([math.log(max(float(_truth(sample, "value")), 0.5))], np.float32)
    if kind == "depth_bin":
        return np.array([math.log(depth_metres(ability, sample))], np.float32)
    if kind == "rgb":
        return np.asarray(_truth(sample, "rgb"), np.float32) / 255.0
    if kind == "box":
        x1, y1, x2, y2 = (float(v) for v in _truth(sample, "box"))
        return np.array([min(x1, x2), min(y1, y2), max(x1, x2), max(y1, y2)], np.float32)
    raise AvaError(f"ability {ability.key!r}: no regression target for answer kind {kind!r}")


def regression_targets(ability: Ability, samples: Sequence[Sample]) -> np.ndarray:
    return np.stack([regression_target(ability, s) for s in samples]).astype(np.float32)


def option_vocabulary(ability: Ability, samples: Sequence[Sample]) -> list[str]:
    """The union of option texts a classifier covers: fixed options, then every train option and truth."""
    vocab: dict[str, None] = dict.fromkeys(ability.fixed_options)
    for s in samples:
        vocab.update(dict.fromkeys(s.options or ()))
        vocab[option_text(ability, s)] = None
    return list(vocab)


def choice_reply(ability: Ability, sample: Sample, scores: np.ndarray, vocab_index: Mapping[str, int]) -> str:
    """The reply naming the best-scoring option among this question's options (unknown options score -inf)."""
    from ava.abilities.parsers import format_reply

    options = question_options(ability, sample)
    best, best_score = 0, -math.inf
    for i, opt in enumerate(options):
        j = vocab_index.get(opt)
        score = float(scores[j]) if j is not None else -math.inf
        if score > best_score:
            best, best_score = i, score
    return format_reply(ability, best, options=options)


def regression_reply(ability: Ability, sample: Sample, value: np.ndarray) -> str:
    """The reply for a predicted regression target (see the module docstring)."""
    from ava.abilities.parsers import format_reply

    kind = ability.answer_kind
    value = np.asarray(value, np.float64).reshape(-1)
    if kind == "integer":
        return format_reply(ability, max(1, int(round(math.exp(min(value[0], 20.0))))))
    if kind == "depth_bin":
        options = question_options(ability, sample)
        metres = math.exp(min(value[0], 20.0))
        mids = [bin_midpoint(o) for o in options]
        best = min(range(len(mids)), key=lambda i: abs(mids[i] - metres))
        return format_reply(ability, int(best), options=options)  # an int is a bin index
    if kind == "rgb":
        rgb = tuple(int(round(float(v))) for v in np.clip(value * 255.0, 0, 255))
        return format_reply(ability, rgb)
    if kind == "box":
        v = np.clip(value, 0.0, 1.0)
        box = (float(min(v[0], v[2])), float(min(v[1], v[3])), float(max(v[0], v[2])), float(max(v[1], v[3])))
        return format_reply(ability, box)
    raise AvaError(f"ability {ability.key!r}: no regression reply for answer kind {kind!r}")


# -- features -------------------------------------------------------------------------------------------
def require_cached(
    cache: Any, samples: Sequence[Sample], hint: str = "run `ava cache extract` for this dataset and VFM first"
) -> None:
    """AvaError naming the first of ``samples`` whose image has no features in ``cache``, and what to run.

    ``hint`` ends the message; ``{avas}`` in it becomes the abilities of the missing samples (comma-separated),
    so a caller can spell out the exact ``ava cache extract`` command.
    """
    missing = [s for s in samples if not cache.has(s.image_sha256)]
    if missing:
        s = missing[0]
        avas = ",".join(sorted({m.ava for m in missing}))
        raise AvaError(
            f"feature cache {cache.key} has no features for {len(missing)} sample(s), e.g. {s.ava}/{s.id} "
            f"(image {s.image}); {hint.replace('{avas}', avas)}"
        )


def read_rows(cache: Any, samples: Sequence[Sample], layer: int | None, pooled: bool) -> np.ndarray:
    """Features of ``samples`` in order ([N, D] pooled or [N, T, D]); each image is read once."""
    shas = [s.image_sha256 for s in samples]
    require_cached(cache, samples)
    unique = list(dict.fromkeys(shas))
    rows = cache.read_pooled(unique, layer=layer) if pooled else cache.read(unique, layer=layer)
    where = {sha: i for i, sha in enumerate(unique)}
    index = np.fromiter((where[sha] for sha in shas), dtype=np.int64, count=len(shas))
    return np.ascontiguousarray(rows[index], dtype=np.float32)


def read_layers(cache: Any, samples: Sequence[Sample], layers: Sequence[int | None], pooled: bool) -> np.ndarray:
    """Features of several cached layers, concatenated along the feature axis."""
    parts = [read_rows(cache, samples, layer, pooled) for layer in layers]
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=-1)


# -- pooled views: the global mean, optionally with coarse cells of the token grid ---------------------------
_POOL_RE = re.compile(r"^grid(\d+)$")


def token_grid(cache: Any) -> tuple[int, int] | None:
    """The (rows, cols) layout of the cache's patch tokens: the cache's own grid when it matches the token
    count, else a square sqrt(T) x sqrt(T) grid when T is a perfect square, else None (no known layout)."""
    t = int(cache.num_tokens)
    grid = tuple(int(g) for g in (getattr(cache, "grid", None) or ()))
    if len(grid) == 2 and grid[0] * grid[1] == t and min(grid) > 0:
        return grid  # type: ignore[return-value]
    side = math.isqrt(t)
    return (side, side) if side > 1 and side * side == t else None


def pool_cells(pool: str) -> int:
    """Cells per side of a pooled view: ``"mean"`` -> 0 (the global mean only), ``"gridN"`` -> N."""
    if pool == "mean":
        return 0
    m = _POOL_RE.match(pool)
    if not m or int(m.group(1)) < 1:
        raise AvaError(
            f"unknown pooling {pool!r}; use 'mean' or 'gridN' (the mean plus N x N cell means), e.g. 'grid4'"
        )
    return int(m.group(1))


def pool_candidates(cache: Any, pools: Sequence[str]) -> list[str]:
    """The pooled views a selection grid tries: ``pools`` validated, minus grid views the cache's tokens cannot
    take (no known layout, or more cells per side than token rows/cols); ``"mean"`` when nothing is left."""
    grid = token_grid(cache)
    out = []
    for pool in dict.fromkeys(pools):
        n = pool_cells(pool)
        if n == 0 or (grid is not None and n <= min(grid)):
            out.append(pool)
    return out or ["mean"]


def pool_dim(dim: int, pool: str) -> int:
    """Feature size of a pooled view of ``dim``-dimensional tokens (the mean, plus N * N cells)."""
    return dim * (1 + pool_cells(pool) ** 2)


def pool_tokens(tokens: np.ndarray, pool: str, grid: tuple[int, int] | None) -> np.ndarray:
    """[B, T, D] tokens -> [B, D'] pooled view: the mean over tokens, then for ``"gridN"`` the means of N x N
    cells of the token grid (row-major; cell edges as ``adaptive_avg_pool2d``: floor(i*R/N) .. ceil((i+1)*R/N)).

    Mean pooling forgets where things are; the cells keep coarse position (what spatial relations, counts
    per region, and the colour at a place need) at the cost of N * N times the features."""
    mean = tokens.mean(axis=1)
    n = pool_cells(pool)
    if n == 0:
        return mean
    if grid is None or grid[0] * grid[1] != tokens.shape[1]:
        raise AvaError(f"pooling {pool!r} needs a token grid, but the cache's {tokens.shape[1]} tokens have no layout")
    rows, cols = grid
    x = tokens.reshape(tokens.shape[0], rows, cols, tokens.shape[2])
    cells = [
        x[:, (i * rows) // n : -((-(i + 1) * rows) // n), (j * cols) // n : -((-(j + 1) * cols) // n)].mean(axis=(1, 2))
        for i in range(n)
        for j in range(n)
    ]
    return np.concatenate([mean, *cells], axis=1).astype(np.float32, copy=False)


def read_pooled_views(cache: Any, samples: Sequence[Sample], layers: Sequence[int | None], pools: Sequence[str],
                      chunk: int = 256) -> dict[str, np.ndarray]:  # fmt: skip
    """Every pooled view in ``pools`` of ``samples`` ([N, D'] each, layers concatenated per view).

    Tokens are read once per chunk of samples and pooled into every view, so memory stays at one chunk of
    tokens plus the pooled views. A ``["mean"]`` request reads the cache's pooled rows directly."""
    pools = list(dict.fromkeys(pools))
    if pools == ["mean"]:
        return {"mean": read_layers(cache, samples, layers, pooled=True)}
    grid = token_grid(cache)
    parts: dict[str, list[np.ndarray]] = {p: [] for p in pools}
    for start in range(0, len(samples), chunk):
        tokens = [read_rows(cache, samples[start : start + chunk], layer, pooled=False) for layer in layers]
        for pool in pools:
            views = [pool_tokens(t, pool, grid) for t in tokens]
            parts[pool].append(views[0] if len(views) == 1 else np.concatenate(views, axis=1))
    if not samples:
        return {p: np.zeros((0, pool_dim(cache.dim, p) * len(layers)), np.float32) for p in pools}
    return {p: np.ascontiguousarray(np.concatenate(v)) for p, v in parts.items()}


def layer_sets(cache: Any, layer: int | None) -> list[tuple[int | None, ...]]:
    """The layer choices a grid tries: the requested layer; else the last cached layer, and all of them
    concatenated when the cache holds several (dinov2's linear eval tries 1 vs 4 last blocks the same way)."""
    if layer is not None:
        return [(layer,)]
    layers = tuple(getattr(cache, "layers", ()) or ())
    if len(layers) <= 1:
        return [(None,)]
    same_sign = all(v < 0 for v in layers) or all(v >= 0 for v in layers)
    deepest = max(layers) if same_sign else layers[-1]
    return [(deepest,), layers]


# -- model selection ------------------------------------------------------------------------------------
def mean_score(ability: Ability, samples: Sequence[Sample], replies: Sequence[str]) -> float:
    """The ability's metric over ``samples`` (scored by ``ava.metrics``, exactly as ``ava score`` does)."""
    from ava.metrics.scoring import score_sample

    values = [score_sample(ability, s, r).value for s, r in zip(samples, replies, strict=True)]
    return float(np.mean(values)) if values else float("nan")


def is_better(ability: Ability, value: float, best: float | None) -> bool:
    """Whether ``value`` beats ``best`` in the ability's direction (the first candidate wins ties)."""
    if best is None:
        return True
    if math.isnan(value):
        return False
    if math.isnan(best):
        return True
    return value > best if ability.higher_is_better else value < best


# -- run directories ------------------------------------------------------------------------------------
def write_json(path: Path, obj: Any) -> None:
    """Write JSON atomically (tmp + rename)."""
    from ava.config import to_jsonable
    from ava.data.format import atomic_write_text

    atomic_write_text(path, json.dumps(to_jsonable(obj), indent=2, ensure_ascii=False) + "\n")


@dataclass
class SavedRun:
    """A finished feature-head run opened for evaluation: its files, its dataset and its cache group."""

    path: Path
    config: dict[str, Any]
    run: dict[str, Any]
    metas: dict[str, Any]
    dataset: Dataset
    cache: Any
    device: str


def open_saved_run(run_dir: str | os.PathLike[str], meta_file: str, *, data: str | None = None,
                   cache: str | None = None, device: str | None = None) -> SavedRun:  # fmt: skip
    """Read config.json, run.json and the head's ``meta_file``; open the data and the run's own cache group
    (``data``/``cache``/``device`` override what the run recorded)."""
    from ava.cache import open_cache
    from ava.data.format import Dataset

    path = Path(run_dir)
    config = read_json(path / "config.json")
    run = read_json(path / "run.json")
    return SavedRun(
        path=path, config=config, run=run, metas=read_json(path / meta_file),
        dataset=Dataset(data or config["data"]),
        cache=open_cache(cache or config["cache"], config["vfm"], key=run.get("cache_key")),
        device=resolve_device(device or config.get("device", "auto")),
    )  # fmt: skip


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as e:
        raise AvaError(f"{path.parent} is not a complete run directory: {path.name} is missing") from e
    except json.JSONDecodeError as e:
        raise AvaError(f"{path}: not valid JSON ({e})") from e


def run_block(head: str, vfm: str, abilities: list[str], cache: Any, dataset: Dataset, **extra: Any) -> dict:
    """The ``run`` block of run.json and of every results file."""
    return {
        "head": head,
        "vfm": vfm,
        "abilities": abilities,
        "random_weights": bool(getattr(cache, "random_weights", False)),
        "llm": None,
        "cache_key": getattr(cache, "key", None),
        "split": dataset.split_info,
        "synthetic": dataset.is_synthetic,
        **extra,
    }


def start_run(out: str | os.PathLike[str], config: Any, run: dict) -> Path:
    """Create the run directory and write config.json and run.json."""
    from ava.config import save_config

    if not str(out):
        raise AvaError("no output directory given (--out)")
    run_dir = Path(out)
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(config, run_dir / "config.json")
    write_json(run_dir / "run.json", run)
    return run_dir


def score_and_write(
    dataset: Dataset,
    predictions: Mapping[tuple[str, str], str],
    abilities: list[str],
    split: str,
    run: dict,
    config: dict,
    run_dir: Path,
    extra: Mapping[str, dict] | None = None,
) -> dict:
    """Score replies like ``ava score`` does, add per-ability ``extra`` (selection details), write results."""
    from ava.metrics.scoring import score_predictions, write_results

    report = score_predictions(dataset, predictions, abilities=abilities, split=split, run=run, config=config)
    for key, info in (extra or {}).items():
        if key in report.results.get("abilities", {}):
            report.results["abilities"][key]["extra"] = info
    write_results(report, run_dir, split)
    return report.results
