"""Run directories with chosen scores, for comparing runs with published results (the paper's table, results
folders): run.json, results_test.json with its sample-set hashes, and predictions_test.jsonl whose per-sample
scores average exactly to each chosen value, so ranks, intervals and differences can be checked by hand."""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import numpy as np

N = 400  # samples per ability: accuracies are multiples of 1/400
AVA_SPLIT = {"name": "test", "made_by": "ava", "test_frac": 0.2, "seed": 0}
SYNTHETIC_SPLIT = {"name": "test", "made_by": "synthetic", "test_frac": 0.2, "seed": 0}


def scores(metric: str, value: float, n: int = N, seed: int = 0) -> list[float]:
    """``n`` per-sample scores whose mean is ``value`` (0/1 for accuracy, spread around it otherwise)."""
    rng = np.random.default_rng(seed)
    if metric == "accuracy":
        k = round(value * n)
        assert abs(k / n - value) < 1e-12, f"accuracy {value} is not a multiple of 1/{n}"
        out = [1.0] * k + [0.0] * (n - k)
    else:
        out = list(value * (1 + 0.5 * np.linspace(-1, 1, n)))
    return [float(x) for x in rng.permutation(out)]


def write_run(
    root: Path,
    vfm: str,
    values: dict[str, float],
    *,
    head: str = "llm",
    llm: str | None = "qwen2-0.5b",
    decode: str | None = "generate",
    split: dict[str, Any] | None = None,
    synthetic: bool = False,
    identity: str = "data-a",
    config: dict[str, Any] | None = None,
    n: int = N,
    name: str | None = None,
    random_weights: bool = False,
) -> Path:
    """A finished run of ``vfm`` under ``head`` with the given scores (ava's units). ``identity`` names the data it
    was trained and scored on: runs with the same identity share data digests and sample sets."""
    from ava.abilities import ABILITIES
    from ava.metrics.sample_set import sample_set_block

    run = root / (name or f"{head}-{vfm}")
    run.mkdir(parents=True)
    split = split or (SYNTHETIC_SPLIT if synthetic else AVA_SPLIT)
    block = {
        "head": head,
        "vfm": vfm,
        "abilities": list(values),
        "random_weights": random_weights,
        "vfm_random_weights": random_weights,
        "llm": llm if head == "llm" else None,
        "llm_random_weights": False,
        "dtype": "bfloat16",
        "init": None,
        "data_identity": {
            "dataset": f"/data/{identity}",
            "algorithm": "per ability: sha256 over the sorted JSON lines of its sample records",
            "per_ability": {ab: f"{identity}-{ab}" for ab in values},
        },
    }
    (run / "run.json").write_text(json.dumps({**block, "split": split}))
    abilities, records = {}, []
    for ab, value in values.items():
        a = ABILITIES.get(ab)
        abilities[ab] = {
            "metric": a.metric,
            "value": value,
            "higher_is_better": a.higher_is_better,
            "n": n,
            "n_unparsed": 0,
            "subgroups": {},
        }
        for i, s in enumerate(scores(a.metric, value, n, seed=zlib.crc32(f"{vfm}{ab}".encode()))):
            records.append({"id": f"{identity}-{i:04d}", "ava": ab, "split": "test", "truth": {"k": i}, "score": s})
    (run / "predictions_test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    results = {
        "schema_version": 1,
        "ava_version": "0.1.0",
        "abilities": abilities,
        "split": split,
        "synthetic": synthetic,
        "run": block,
        "decode": decode if head == "llm" else None,
        "config": {"data": f"/data/{identity}", **(config or {})},
        "provenance": {"ava_version": "0.1.0"},
        "sample_set": sample_set_block(records),
    }
    (run / "results_test.json").write_text(json.dumps(results))
    return run


def cli(args: list[str], capsys: Any) -> tuple[int, str, str]:
    """``ava ARGS`` through the command's own main (its one-line errors): exit code, stdout, stderr (whitespace
    collapsed)."""
    import pytest

    from ava.cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(args)
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), " ".join(out.split()), " ".join(err.split())
