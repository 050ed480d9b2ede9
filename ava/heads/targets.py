"""Samples, targets and replies of the heads trained on cached features (probes, kNN, the LLM head's helpers).

What every such head does the same way with samples: pick the abilities of a run, cap and split the train
samples deterministically (a held-out slice for model selection), turn a sample's structured truth into a
training target and a prediction back into a reply (through ``ava.abilities.parsers.format_reply``, so every
head is scored exactly like ``ava score``), and score replies for model selection.

Feature reading and pooling: :mod:`ava.heads.features`; run directories: :mod:`ava.heads.rundir.files`.

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
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ava.errors import AvaError

if TYPE_CHECKING:
    from ava.abilities import Ability
    from ava.data.format import Dataset, Sample

REGRESSION_KINDS = ("integer", "depth_bin", "rgb", "box")
TARGET_DIMS = {"integer": 1, "depth_bin": 1, "rgb": 3, "box": 4}


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


def heldout_count(n: int, frac: float) -> int:
    """How many of ``n`` train samples :func:`holdout_split` holds out: ``frac`` of them, at least one each side
    (all of them when there are fewer than two: both sides are the whole set then)."""
    return n if n < 2 else min(n - 1, max(1, round(frac * n)))


def holdout_split(samples: Sequence[Sample], frac: float = 0.1, seed: int = 0) -> tuple[list[Sample], list[Sample]]:
    """(fit, held-out): a deterministic ``frac`` slice of train for model selection (at least one each side)."""
    ordered = stable_order(samples, f"holdout{seed}")
    if len(ordered) < 2:
        return list(ordered), list(ordered)
    n_held = heldout_count(len(ordered), frac)
    return ordered[n_held:], ordered[:n_held]


def stratified_rows(samples: Sequence[Sample], n: int, seed: int = 0) -> np.ndarray:
    """Indices (ascending) of ``n`` of ``samples``, drawn deterministically and stratified by answer class or bin as
    the train/test split is (:func:`ava.data.split.stratum_label`): each stratum gives its share of ``n``, floored,
    and the rows left go one each to the strata with the largest remainders (ties in an order set by ``seed``); inside
    a stratum the rows come in :func:`stable_order`. Every row when ``n`` is at least their number."""
    from ava.data.split import stratum_label

    total = len(samples)
    if n >= total:
        return np.arange(total, dtype=np.int64)
    strata: dict[str, list[int]] = {}
    for i, s in enumerate(samples):
        strata.setdefault(stratum_label(s), []).append(i)
    quota = {name: n * len(rows) // total for name, rows in strata.items()}
    left = n - sum(quota.values())  # fewer than the strata: each remainder is below one row

    def priority(name: str) -> tuple[int, str]:
        return (-(n * len(strata[name]) % total), hashlib.sha256(f"{seed}|{name}".encode()).hexdigest())

    for name in sorted(strata, key=priority)[:left]:
        quota[name] += 1
    salt = f"subsample{seed}"
    picked = [
        i for name, rows in strata.items() for i in sorted(rows, key=lambda i: _rank(samples[i], salt))[: quota[name]]
    ]
    return np.array(sorted(picked), dtype=np.int64)


def question_options(ability: Ability, sample: Sample) -> list[str]:
    """The options of this question (the sample's own list, or the ability's fixed one)."""
    from ava.abilities.parsers import sample_options

    if options := sample_options(ability, sample.options):
        return options
    raise AvaError(f"sample {sample.ava}/{sample.id}: a {ability.answer_kind} question without options")


# -- targets --------------------------------------------------------------------------------------------
def truth_field(sample: Sample, field: str) -> Any:
    """``sample.truth[field]``, or an error naming the sample."""
    if field not in sample.truth:
        raise AvaError(f"sample {sample.ava}/{sample.id}: truth {sample.truth!r} has no {field!r}")
    return sample.truth[field]


def option_text(ability: Ability, sample: Sample) -> str:
    """The true option's text of a choice question."""
    if "text" in sample.truth:
        return str(sample.truth["text"])
    return question_options(ability, sample)[int(truth_field(sample, "index"))]


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
    return bin_midpoint(question_options(ability, sample)[int(truth_field(sample, "index"))])


def regression_target(ability: Ability, sample: Sample) -> np.ndarray:
    """The regression target of one sample (see the module docstring), float32."""
    kind = ability.answer_kind
    if kind == "integer":
        return np.array([math.log(max(float(truth_field(sample, "value")), 0.5))], np.float32)
    if kind == "depth_bin":
        return np.array([math.log(depth_metres(ability, sample))], np.float32)
    if kind == "rgb":
        return np.asarray(truth_field(sample, "rgb"), np.float32) / 255.0
    if kind == "box":
        x1, y1, x2, y2 = (float(v) for v in truth_field(sample, "box"))
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


# -- model selection ------------------------------------------------------------------------------------
def mean_score(
    ability: Ability, samples: Sequence[Sample], replies: Sequence[str], memo: dict[Any, float] | None = None
) -> float:
    """The ability's metric over ``samples`` (scored by ``ava.metrics``, exactly as ``ava score`` does).

    ``memo`` (a dict kept by the caller across calls) holds the score of every (sample id, reply) already scored:
    candidates of a selection grid mostly give the same replies, and each is parsed and scored once."""
    from ava.metrics.scoring import score_samples

    memo = {} if memo is None else memo
    keys = [(s.key, r) for s, r in zip(samples, replies, strict=True)]  # (each built once: 100Ks of replies)
    todo = {key: (s, key[1]) for key, s in zip(keys, samples, strict=True) if key not in memo}
    if todo:
        pairs = list(todo.values())
        scores = score_samples(ability, [s for s, _ in pairs], [r for _, r in pairs])
        memo.update(zip(todo, (x.value for x in scores), strict=True))
    values = [memo[key] for key in keys]
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
