"""``ava results export RUNS --out DIR``: run directories as a results folder (:mod:`ava.published.folder`).

Each run becomes one entry: per ability its value, n, unparsed replies, the scored samples' hash and the 95%
percentile bootstrap interval over its test samples, drawn exactly as ``ava report`` draws it (the same seed and the
same label: the ability and its sample-set hash), so the interval a reader sees in the folder is the one the
exporter's report showed; and the run's identity: head, VFM, weights, split, data identity, config, the results
file's digest and the package versions.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from ava.report import bootstrap as bs
from ava.report.load import RunResult, load_runs, weights_label
from ava.report.strict_json import clean


def run_intervals(run: RunResult, *, n_boot: int = bs.N_BOOT, seed: int = bs.SEED) -> dict[str, Any]:
    """``ability -> [low, high]`` (None where the run has no per-sample scores of it), as the report computes it for
    a table whose VFMs share their samples (the draws depend on the samples, not on the other VFMs)."""
    out: dict[str, Any] = {}
    records = run.records()
    for ab, result in run.abilities.items():
        recs = records.get(ab)
        if result.value is None or not recs:
            out[ab] = None
            continue
        scores = np.asarray([float(r["score"]) for r in sorted(recs, key=lambda r: str(r["id"]))])
        label = f"{ab}:{result.sample_set}" if result.sample_set else f"{ab}:{run.head_id or run.head}:{run.vfm}"
        reps = bs.replicate_means(scores[None], n_boot, bs.rng_for(label, seed))
        lo, hi = bs.interval(reps)[0]
        out[ab] = [float(lo), float(hi)]
    return out


def run_entry(run: RunResult, split: str = "test", *, n_boot: int = bs.N_BOOT, seed: int = bs.SEED) -> dict[str, Any]:
    """The results-folder entry of one run (the format :func:`ava.published.folder.parse_entry` reads)."""
    from ava.published.folder import ENTRY_FORMAT, FORMAT_VERSION

    results_file = run.path / f"results_{split}.json"
    raw = results_file.read_bytes()
    results = json.loads(raw)
    intervals = run_intervals(run, n_boot=n_boot, seed=seed)
    llm = run.run.get("llm")
    return clean(
        {
            "format": ENTRY_FORMAT,
            "format_version": FORMAT_VERSION,
            "vfm": run.vfm,
            "weights": weights_label(run),
            "vfm_random_weights": run.vfm_random_weights,
            "llm_random_weights": run.llm_random_weights,
            "head": str(run.run.get("head")),
            "head_id": run.head_id or run.head,
            "head_label": run.head,
            "llm": llm if isinstance(llm, str) else None,
            "decode": run.decode,
            "synthetic": run.synthetic,
            "split": run.split,
            "split_label": run.split_label,
            "data_identity": run.run.get("data_identity") if isinstance(run.run.get("data_identity"), dict) else None,
            "interval": {
                "method": "percentile bootstrap over test samples",
                "level": bs.LEVEL,
                "n_boot": n_boot,
                "seed": seed,
            },
            "abilities": {
                ab: {
                    "metric": a.metric,
                    "higher_is_better": a.higher_is_better,
                    "value": a.value,
                    "n": a.n,
                    "n_unparsed": a.n_unparsed,
                    "interval": intervals.get(ab),
                    "sample_set": a.sample_set,
                }
                for ab, a in run.abilities.items()
            },
            "run": {
                "path": str(run.path.resolve()),
                "results_file": results_file.name,
                "results_sha256": hashlib.sha256(raw).hexdigest(),
                "run": run.run,
                "config": results.get("config") if isinstance(results.get("config"), dict) else {},
            },
            "versions": results.get("provenance") if isinstance(results.get("provenance"), dict) else {},
        }
    )


def export_results(
    run_dirs: list[str | Path],
    out: str,
    *,
    split: str = "test",
    title: str | None = None,
    force: bool = False,
    n_boot: int = bs.N_BOOT,
    seed: int = bs.SEED,
) -> dict[str, Any]:
    """Write the runs as a results folder at ``out`` (a path or an fsspec URL); returns the folder's index."""
    from ava.published.folder import write_folder

    runs = load_runs(list(run_dirs), split)
    entries = [run_entry(r, split, n_boot=n_boot, seed=seed) for r in runs]
    return write_folder(entries, out, title=title, force=force)
