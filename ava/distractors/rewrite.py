"""``ava data options``: a copy of a dataset whose choice questions ask the truth plus ``k - 1`` mined (or random)
wrong classes, shuffled with a seed; the question's option list, the truth's index and the reference answer are
rewritten to match, and the provenance is recorded in ``dataset.json`` (``options``) and in each rewritten
sample's ``meta["options_miner"]``.

Which abilities: those whose answer is an option (``answer_kind == "option"``). An ability's classes are every
class it declares: the class list ``ava data build`` records (``dataset.json`` ``build.classes``: the annotation
file's categories, the class folders), the true option texts of its samples and the options its questions list.
Without ``ava``, abilities with no more than ``k`` classes are left as they are (and listed); named with ``ava``,
such an ability is an error.

Where the samples say which photo they come from (``meta.image_classes``, or ``meta.origin``), the result reports,
per ability, the share of distractors that are other objects of the question's own photo, over the questions on
photos of several classes: a miner that reads the whole photo instead of the object offers those.
The output is built in a temporary directory beside ``out`` and renamed into place, so ``out`` is never half
written; images are hard links to the source's (copies across file systems).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ava.abilities.parsers import FOCI_RULE
from ava.data.choices import OptionsError
from ava.distractors.miners import Miner, TextTowerMiner, mined_options, object_key, parse_miner, truth_text
from ava.distractors.prompt import TEMPLATES, foci_question, replace_option_list, rewritten_answer


@dataclass
class OptionsResult:
    """What ``ava data options`` wrote: rewritten samples and classes per ability, abilities left as they were."""

    out: Path
    miner: str
    k: int
    rewritten: dict[str, int] = field(default_factory=dict)  # ability -> samples rewritten
    classes: dict[str, int] = field(default_factory=dict)  # ability -> classes
    skipped: dict[str, str] = field(default_factory=dict)  # ability -> why it was left as it was
    # ability -> {"share": distractors that are other objects of the question's photo / all distractors, over the
    # "questions" on photos of several classes}; absent where the samples do not say which photo they are from
    same_photo: dict[str, dict[str, float | int]] = field(default_factory=dict)
    unplaced: dict[str, list[str]] = field(default_factory=dict)  # ability -> classes the miner could not place


def sample_rng(seed: int, ava: str, sample_id: str) -> np.random.Generator:
    """A generator for one question that depends only on the seed and the sample's key (not on order)."""
    digest = hashlib.sha256(f"{seed}|{ava}|{sample_id}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def ability_classes(samples: list[Any], declared: list[str] | None = None) -> list[str]:
    """Every class of an ability: ``declared`` (the build's class list), then the true option texts and the listed
    options of its samples, in the order of first appearance."""
    out = list(declared or [])
    for s in samples:
        out.append(truth_text(s))
        out += [str(o) for o in s.options or []]
    return list(dict.fromkeys(out))


def declared_classes(dataset: Any, ava: str) -> list[str] | None:
    """The class list ``ava data build`` recorded for ``ava`` (``build.classes``), if any."""
    classes = ((dataset.info.get("build") or {}).get("classes") or {}).get(ava)
    return [str(c) for c in classes] if isinstance(classes, list) else None


def photo_classes(samples: list[Any]) -> dict[str, set[str]] | None:
    """Per sample id, the classes of the objects its photo shows: ``meta.image_classes`` where the build wrote
    it, else the truths of the samples from the same source image (``meta.origin``); None when the samples say
    neither."""
    by_origin: dict[tuple, set[str]] = {}
    for s in samples:
        origin = (s.meta or {}).get("origin") or {}
        if origin.get("file"):
            by_origin.setdefault((origin.get("file"), origin.get("image_id")), set()).add(truth_text(s))
    out: dict[str, set[str]] = {}
    for s in samples:
        listed = (s.meta or {}).get("image_classes")
        origin = (s.meta or {}).get("origin") or {}
        if isinstance(listed, list):
            out[s.id] = {str(c) for c in listed}
        elif origin.get("file"):
            out[s.id] = by_origin[(origin.get("file"), origin.get("image_id"))]
    return out or None


def same_photo_share(samples: list[Any]) -> dict[str, float | int] | None:
    """Of the distractors of the questions on photos of several classes, the share that are other objects of the
    question's own photo."""
    photos = photo_classes(samples)
    if photos is None:
        return None
    same = total = questions = 0
    for s in samples:
        truth, shown = truth_text(s), photos.get(s.id)
        if not shown or len(shown - {truth}) == 0:
            continue
        wrong = [o for o in s.options or [] if o != truth]
        questions += 1
        total += len(wrong)
        same += sum(o in shown for o in wrong)
    return {"share": round(same / total, 4) if total else 0.0, "questions": questions}


def _choice_abilities(dataset: Any, ava: list[str] | None, k: int) -> tuple[list[str], dict[str, str]]:
    from ava.abilities import get_ability

    present = dataset.abilities()
    keys = [get_ability(a).key for a in ava] if ava else present
    missing = [a for a in keys if a not in present]
    if missing:
        raise OptionsError(f"dataset {dataset.root} has no samples for {', '.join(missing)}; present: {present}")
    choice = [a for a in keys if get_ability(a).answer_kind == "option"]
    if not choice:
        raise OptionsError(
            f"dataset {dataset.root} has no choice questions to rewrite (abilities {', '.join(keys)} "
            "do not answer with an option)"
        )
    chosen, skipped = [], {}
    for a in keys:
        if a not in choice:
            skipped[a] = "not a choice question"
            continue
        n = len(ability_classes(dataset.samples(a), declared_classes(dataset, a)))
        if n <= k:
            if ava:
                raise OptionsError(f"k = {k} options asked, but ability {a!r} has only {n} classes in {dataset.root}")
            skipped[a] = f"{n} classes, not more than k = {k}"
            continue
        chosen.append(a)
    if not chosen:
        raise OptionsError(
            f"k = {k} options asked, but no choice ability of {dataset.root} has more than {k} "
            f"classes ({'; '.join(f'{a}: {w}' for a, w in skipped.items())})"
        )
    return chosen, skipped


def rewrite_options(
    data: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    miner: str | Miner,
    k: int = 4,
    seed: int = 0,
    ava: list[str] | None = None,
    cache: str | None = None,
    template: str = "keep",
    domain: str = "choices",
    label_template: str | None = None,
    device: str = "cpu",
    force: bool = False,
) -> OptionsResult:
    """Write ``out``: ``data`` with every choice question's options rewritten (see the module docstring)."""
    from ava.abilities import get_ability
    from ava.data.format import Dataset, check_replaceable

    if template not in TEMPLATES:
        raise OptionsError(f"unknown question template {template!r}; use {' or '.join(TEMPLATES)}")
    if k < 2:
        raise OptionsError(f"k = {k}: a choice question needs at least 2 options")
    data, out = Path(data), Path(out)
    if out.resolve() == data.resolve():
        raise OptionsError(f"--out {out} is the input dataset; write the rewritten copy elsewhere")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        if not force:
            raise OptionsError(f"{out} exists; pass --force to replace it (only an ava dataset is replaced)")
        check_replaceable(out, option="--force")
    found = (
        miner if not isinstance(miner, str) else parse_miner(miner, cache=cache, template=label_template, device=device)
    )
    dataset = Dataset(data)
    chosen, skipped = _choice_abilities(dataset, ava, k)
    if isinstance(found, TextTowerMiner):
        found.load()  # a checkpoint without a text tower is refused before any image is read
    result = OptionsResult(out, found.name, k, skipped=skipped)
    files: dict[str, str] = {}
    for key in dataset.abilities():
        samples = dataset.samples(key)
        if key in chosen:
            samples = _rewrite_ability(dataset, get_ability(key), samples, found, k, seed, template, domain, result)
        files[key] = "".join(s.to_json() + "\n" for s in samples)
    info = {
        **dataset.info,
        "options": {
            "miner": found.name,
            "k": k,
            "seed": seed,
            "template": template,
            "domain": domain if template == "foci" else None,
            "label_template": getattr(found, "template", None),
            "source": str(data.resolve()),
            "abilities": result.rewritten,
            "skipped": skipped,
            "same_photo": result.same_photo,
            "unplaced": result.unplaced,
        },
    }
    _write(dataset.root, out, info, files)
    return result


def _rewrite_ability(
    dataset: Any,
    ability: Any,
    samples: list[Any],
    miner: Miner,
    k: int,
    seed: int,
    template: str,
    domain: str,
    result: OptionsResult,
) -> list[Any]:
    import dataclasses

    classes = ability_classes(samples, declared_classes(dataset, ability.key))
    sampler = mined_options(miner, dataset, ability.key, classes, samples, k)
    out = []
    for s in samples:
        truth = truth_text(s)
        options = sampler(truth, classes, sample_rng(seed, s.ava, s.id), image=object_key(s))
        index = options.index(truth)
        old = list(s.options or ability.fixed_options)
        style = ability.option_style
        question = (
            foci_question(options, domain)
            if template == "foci"
            else replace_option_list(s.question, old, options, style)
        )
        answer = rewritten_answer(s.answer, truth, index, style, template)
        meta = {**s.meta, "options_miner": miner.name}
        if template == "foci":  # scored by FOCI's rule: right when the reply begins with the right letter
            meta["reply_rule"] = FOCI_RULE
        out.append(
            dataclasses.replace(
                s,
                question=question,
                answer=answer,
                options=options,
                truth={**s.truth, "index": index, "text": truth},
                meta=meta,
            )
        )
    result.rewritten[ability.key] = len(out)
    result.classes[ability.key] = len(classes)
    share = same_photo_share(out)
    if share is not None:
        result.same_photo[ability.key] = share
    unplaced = getattr(miner, "unplaced", {}).get(ability.key)
    if unplaced:
        result.unplaced[ability.key] = unplaced
    return out


def _link_images(src: Path, dst: Path) -> None:
    for folder in sorted(p for p in src.iterdir() if p.is_dir()):
        target = dst / folder.name
        target.mkdir(parents=True, exist_ok=True)
        for f in folder.iterdir():
            try:
                os.link(f, target / f.name)
            except OSError:  # another file system, or links not allowed: a copy
                shutil.copy2(f, target / f.name)


def _write(src: Path, out: Path, info: dict[str, Any], files: dict[str, str]) -> None:
    """The whole dataset in a temporary directory beside ``out``, then renamed into place."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.options-{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        (tmp / "samples").mkdir(parents=True)
        (tmp / "images").mkdir()
        _link_images(src / "images", tmp / "images")
        for key, text in files.items():
            (tmp / "samples" / f"{key}.jsonl").write_text(text, encoding="utf-8")
        (tmp / "dataset.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        old = None
        if out.exists():
            old = out.parent / f".{out.name}.replaced-{os.getpid()}.tmp"
            os.replace(out, old)
        os.replace(tmp, out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
