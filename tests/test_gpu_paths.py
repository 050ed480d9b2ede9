"""Device-path habits checked on the CPU: a finished shard's device work is awaited on a writer thread (the main loop
keeps the GPU's queue fed), and a training step hands host-held features a host index (no read-back)."""

from __future__ import annotations

import threading
from pathlib import Path

import torch

from ava.cache import extraction


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
    extract(ExtractConfig(vfm="pixels", data=str(data), cache=str(tmp_path / "cache"), device="cpu", progress=False,
                          shard_size=4, batch_size=4))  # fmt: skip
    assert len(seen) == 3 and all(name.startswith("ava-cache-writer") for name in seen), seen


def test_training_step_gathers_with_the_host_index() -> None:
    """The featurize function gets the batch's index on the host beside the device copy."""
    import importlib

    from ava.heads.llm.data import Collator, LoopData
    from ava.heads.llm.prompt import Encoded

    tr = importlib.import_module("ava.heads.llm.train")
    from tests.test_llm_fast_paths import _head

    head = _head().train()
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
