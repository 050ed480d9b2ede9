"""What a score must beat: the chance level and the majority baseline of each ability, on the scored samples.

- **chance**: a reply drawn uniformly from the question's options, scored by the ability's own parser and
  metric; its expectation per sample is the mean of the metric over the options, and the baseline is the mean
  over the test samples. Defined only for abilities whose questions have options (or fixed options).
- **majority**: the most frequent answer of the ability's *train* split, given as the reply to every test
  sample and scored like any reply (an option text that a question does not offer is unparsed and scored
  worst). Undefined when every train answer is distinct (a box, a colour, a text), where there is no majority.

Both are computed through :func:`ava.metrics.scoring.score_sample`, so they follow the same parsing rules and
worst values as the heads' scores.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ava.errors import AvaError


@dataclass
class Baseline:
    """A baseline's value on the scored samples, or None with the reason."""

    value: float | None
    n: int = 0  # test samples it was computed over
    answer: str | None = None  # the majority answer (majority only)
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _chance(ability: Any, samples: list[Any]) -> Baseline:
    from ava.abilities.parsers import format_reply, sample_options
    from ava.metrics.scoring import score_sample

    values = []
    for s in samples:
        opts = sample_options(ability, s.options)
        if not opts:
            return Baseline(None, reason="no options: the answer is free (a number, box, colour or text)")
        per = [score_sample(ability, s, format_reply(ability, i, options=opts)).value for i in range(len(opts))]
        values.append(sum(per) / len(per))
    return Baseline(sum(values) / len(values), n=len(values))


def _answer_key(ability: Any, sample: Any) -> str:
    from ava.abilities.parsers import truth_value

    if ability.answer_kind == "option":  # options may be shuffled per question: the answer is the text
        return str(sample.truth.get("text", sample.answer))
    return json.dumps(truth_value(ability, sample), sort_keys=True)


def _majority(ability: Any, train: list[Any], samples: list[Any]) -> Baseline:
    from ava.abilities.parsers import format_reply, truth_value
    from ava.metrics.scoring import score_sample

    if not train:
        return Baseline(None, reason="no train samples of this ability in the dataset")
    counts = Counter(_answer_key(ability, s) for s in train)
    key, top = counts.most_common(1)[0]
    if top == 1 and len(train) > 1:
        return Baseline(None, reason=f"every one of the {len(train)} train answers is distinct: no majority")
    example = next(s for s in train if _answer_key(ability, s) == key)
    if ability.answer_kind == "option":
        reply = key
    else:
        reply = format_reply(ability, truth_value(ability, example), options=example.options)
    values = [score_sample(ability, s, reply).value for s in samples]
    return Baseline(sum(values) / len(values), n=len(values), answer=reply)


def ability_baselines(
    dataset: Any, ability_key: str, ids: set[str] | None, split: str | None = "test"
) -> dict[str, Any]:
    """``{"chance": Baseline, "majority": Baseline}`` (as dicts) of one ability over the scored samples: those
    whose id is in ``ids`` (the runs' per-sample records), else every sample of ``split``."""
    from ava.abilities import get_ability

    ability = get_ability(ability_key)
    if ids is not None:
        samples = [s for s in dataset.samples(ability.key) if s.id in ids]
    else:
        samples = dataset.samples(ability.key, split=split)
    if not samples:
        reason = f"none of the scored samples is in the dataset ({dataset.root})"
        return {"chance": Baseline(None, reason=reason).to_dict(), "majority": Baseline(None, reason=reason).to_dict()}
    return {
        "chance": _chance(ability, samples).to_dict(),
        "majority": _majority(ability, dataset.samples(ability.key, split="train"), samples).to_dict(),
    }


def find_dataset(candidates: list[str | None], run_dir: Path) -> Path | None:
    """The first candidate dataset directory that exists (as given, or relative to the run directory)."""
    for c in candidates:
        if not c:
            continue
        for p in (Path(c), run_dir / c):
            if (p / "dataset.json").is_file() or (p / "samples").is_dir():
                return p
    return None


def open_dataset(path: Path | None) -> tuple[Any, str | None]:
    """The dataset at ``path``, or None with the reason it cannot be read."""
    from ava.data.format import Dataset

    if path is None:
        return None, "the runs' dataset was not found (results record no existing dataset directory)"
    try:
        return Dataset(path), None
    except (AvaError, OSError) as e:
        return None, f"cannot read the dataset {path}: {e}"
