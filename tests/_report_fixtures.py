"""Run directories scored through the real scorer on a tiny synthetic suite, for report tests.

Three VFMs on four abilities: ``good`` answers the truth on most samples, ``noisy`` on fewer, ``mute`` replies
nothing readable (every reply unparsed), so the report has intervals, baselines, failures and an
"all unparsed" panel to show.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

ABILITIES = ("localization", "counting", "spatial", "emotion")
VFMS = {"good": 0.85, "noisy": 0.45, "mute": None}  # share of samples answered with the truth; None: unparsable


def make_dataset(root: Path, per_ava: int = 50) -> Path:
    from ava.synth import SynthConfig, generate

    data = root / "data"
    generate(SynthConfig(out=str(data), per_ava=per_ava, ava=list(ABILITIES), seed=0, size=64), progress=False)
    return data


def _reply(ability, sample, right: bool, rng: np.random.Generator) -> str:
    from ava.abilities.parsers import format_reply, sample_options, truth_value

    if right:
        return format_reply(ability, truth_value(ability, sample), options=sample.options)
    if ability.answer_kind == "box":
        x, y = rng.uniform(0, 0.5, 2)
        return format_reply(ability, [x, y, x + 0.3, y + 0.3])
    if ability.answer_kind == "integer":
        return str(int(rng.integers(1, 41)))
    opts = sample_options(ability, sample.options)
    return opts[int(rng.integers(len(opts)))]


def write_scored_run(
    data: Path,
    root: Path,
    head: str,
    vfm: str,
    right: float | None,
    *,
    seed: int = 0,
    abilities: tuple[str, ...] = ABILITIES,
    extra: dict | None = None,
) -> Path:
    """A run directory as a head writes it: run.json, results_test.json, predictions_test.jsonl."""
    from ava.abilities import get_ability
    from ava.data.format import Dataset
    from ava.metrics.scoring import score_predictions, write_results

    dataset = Dataset(data)
    rng = np.random.default_rng(seed)
    predictions = {}
    for key in abilities:
        ability = get_ability(key)
        samples = dataset.samples(key, split="test")
        for s in samples:
            if right is None:
                predictions[s.key] = "I cannot tell."
            else:
                predictions[s.key] = _reply(ability, s, bool(rng.random() < right), rng)
    run = {
        "head": head,
        "vfm": vfm,
        "abilities": list(abilities),
        "random_weights": vfm == "mute",
        "llm": None,
        **(extra or {}),
    }
    out = root / f"{head}-{vfm}"
    out.mkdir(parents=True)
    (out / "run.json").write_text(json.dumps({**run, "split": dataset.split_info}))
    report = score_predictions(
        dataset, predictions, abilities=list(abilities), split="test", run=run, config={"data": str(data)}
    )
    write_results(report, out, "test")
    return out
