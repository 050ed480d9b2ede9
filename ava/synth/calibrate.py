"""Does each synthetic ability carry signal? Score the floor, the control and a trained extractor with cheap heads.

For every ability of a synthetic set, ``calibrate`` scores each VFM (by default the ``pixels`` floor and the
``random-vit`` control, plus any trained extractor named) with the cheap heads (kNN and the linear probe, the
heads the demo runs), through the real cache and head code, and compares the scores with the ability's chance
level (the majority answer of train, or the train median, scored by the same metric). An ability is

- ``saturated`` when every VFM is within 5% (of the chance-to-perfect range) of a perfect score: it ranks nothing;
- ``chance`` when no VFM beats chance (a paired bootstrap over test samples, 95%): it ranks nothing either;
- ``separates`` when the best and the worst VFM differ (the same bootstrap): the ability can rank extractors;
- ``ties`` otherwise (above chance, below perfect, but the VFMs cannot be told apart at this size).

A VFM's score on an ability is its best head there (picked on test: an optimistic summary, fine for deciding
whether an ability carries signal, not for reporting a model's skill). The table is what chose the difficulty
defaults of the synthetic generators (``benchmarks/bench_synth_signal.py`` prints it).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ava.errors import AvaError
from ava.jsonfile import loads, read_json

PERFECT = {"accuracy": 1.0, "giou": 1.0, "anls": 1.0, "mae_gt": 0.0, "ciede2000": 0.0}
SATURATED_FRAC = 0.05  # within this fraction of |perfect - chance| of a perfect score counts as saturated
CONFIDENCE = 0.95


@dataclass
class CalibrateConfig:
    """Settings of a calibration run (defaults: the demo's size)."""

    out: str = "ava-out/calibrate"
    per_ava: int = 200
    size: int = 160
    ava: list[str] | None = None  # None: all 14
    seed: int = 0
    difficulty: str = "easy"
    vfms: list[str] = field(default_factory=lambda: ["pixels", "random-vit"])
    heads: list[str] = field(default_factory=lambda: ["knn", "probe-linear"])
    device: str = "cpu"
    workers: int | None = None
    progress: bool = True


@dataclass
class Row:
    """One ability's line of the calibration table."""

    ava: str
    metric: str
    higher_is_better: bool
    chance: float
    scores: dict[str, float]  # vfm -> best head's test value
    heads: dict[str, str]  # vfm -> the head that gave it
    verdict: str  # saturated | chance | separates | ties
    leader: str
    n_test: int
    above_chance: dict[str, bool] = field(default_factory=dict)  # vfm -> beats chance (paired bootstrap, 95%)
    flat_heads: list[str] = field(default_factory=list)  # heads whose mean score beats chance for no VFM

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- chance ---------------------------------------------------------------------------------------------------
def chance_replies(ability: Any, train: Sequence[Any], test: Sequence[Any]) -> list[str]:
    """What a model that ignores the image answers: the majority answer of train (choice abilities, depth bins,
    texts) or the train median (counts, colours, boxes), written as replies for every test sample."""
    from ava.abilities.parsers import format_reply
    from ava.heads.targets import option_text, question_options

    kind = ability.answer_kind
    if ability.is_choice and kind == "option":
        texts = [option_text(ability, s) for s in train]
        top = max(sorted(set(texts)), key=texts.count)
        replies = []
        for s in test:
            options = question_options(ability, s)
            replies.append(format_reply(ability, options.index(top), options=options) if top in options else top)
        return replies
    if kind in ("integer", "rgb", "box"):
        key = {"integer": "value", "rgb": "rgb", "box": "box"}[kind]
        median = np.median([s.truth[key] for s in train], axis=0)
        value = int(median) if kind == "integer" else tuple(float(v) for v in median)
        return [format_reply(ability, value)] * len(test)
    answers = [str(s.answer) for s in train]  # depth bins and texts: the most frequent answer
    top = max(sorted(set(answers)), key=answers.count)
    return [top] * len(test)


def sample_scores(ability: Any, samples: Sequence[Any], replies: Sequence[str]) -> np.ndarray:
    from ava.metrics.scoring import score_sample

    return np.array([score_sample(ability, s, r).value for s, r in zip(samples, replies, strict=True)], float)


# -- verdicts -------------------------------------------------------------------------------------------------
def paired_interval(a: np.ndarray, b: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """Bootstrap confidence interval (percentile, 95%) of mean(a - b) over the same test samples."""
    from scipy.stats import bootstrap

    diff = np.asarray(a, float) - np.asarray(b, float)
    if len(diff) < 2 or np.allclose(diff, diff[0]):
        return float(diff.mean()), float(diff.mean())
    res = bootstrap(
        (diff,),
        np.mean,
        confidence_level=CONFIDENCE,
        n_resamples=2000,
        method="percentile",
        random_state=np.random.default_rng(seed),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def verdict(
    metric: str, higher: bool, chance: np.ndarray, per_vfm: dict[str, np.ndarray], seed: int = 0
) -> tuple[str, str]:
    """(verdict, leading VFM) from per-sample scores of each VFM and of the chance replies."""
    sign = 1.0 if higher else -1.0
    means = {v: float(x.mean()) for v, x in per_vfm.items()}
    leader = max(means, key=lambda v: sign * means[v])
    worst = min(means, key=lambda v: sign * means[v])
    perfect, base = PERFECT[metric], float(chance.mean())
    span = abs(perfect - base) or 1.0
    if all(abs(perfect - m) <= SATURATED_FRAC * span for m in means.values()):
        return "saturated", leader
    low, _ = paired_interval(sign * per_vfm[leader], sign * chance, seed)
    if low <= 0:
        return "chance", leader
    low, _ = paired_interval(sign * per_vfm[leader], sign * per_vfm[worst], seed)
    return ("separates" if low > 0 else "ties"), leader


# -- the run --------------------------------------------------------------------------------------------------
def _dataset(config: CalibrateConfig, data: Path) -> None:
    """Generate the synthetic set, or reuse it when ``data`` holds one made with the same settings."""
    from ava.synth import SynthConfig, generate
    from ava.synth.generate import resolve_abilities, synth_info

    synth = SynthConfig(
        out=str(data),
        per_ava=config.per_ava,
        ava=config.ava,
        seed=config.seed,
        size=config.size,
        difficulty=config.difficulty,
        workers=config.workers,
        overwrite=True,
    )
    info = data / "dataset.json"
    if info.is_file():
        saved = read_json(info).get("synth_config")
        if saved == synth_info(synth, resolve_abilities(config.ava))["synth_config"]:
            return
        if saved is None:
            raise AvaError(f"{data} is not a synthetic dataset made by ava; choose another --out")
    generate(synth, progress=config.progress)


def _head_config(head: str, config: CalibrateConfig, vfm: str, data: Path, cache: Path, out: Path) -> Any:
    import dataclasses

    from ava.heads import HEADS

    spec = HEADS.get(head)
    values = {
        "vfm": vfm,
        "data": str(data),
        "cache": str(cache),
        "out": str(out),
        "seed": config.seed,
        "device": config.device,
        "progress": config.progress,
        "ava": config.ava,
    }
    names = {f.name for f in dataclasses.fields(spec.config_cls)}
    return spec.config_cls(**{k: v for k, v in values.items() if k in names})


def run_heads(config: CalibrateConfig, data: Path, cache: Path, runs: Path) -> dict[tuple[str, str], Path]:
    """Extract every VFM and train every head on it; returns {(head, vfm): run dir}."""
    from ava.cache import ExtractConfig, extract
    from ava.heads import HEADS
    from ava.heads.fingerprint import run_dir_name

    done = {}
    for vfm in config.vfms:
        extract(
            ExtractConfig(vfm=vfm, data=str(data), cache=str(cache), device=config.device, progress=config.progress)
        )
        for head in config.heads:
            out = runs / run_dir_name(head, vfm)  # the names `ava fingerprint` and `ava demo` give
            HEADS.get(head).train(_head_config(head, config, vfm, data, cache, out))
            done[(head, vfm)] = out
    return done


def _results(run: Path) -> dict[str, Any]:
    """A run's results_test.json, or a one-line error naming the run that has none (unfinished or not a run)."""
    path = Path(run) / "results_test.json"
    try:
        return read_json(path, encoding="utf-8")
    except FileNotFoundError:
        raise AvaError(f"{run}: no results_test.json (the head run did not finish, or this is not a run)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise AvaError(f"{path}: not a results file ({e})") from None


def _per_sample(run: Path, ava: str) -> dict[str, float]:
    scores = {}
    with (run / "predictions_test.jsonl").open(encoding="utf-8") as f:
        for line in f:
            rec = loads(line, run / "predictions_test.jsonl")
            if rec["ava"] == ava:
                scores[rec["id"]] = float(rec["score"])
    return scores


def calibration_table(data: str | Path, runs: dict[tuple[str, str], Path], seed: int = 0) -> list[Row]:
    """One row per ability of ``data`` that every run scored: chance, each VFM's best head, the verdict."""
    from ava.abilities import get_ability
    from ava.data.format import Dataset

    dataset = Dataset(data)
    results = {key: _results(run)["abilities"] for key, run in runs.items()}
    vfms = list(dict.fromkeys(v for _, v in runs))
    rows = []
    for ava in dataset.abilities():
        if not all(ava in r for r in results.values()):
            continue
        ability = get_ability(ava)
        train, test = dataset.samples(ava, split="train"), dataset.samples(ava, split="test")
        chance = sample_scores(ability, test, chance_replies(ability, train, test))
        sign = 1.0 if ability.higher_is_better else -1.0
        best: dict[str, tuple[float, str]] = {}
        for (head, vfm), r in results.items():
            value = float(r[ava]["value"])
            if vfm not in best or sign * value > sign * best[vfm][0]:
                best[vfm] = (value, head)
        flat = [
            h
            for h in dict.fromkeys(h for h, _ in results)
            if all(
                sign * float(r[ava]["value"]) <= sign * float(chance.mean()) + 1e-9
                for (hh, _), r in results.items()
                if hh == h
            )
        ]
        ids = [s.id for s in test]
        per_vfm = {}
        for vfm in vfms:
            by_id = _per_sample(runs[(best[vfm][1], vfm)], ava)
            per_vfm[vfm] = np.array([by_id.get(i, math.nan) for i in ids], float)
        what, leader = verdict(ability.metric, ability.higher_is_better, chance, per_vfm, seed)
        above = {v: paired_interval(sign * x, sign * chance, seed)[0] > 0 for v, x in per_vfm.items()}
        rows.append(
            Row(
                ava=ava,
                metric=ability.metric,
                higher_is_better=ability.higher_is_better,
                chance=float(chance.mean()),
                scores={v: best[v][0] for v in vfms},
                heads={v: best[v][1] for v in vfms},
                verdict=what,
                leader=leader,
                n_test=len(test),
                above_chance=above,
                flat_heads=flat,
            )
        )
    return rows


def calibrate(config: CalibrateConfig) -> list[Row]:
    """Generate (or reuse) the set under ``out/data``, extract, train the heads, and return the table (also
    written to ``out/calibration.json``)."""
    from ava.data.format import atomic_write_text

    out = Path(config.out)
    data, cache, runs = out / "data", out / "cache", out / "runs"
    _dataset(config, data)
    table = calibration_table(data, run_heads(config, data, cache, runs), seed=config.seed)
    doc = {"config": asdict(config), "rows": [r.to_dict() for r in table]}
    atomic_write_text(out / "calibration.json", json.dumps(doc, indent=2) + "\n")
    return table


# -- rendering ------------------------------------------------------------------------------------------------
def _fmt(x: float) -> str:
    return "–" if math.isnan(x) else f"{x:.3g}"


def table_lines(rows: Sequence[Row]) -> list[str]:
    """The table as GitHub markdown: ability, metric, chance, each VFM's score (head), verdict and leader."""
    if not rows:
        return []
    vfms = list(rows[0].scores)
    short = {"knn": "k", "probe-linear": "p", "probe-attn": "a", "llm": "l"}
    lines = [
        "| ability | metric | chance | " + " | ".join(vfms) + " | verdict | leads |",
        "|---|---|---|" + "---|" * len(vfms) + "---|---|",
    ]
    for r in rows:
        arrow = "↑" if r.higher_is_better else "↓"
        cells = [f"{_fmt(r.scores[v])} ({short.get(r.heads[v], r.heads[v])})" for v in vfms]
        lead = r.leader if r.verdict in ("separates", "ties") else "–"
        lines.append(
            f"| {r.ava} | {r.metric} {arrow} | {_fmt(r.chance)} | " + " | ".join(cells) + f" | {r.verdict} | {lead} |"
        )
    return lines


# -- what a fingerprint shows, in words ---------------------------------------------------------------------
def _join(names: Sequence[str]) -> str:
    names = [n.replace("_", "-") for n in names]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def vfm_kind(name: str) -> str:
    """'raw pixels, the floor' / 'random weights, the control' / 'trained weights' for a VFM name."""
    from ava.vfm import resolve_vfm

    try:
        spec = resolve_vfm(name)
    except Exception:  # noqa: BLE001 - an unknown name still gets a sentence, without the kind
        return ""
    if spec.model_class == "pixels":
        return "raw pixels, the floor"
    return "random weights, the control" if spec.random_weights else "trained weights"


def fingerprint_sentences(rows: Sequence[Row]) -> list[str]:
    """One sentence per VFM of the table: where it leads the others (beyond the test-set noise), where it does not
    beat chance, and the abilities that rank nobody (every VFM perfect, or every VFM at chance)."""
    if not rows:
        return []
    sentences = []
    for vfm in rows[0].scores:
        kind = vfm_kind(vfm)
        leads = [r.ava for r in rows if r.verdict == "separates" and r.leader == vfm]
        chance = [r.ava for r in rows if not r.above_chance.get(vfm, True)]
        parts = [f"leads on {_join(leads)}" if leads else "leads on no ability"]
        parts.append(f"does not beat chance on {_join(chance)}" if chance else "beats chance on every ability")
        sentences.append(f"`{vfm}`{f' ({kind})' if kind else ''}: " + "; ".join(parts) + ".")
    dead = [r for r in rows if r.verdict in ("saturated", "chance")]
    if dead:
        why = {"saturated": "solved by every VFM", "chance": "no VFM beats chance"}
        what = "; ".join(f"{r.ava.replace('_', '-')} ({why[r.verdict]})" for r in dead)
        sentences.append(f"Abilities that rank nothing at this size: {what}.")
    flat = [r for r in rows if r.flat_heads and r not in dead]
    if flat:  # a bare 0 (OCR's text reader, say) would otherwise read as every extractor lacking the ability
        what = "; ".join(f"{_join(r.flat_heads)} on {r.ava.replace('_', '-')}" for r in flat)
        sentences.append(
            f"Heads that learn nothing at this size (no extractor above chance with them, so their "
            f"scores there rank nothing; the other heads' do): {what}."
        )
    return sentences


def runs_by_key(run_dirs: Sequence[str | Path], skip_heads: Sequence[str] = ("llm",)) -> dict[tuple[str, str], Path]:
    """{(head, vfm): run dir} read from each run's results_test.json (heads in ``skip_heads`` left out)."""
    found = {}
    for run in map(Path, run_dirs):
        block = _results(run).get("run", {})
        if block.get("head") not in skip_heads:
            found[(str(block.get("head")), str(block.get("vfm")))] = run
    return found


def opening_sentences(data: str | Path, run_dirs: Sequence[str | Path]) -> list[str]:
    """What each extractor's fingerprint shows, for the top of a report over feature-head runs on ``data`` (the
    LLM head is left out: it covers few abilities in the demo). Empty when fewer than two VFMs were run."""
    runs = runs_by_key(run_dirs)
    if len({v for _, v in runs}) < 2:
        return []
    return fingerprint_sentences(calibration_table(data, runs))
