"""The task-augmentation metric (Meta-COCO / Meta-KITTI; docs/benchmark.md).

Over the task-augmentation questions (abilities ``ta_*``) of a run: per source image, the fraction of its questions
answered right; ``Accuracy%(t)`` = the percentage of images whose fraction is at least ``t``, as a curve over t
(t = 0.75 is the paper's headline). Where raters gave an attribute, each question carries an ambiguity (the share
of raters who disagree with the majority) and accuracy is shown per ambiguity bin.

A question is right when its per-sample score is the metric's best (accuracy 1; an exact count, MAE/GT 0). The
source image and ambiguity of each question are read from the scored dataset (``meta.origin``, ``meta.ambiguity``
written by ``ava data build``); a run whose dataset cannot be found is left out and named.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from ava.abilities.tasks import is_task

THRESHOLDS = tuple(round(0.05 * i, 2) for i in range(21))
HEADLINE = 0.75
AMBIGUITY_BINS = ((0.0, "0 (raters agree)"), (0.2, "(0, 0.2]"), (0.34, "(0.2, 0.34]"), (1.0, "> 0.34"))


def _ambiguity_bin(value: float) -> str:
    return next(label for upper, label in AMBIGUITY_BINS if value <= upper + 1e-9)


def _right(ava: str, record: dict[str, Any]) -> bool:
    """The per-sample score is the metric's best: 1 for accuracy, 0 for an error (an exact count)."""
    from ava.abilities import get_ability

    best = 1.0 if get_ability(ava).higher_is_better else 0.0
    return record.get("score") == best


def curve(per_image: list[float], thresholds: tuple[float, ...] = THRESHOLDS) -> list[tuple[float, float]]:
    """``[(t, Accuracy%(t)), ...]``: the percentage of images whose fraction right is at least t."""
    n = len(per_image)
    return [(t, 100.0 * sum(f >= t - 1e-12 for f in per_image) / n if n else 0.0) for t in thresholds]


def image_scores(
    records: dict[str, list[dict[str, Any]]], meta: dict[tuple[str, str], dict[str, Any]]
) -> tuple[dict[str, float], dict[str, list[bool]]]:
    """Per source image, the fraction of its task questions right; and right/wrong per ambiguity bin."""
    per_image: dict[str, list[bool]] = defaultdict(list)
    by_ambiguity: dict[str, list[bool]] = defaultdict(list)
    for ava, rows in records.items():
        if not is_task(ava):
            continue
        for r in rows:
            m = meta.get((ava, str(r["id"])), {})
            origin = m.get("origin") or {}
            image = str(origin.get("file") or origin.get("image_id") or f"{ava}:{r['id']}")
            ok = _right(ava, r)
            per_image[image].append(ok)
            if "ambiguity" in m:
                by_ambiguity[_ambiguity_bin(float(m["ambiguity"]))].append(ok)
    return {k: sum(v) / len(v) for k, v in per_image.items()}, by_ambiguity


def _dataset_meta(candidates: list[str]) -> dict[tuple[str, str], dict[str, Any]] | None:
    from ava.data.format import Dataset

    for c in candidates:
        if (Path(c) / "dataset.json").is_file():
            ds = Dataset(c)
            return {(s.ava, s.id): s.meta for s in ds.samples([a for a in ds.abilities() if is_task(a)])}
    return None


def task_augmentation(runs: list[Any]) -> dict[str, Any] | None:
    """The section for report.json (None when no run scored a task-augmentation question)."""
    rows, missing = [], []
    for r in runs:
        records = {a: v for a, v in r.records().items() if is_task(a)}
        if not records:
            continue
        meta = _dataset_meta(r.datasets)
        if meta is None:
            missing.append(str(r.path))
            continue
        fractions, ambiguity = image_scores(records, meta)
        points = curve(list(fractions.values()))
        rows.append(
            {
                "run": str(r.path),
                "vfm": r.vfm,
                "head": r.head,
                "n_images": len(fractions),
                "n_questions": sum(len(v) for v in records.values()),
                "curve": [[t, round(p, 2)] for t, p in points],
                "accuracy_at_0.75": round(dict(points)[HEADLINE], 2),
                "ambiguity": [
                    {
                        "bin": label,
                        "n": len(ambiguity[label]),
                        "accuracy": round(100.0 * sum(ambiguity[label]) / len(ambiguity[label]), 2),
                    }
                    for _, label in AMBIGUITY_BINS
                    if ambiguity.get(label)
                ],
            }
        )
    if not rows and not missing:
        return None
    return {"thresholds": list(THRESHOLDS), "headline": HEADLINE, "runs": rows, "runs_without_dataset": missing}


def markdown_lines(section: dict[str, Any]) -> list[str]:
    """The report.md section: Accuracy%(t) at five thresholds per run (the full curve is in report.json and the
    plot), then accuracy per ambiguity bin."""
    shown = (0.25, 0.5, 0.75, 0.9, 1.0)
    md = [
        "## Task augmentation",
        "",
        "Per source image, the fraction of its task-augmentation questions (`ta_*`) answered right; "
        "Accuracy%(t) is the percentage of images at or above t (the full curve over t is in report.json).",
        "",
        "| VFM | head | images | questions | " + " | ".join(f"Acc%({t:g})" for t in shown) + " |",
        "|---|---|---:|---:|" + "---:|" * len(shown),
    ]
    for row in section["runs"]:
        at = {t: p for t, p in row["curve"]}
        md.append(
            f"| {row['vfm']} | {row['head']} | {row['n_images']} | {row['n_questions']} | "
            + " | ".join(f"{at[t]:.1f}" for t in shown)
            + " |"
        )
    amb = [row for row in section["runs"] if row["ambiguity"]]
    if amb:
        md += [
            "",
            "Accuracy (%) by the raters' ambiguity (share disagreeing with the majority):",
            "",
            "| VFM | head | ambiguity | n | accuracy |",
            "|---|---|---|---:|---:|",
        ]
        for row in amb:
            md += [
                f"| {row['vfm']} | {row['head']} | {a['bin']} | {a['n']} | {a['accuracy']:.1f} |"
                for a in row["ambiguity"]
            ]
    if section.get("plot"):
        md += ["", f"![Accuracy%(t) per run]({section['plot']})"]
    if section["runs_without_dataset"]:
        md += ["", "Left out (their scored dataset was not found): " + ", ".join(section["runs_without_dataset"])]
    return md + [""]


def write_plot(section: dict[str, Any], out: Path) -> str | None:
    """``plots/task_augmentation.png``: Accuracy%(t) curves, one per run."""
    if not section["runs"]:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for row in section["runs"]:
        ax.plot([p[0] for p in row["curve"]], [p[1] for p in row["curve"]], label=f"{row['vfm']} ({row['head']})")
    ax.set_xlabel("t (fraction of an image's questions right)")
    ax.set_ylabel("Accuracy%(t)")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=7)
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "task_augmentation.png", dpi=100)
    plt.close(fig)
    return "plots/task_augmentation.png"
