"""Device-path habits checked on the CPU: a finished shard's device work is awaited on a writer thread (the main loop
keeps the GPU's queue fed), and a training step hands host-held features a host index (no read-back)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from ava.cache import extraction
from tests.helpers import D, T, benchmark_module, tiny_llm_head


def test_shards_are_settled_on_writer_threads(tmp_path: Path, monkeypatch) -> None:
    from ava.cache import ExtractConfig, extract
    from ava.synth import SynthConfig, generate

    data = tmp_path / "synth"
    generate(SynthConfig(out=str(data), per_ava=12, ava=["color"], size=64, seed=0), progress=False)
    seen: list[str] = []
    real = extraction._ShardChecks.settle

    def settle(self, codec):
        seen.append(threading.current_thread().name)
        return real(self, codec)

    monkeypatch.setattr(extraction._ShardChecks, "settle", settle)
    extract(
        ExtractConfig(
            vfm="pixels",
            data=str(data),
            cache=str(tmp_path / "cache"),
            device="cpu",
            progress=False,
            shard_size=4,
            batch_size=4,
        )
    )
    assert len(seen) == 3 and all(name.startswith("ava-cache-writer") for name in seen), seen


def test_training_step_gathers_with_the_host_index() -> None:
    """The featurize function gets the batch's index on the host beside the device copy."""
    import importlib

    from ava.heads.llm.data import Collator, LoopData
    from ava.heads.llm.prompt import Encoded

    tr = importlib.import_module("ava.heads.llm.train")

    head = tiny_llm_head().train()
    params = [p for p in head.parameters() if p.requires_grad]
    optimizer = tr.adamw(params, 1e-3, 0.0)
    scheduler = tr.schedule(10, 0.1, optimizer)
    feats = torch.randn(2, 5, 12)
    got: list[torch.Tensor] = []

    def featurize(batch):
        got.append(batch["index_host"])
        return feats.index_select(0, batch["index"])

    enc = [Encoded([1, 2], [3, 4], [5, 2]), Encoded([1, 2], [3], [6, 2])]
    data = LoopData(None, enc, 5, 0, featurize)
    batch = Collator(enc, 5, 0)([{"index": i} for i in range(2)])
    tr.train_step(head, params, optimizer, scheduler, [batch], data, torch.device("cpu"), torch.float32)
    assert got and got[0].device.type == "cpu" and got[0].tolist() == [0, 1]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="the host's waits on a GPU")
@pytest.mark.parametrize("decode", ["workers", "auto"])
def test_an_extraction_batch_never_waits_for_the_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, decode: str
) -> None:
    """The main loop's work on a batch (the forward, the codec, the pooled views, the copies to the host) queues work
    on the GPU and never waits for it: under CUDA's sync debug mode ("warn"), no waiting call on the main thread
    after the first batch (the writer threads wait for their shards' copies: not counted). Two waiting copies of the
    normalization's constants held the H200's extraction to the forward's pace plus the host's (2026-11-28)."""

    from ava.cache import ExtractConfig, extract
    from tests.helpers import waits_after_the_first

    data = benchmark_module("bench_cache").make_images(tmp_path / "images", 24)
    calls, waits = [], []
    monkeypatch.setattr(extraction, "_compute", waits_after_the_first(extraction._compute, calls, waits))
    config = ExtractConfig(
        vfm="random-vit",
        data=str(data),
        cache=str(tmp_path / "cache"),
        device="cuda",
        batch_size=8,
        shard_size=8,
        num_workers=1,
        progress=False,
        decode=decode,
    )
    summary = extract(config)
    assert summary["extracted"] == 24 and not summary["failed"] and len(calls) == 3, summary
    assert not [w for w in waits if w[0] == calls[0]], waits


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="the host's waits on a GPU")
def test_an_llm_head_step_never_waits_for_the_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The LLM head's optimizer steps after the first (forward, backward, clipping, the update, on packed batches)
    queue work on the GPU and never wait for it on the training thread: under CUDA's sync debug mode ("warn"), no
    waiting call is made there. The loss is read every ``log_every`` steps, outside the step. The batches' own
    thread (loader, collator, pinning) is not the GPU's queue: what it does is not counted."""

    from ava.heads.llm import train
    from tests.helpers import waits_after_the_first

    pre = benchmark_module("gpu_preflight")
    calls, waits = [], []
    monkeypatch.setattr(train, "train_step", waits_after_the_first(train.train_step, calls, waits))
    out = pre.layer_steps(torch.device("cuda"), pre.SMALL, "auto", compile_=False)
    assert out["steps"] == 3 and len(calls) == 3, out
    assert not [w for w in waits if w[0] == calls[0]], waits


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_training_steps_replayed_from_bucket_graphs_are_the_eager_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The benchmark's bucketed CUDA graphs (benchmarks/llm_graph_replay.py) train as the same padded steps run
    eagerly: the same losses step by step (no dropout, bf16), several buckets captured (so a graph replays batches
    other than the one it was captured with), no gradient tensor replaced by a capture."""
    import copy

    from ava.heads.llm.data import IndexItems, LoopData
    from ava.heads.llm.prompt import Encoded

    graphs = benchmark_module("llm_graph_replay")
    monkeypatch.setattr(graphs, "TOKEN_STEP", 16)  # small buckets: tiny batches fall into several
    cuda = torch.device("cuda")
    head = tiny_llm_head().to(cuda)
    for m in head.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    if not head.use_packing(cuda, torch.bfloat16) or head.attention_path() != "varlen":
        pytest.skip(f"no varlen kernel here: {head.packing}")
    head.use_packing(cuda, torch.bfloat16, on=False)
    rng = torch.Generator().manual_seed(0)
    encoded = [Encoded([1, 2], [3] * int(torch.randint(1, 12, (1,), generator=rng)), [7, 2]) for _ in range(24)]
    feats = torch.randn(24, T, D, generator=rng).to(cuda)
    loop = LoopData(IndexItems(24), encoded, T, 0, lambda b: feats.index_select(0, b["index"]))
    eager = graphs.bucketed_graphs(copy.deepcopy(head), loop, 3, cuda, torch.bfloat16, float("inf"), "host", 8)
    replayed = graphs.bucketed_graphs(head, loop, 3, cuda, torch.bfloat16, float("inf"), "on-device", 8)
    assert "error" not in replayed and "graphs" not in replayed and replayed["captures"] >= 2, replayed
    assert eager["graphs"].startswith("skipped: the features are held host") and eager["steps"] == 8
    assert torch.allclose(torch.tensor(replayed["losses"]), torch.tensor(eager["losses"]), rtol=2e-2, atol=2e-2), (
        replayed["losses"],
        eager["losses"],
    )
