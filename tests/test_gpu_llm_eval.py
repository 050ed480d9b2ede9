"""The LLM head trained and evaluated on a GPU, end to end (CI has none: these run in ``gpu.sh``'s preflight).

The benchmarks time the head's training on a GPU, but ``ava head train`` also evaluates after training (greedy
generation from a KV cache, and ``--decode score``: every option scored against the prompts' shared cache): those
paths had run on CPUs only, where a tensor left on the host beside one on the GPU does not fail."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from tests.helpers import LLM, LLM_VFM, make_cache, make_rel_depth


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="the LLM head on a GPU")
def test_the_llm_head_trains_and_evaluates_on_a_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Packed bf16 training (varlen where the GPU has it), then both decodes, from the CLI as a user runs it: the
    results and predictions files, every reply parsed to an option, the run recording what ran."""
    from ava.cli.main import main

    monkeypatch.setenv("AVA_HOME", str(tmp_path / "home"))
    data = make_rel_depth(tmp_path / "data", n=32)
    cache = make_cache(data, tmp_path / "cache")
    out = tmp_path / "run"
    args = [
        "head",
        "train",
        "--head",
        "llm",
        "--ava",
        "rel_depth",
        "--vfm",
        LLM_VFM,
        "--data",
        str(data),
        "--cache",
        str(cache),
        "--out",
        str(out),
        "--llm",
        LLM,
        "--epochs",
        "2",
        "--batch-size",
        "8",
        "--lora-r",
        "16",
        "--device",
        "cuda",
        "--dtype",
        "bf16",
        "--no-compile",
    ]
    try:
        main(args)
    except SystemExit as e:
        assert e.code in (0, None), e
    run = json.loads((out / "run.json").read_text())
    assert run["training"]["done"] and run["training"]["packed"] and run["training"]["steps_per_epoch"] == 3, run
    assert run["training"]["attention"] in ("varlen", "sdpa-per-sample"), run["training"]
    res = json.loads((out / "results_test.json").read_text())
    preds = [json.loads(x) for x in (out / "predictions_test.jsonl").read_text().splitlines()]
    assert res["abilities"]["rel_depth"]["n"] == len(preds) == 8
    try:
        main(["head", "eval", "--run", str(out), "--decode", "score", "--device", "cuda"])
    except SystemExit as e:
        assert e.code in (0, None), e
    scored = json.loads((out / "results_test_score.json").read_text())["abilities"]["rel_depth"]
    assert scored["n"] == 8 and scored["n_unparsed"] == 0, scored
    assert os.path.getsize(out / "predictions_test_score.jsonl") > 0
