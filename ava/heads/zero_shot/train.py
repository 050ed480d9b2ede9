"""Run the zero-shot head: embed every option text (in the prompt template) with the text tower and every image with
the image tower, answer each choice question with its most similar option, score like ``ava score``.

Run directory (besides config.json, run.json, results_<split>.json, predictions_<split>.jsonl)::

    zero_shot.json   # the checkpoint, its weights identity, the template, the abilities not applicable and why

``run.json`` records ``not_applicable`` (ability -> why): those abilities have no results, so a report shows them
as not scored, never as zero.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ava.errors import AvaError
from ava.heads.rundir import owns_run_dir
from ava.heads.zero_shot.config import ZeroShotConfig

META_FILE = "zero_shot.json"


def split_applicable(abilities: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """(choice abilities, {other ability: why not applicable})."""
    from ava.abilities import get_ability

    applicable, skipped = [], {}
    for key in abilities:
        kind = get_ability(key).answer_kind
        if kind == "option":
            applicable.append(key)
        else:
            skipped[key] = f"not applicable: its answer kind is {kind!r}, not an option among texts"
    return applicable, skipped


def predict(
    model: Any,
    dataset: Any,
    ava: str,
    samples: Sequence[Any],
    template: str,
    advance: Callable[[int], Any] = lambda n: None,
) -> list[str]:
    """The reply of every sample: the option whose prompt-wrapped text is most similar to the image; ``advance(n)``
    is called after each batch of ``n`` images."""
    from ava.abilities import get_ability
    from ava.abilities.parsers import format_reply
    from ava.heads.targets import question_options

    ability = get_ability(ava)
    options = [question_options(ability, s) for s in samples]
    texts = list(dict.fromkeys(o for opts in options for o in opts))
    text_rows = dict(zip(texts, model.texts([template.format(t) for t in texts]), strict=True))
    unique = {s.image_sha256: s for s in samples}
    image_rows: dict[str, np.ndarray] = {}
    keys = list(unique)
    step = max(1, int(getattr(model, "batch_size", 32) or 32))  # one model batch of decoded images at a time
    for start in range(0, len(keys), step):
        chunk = keys[start : start + step]
        image_rows.update(zip(chunk, model.images([dataset.load_image(unique[k]) for k in chunk]), strict=True))
        advance(len(chunk))
    replies = []
    for s, opts in zip(samples, options, strict=True):
        sims = np.stack([text_rows[o] for o in opts]) @ image_rows[s.image_sha256]
        replies.append(format_reply(ability, int(np.argmax(sims)), options=opts))
    return replies


def _load(vfm: str, device: str, batch_size: int | None) -> tuple[Any, str]:
    from ava.heads.features import resolve_device
    from ava.vfm.image_text import load_image_text, text_tower_source

    source = text_tower_source(vfm)
    base = vfm.split("@")[0]  # a registered name takes a local copy as NAME@DIR, any other checkpoint as hf:DIR
    local = f"--vfm {base}@/path/to/dir" if ":" not in base else "--vfm hf:/path/to/dir"
    model = load_image_text(
        source, device=resolve_device(device), batch_size=batch_size or 32, what=f"VFM {vfm!r}", local_form=local
    )
    return model, source


def _run(config: ZeroShotConfig, run_dir: Path, abilities: list[str], split: str, model: Any) -> dict[str, Any]:
    from ava.config import to_jsonable
    from ava.data.format import Dataset
    from ava.heads.rundir import read_json, score_and_write
    from ava.progress import progress as progress_bar

    dataset = Dataset(config.data)
    run = read_json(run_dir / "run.json")
    predictions: dict[tuple[str, str], str] = {}
    per_ability = {ava: dataset.samples(ava, split=split) for ava in abilities}
    with progress_bar(config.progress, transient=True) as bar:  # images, advanced per batch within each ability
        total = sum(len({s.image_sha256 for s in samples}) for samples in per_ability.values())
        task = bar.add_task(f"zero-shot {config.vfm}", total=total)
        for i, (ava, samples) in enumerate(per_ability.items(), 1):
            bar.update(task, description=f"zero-shot {config.vfm}: {ava} ({i}/{len(abilities)}), images")
            replies = predict(model, dataset, ava, samples, config.template, advance=lambda n: bar.advance(task, n))
            predictions.update({s.key: r for s, r in zip(samples, replies, strict=True)})
    extra = {ava: {"template": config.template} for ava in abilities}
    return score_and_write(dataset, predictions, abilities, split, run, to_jsonable(config), run_dir, extra)


@owns_run_dir("zero-shot")
def train(config: ZeroShotConfig) -> Path:
    """Score every choice ability of ``config.split`` zero-shot; write the run directory."""
    from ava.data.format import Dataset
    from ava.heads.rundir import run_block, start_run, write_json
    from ava.heads.targets import select_abilities
    from ava.vfm.image_text import text_tower_random_weights

    dataset = Dataset(config.data)
    abilities, skipped = split_applicable(select_abilities(dataset, config.ava))
    if not abilities:
        raise AvaError(f"the zero-shot head answers choice questions only, and none of {', '.join(skipped)} is one")
    model, source = _load(config.vfm, config.device, config.batch_size)
    run = run_block(
        "zero-shot",
        config.vfm,
        abilities,
        None,
        dataset,
        seed=config.seed,
        not_applicable=skipped,
        weights=model.identity,
    )
    run["random_weights"] = run["vfm_random_weights"] = text_tower_random_weights(config.vfm)
    run_dir = start_run(config.out, config, run)
    write_json(
        run_dir / META_FILE,
        {
            "source": source,
            "weights": model.identity,
            "model_type": model.model_type,
            "logit_scale": getattr(model, "logit_scale", None),
            "template": config.template,
            "not_applicable": skipped,
        },
    )
    _run(config, run_dir, abilities, config.split, model)
    return run_dir


def evaluate(
    run_dir: str | os.PathLike[str],
    split: str = "test",
    *,
    device: str | None = None,
    batch_size: int | None = None,
    **_: Any,
) -> dict[str, Any]:
    """Score another split of a zero-shot run (the same checkpoint and template)."""
    from ava.config import config_from_dict
    from ava.data.format import Dataset
    from ava.heads.rundir import check_eval_target, read_run

    path = Path(run_dir)
    config_dict, run = read_run(path, "zero-shot")
    config = config_from_dict(ZeroShotConfig, config_dict, str(path / "config.json"))
    check_eval_target(path, run, Dataset(config.data), list(run["abilities"]), [f"results_{split}.json"])
    model, _ = _load(config.vfm, device or config.device, batch_size or config.batch_size)
    return _run(config, path, list(run["abilities"]), split, model)
