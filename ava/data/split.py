"""The one train/test split rule of ava: deterministic, stratified per ability and class or answer bin.

The release publishes only train data, and the paper splits every ability 80/20 *within* each class
or answer bin, so every test class or bin also appears in train. :func:`assign_splits` does that:
inside each stratum (see :func:`stratum`), samples are ordered by ``sha256(seed, ava, id)``, which
depends on nothing but the sample itself, so the split is the same whatever order the samples come
in, and adding a sample never moves another one between strata. The first samples of each stratum in
that order go to test; :func:`assign_splits` says how many. The synthetic suite uses the same functions. Box-area
and text-length bins are the paper's subgroup bins (``ava.abilities.subgroups``), so every reported
subgroup is split 80/20 too.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from ava.abilities.subgroups import box_area, text_length
from ava.data.format import Dataset, Sample, update_info, write_samples
from ava.errors import AvaError

COLOR_CELLS = 3  # a coarse 3x3x3 RGB grid

STRATIFIED_BY: dict[str, str] = {
    "localization": "normalized box area bin (0-0.1, 0.1-0.2, 0.2-0.3, 0.3-0.5, >0.5)",
    "counting": "count",
    "abs_depth": "depth bin",
    "rel_depth": "object class x answer (red/blue)",
    "ocr": "text length bin (1-5, 6-10, 11-20, >20)",
    "color": f"RGB cell of a {COLOR_CELLS}x{COLOR_CELLS}x{COLOR_CELLS} grid",
}
OPTION_STRATUM = "truth option text"


def stratum(sample: Sample) -> str:
    """``"<ava>:<label>"``: the class or answer bin a sample is split within."""
    return f"{sample.ava}:{stratum_label(sample)}"


def stratum_label(sample: Sample) -> str:
    """The class or answer-bin label of a sample (also the "answer class" of ``ava data info``)."""
    t = sample.truth
    ava = sample.ava
    if ava == "rel_depth":
        return f"{sample.meta.get('class', '?')}|{t.get('text', '?')}"
    if "text" in t and "index" in t:  # option abilities
        return str(t["text"])
    if "value" in t:
        return str(t["value"])
    if "bin" in t:
        lo, hi = t["bin"]
        return f"{_num(lo)}-{_num(hi)}"
    if "box" in t:
        return f"area {box_area(sample)}"
    if "rgb" in t:
        return "rgb " + "".join(str(min(int(c), 255) * COLOR_CELLS // 256) for c in t["rgb"])
    if "text" in t:
        return f"len {text_length(sample) or 0}"
    return "all"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _order_key(sample: Sample, seed: int) -> str:
    return hashlib.sha256(f"{seed}\0{sample.ava}\0{sample.id}".encode()).hexdigest()


def assign_splits(samples: list[Sample], *, test_frac: float = 0.2, seed: int = 0) -> None:
    """Set ``sample.split`` in place: 80/20 (``test_frac``) within every stratum, deterministic.

    Each ability gets ``round(n * test_frac)`` test samples in all. Every stratum first gets
    ``floor(n_s * test_frac)``; the rest go one each to the strata with the largest remainders (ties in
    hash order), preferring strata that keep a train sample. So a large dataset is split 80/20 inside
    every class or bin, and a small one (few samples per bin, e.g. a synthetic smoke run) still has its
    test fraction, at the price of some test bins without a train sample.
    """
    if not 0.0 <= test_frac < 1.0:
        raise AvaError(f"test fraction must be in [0, 1), got {test_frac}")
    by_ava: dict[str, dict[str, list[Sample]]] = defaultdict(lambda: defaultdict(list))
    for s in samples:
        by_ava[s.ava][stratum(s)].append(s)
    for strata in by_ava.values():
        n_test = _apportion(strata, test_frac, seed)
        for name, members in strata.items():
            members.sort(key=lambda s: _order_key(s, seed))
            for i, s in enumerate(members):
                s.split = "test" if i < n_test[name] else "train"


def _apportion(strata: dict[str, list[Sample]], test_frac: float, seed: int) -> dict[str, int]:
    """Test samples per stratum: largest-remainder apportionment of the ability's test total."""
    total = math.floor(sum(len(m) for m in strata.values()) * test_frac + 0.5)
    n_test = {name: math.floor(len(m) * test_frac) for name, m in strata.items()}
    left = total - sum(n_test.values())

    def priority(name: str) -> tuple[bool, float, str]:
        n = len(strata[name])
        keeps_train = n - n_test[name] >= 2
        tie = hashlib.sha256(f"{seed}\0{name}".encode()).hexdigest()
        return (not keeps_train, -(n * test_frac - n_test[name]), tie)

    for name in sorted(strata, key=priority):
        if left <= 0:
            break
        if n_test[name] < len(strata[name]):
            n_test[name] += 1
            left -= 1
    return n_test


