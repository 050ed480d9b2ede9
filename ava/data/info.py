"""``ava data info``: what a dataset holds, per ability x split, source dataset and answer class."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

from ava.data.format import Dataset
from ava.data.split import stratum_label

SPLIT_COLUMNS = ("train", "test", "unsplit")


def dataset_info(root: str | os.PathLike[str]) -> dict[str, Any]:
    """Counts of the dataset at ROOT.

    ``abilities[ava]`` = ``{"total", "train", "test", "unsplit", "sources": {name: n},
    "classes": {label: {"train", "test", "unsplit"}}}``; the class label is the one the split is
    stratified by (the truth option, the count, the depth bin, the box-area bin, ...).
    """
    ds = Dataset(root)
    abilities: dict[str, Any] = {}
    images: set[str] = set()
    for ava in ds.abilities():
        samples = ds.samples(ava)
        images.update(s.image for s in samples)
        splits = Counter(s.split or "unsplit" for s in samples)
        classes: dict[str, Counter[str]] = {}
        for s in samples:
            classes.setdefault(stratum_label(s), Counter())[s.split or "unsplit"] += 1
        abilities[ava] = {
            "total": len(samples),
            **{name: splits.get(name, 0) for name in SPLIT_COLUMNS},
            "sources": dict(Counter(str(s.meta.get("source", "unknown")) for s in samples).most_common()),
            "classes": {k: {name: c.get(name, 0) for name in SPLIT_COLUMNS} for k, c in sorted(classes.items())},
        }
    return {
        "root": str(ds.root),
        "source": ds.info.get("source"),
        "synthetic": ds.is_synthetic,
        "split": ds.split_info,
        "n_samples": sum(a["total"] for a in abilities.values()),
        "n_images": len(images),
        "abilities": abilities,
    }
