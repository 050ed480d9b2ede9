"""The LLM head's training step: no host sync (counted with a TorchDispatchMode on CPU), and the sync-free path
(host-side positions, no padding mask for right-padded rows) gives the padded, masked batch's loss."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ava.heads.llm.data import Collator, LoopData
from ava.heads.llm.prompt import Encoded, build_batch
from tests.helpers import D, T, encoded_prompts, tiny_llm_head

SYNCS = {
    "_local_scalar_dense",
    "item",
    "nonzero",
    "is_nonzero",
    "masked_select",
    "equal",
    "allclose",
    "unique",
    "_unique",
    "_unique2",
    "unique_consecutive",
    "repeat_interleave",
}


class SyncCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name.split("::")[-1]
        if name in SYNCS:
            self.seen.append(name)
        return func(*args, **(kwargs or {}))


def test_training_step_has_no_host_sync():
    import importlib

    tr = importlib.import_module("ava.heads.llm.train")
    head = tiny_llm_head().train()
    params = [p for p in head.parameters() if p.requires_grad]
    optimizer = tr.adamw(params, 1e-3, 0.0)
    scheduler = tr.schedule(10, 0.1, optimizer)
    feats = torch.randn(3, T, D).half()
    data = LoopData(None, encoded_prompts(), T, 0, lambda b: feats.index_select(0, b["index"]))
    batch = Collator(encoded_prompts(), T, 0)([{"index": i} for i in range(3)])
    cpu = torch.device("cpu")
    tr.train_step(head, params, optimizer, scheduler, [batch], data, cpu, torch.float32)  # lazy state made
    with SyncCounter() as counter:
        loss, n, toks = tr.train_step(head, params, optimizer, scheduler, [batch, batch], data, cpu, torch.float32)
    assert counter.seen == [], counter.seen
    assert n == 6 and toks == 2 * sum(e.length(T) for e in encoded_prompts())
    assert torch.isfinite(loss)


def test_sync_free_path_equals_the_masked_padded_path():
    head = tiny_llm_head().eval()
    feats = torch.randn(3, T, D)
    batch = Collator(encoded_prompts(), T, 0)([{"index": i} for i in range(3)])
    plain = build_batch(encoded_prompts(), T, 0)  # no host-side positions: boolean gathers and the padding mask
    assert batch["mask_free"] and "sup_pos" not in plain
    with torch.no_grad():
        fast, slow = head(batch, feats), head(plain, feats)
        reference = head.full_logits_loss(plain, feats)
    assert torch.allclose(fast, slow, atol=1e-6) and torch.allclose(fast, reference, atol=1e-5), (fast, slow)


def test_compile_default_and_clean_fallback(monkeypatch):
    """--compile defaults to CUDA only; where torch.compile cannot run, training goes on eagerly with a warning."""
    import importlib

    tr = importlib.import_module("ava.heads.llm.train")
    assert tr.use_compile(None, torch.device("cuda")) and not tr.use_compile(None, torch.device("cpu"))
    assert tr.use_compile(True, torch.device("cpu")) and not tr.use_compile(False, torch.device("cuda"))

    def no_toolchain(*args, **kwargs):
        raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(torch, "compile", no_toolchain)
    head = tiny_llm_head()
    with pytest.warns(UserWarning, match="running eagerly"):
        assert tr.compile_layers(head) is False
    assert not any("_orig_mod" in n or "compiled" in type(m).__name__.lower() for n, m in head.named_modules())


def test_packed_batch_equals_the_padded_batch():
    """Samples packed into one row (position ids restart, attention kept inside each sample) give the padded loss;
    attention across samples would not."""
    head = tiny_llm_head().eval()
    feats = torch.randn(3, T, D)
    items = [{"index": i} for i in range(3)]
    padded = Collator(encoded_prompts(), T, 0)(items)
    packed = Collator(encoded_prompts(), T, 0, pack=True)(items)
    lens = tuple(e.length(T) for e in encoded_prompts())
    assert packed["input_ids"].shape == (1, sum(lens)) and packed["seq_lens"] == lens
    assert packed["cu_seqlens"].tolist() == [0, lens[0], lens[0] + lens[1], sum(lens)]
    assert packed["position_ids"][0, lens[0]] == 0 and packed["n_tokens"] == padded["n_tokens"] == sum(lens)
    assert torch.equal(packed["sup_targets"], padded["sup_targets"])
    assert head.use_packing(torch.device("cpu"), torch.float32)
    with torch.no_grad():
        a, b = head(padded, feats), head(packed, feats)
        lp_padded, lp_packed = head.sequence_logprob(padded, feats), head.sequence_logprob(packed, feats)
        across = head(dict(packed, seq_lens=(sum(lens),)), feats)  # one causal sequence: samples see each other
    assert abs(a.item() - b.item()) < 1e-4, (a, b)
    assert torch.allclose(lp_padded, lp_packed, atol=1e-4)
    assert abs(across.item() - a.item()) > 1e-3
    head.use_packing(torch.device("cpu"), torch.float32, on=False)
    assert head.base.config._attn_implementation == "sdpa"
    with pytest.raises(RuntimeError, match="use_packing"):
        head(packed, feats)


def test_packed_training_step_has_no_host_sync():
    import importlib

    tr = importlib.import_module("ava.heads.llm.train")
    head = tiny_llm_head().train()
    assert head.use_packing(torch.device("cpu"), torch.float32)
    params = [p for p in head.parameters() if p.requires_grad]
    optimizer = tr.adamw(params, 1e-3, 0.0)
    scheduler = tr.schedule(10, 0.1, optimizer)
    feats = torch.randn(3, T, D).half()
    data = LoopData(None, encoded_prompts(), T, 0, lambda b: feats.index_select(0, b["index"]))
    batch = Collator(encoded_prompts(), T, 0, pack=True)([{"index": i} for i in range(3)])
    cpu = torch.device("cpu")
    tr.train_step(head, params, optimizer, scheduler, [batch], data, cpu, torch.float32)
    with SyncCounter() as counter:
        loss, n, toks = tr.train_step(head, params, optimizer, scheduler, [batch, batch], data, cpu, torch.float32)
    assert counter.seen == [], counter.seen
    assert n == 6 and toks == 2 * sum(e.length(T) for e in encoded_prompts()) and torch.isfinite(loss)


def test_packing_falls_back_to_padding_where_it_cannot_run():
    """A batch with a text-only row (stage 2) is padded; an LLM with eager attention trains padded, with a warning;
    on a CPU the varlen kernel is never tried."""
    from ava.heads.llm.packing import varlen_usable

    enc = [*encoded_prompts(), Encoded([1, 2], [3, 4], [5, 2], image=False)]
    batch = Collator(enc, T, 0, pack=True)([{"index": i} for i in (0, 3)])
    assert "cu_seqlens" not in batch and batch["input_ids"].shape[0] == 2
    assert not varlen_usable(torch.device("cpu"), torch.bfloat16)
    head = tiny_llm_head()
    head.base.config._attn_implementation = "eager"
    with pytest.warns(UserWarning, match="batches stay padded"):
        assert head.use_packing(torch.device("cpu"), torch.float32) is False


@pytest.mark.parametrize(("start", "accum"), [(0, 1), (5, 1), (3, 2), (7, 3)])
def test_one_loader_gives_every_epoch_the_batches_a_loader_per_epoch_gave(start, accum):
    """The run's one DataLoader (workers started once) serves, step by step across epochs and from a resumed step,
    the micro-batches that a new loader per epoch served before: the same seeded plan."""
    from types import SimpleNamespace

    from ava.heads.llm.data import IndexItems, length_grouped_batches, steps_per_epoch
    from ava.heads.llm.devices import Dist
    from ava.heads.llm.train import _step_groups

    lengths = [10 + (7 * i) % 13 for i in range(23)]
    micro, cfg = 2, SimpleNamespace(grad_accum=accum, seed=4, num_workers=2)
    spe = steps_per_epoch(len(length_grouped_batches(lengths, micro, seed=4, epoch=0)), accum)
    encoded = [Encoded([1, 2], [3] * (n - 3), [4]) for n in lengths]
    data = LoopData(IndexItems(len(lengths)), encoded, 0, 0, lambda b: None)
    groups = _step_groups(data, lengths, micro, cfg, Dist(), start, spe)
    for step in range(start, start + 3 * spe):
        epoch, group = next(groups)
        plan = length_grouped_batches(lengths, micro, seed=4, epoch=step // spe)
        offset = step % spe
        want = plan[offset * accum : (offset + 1) * accum]
        assert epoch == step // spe
        assert [sorted(b["index"].tolist()) for b in group] == [sorted(w) for w in want]
    groups.close()


def test_batches_made_ahead_keep_their_order_errors_and_close() -> None:
    """The loop's batches are made on a thread of their own, ahead of the step: the same items in the same order, an
    error raised at the item that failed (not before the earlier ones), and closing stops the thread and the loader."""
    import threading

    from ava.heads.llm.train import ahead

    made: list[int] = []
    closed = threading.Event()

    def groups(fail_at: int | None = None):
        try:
            for i in range(6):
                if i == fail_at:
                    raise ValueError(f"batch {i} is bad")
                made.append(i)
                yield i
        finally:
            closed.set()

    assert list(ahead(groups())) == list(range(6))
    got = []
    with pytest.raises(ValueError, match="batch 3 is bad"):
        for item in ahead(groups(fail_at=3)):
            got.append(item)
    assert got == [0, 1, 2]
    made.clear()
    closed.clear()
    it = ahead(groups(), depth=2)
    assert next(it) == 0
    it.close()
    assert closed.is_set() and len(made) <= 4  # made at most depth + 1 beyond what was taken, then stopped
    assert not [t for t in threading.enumerate() if t.name == "ava-llm-batches"]
