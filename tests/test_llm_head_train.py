"""LLM head end to end on CPU: training from the cache beats the majority baseline, cached vs online parity,
exact resume, repeatable evaluation, option scoring, warm starts and the CLI."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

from ava.errors import AvaError
from ava.heads.llm import LLMHeadConfig, evaluate, train
from ava.heads.llm.checkpoint import read_checkpoint
from tests.helpers import LLM, LLM_VFM, make_cache, make_rel_depth, plant_pickle

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    """A 64-sample 2-option set (48 train / 16 test) and its fp16 feature cache of a tiny random SigLIP."""
    root = tmp_path_factory.mktemp("llm_suite")
    os.environ["AVA_HOME"] = str(tmp_path_factory.getbasetemp() / "ava_home")
    torch.set_num_threads(1)
    data = make_rel_depth(root / "data", n=64)
    cache = make_cache(data, root / "cache")
    return root, data, cache


def _cfg(suite, out, **kw):
    root, data, cache = suite
    base = dict(
        ava=["rel_depth"],
        vfm=LLM_VFM,
        data=str(data),
        cache=str(cache),
        out=str(root / out),
        llm=LLM,
        epochs=8,
        lr=3e-3,
        batch_size=8,
        lora_r=16,
        progress=False,
    )
    return LLMHeadConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def trained(suite):
    """The reference run: a tiny random LLM head trained from the cache (also evaluated)."""
    return train(_cfg(suite, "run"))


def test_beats_majority_baseline(trained):
    results = json.loads((trained / "results_test.json").read_text())
    r = results["abilities"]["rel_depth"]
    # The test split is 8 red / 8 blue: always answering one colour (the majority baseline) scores 0.5.
    assert r["n"] == 16 and r["n_unparsed"] == 0
    assert r["value"] >= 0.8, r
    run = results["run"]
    assert run["random_weights"] is True and run["llm"] == LLM and run["llm_random_weights"] is True
    assert run["head"] == "llm" and run["cache_key"] and run["features"] == "cache"
    training = json.loads((trained / "run.json").read_text())["training"]
    assert training["packed"] is True  # (the default: samples packed into one row, no padding)
    # what ran is recorded, in the results too: on a CPU, packed samples attend one by one; no compilation
    assert training["attention"] == run["training"]["attention"] == "sdpa-per-sample"
    assert training["compiled"] is False
    for name in (
        "connector.safetensors",
        "adapter/adapter_model.safetensors",
        "config.json",
        "run.json",
        "train_log.jsonl",
        "checkpoint/latest",
        "predictions_test.jsonl",
    ):
        assert (trained / name).is_file(), name
    log = [json.loads(line) for line in (trained / "train_log.jsonl").read_text().splitlines()]
    assert len(log) == 48 and log[-1]["loss"] < log[0]["loss"] / 5  # 6 steps x 8 epochs
    assert {"samples_per_s", "tokens_per_s", "lr"} <= set(log[0])
    pred = json.loads((trained / "predictions_test.jsonl").read_text().splitlines()[0])
    assert {"id", "ava", "prompt", "prediction", "parsed", "truth", "score"} <= set(pred)
    assert "<image>" in pred["prompt"]


def test_two_evaluations_identical_and_score_decode(trained):
    first = (trained / "predictions_test.jsonl").read_text()
    evaluate(trained, "test", progress=False)
    assert (trained / "predictions_test.jsonl").read_text() == first
    res = evaluate(trained, "test", decode="score", progress=False)
    assert res["decode"] == "score" and (trained / "results_test_score.json").is_file()
    r = res["abilities"]["rel_depth"]
    assert r["n_unparsed"] == 0 and r["value"] >= 0.8
    capped = evaluate(trained, "test", max_eval=4, progress=False)
    assert capped["abilities"]["rel_depth"]["n"] == 4 and capped["run"]["max_eval"] == 4


def test_resume_continues_identically(suite, trained):
    """Stop after 7 optimizer steps (a checkpoint is left, as after an interruption), re-run: same weights."""
    from safetensors.torch import load_file

    cfg = _cfg(suite, "resumed", eval_after=False, stop_after_steps=7)
    train(cfg)
    assert json.loads((trained.parent / "resumed" / "run.json").read_text())["training"]["done"] is False
    state = read_checkpoint(trained.parent / "resumed")
    assert state["step"] == 7
    cfg.stop_after_steps = None
    out = train(cfg)
    for name in ("connector.safetensors", "adapter/adapter_model.safetensors"):
        a, b = load_file(trained / name), load_file(out / name)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
    ref = [json.loads(x)["loss"] for x in (trained / "train_log.jsonl").read_text().splitlines()]
    got = [json.loads(x)["loss"] for x in (out / "train_log.jsonl").read_text().splitlines()]
    assert got == ref


def test_interrupt_mid_step_resumes_identically(suite, monkeypatch):
    """Ctrl-C after the first of two micro-batches (its dropout masks drawn), then re-run: the weights of an
    uninterrupted run, because the checkpoint holds the RNG state of the step boundary, not of the interrupt."""
    from safetensors.torch import load_file

    import ava.heads.llm.runtime as runtime

    kw = dict(eval_after=False, grad_accum=2, epochs=2, max_train=16)  # 2 steps of 2 micro-batches per epoch
    ref = train(_cfg(suite, "accum_ref", **kw))
    prepare, calls = runtime.prepare_training, []

    def prepare_then_interrupt(*args, **kwargs):
        prep = prepare(*args, **kwargs)
        featurize = prep.loop.featurize

        def featurize_or_interrupt(batch):
            calls.append(1)
            if len(calls) == 4:  # step 2's second micro-batch
                raise KeyboardInterrupt
            return featurize(batch)

        prep.loop.featurize = featurize_or_interrupt
        return prep

    monkeypatch.setattr(runtime, "prepare_training", prepare_then_interrupt)
    cfg = _cfg(suite, "accum_cut", **kw)
    with pytest.raises(KeyboardInterrupt):
        train(cfg)
    monkeypatch.undo()
    state = read_checkpoint(ref.parent / "accum_cut")
    assert state["step"] == 1 and len(state["rng"]) == 1  # one RNG state per rank
    out = train(cfg)
    for name in ("connector.safetensors", "adapter/adapter_model.safetensors"):
        a, b = load_file(ref / name), load_file(out / name)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name


def test_uncached_sample_names_the_extract_command(suite):
    from dataclasses import replace

    from ava.data.format import Dataset
    from ava.errors import AvaError
    from ava.heads.llm.runtime import feature_source

    root, data, cache = suite
    ghost = replace(Dataset(data).samples("rel_depth")[0], id="ghost", image="images/" + "0" * 64 + ".png")
    with pytest.raises(AvaError, match=r"rel_depth/ghost.*extract --vfm tiny-siglip .*--ava rel_depth` first"):
        feature_source(_cfg(suite, "unused"), Dataset(data), [ghost], torch.device("cpu"))


def test_other_config_in_same_dir_is_refused(suite, trained):
    from ava.errors import AvaError

    with pytest.raises(AvaError, match=r"(different config|another run).*lr"):
        train(_cfg(suite, "run", lr=1e-2))


def test_cached_and_online_first_step_loss_agree(suite):
    """Same batch, same init: fp16-cached features vs the LLM_VFM run on the images (fp32) give the same loss."""
    from ava.heads.llm.data import Collator
    from ava.heads.llm.runtime import prepare_training

    losses = {}
    for mode in ("cache", "online"):
        prep = prepare_training(_cfg(suite, "unused", features=mode), device=torch.device("cpu"), dtype=torch.float32)
        prep.head.eval()
        collate = Collator(prep.loop.encoded, prep.loop.num_image_tokens, prep.loop.pad_id)
        batch = collate([prep.loop.items[i] for i in range(16)])  # the paper's global batch
        feats = prep.loop.featurize(batch)
        losses[mode] = (prep.head(batch, feats).item(), feats)
    (lc, fc), (lo, fo) = losses["cache"], losses["online"]
    assert fc.dtype == torch.float16  # cached features stay in half precision up to the connector
    fc = fc.float()
    assert fc.shape == fo.shape and not torch.equal(fc, fo)  # fp16 storage really differs ...
    assert torch.allclose(fc, fo, atol=1e-2, rtol=1e-2)
    print(f"parity: cached {lc:.7f} online {lo:.7f} |diff| {abs(lc - lo):.2e}")
    assert abs(lc - lo) < 1e-4, (lc, lo)  # ... and the loss does not care


def test_online_features_train_too(suite):
    out = train(_cfg(suite, "online", features="online", epochs=1, eval_after=False, max_train=8))
    run = json.loads((out / "run.json").read_text())
    assert run["features"] == "online" and run["cache_key"] is None and run["training"]["step"] == 1


def test_align_then_init(suite, tmp_path):
    """Caption pairs -> dataset -> connector-only training -> `--init` loads that connector."""
    from PIL import Image
    from safetensors.torch import load_file

    from ava.heads.llm import AlignConfig, align
    from ava.heads.llm.align import import_captions
    from ava.heads.llm.runtime import prepare_training

    (tmp_path / "img").mkdir()
    pairs = []
    for i in range(4):
        Image.new("RGB", (40 + i, 30), (60 * i, 20, 200)).save(tmp_path / "img" / f"{i}.jpg")
        pairs.append(
            {
                "id": f"p{i}",
                "image": f"{i}.jpg",
                "conversations": [
                    {"from": "human", "value": "<image>\nGive a brief description of the image."},
                    {"from": "gpt", "value": f"a picture number {i}"},
                ],
            }
        )
    (tmp_path / "caps.json").write_text(json.dumps(pairs))
    assert import_captions(tmp_path / "caps.json", tmp_path / "img", tmp_path / "capdata") == 4
    from ava.cache import ExtractConfig, extract

    extract(
        ExtractConfig(
            vfm=LLM_VFM,
            data=str(tmp_path / "capdata"),
            cache=str(tmp_path / "capcache"),
            ava=["captions"],
            device="cpu",
            progress=False,
        )
    )
    run = align(
        AlignConfig(
            vfm=LLM_VFM,
            data=str(tmp_path / "capdata"),
            cache=str(tmp_path / "capcache"),
            out=str(tmp_path / "align"),
            llm=LLM,
            batch_size=2,
            progress=False,
        )
    )
    meta = json.loads((run / "run.json").read_text())
    assert meta["head"] == "align" and meta["training"]["step"] == 2 and meta["cache_key"]
    assert not (run / "adapter").exists()  # the LLM stayed frozen
    prep = prepare_training(_cfg(suite, "x", init=str(run)), device=torch.device("cpu"), dtype=torch.float32)
    want = load_file(run / "connector.safetensors")
    assert all(torch.equal(prep.head.connector.state_dict()[k], want[k]) for k in want)


def test_cli_train_eval_and_foreign_option(suite, tmp_path):
    from typer.testing import CliRunner

    from ava.cli.main import app

    root, data, cache = suite
    out = tmp_path / "cli_run"
    common = ["--vfm", LLM_VFM, "--data", str(data), "--cache", str(cache)]
    runner = CliRunner()
    bad = runner.invoke(app, ["head", "train", "--head", "llm", *common, "--out", str(out), "--k", "3"])
    assert bad.exit_code != 0 and "--k" in str(bad.exception or bad.output)
    toml = tmp_path / "c.toml"
    toml.write_text(f'llm = "{LLM}"\nlora_r = 4\nprogress = false\n')
    ok = runner.invoke(
        app,
        [
            "head",
            "train",
            "--head",
            "llm",
            "--ava",
            "rel_depth",
            *common,
            "--out",
            str(out),
            "--config",
            str(toml),
            "--epochs",
            "1",
            "--max-train",
            "8",
            "--max-eval",
            "4",
            "--batch-size",
            "4",
        ],
    )
    assert ok.exit_code == 0, ok.output
    assert "rel_depth" in ok.output and "accuracy" in ok.output
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["lora_r"] == 4 and cfg["epochs"] == 1 and cfg["llm"] == LLM
    ev = runner.invoke(app, ["head", "eval", "--run", str(out), "--decode", "score", "--max-eval", "2"])
    assert ev.exit_code == 0, ev.output
    assert json.loads((out / "results_test_score.json").read_text())["abilities"]["rel_depth"]["n"] == 2
    shutil.rmtree(out)


def test_two_cpu_processes_ddp_gloo(suite, tmp_path):
    """`torchrun --nproc-per-node 2` on CPU (gloo): each rank a slice of every global batch; eval gathered."""
    import socket
    import subprocess
    import sys

    root, data, cache = suite
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "ddp"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-port",
        str(port),
        "-m",
        "ava",
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
        "8",
        "--lr",
        "3e-3",
        "--batch-size",
        "8",
        "--lora-r",
        "16",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    training = json.loads((out / "run.json").read_text())["training"]
    assert training["world_size"] == 2 and training["micro_batch"] == 4 and training["done"]
    rng = read_checkpoint(out)["rng"]
    assert len(rng) == 2 and not torch.equal(rng[0]["torch"], rng[1]["torch"])  # each rank's own dropout stream
    r = json.loads((out / "results_test.json").read_text())["abilities"]["rel_depth"]
    assert r["n"] == 16 and r["n_missing"] == 0 and r["value"] >= 0.8
    assert proc.stdout.count("rel_depth") == 1  # only rank 0 prints the table


def test_planted_pickle_checkpoint_is_refused_by_the_cli(suite, tmp_path):
    """A received run directory with a pickle as its checkpoint: one clear error, exit 1, the payload never runs."""
    from typer.testing import CliRunner

    from ava.cli.main import app

    root, data, cache = suite
    out, marker = tmp_path / "received", tmp_path / "marker"
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
        "1",
        "--max-train",
        "8",
        "--batch-size",
        "4",
        "--no-eval-after",
    ]
    assert CliRunner().invoke(app, args).exit_code == 0  # a real run directory ...
    shutil.rmtree(out / "checkpoint")
    plant_pickle(out / "checkpoint" / "state.pt", marker)  # ... received with a pickle as its checkpoint
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file() and p.name != ".lock"}
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 1 and isinstance(res.exception, AvaError), res.output  # main() prints it as one line
    assert "old pickle format" in str(res.exception) and not marker.exists()
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file() and p.name != ".lock"} == before


def test_kill_during_a_checkpoint_swap_resumes_without_repeating(suite, monkeypatch):
    """Killed inside the second checkpoint's swap (written in the background), re-run: the previous checkpoint is
    resumed, the log has each step once, and the weights equal an uninterrupted run's."""
    from safetensors.torch import load_file

    from ava.heads.llm import checkpoint as ckpt

    kw = dict(eval_after=False, epochs=4, max_train=16)  # 2 steps per epoch, a checkpoint at each epoch end
    ref = train(_cfg(suite, "swap_ref", **kw))
    real, swaps = os.replace, []

    class Killed(BaseException):
        pass

    def replace(src, dst):
        if os.path.basename(dst) == ckpt.LATEST:
            swaps.append(dst)
            if len(swaps) == 2:
                raise Killed
        return real(src, dst)

    monkeypatch.setattr(ckpt.os, "replace", replace)
    cfg = _cfg(suite, "swap_cut", **kw)
    with pytest.raises(Killed):
        train(cfg)
    monkeypatch.undo()
    assert read_checkpoint(ref.parent / "swap_cut")["step"] == 2  # the first checkpoint survived the kill
    out = train(cfg)
    steps = [json.loads(x)["step"] for x in (out / "train_log.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 9))
    for name in ("connector.safetensors", "adapter/adapter_model.safetensors"):
        a, b = load_file(ref / name), load_file(out / name)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
    ref_loss = [json.loads(x)["loss"] for x in (ref / "train_log.jsonl").read_text().splitlines()]
    assert [json.loads(x)["loss"] for x in (out / "train_log.jsonl").read_text().splitlines()] == ref_loss


def test_non_finite_features_stop_training_naming_the_samples(suite, tmp_path):
    """NaN in one cached row and inf in another: one error naming both samples, exit 1, nothing trained."""
    import numpy as np
    from typer.testing import CliRunner

    from ava.cache import open_cache
    from ava.cache.store import CacheGroup
    from ava.cli.main import app
    from ava.data.format import Dataset

    root, data, cache = suite
    bad_cache = tmp_path / "cache"
    shutil.copytree(cache, bad_cache)
    fc = open_cache(bad_cache, LLM_VFM)
    group = CacheGroup.open(bad_cache, fc.key, writable=True)
    samples = [s for s in Dataset(data).samples("rel_depth") if s.split == "train"][:2]
    arr = group.features(fc.layers[0])
    for s, value in zip(samples, (np.nan, np.inf), strict=True):
        row = group.index()[s.image_sha256]
        block = arr[row : row + 1]
        block[0, 3, 5] = value
        arr[row : row + 1] = block
    out = tmp_path / "nan_run"
    res = CliRunner().invoke(
        app,
        [
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
            str(bad_cache),
            "--out",
            str(out),
            "--llm",
            LLM,
            "--epochs",
            "1",
            "--batch-size",
            "8",
        ],
    )
    assert res.exit_code == 1 and isinstance(res.exception, AvaError), res.output
    msg = str(res.exception)
    assert "non-finite cached features" in msg and all(f"rel_depth/{s.id}" in msg for s in samples), msg
    assert not (out / "train_log.jsonl").exists() and not (out / "checkpoint").exists()


def test_eval_refuses_other_data_or_cache_and_writes_nothing(suite, trained, tmp_path):
    """The run records its data identity and cache group (run.json) and absolute paths (config.json); an
    evaluation on a changed dataset or another cache group is refused before anything is written."""
    from ava.heads.rundir import RunIdentityError

    config = json.loads((trained / "config.json").read_text())
    assert os.path.isabs(config["data"]) and os.path.isabs(config["cache"]) and os.path.isabs(config["out"])
    assert "rel_depth" in json.loads((trained / "run.json").read_text())["data_identity"]["per_ability"]
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    data = tmp_path / "data"
    shutil.copytree(config["data"], data)
    lines = [json.loads(x) for x in (data / "samples" / "rel_depth.jsonl").read_text().splitlines()]
    test = next(r for r in lines if r["split"] == "test")
    test["truth"]["index"] = 1 - test["truth"]["index"]
    (data / "samples" / "rel_depth.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    (run / "config.json").write_text(json.dumps({**config, "data": str(data), "out": str(run)}))
    before = {p.name: p.read_bytes() for p in run.glob("*_test*")}
    with pytest.raises(RunIdentityError, match="'rel_depth' samples of .* are not those recorded"):
        evaluate(run, "test", progress=False)
    (run / "config.json").write_text(json.dumps({**config, "out": str(run)}))
    meta = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**meta, "cache_key": "0123456789ab"}))
    with pytest.raises(RunIdentityError, match="trained on cache group '0123456789ab'"):
        evaluate(run, "test", decode="score", progress=False)
    assert {p.name: p.read_bytes() for p in run.glob("*_test*")} == before
