"""Scoring replies against a dataset: per sample, per ability, per subgroup, into the results schema.

Every sample of the scored split counts: a reply that cannot be parsed, or a sample with no prediction at
all, is scored at its metric's documented worst value and counted in ``n_unparsed`` (the release dropped
them, which flatters weak models). Results schema (``schema_version`` 1)::

    {"schema_version": 1, "ava_version": ..., "abilities": {"<key>": {"metric", "value", "higher_is_better",
     "n", "n_unparsed", "n_missing", "unparsed_rule", "subgroups": {"<group>": {"<bin>": {"value", "n"}}}}},
     "split": {"name": "test", "made_by": "official"|"ava"|"synthetic"|None, ...}, "synthetic": bool,
     "run": {...} | None, "config": {...}, "dataset": "<dir>", "n_missing": int, "n_unknown": int,
     "decode": "generate"|"score"|None, "sample_set": {...}, "provenance": {...}}

``sample_set`` (see :mod:`ava.metrics.sample_set`) identifies the scored samples and their truths, and
``decode`` how the replies were produced (an LLM head's ``generate`` or ``score``; None for feature heads), so
``ava report`` compares only runs scored on the same samples. Files without them stay readable.

Values are in the metric's natural unit: accuracy, GIoU and ANLS as fractions (the paper prints x100),
MAE/GT as a fraction, CIEDE2000 in delta E units.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ava
from ava.abilities import ABILITIES, Ability, get_ability
from ava.abilities.parsers import (
    BOX_FORMATS,
    FOCI_RULE,
    parse_box,
    parse_foci_letter,
    parse_reply,
    sample_options,
    truth_value,
)
from ava.abilities.subgroups import SUBGROUPS, UNKNOWN
from ava.data.format import Dataset, Sample, atomic_write_text
from ava.data.truth import QUESTION_CLASS_ABILITIES
from ava.errors import AvaError
from ava.jsonfile import loads
from ava.metrics import METRICS
from ava.metrics.sample_set import sample_set_block
from ava.provenance import provenance

SCHEMA_VERSION = 1
SPLIT_CHOICES = ("test", "train", "all")


@dataclass
class SampleScore:
    value: float
    parsed: Any | None
    ok: bool  # False: unparsed (or missing), scored at the metric's worst value
    truth: Any = None  # the sample's structured truth (``truth_value``), kept for the per-sample record
    rule: str | None = None  # boxes: the rule that read the reply ("normalized", "pixels" or "1000")


@dataclass
class ScoreReport:
    results: dict[str, Any]
    records: list[dict[str, Any]] = field(default_factory=list)
    missing: list[tuple[str, str]] = field(default_factory=list)  # samples with no prediction
    unknown: list[tuple[str, str]] = field(default_factory=list)  # predictions matching no scored sample


def score_sample(ability: Ability, sample: Sample, reply: str | None, *, box_format: str = "auto") -> SampleScore:
    """Parse one reply and score it; an unparsed or missing reply gets the metric's worst value.

    ``box_format`` says how a box reply's numbers are read (``ava.abilities.parsers.BOX_FORMATS``).
    """
    return score_samples(ability, [sample], [reply], box_format=box_format)[0]


def score_samples(
    ability: Ability, samples: Sequence[Sample], replies: Sequence[str | None], *, box_format: str = "auto"
) -> list[SampleScore]:
    """:func:`score_sample` of every (sample, reply) pair; a metric with ``compute_many`` scores the parsed replies
    in one vectorized call."""
    metric = METRICS.get(ability.metric)
    out: list[SampleScore] = []
    for sample, reply in zip(samples, replies, strict=True):
        truth = truth_value(ability, sample)
        try:
            parsed, rule = None, None
            if reply is not None:
                size = (sample.width, sample.height)
                if ability.answer_kind == "box":
                    found = parse_box(reply, size, box_format)
                    parsed, rule = found if found is not None else (None, None)
                elif ability.answer_kind == "option" and sample.meta.get("reply_rule") == FOCI_RULE:
                    parsed = parse_foci_letter(reply, len(sample_options(ability, sample.options)))
                else:
                    parsed = parse_reply(ability, reply, options=sample.options, image_size=size)
            if parsed is None:
                out.append(SampleScore(float(metric.worst(truth, ability, sample)), None, False, truth))
                continue
            value = float(metric.compute(parsed, truth)) if metric.compute_many is None else math.nan
        except AvaError as e:
            raise AvaError(f"sample {sample.ava}/{sample.id}: {e}") from e
        out.append(SampleScore(value, parsed, True, truth, rule))
    if metric.compute_many is not None:
        scored = [r for r in out if r.ok]
        values = metric.compute_many([r.parsed for r in scored], [r.truth for r in scored])
        for r, v in zip(scored, values, strict=True):
            r.value = float(v)
    return out


def _jsonable(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _bin_order(label: str) -> tuple[int, float, str]:
    if label == UNKNOWN:
        return (2, 0.0, label)
    m = re.search(r"\d+(?:\.\d+)?", label)
    if not m:
        return (1, 0.0, label)
    bound = {"<": -0.5, ">": 0.5}.get(label[:1], 0.0)  # "<=5 m" before "5-10 m", ">20" after "10-20"
    return (0, float(m.group()) + bound, label)


def _subgroups(ability: Ability, samples: list[Sample], values: list[float]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for group in ability.subgroups:
        fn = SUBGROUPS.get(group)
        bins: dict[str, list[float]] = {}
        for sample, value in zip(samples, values, strict=True):
            label = fn(sample)  # a bin that cannot be read is counted and shown as "unknown", never dropped
            bins.setdefault(UNKNOWN if label is None else label, []).append(value)
        if bins:
            out[group] = {
                b: {"value": sum(v) / len(v), "n": len(v)}
                for b, v in sorted(bins.items(), key=lambda kv: _bin_order(kv[0]))
            }
    return out


def _score_ability(
    ability: Ability,
    samples: list[Sample],
    predictions: Mapping[tuple[str, str], str | None],
    box_format: str = "auto",
) -> tuple[dict[str, Any], list[dict[str, Any]], list[tuple[str, str]]]:
    metric = METRICS.get(ability.metric)
    records, values = [], []
    rules: dict[str, int] = {}
    replies = [predictions.get(sample.key) for sample in samples]
    missing = [sample.key for sample in samples if sample.key not in predictions]
    for sample, reply, result in zip(
        samples, replies, score_samples(ability, samples, replies, box_format=box_format), strict=True
    ):
        if result.rule:
            rules[result.rule] = rules.get(result.rule, 0) + 1
        values.append(result.value)
        records.append(
            {
                "id": sample.id,
                "ava": sample.ava,
                "split": sample.split,
                "prediction": reply,
                "parsed": _jsonable(result.parsed),
                "truth": _jsonable(result.truth),
                "score": result.value,
                "ok": result.ok,
            }
        )
    summary = {
        "metric": metric.key,
        "value": sum(values) / len(values),
        "higher_is_better": metric.higher_is_better,
        "n": len(samples),
        "n_unparsed": sum(not r["ok"] for r in records),
        "n_missing": len(missing),
        "unparsed_rule": metric.worst_rule,
        "subgroups": _subgroups(ability, samples, values),
    }
    if ability.key in QUESTION_CLASS_ABILITIES:  # questions whose object could not be read: counted, shown
        summary["n_class_unknown"] = sum(s.meta.get("class") in (None, "", UNKNOWN) for s in samples)
    if ability.answer_kind == "box":  # how many parsed boxes each rule read (auto mixes normalized and pixels)
        summary["box_format"] = box_format
        summary["box_rules"] = {r: rules.get(r, 0) for r in BOX_FORMATS[1:]}
    return summary, records, missing


def _ability_keys(dataset: Dataset, abilities: list[str] | None) -> list[str]:
    if not abilities:
        return dataset.abilities()
    keys = [ABILITIES.canonical(a) for a in abilities]
    present = dataset.abilities()
    absent = [k for k in keys if k not in present]
    if absent:
        raise AvaError(f"{dataset.root}: no samples for {', '.join(absent)} (present: {', '.join(present)})")
    return list(dict.fromkeys(keys))


def score_predictions(
    dataset: Dataset,
    predictions: Mapping[tuple[str, str], str | None],
    *,
    abilities: list[str] | None = None,
    split: str | None = "test",
    run: dict | None = None,
    config: dict | None = None,
    box_format: str = "auto",
) -> ScoreReport:
    """Score replies keyed by ``(ava, id)`` on one split (``None`` or ``"all"``: every sample).

    ``box_format`` says how box replies are read (``ava.abilities.parsers.BOX_FORMATS``; ``auto`` by default).
    """
    if box_format not in BOX_FORMATS:
        raise AvaError(f"unknown box format {box_format!r}: choose one of {', '.join(BOX_FORMATS)}")
    keys = _ability_keys(dataset, abilities)
    wanted = None if split in (None, "all") else split
    results: dict[str, Any] = {}
    records: list[dict[str, Any]] = []
    missing: list[tuple[str, str]] = []
    for key in keys:
        samples = dataset.samples(key, split=wanted)
        if samples:
            results[key], recs, miss = _score_ability(get_ability(key), samples, predictions, box_format)
            records.extend(recs)
            missing.extend(miss)
    if not results:
        hint = " (the dataset has no split yet: run `ava data split`)" if wanted and not dataset.split_info else ""
        raise AvaError(f"{dataset.root}: no samples of {', '.join(keys)} in split {split!r}{hint}")
    scored = {(r["ava"], r["id"]) for r in records}
    unknown = [k for k in predictions if k not in scored and (k[0] in keys or k[0] not in ABILITIES)]
    out = {
        "schema_version": SCHEMA_VERSION,
        "ava_version": ava.__version__,
        "abilities": results,
        "split": {"made_by": None, **(dataset.split_info or {}), "name": wanted or "all"},
        "synthetic": dataset.is_synthetic,
        "run": run,
        "config": config or {},
        "dataset": str(dataset.root),
        "n_missing": len(missing),
        "n_unknown": len(unknown),
        "decode": (run or {}).get("decode"),
        "sample_set": {**sample_set_block(records), "dataset": str(Path(dataset.root).resolve())},
        "provenance": provenance(),
    }
    return ScoreReport(out, records, missing, unknown)


def write_results(report: ScoreReport, out_dir: Path, split: str) -> None:
    """Write ``out_dir/results_<split>.json`` and ``out_dir/predictions_<split>.jsonl`` (atomically)."""
    out_dir = Path(out_dir)
    write_json(report.results, out_dir / f"results_{split}.json")
    write_records(report.records, out_dir / f"predictions_{split}.jsonl")


def write_json(results: dict[str, Any], path: Path) -> None:
    atomic_write_text(Path(path), json.dumps(results, indent=2, ensure_ascii=False) + "\n")


def write_records(records: list[dict[str, Any]], path: Path) -> None:
    atomic_write_text(Path(path), "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))


# -- prediction files --------------------------------------------------------------------------------------------


def _id_index(dataset: Dataset) -> dict[str, list[str]]:
    index: dict[str, list[str]] = {}
    for key in dataset.abilities():
        for sample in dataset.samples(key):
            index.setdefault(sample.id, []).append(key)
    return index


def _prediction_key(
    row: dict[str, Any], index: dict[str, list[str]], abilities: list[str] | None, where: str
) -> tuple[str, str]:
    sid = str(row["id"])
    if row.get("ava"):
        try:
            return (ABILITIES.canonical(str(row["ava"])), sid)
        except AvaError as e:
            raise AvaError(f"{where}: {e}") from e
    candidates = index.get(sid, [])
    if len(candidates) > 1 and abilities:
        selected = [c for c in candidates if c in abilities]
        candidates = selected if len(selected) == 1 else candidates
    if len(candidates) > 1:
        raise AvaError(
            f'{where}: id {sid!r} exists in several abilities ({", ".join(candidates)}); add "ava" to the line'
        )
    return (candidates[0] if candidates else "", sid)


def _prediction_text(value: Any, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    raise AvaError(f'{where}: "prediction" must be a string, got {type(value).__name__}')


def read_predictions(
    path: str | Path, dataset: Dataset, *, abilities: list[str] | None = None
) -> dict[tuple[str, str], str | None]:
    """Predictions JSONL (``{"id", "prediction"}``, optional ``"ava"``) keyed by ``(ava, id)``.

    ``"ava"`` is needed only for an id that exists in several abilities. An id found in no ability is kept
    under ``("", id)`` so scoring reports it as unknown. A malformed line raises, naming file and line.
    """
    path = Path(path)
    if not path.is_file():
        raise AvaError(f"predictions file {path} does not exist")
    keys = [ABILITIES.canonical(a) for a in abilities] if abilities else None
    index = _id_index(dataset)
    out: dict[tuple[str, str], str | None] = {}
    lines: dict[tuple[str, str], int] = {}
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                row = loads(line, where)
            except json.JSONDecodeError as e:
                raise AvaError(f"{where}: not valid JSON ({e})") from e
            if not isinstance(row, dict) or "id" not in row or "prediction" not in row:
                raise AvaError(f'{where}: expected an object with "id" and "prediction"')
            key = _prediction_key(row, index, keys, where)
            if key in lines:
                raise AvaError(f"{where}: duplicate prediction for {key[0]}/{key[1]} (first on line {lines[key]})")
            lines[key] = lineno
            out[key] = _prediction_text(row["prediction"], where)
    return out


def score_file(
    data: str | Path,
    pred: str | Path,
    *,
    abilities: list[str] | None = None,
    split: str = "test",
    box_format: str = "auto",
) -> ScoreReport:
    """``ava score``: read a dataset and a predictions JSONL, and score them."""
    if split not in SPLIT_CHOICES:
        raise AvaError(f"unknown split {split!r}: choose one of {', '.join(SPLIT_CHOICES)}")
    if box_format not in BOX_FORMATS:
        raise AvaError(f"--box-format {box_format!r}: choose one of {', '.join(BOX_FORMATS)}")
    dataset = Dataset(data)
    predictions = read_predictions(pred, dataset, abilities=abilities)
    config = {"data": str(data), "pred": str(pred), "ava": abilities or None, "split": split, "box_format": box_format}
    return score_predictions(
        dataset, predictions, abilities=abilities, split=split, config=config, box_format=box_format
    )