def split_dataset(
    root: str | os.PathLike[str], *, test_frac: float = 0.2, seed: int = 0, force: bool = False
) -> dict[str, Any]:
    """Split every ability of the dataset at ROOT; refuses an already split dataset unless ``force``, but for one
    ava split with the same seed and test fraction (splitting again would give the same split: it is kept, and
    ``unchanged`` is true).

    Returns ``{"split": <what dataset.json now records>, "counts": {ava: {"train": n, "test": n}}, "unchanged"}``.
    """
    ds = Dataset(root)
    current = ds.split_info
    if current and not force:
        if current.get("made_by") == "ava":
            differ = [
                f"{o} {current.get(k)} there, {v} now"
                for k, o, v in (("seed", "--seed", seed), ("test_frac", "--test-frac", test_frac))
                if current.get(k) != v
            ]
            if not differ:
                counts = {
                    ava: {name: sum(s.split == name for s in ds.samples(ava)) for name in ("train", "test")}
                    for ava in ds.abilities()
                }
                return {"split": current, "counts": counts, "unchanged": True}
            raise AvaError(
                f"{Path(root)} is already split by ava with other settings ({'; '.join(differ)}); give "
                "the same options to keep it, or --force to split it again"
            )
        raise AvaError(
            f"{Path(root)} is already split (made_by={current.get('made_by')!r}); pass --force to replace that split"
        )
    if not 0.0 < test_frac < 1.0:
        raise AvaError(f"--test-frac must be between 0 and 1 (exclusive), got {test_frac}")
    abilities = ds.abilities()
    if not abilities:
        raise AvaError(f"{Path(root)} has no samples to split")
    counts: dict[str, dict[str, int]] = {}
    for ava in abilities:
        samples = ds.samples(ava)
        assign_splits(samples, test_frac=test_frac, seed=seed)
        write_samples(root, ava, samples)
        counts[ava] = {name: sum(s.split == name for s in samples) for name in ("train", "test")}
    info = {
        "made_by": "ava",
        "test_frac": test_frac,
        "seed": seed,
        "stratified_by": {ava: STRATIFIED_BY.get(ava, OPTION_STRATUM) for ava in abilities},
    }
    if current and current.get("made_by") != "ava":
        info["replaced"] = current.get("made_by")
    update_info(root, split=info)
    return {"split": info, "counts": counts, "unchanged": False}


_MADE_BY = {
    "official": "official split",
    "ava": "80/20 split made by ava",
    "synthetic": "split of the synthetic suite",
}


def split_label(split: dict[str, Any]) -> str:
    """``"test (80/20 split made by ava, seed 0)"``: the split's name and who made it."""
    made_by = split.get("made_by")
    if not made_by:  # e.g. `ava score --split all` on an unsplit dataset
        return str(split.get("name", "?"))
    label = _MADE_BY.get(made_by, f"split made by {made_by}")
    if made_by == "ava" and "seed" in split:
        label += f", seed {split['seed']}"
    return f"{split.get('name', '?')} ({label})"
