"""Per-ability LLM heads by default (the paper's protocol): one head per ability in one run directory, each with
its ability's epochs, resumable per ability, one results file; a joint head only with ``--joint``."""

from __future__ import annotations

import json
import os
import random

import pytest
import torch
from PIL import Image

from ava.abilities import REL_DEPTH_ANSWERS, format_options, get_ability
from ava.data.format import DatasetWriter, Sample
from ava.heads.llm import LLMHeadConfig, evaluate, train
from tests.helpers import LLM, LLM_VFM, make_cache

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    """8 rel_depth and 8 localization samples (6 train / 2 test each) and their feature cache."""
    root = tmp_path_factory.mktemp("per_ability")
    os.environ["AVA_HOME"] = str(tmp_path_factory.getbasetemp() / "ava_home")
    torch.set_num_threads(1)
    rng = random.Random(0)
    rel, loc = get_ability("rel_depth"), get_ability("localization")
    with DatasetWriter(root / "data", info={"synthetic": True, "split": {"made_by": "synthetic", "seed": 0}}) as w:
        for i in range(8):
            image = w.add_image(Image.new("RGB", (32, 32), (rng.randrange(256), 40, 200)))
            split = "test" if i in (3, 6) else "train"
            q = rel.question_templates[0].format(a="cup", b="box", options=format_options(REL_DEPTH_ANSWERS))
            answer = REL_DEPTH_ANSWERS[i % 2]
            w.add_sample(
                Sample(
                    id=f"r{i}",
                    ava="rel_depth",
                    image=image,
                    width=32,
                    height=32,
                    question=q,
                    answer=answer,
                    truth={"index": i % 2, "text": answer},
                    split=split,
                )
            )
            box = [0.1, 0.1, 0.4 + 0.05 * (i % 4), 0.6]
            w.add_sample(
                Sample(
                    id=f"l{i}",
                    ava="localization",
                    image=image,
                    width=32,
                    height=32,
                    question=loc.question_templates[0].format(object="square"),
                    answer=str(box),
                    truth={"box": box},
                    split=split,
                )
            )
    cache = make_cache(root / "data", root / "cache")
    return root, root / "data", cache


def _cfg(suite, out, **kw):
    root, data, cache = suite
    base = dict(
        vfm=LLM_VFM,
        data=str(data),
        cache=str(cache),
        out=str(root / out),
        llm=LLM,
        lr=3e-3,
        batch_size=8,
        lora_r=4,
        progress=False,
        max_eval=2,
    )
    return LLMHeadConfig(**{**base, **kw})


def test_default_is_one_head_per_ability_with_its_own_epochs(suite):
    from safetensors.torch import load_file

    run_dir = train(_cfg(suite, "per"))
    run = json.loads((run_dir / "run.json").read_text())
    assert run["per_ability"] is True and run["abilities"] == ["localization", "rel_depth"]
    steps = {k: run["runs"][k]["training"]["total_steps"] for k in run["abilities"]}
    assert steps == {"localization": 20, "rel_depth": 10}  # 6 samples = one step per epoch; 20 vs 10 epochs
    for key in run["abilities"]:
        sub = run_dir / "abilities" / key
        assert (sub / "connector.safetensors").is_file() and (sub / "adapter").is_dir()
        assert json.loads((sub / "run.json").read_text())["abilities"] == [key]
    a = load_file(run_dir / "abilities" / "localization" / "connector.safetensors")
    b = load_file(run_dir / "abilities" / "rel_depth" / "connector.safetensors")
    assert not torch.equal(a["0.weight"], b["0.weight"])  # two heads, not one
    results = json.loads((run_dir / "results_test.json").read_text())
    assert set(results["abilities"]) == {"localization", "rel_depth"} and results["run"]["per_ability"]
    assert all(r["n"] == 2 for r in results["abilities"].values())
    lines = (run_dir / "predictions_test.jsonl").read_text().splitlines()
    assert sorted(json.loads(x)["ava"] for x in lines) == ["localization"] * 2 + ["rel_depth"] * 2

    # resumable per ability: delete one ability's head and re-run the same command; the other is not retrained
    kept = (run_dir / "abilities" / "localization" / "train_log.jsonl").read_text()
    for name in ("connector.safetensors", "run.json", "train_log.jsonl", "results_test.json"):
        (run_dir / "abilities" / "rel_depth" / name).unlink()
    import shutil

    shutil.rmtree(run_dir / "abilities" / "rel_depth" / "checkpoint")
    train(_cfg(suite, "per"))
    assert (run_dir / "abilities" / "localization" / "train_log.jsonl").read_text() == kept
    again = load_file(run_dir / "abilities" / "rel_depth" / "connector.safetensors")
    assert torch.equal(again["0.weight"], b["0.weight"])  # retrained identically from the same seed

    # `ava head eval` on the parent evaluates every head and writes the one merged file
    merged = evaluate(run_dir, "test", decode="score", max_eval=1)
    assert set(merged["abilities"]) == {"localization", "rel_depth"}
    assert (run_dir / "results_test_score.json").is_file()


def test_joint_only_when_asked_and_a_changed_config_is_refused(suite):
    from ava.errors import AvaError

    run_dir = train(_cfg(suite, "joint", joint=True, epochs=1, eval_after=False))
    run = json.loads((run_dir / "run.json").read_text())
    assert not run.get("per_ability") and run["abilities"] == ["localization", "rel_depth"]
    assert not (run_dir / "abilities").exists()
    with pytest.raises(AvaError, match="joint"):
        train(_cfg(suite, "joint", epochs=1, eval_after=False))  # a per-ability run into a joint run's dir
    train(_cfg(suite, "per2", epochs=1, eval_after=False))
    with pytest.raises(AvaError, match="(different config|another run).*lr"):
        train(_cfg(suite, "per2", epochs=1, eval_after=False, lr=1e-3))


def test_cli_joint_flag(suite, tmp_path):
    from typer.testing import CliRunner

    from ava.cli.main import app

    root, data, cache = suite
    out = tmp_path / "cli"
    args = [
        "head",
        "train",
        "--head",
        "llm",
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
        "1",
        "--lora-r",
        "4",
        "--no-eval-after",
        "--joint",
    ]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert json.loads((out / "config.json").read_text())["joint"] is True
