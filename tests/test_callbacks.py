"""The in-training fingerprint (ava.callbacks): logged every N steps, training not perturbed (byte-identical weights
with and without it, plain loop and Lightning), DDP on 2 CPU processes with gloo, bad intervals."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from ava.callbacks import FingerprintMonitor, preserved_training_state
from ava.errors import AvaError
from ava.heads.memory import fingerprint_in_memory
from tests.helpers import make_small_suite, tiny_vfm, tiny_vit

TWO = ("color", "spatial")


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    return make_small_suite(tmp_path_factory.mktemp("two") / "suite", abilities=TWO)


def _train(steps: int, make_monitor=None) -> tuple[dict[str, torch.Tensor], list]:
    """A seeded training run of a tiny ViT with dropout, drawing from every RNG; the monitor (if any) called after each
    optimizer step, inside an autocast block as a mixed-precision loop would."""
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    model = tiny_vit(seed=0, drop=0.3).train()
    model.head.requires_grad_(False)
    monitor = make_monitor(model) if make_monitor else None
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    seen = []
    for step in range(1, steps + 1):
        x = torch.randn(4, 3, 64, 64) * (1 + random.random()) + float(np.random.rand())
        y = torch.randint(0, 4, (4,))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            if monitor is not None and (rec := monitor.maybe_run(step)) is not None:
                seen.append(rec)
            seen.append(("autocast", torch.is_autocast_enabled("cpu")))
        seen.append(("mode", model.training, model.head.weight.requires_grad, torch.is_grad_enabled()))
    return {k: v.clone() for k, v in model.state_dict().items()}, seen


@pytest.mark.parametrize("dtype", [None, "bf16"])
def test_plain_loop_weights_byte_identical_and_jsonl(two, tmp_path, dtype):
    """dtype="bf16" too: its forward swaps bf16 copies into the model's parameters and back."""
    out = tmp_path / "fp"
    logged = []

    def monitor(model):
        return FingerprintMonitor(
            tiny_vfm(model, version="live", dtype=dtype),
            every=2,
            suite=two,
            out=out,
            baselines=(),
            log=lambda m, s: logged.append((s, m)),
        )

    without, plain = _train(5)
    with_cb, seen = _train(5, monitor)
    assert without.keys() == with_cb.keys()
    for k in without:
        assert without[k].numpy().tobytes() == with_cb[k].numpy().tobytes(), k
    records = [r for r in seen if isinstance(r, dict)]
    assert [r["step"] for r in records] == [2, 4]
    assert [s for s in seen if not isinstance(s, dict)] == [s for s in plain if not isinstance(s, dict)]
    lines = [json.loads(line) for line in (out / "fingerprints.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [2, 4]
    assert all(set(line["scores"][h]) == set(TWO) for line in lines for h in ("probe-linear", "knn"))
    assert lines[0]["scores"] != lines[1]["scores"]  # the weights moved between the two evaluations
    assert [s for s, _ in logged] == [2, 4] and "ava/knn/color" in logged[0][1]


def test_baselines_are_stored_ranked_and_reused(two, tmp_path):
    vfm = tiny_vfm(tiny_vit(seed=4))
    mon = FingerprintMonitor(vfm, every=1, suite=two, out=tmp_path, baselines=("pixels#size=64",), heads=["knn"])
    rec = mon.run(1)
    stored = json.loads((tmp_path / "fingerprint_baselines.json").read_text())
    pixels = stored["baselines"]["pixels#size=64"]["scores"]["knn"]
    assert pixels == rec["baselines"]["pixels#size=64"]["knn"]
    alone = fingerprint_in_memory(vfm, two, heads=["knn"]).scores["knn"]
    assert rec["scores"]["knn"] == alone
    expect = [1.0 if (alone[a] >= pixels[a] if a != "color" else alone[a] <= pixels[a]) else 2.0 for a in TWO]
    expect = [1.5 if alone[a] == pixels[a] else e for a, e in zip(TWO, expect, strict=True)]
    assert rec["avg_rank"]["knn"] == pytest.approx(sum(expect) / 2)
    again = FingerprintMonitor(vfm, every=1, suite=two, out=tmp_path, baselines=("pixels#size=64",), heads=["knn"])
    from unittest import mock

    with mock.patch("ava.vfm.load_vfm", side_effect=AssertionError("recomputed")):
        assert again.run(1)["baselines"] == rec["baselines"]  # read back, not recomputed


@pytest.mark.parametrize("every", [0, -5, 2.5, True])
def test_bad_interval_is_one_line(every):
    with pytest.raises(AvaError) as e:
        FingerprintMonitor(object(), every=every)
    assert str(e.value) == (
        f"every={every!r}: the fingerprint interval must be a positive number of steps (e.g. every=500)"
    )


def test_preserved_training_state_restores_everything():
    model = tiny_vit(drop=0.2).train()
    model.head.requires_grad_(False)
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    threads = torch.get_num_threads()
    expect = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    with torch.autocast("cpu", dtype=torch.bfloat16), preserved_training_state(model):
        model.eval().requires_grad_(True)
        random.random(), np.random.rand(), torch.rand(5)
        torch.set_autocast_enabled("cpu", False)
        torch.set_grad_enabled(False)
        torch.set_num_threads(1)
    assert model.training and all(m.training for m in model.modules()) and not model.head.weight.requires_grad
    assert torch.is_grad_enabled() and torch.get_num_threads() == threads
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == expect


def test_default_suite_generated_once(tmp_path):
    from ava.callbacks import default_suite
    from ava.data.format import Dataset

    path = default_suite(per_ava=5, size=64, root=tmp_path)
    ds = Dataset(path)
    assert len(ds.abilities()) == 14 and all(len(ds.samples(a)) == 5 for a in ds.abilities())
    stamp = (path / "dataset.json").stat().st_mtime_ns
    assert default_suite(per_ava=5, size=64, root=tmp_path) == path
    assert (path / "dataset.json").stat().st_mtime_ns == stamp


@pytest.mark.slow
def test_lightning_callback(two, tmp_path):
    pl = pytest.importorskip("lightning.pytorch")
    from ava.callbacks import Fingerprint

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = tiny_vit(seed=0, drop=0.3)

        def training_step(self, batch, _):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    def run(callback: bool, out: Path) -> dict[str, torch.Tensor]:
        pl.seed_everything(0, verbose=False)
        g = torch.Generator().manual_seed(0)
        x, y = torch.randn(24, 3, 64, 64, generator=g), torch.randint(0, 4, (24,), generator=g)
        ds = torch.utils.data.TensorDataset(x, y)
        loader = torch.utils.data.DataLoader(ds, batch_size=4, shuffle=True)
        cbs = (
            [Fingerprint(lambda m: tiny_vfm(m.net, version="live"), every_n_steps=3, suite=two, out=out, baselines=())]
            if callback
            else []
        )
        logger = pl.loggers.CSVLogger(out, name="csv")
        trainer = pl.Trainer(
            max_steps=6,
            accelerator="cpu",
            devices=1,
            logger=logger,
            callbacks=cbs,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        module = Module()
        trainer.fit(module, loader)
        return {k: v.clone() for k, v in module.state_dict().items()}

    without = run(False, tmp_path / "a")
    with_cb = run(True, tmp_path / "b")
    for k in without:
        assert without[k].numpy().tobytes() == with_cb[k].numpy().tobytes(), k
    lines = [json.loads(x) for x in (tmp_path / "b" / "fingerprints.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [3, 6]
    csv = next((tmp_path / "b" / "csv").rglob("metrics.csv")).read_text()
    assert "ava/knn/color" in csv.splitlines()[0] and "ava/probe-linear/spatial" in csv.splitlines()[0]


def test_lightning_missing_is_named(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_lightning(name, *args, **kwargs):
        if name.startswith(("lightning", "pytorch_lightning")):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "ava.callbacks.lightning", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_lightning)
    import ava.callbacks

    says = r"needs PyTorch Lightning, from the lightning extra, which is not installed: pip install .*\[lightning\]"
    with pytest.raises(AvaError, match=says):
        ava.callbacks.Fingerprint  # noqa: B018
    monkeypatch.delitem(sys.modules, "ava.callbacks.lightning", raising=False)


WORKER = """
import datetime, json, sys
sys.path.insert(0, {repo!r})
import ava, torch, torch.distributed as dist
from ava.callbacks import FingerprintMonitor
from tests.helpers import tiny_vfm, tiny_vit
# a rank left waiting raises after 2 minutes instead of hanging the test until its own timeout
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
rank = dist.get_rank()
model = tiny_vit(seed=5)
vfm = tiny_vfm(model, version="v")
images = []
model.patch_embed.register_forward_hook(lambda m, i, o: images.append(o.shape[0]))
monitor = FingerprintMonitor(vfm, every=2, suite={data!r}, out={out!r}, baselines=())
record = monitor.maybe_run(2)
seen = sum(images)
failed = None
if rank == 0:  # the heads fail on rank 0: rank 1 is told so instead of waiting for ever
    import ava.heads.ability_runs as runs

    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    runs.train_abilities = boom
try:
    from ava.heads.memory import fingerprint_in_memory

    fingerprint_in_memory(vfm, {data!r}, abilities=["color"], heads=["knn"])
except Exception as e:
    failed = f"{{type(e).__name__}}: {{e}}"
extract_failed = None
other = tiny_vit(seed=6)
vfm_other = tiny_vfm(other, version="v")
if rank == 1:  # the extraction fails on rank 1 (its VFM raises): rank 0 is told so instead of waiting for its features

    def oom(m, i, o):
        raise RuntimeError("out of memory on rank 1")

    other.patch_embed.register_forward_hook(oom)
try:
    fingerprint_in_memory(vfm_other, {data!r}, abilities=["color"], heads=["knn"])
except Exception as e:
    extract_failed = f"{{type(e).__name__}}: {{e}}"
with open({out!r} + f"/rank{{rank}}.json", "w") as f:
    json.dump({{"scores": record["scores"], "images": seen, "failed": failed, "extract_failed": extract_failed}}, f)
dist.barrier()
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_ddp_two_cpu_processes_gloo(small_suite, tmp_path):
    """`torchrun --nproc-per-node 2` on CPU (gloo): each rank extracts half of the images, rank 0 trains the heads,
    rank 1 waits and gets the same result, which equals a single process's; only rank 0 writes the JSONL. When the
    heads fail on rank 0, rank 1 raises a one-line error saying so instead of waiting for ever; when the extraction
    fails on rank 1, rank 0 raises one naming rank 1 and its error instead of waiting for its features."""
    from ava.heads.memory import EvalSuite

    repo = str(Path(__file__).resolve().parents[1])
    script = tmp_path / "worker.py"
    script.write_text(WORKER.format(repo=repo, data=str(small_suite), out=str(tmp_path)))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-port",
        str(port),
        str(script),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    total = len(EvalSuite(small_suite).shas())
    assert ranks[0]["images"] + ranks[1]["images"] == total and abs(ranks[0]["images"] - ranks[1]["images"]) <= 1
    alone = fingerprint_in_memory(tiny_vfm(tiny_vit(seed=5), version="v"), small_suite).scores
    assert ranks[0]["scores"] == ranks[1]["scores"] == alone
    assert len((tmp_path / "fingerprints.jsonl").read_text().splitlines()) == 1
    assert ranks[0]["failed"] == "RuntimeError: boom"
    assert ranks[1]["failed"] == "AvaError: the in-memory fingerprint failed on rank 0: RuntimeError: boom"
    assert ranks[1]["extract_failed"] == "RuntimeError: out of memory on rank 1"
    assert ranks[0]["extract_failed"] == (
        "AvaError: the in-memory fingerprint failed on rank 1 while extracting "
        "features: RuntimeError: out of memory on rank 1"
    )


def test_lightning_bad_interval_is_one_line():
    pytest.importorskip("lightning.pytorch")
    from ava.callbacks import Fingerprint

    with pytest.raises(AvaError) as e:
        Fingerprint(object(), every_n_steps=0)
    assert str(e.value) == (
        "every_n_steps=0: the fingerprint interval must be a positive number of steps (e.g. every_n_steps=500)"
    )


LIGHTNING_WORKER = """
import json, sys
sys.path.insert(0, {repo!r})
import ava  # first: it mends a torchvision that fails to import, which lightning imports
import lightning.pytorch as pl
import torch
from ava.callbacks import Fingerprint
from tests.helpers import tiny_vfm, tiny_vit


class Module(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = tiny_vit(seed=0)

    def training_step(self, batch, _):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def main():
    pl.seed_everything(0, verbose=False)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(32, 3, 64, 64, generator=g), torch.randint(0, 4, (32,), generator=g)
    data = torch.utils.data.TensorDataset(x, y)
    module = Module()
    images = []  # images this rank ran through the model outside training (grad off): its share of the suite
    module.net.patch_embed.register_forward_hook(
        lambda m, i, o: None if torch.is_grad_enabled() else images.append(o.shape[0]))
    callback = Fingerprint(lambda m: tiny_vfm(m.net, version="live"), every_n_steps=2, suite={data!r}, out={out!r},
                           baselines=())
    trainer = pl.Trainer(max_steps=4, accelerator="cpu", devices=2, strategy="ddp", callbacks=[callback],
                         logger=pl.loggers.CSVLogger({out!r}, name="csv"), enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=4))
    history = callback.monitor.history
    with open({out!r} + f"/rank{{trainer.global_rank}}.json", "w") as f:
        json.dump({{"world": trainer.world_size, "steps": [r["step"] for r in history],
                   "scores": [r["scores"] for r in history], "images": sum(images)}}, f)


if __name__ == "__main__":
    main()
"""


@pytest.mark.slow
def test_lightning_ddp_two_cpu_processes(two, tmp_path):
    """The Lightning callback under `Trainer(accelerator="cpu", devices=2, strategy="ddp")` (gloo): both ranks
    evaluate at the same steps, each runs half of the suite's images through its model, both get rank 0's scores,
    and only rank 0 writes the JSONL and logs."""
    pytest.importorskip("lightning.pytorch")
    from ava.heads.memory import EvalSuite

    repo = str(Path(__file__).resolve().parents[1])
    script = tmp_path / "lightning_worker.py"
    script.write_text(LIGHTNING_WORKER.format(repo=repo, data=str(two), out=str(tmp_path)))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_PORT": str(port), "PL_DISABLE_FORK": "1"}
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["world"] == ranks[1]["world"] == 2
    assert ranks[0]["steps"] == ranks[1]["steps"] == [2, 4]
    assert ranks[0]["scores"] == ranks[1]["scores"]
    half = len(EvalSuite(two).shas()) / 2
    # one image when vfm_from_module checks the output's shape, then half of the suite at each of two evaluations
    assert all(abs(r["images"] - (1 + 2 * half)) <= 1 for r in ranks), [r["images"] for r in ranks]
    lines = [json.loads(x) for x in (tmp_path / "fingerprints.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [2, 4] and [x["scores"] for x in lines] == ranks[0]["scores"]
    csv = next((tmp_path / "csv").rglob("metrics.csv")).read_text()
    assert "ava/knn/color" in csv.splitlines()[0]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="a training loop on a GPU")
def test_a_gpu_training_loop_is_not_perturbed_by_the_monitor(two, tmp_path, monkeypatch):
    """The model, its optimizer and the fingerprint's heads on a GPU: the weights after 4 steps with a fingerprint
    every 2 are those without, bit for bit (the CUDA RNG's state, drawn from by dropout and by the heads, put back).
    Attention runs PyTorch's math kernel here, so that two runs of the loop are deterministic to compare at all."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    cuda = torch.device("cuda")
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)  # (the patch embedding's convolution)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)

    def run(monitored: bool) -> tuple[dict[str, torch.Tensor], list]:
        torch.manual_seed(0)
        torch.cuda.manual_seed_all(0)
        model = tiny_vit(seed=0, drop=0.3).to(cuda).train()
        monitor = (
            FingerprintMonitor(
                tiny_vfm(model, version="live"), every=2, suite=two, out=tmp_path / "fp", baselines=(), device="cuda"
            )
            if monitored
            else None
        )
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        records = []
        with sdpa_kernel(SDPBackend.MATH):
            for step in range(1, 5):
                x = torch.randn(4, 3, 64, 64, device=cuda)
                loss = torch.nn.functional.cross_entropy(model(x), torch.randint(0, 4, (4,), device=cuda))
                loss.backward()
                opt.step()
                opt.zero_grad()
                if monitor is not None and (rec := monitor.maybe_run(step)) is not None:
                    records.append(rec)
        return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}, records

    without, _ = run(False)
    again, _ = run(False)
    if not all(torch.equal(without[k], again[k]) for k in without):
        pytest.skip("the loop alone is not deterministic on this GPU: nothing to compare with")
    with_monitor, records = run(True)
    assert [r["step"] for r in records] == [2, 4]
    assert [k for k in without if not torch.equal(without[k], with_monitor[k])] == []
