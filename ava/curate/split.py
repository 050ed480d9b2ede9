"""The build's 80/20 split: per class x answer bin where the source has both, else the coarser stratum.

Each question carries a fine stratum (counting: class x count; spatial: answer x class pair; depth: class x bin;
relative depth and tasks: class x answer; recognition and the class-folder abilities: class) and a coarse one (the
answer or bin alone, as ``ava data split`` uses). A fine stratum with fewer than :data:`MIN_STRATUM` questions
cannot give both train and test a share, so its questions are split within their coarse stratum instead, and a
coarse stratum still that small within the whole ability; the build records which strata fell back and how far.
Inside a stratum the order is ``sha256(seed, ava, id)``, as in
``ava.data.split``, so adding a question never moves another.
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from typing import Any

from ava.curate.core import Question

MIN_STRATUM = 5  # with 5, an 80/20 split gives test one question and train four


def assign(questions: list[Question], test_frac: float, seed: int) -> tuple[dict[str, str], dict[str, Any]]:
    """Question id -> "train"/"test" (keyed by ``(ava, id)`` joined with a NUL), and what was stratified how."""
    by_ava: dict[str, list[Question]] = defaultdict(list)
    for q in questions:
        by_ava[q.ava].append(q)
    splits: dict[str, str] = {}
    report: dict[str, Any] = {}
    for ava, qs in by_ava.items():
        fine: dict[str, list[Question]] = defaultdict(list)
        for q in qs:
            fine[q.fine].append(q)
        strata: dict[str, list[Question]] = defaultdict(list)
        fell_back = []
        coarse: dict[str, list[Question]] = defaultdict(list)
        for name, members in fine.items():
            if len(members) >= MIN_STRATUM:
                strata[f"fine:{name}"] += members
            else:
                fell_back.append(name)
                for q in members:
                    coarse[q.coarse].append(q)
        to_ability = []
        for name, members in coarse.items():
            if len(members) >= MIN_STRATUM:
                strata[f"coarse:{name}"] += members
            else:
                to_ability.append(name)
                strata["ability"] += members
        for members in strata.values():
            members.sort(key=lambda q: hashlib.sha256(f"{seed}\0{q.ava}\0{q.id}".encode()).hexdigest())
            n_test = math.floor(len(members) * test_frac + 0.5) if len(members) > 1 else 0
            for i, q in enumerate(members):
                splits[f"{q.ava}\0{q.id}"] = "test" if i < n_test else "train"
        report[ava] = {
            "strata": len(strata),
            "fine_strata": len(fine) - len(fell_back),
            "fell_back_to_coarse": sorted(fell_back)[:20],
            "n_fell_back": len(fell_back),
            "fell_back_to_ability": sorted(to_ability)[:20],
        }
    return splits, report
