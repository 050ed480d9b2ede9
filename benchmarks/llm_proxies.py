"""CPU proxies of the LLM head's hot path at real shapes (imported by ``bench_llm_head.py``; runs on any machine).

Real shapes: SigLIP-so400m features (729 tokens x 1152) in an fp16 Zarr cache, the Qwen2-0.5B architecture
(hidden 896, MLP 4864, 14 heads / 2 KV heads, vocab 151936) at random weights built from a config, LoRA r 128 on
its 7 block linears, ~850 tokens per sample. Three figures:

- **host data path per 16-sample step** (ms): from the batch sampler to image features on the device, through the
  training loop's own loader (``train._step_groups``) and feature source (``runtime.feature_source``); the one-time
  resident read, where there is one, is reported apart.
- **non-matmul bytes per token per layer** (MB), forward + backward: bytes read and written by every aten op that
  is not a matmul or an attention kernel (views excluded), counted with a ``TorchDispatchMode``; per layer as the
  difference between a 2-layer and a 1-layer model, per token over the batch's real tokens. Eager mode (what
  ``torch.compile`` fuses away does not show here).
- **host syncs per training step**: ops that read device data back to the host (``_local_scalar_dense`` i.e.
  ``.item()``, ``nonzero``, ``masked_select``, ``is_nonzero``, ``equal``, ``unique``, ...) during one optimizer
  step of the loop's step function (forward, backward, clipping, optimizer), data already collated.

Works against the code before and after the LLM-head speed work (it looks up what each version has), so one
script gives both columns.
"""

from __future__ import annotations

import importlib
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

T, D = 729, 1152  # SigLIP-so400m at 384 px: 27 x 27 patches
QWEN2_05B = dict(
    hidden_size=896,
    intermediate_size=4864,
    num_attention_heads=14,
    num_key_value_heads=2,
    vocab_size=151936,
    max_position_embeddings=4096,
    rope_theta=1_000_000.0,
    tie_word_embeddings=True,
    rms_norm_eps=1e-6,
)
FREE_OPS = {"_unsafe_view", "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}  # no traffic
SYNC_OPS = {
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
    "unique_dim",
}
MATMUL_OPS = {
    "mm",
    "addmm",
    "bmm",
    "baddbmm",
    "matmul",
    "linear",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention_for_cpu_backward",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_backward",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_efficient_attention_backward",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_cudnn_attention_backward",
    "_flash_attention_forward",
    "_flash_attention_backward",
}


class OpCounter(TorchDispatchMode):
    """Counts host syncs and the bytes moved by non-matmul, non-view ops.

    ``fake_matmul``: matmuls and attention kernels are not computed: their outputs are zeros of the shape, dtype
    and strides the op's meta kernel gives. Nothing counted depends on their values, and it makes a step at real
    widths in bf16 affordable on a CPU without bf16 matmul units.
    """

    def __init__(self, fake_matmul: bool = False) -> None:
        super().__init__()
        self.syncs: Counter[str] = Counter()
        self.bytes = 0
        self.ops: Counter[str] = Counter()
        self.fake_matmul = fake_matmul

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        name = func._schema.name.split("::")[-1]
        if self.fake_matmul and name in MATMUL_OPS:
            from torch.utils._pytree import tree_map

            meta = func(*tree_map(_to_meta, args), **tree_map(_to_meta, kwargs or {}))
            return tree_map(_from_meta, meta)
        out = func(*args, **(kwargs or {}))
        if name in SYNC_OPS:
            self.syncs[name] += 1
        if name not in MATMUL_OPS | SYNC_OPS | FREE_OPS and not func.is_view:
            moved = sum(_nbytes(a) for a in (*args, *(kwargs or {}).values())) + _nbytes(out)
            self.bytes += moved
            self.ops[name] += moved
        return out


def _to_meta(x: Any) -> Any:
    return x.to("meta") if isinstance(x, torch.Tensor) else x


def _from_meta(x: Any) -> Any:
    if isinstance(x, torch.Tensor) and x.device.type == "meta":
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype).zero_()
    return x


def _nbytes(x: Any) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_nbytes(v) for v in x)
    return 0


# -- fixtures ---------------------------------------------------------------------------------------------------
def make_dataset(root: Path, n: int) -> Path:
    from PIL import Image

    from ava.abilities import REL_DEPTH_ANSWERS
    from ava.data.format import DatasetWriter, Sample

    with DatasetWriter(root, {"source": "bench", "split": {"made_by": "synthetic"}}) as w:
        for i in range(n):
            rel = w.add_image(Image.new("RGB", (32, 24), (i % 256, 7, 9)))
            w.add_sample(
                Sample(
                    f"b{i}",
                    "rel_depth",
                    rel,
                    32,
                    24,
                    f"Which is nearer, object {i}?",
                    REL_DEPTH_ANSWERS[i % 2],
                    {"index": i % 2},
                    split="train",
                )
            )
    return root


def make_cache(data: Path, cache_dir: Path, seed: int = 0) -> str:
    """An fp16 cache group of SigLIP-so400m shapes (random features), written through the cache's own store."""
    from ava.cache.extraction import write_shard
    from ava.cache.store import add_rows, create_group
    from ava.data.format import Dataset

    name = "bench-siglip-shapes"
    spec = {
        "format": "ava-feature-cache",
        "format_version": 2,
        "vfm": name,
        "requested": name,
        "identity": {"vfm": name, "preprocess": "none", "bench": True},
        "codec": "fp16",
        "preprocess": "none",
        "layers": [-2],
        "dtype": "fp16",
        "num_tokens": T,
        "dim": D,
        "grid": [27, 27],
        "random_weights": True,
    }
    group = create_group(cache_dir, spec, shard_size=64)
    shas = sorted({s.image_sha256 for s in Dataset(data).samples()})
    add_rows(group, shas)
    rng = np.random.default_rng(seed)
    for shard in range(group.num_shards()):
        rows = group.shard_rows(shard)
        results = {r: [(rng.standard_normal((T, D), dtype=np.float32).astype(np.float16), None)] for r in rows}
        write_shard(group, shard, results)
    return name


def _encoded(n: int, seed: int = 0) -> list:
    """Token ids around the image slot: ~120 text tokens (system prompt, question, answer), ~850 per sample."""
    from ava.heads.llm.prompt import Encoded

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        post = rng.integers(100, 1000, size=int(rng.integers(80, 100))).tolist()
        out.append(Encoded(pre=list(range(1, 21)), post=post, answer=[5, 6, 7, 8, 2]))
    return out


# -- 1. host data path -----------------------------------------------------------------------------------------
def data_path(work: Path, n: int = 64, batch: int = 16, steps: int = 8) -> dict[str, Any]:
    from ava.data.format import Dataset

    tr = importlib.import_module("ava.heads.llm.train")
    from ava.heads.llm.config import LLMHeadConfig
    from ava.heads.llm.runtime import feature_source

    data = make_dataset(work / "data", n)
    vfm = make_cache(data, work / "cache")
    dataset = Dataset(data)
    samples = dataset.samples("rel_depth")
    cfg = LLMHeadConfig(
        ava=["rel_depth"],
        vfm=vfm,
        data=str(data),
        cache=str(work / "cache"),
        out=str(work / "o"),
        batch_size=batch,
        progress=False,
    )
    device = torch.device("cpu")
    t0 = time.perf_counter()
    try:
        source = feature_source(cfg, dataset, samples, device, resident=True)
    except TypeError:  # the code before resident features
        source = feature_source(cfg, dataset, samples, device)
    if hasattr(source, "ready"):
        source.ready()
    setup = time.perf_counter() - t0
    data_ = tr.LoopData(source.items, _encoded(n), source.num_tokens, 0, source.featurize)
    lengths = [e.length(source.num_tokens) for e in data_.encoded]
    spe = len(lengths) // batch
    groups = tr._step_groups(data_, lengths, batch, cfg, tr.Dist(), 0, spe)
    times, cpu, gather = [], [], []
    for _ in range(steps + 1):
        t, c = time.perf_counter(), time.process_time()
        _, group = next(groups)
        for b in group:
            b = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in b.items()}
            g = time.process_time()
            feats = source.featurize(b)
            gather.append(time.process_time() - g)
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return {
        "host_ms_per_step": 1000 * float(np.median(times[1:])),
        "host_cpu_ms_per_step": 1000 * float(np.median(cpu[1:])),
        "featurize_cpu_ms_per_step": 1000
        * float(np.median(gather[1:])),  # (resident: the gather, on the device on GPU)
        "one_time_read_s": setup,
        "feature_dtype": str(feats.dtype).removeprefix("torch."),
        "features_shape": list(feats.shape),
    }


# -- 2. and 3. bytes per token per layer, syncs per step ----------------------------------------------------------
def _model(layers: int, lora_r: int, dtype: torch.dtype, lora_dropout: float = 0.05) -> Any:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from ava.heads.llm.model import build_head

    torch.manual_seed(0)
    llm = Qwen2ForCausalLM(Qwen2Config(num_hidden_layers=layers, **QWEN2_05B, attn_implementation="sdpa"))
    llm.to(dtype)
    head = build_head(llm, D, lora_r=lora_r, lora_dropout=lora_dropout, seed=0)
    head.connector.float()
    return head


def _batch(n: int) -> dict[str, Any]:
    from ava.heads.llm.data import Collator

    collate = Collator(_encoded(n, seed=1), T, 0)
    return collate([{"index": i} for i in range(n)])


def step_counts(layers: int, samples: int, lora_r: int, dtype: torch.dtype) -> dict[str, Any]:
    """Syncs and non-matmul bytes of one optimizer step of the loop's own step function."""
    tr = importlib.import_module("ava.heads.llm.train")

    head = _model(layers, lora_r, dtype)
    params = [p for p in head.parameters() if p.requires_grad]
    optimizer = tr.adamw(params, 1e-4, 0.0) if hasattr(tr, "adamw") else torch.optim.AdamW(params, lr=1e-4)
    scheduler = tr.schedule(10, 0.0, optimizer)
    feats = torch.randn(samples, T, D).to(torch.float16)
    data = tr.LoopData(None, _encoded(samples, seed=1), T, 0, lambda b: feats)
    device = torch.device("cpu")
    batch = _batch(samples)
    head.train()

    def step() -> None:
        if hasattr(tr, "train_step"):
            tr.train_step(head, params, optimizer, scheduler, [batch], data, device, dtype)
        else:  # the loop before the speed work: _accumulate, then the update
            tr._accumulate(head, [batch], data, device, dtype)
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)

    with OpCounter(fake_matmul=True):
        step()  # warm (optimizer state, lazy inits)
    with OpCounter(fake_matmul=True) as whole:
        step()
    packed_syncs = None
    if hasattr(head, "use_packing"):  # the loop's default batches: packed (CPU: the exact per-sample attention)
        from ava.heads.llm.data import Collator

        head.use_packing(device, dtype)
        packed = Collator(_encoded(samples, seed=1), T, 0, pack=True)([{"index": i} for i in range(samples)])
        with OpCounter(fake_matmul=True) as counted:
            tr.train_step(head, params, optimizer, scheduler, [packed], data, device, dtype)
        packed_syncs = dict(counted.syncs)
        head.use_packing(device, dtype, on=False)
    with OpCounter(fake_matmul=True) as fwd_bwd:  # forward + backward only, for the traffic per token
        with tr.autocast(device, dtype):
            b = {k: v for k, v in batch.items()}
            loss = head(b, feats)
        loss.backward()
    head.zero_grad(set_to_none=True)
    tokens = int(batch["attention_mask"].sum())
    return {
        "syncs": dict(whole.syncs),
        "bytes": fwd_bwd.bytes,
        "tokens": tokens,
        "ops": fwd_bwd.ops,
        "packed_syncs": packed_syncs,
    }


def run(
    work: Path, *, samples: int = 2, lora_r: int = 128, dtype: torch.dtype = torch.bfloat16, data_only: bool = False
) -> dict[str, Any]:
    out = data_path(work)
    if data_only:
        return out
    one, two = (step_counts(n, samples, lora_r, dtype) for n in (1, 2))
    per_layer = (two["bytes"] - one["bytes"]) / two["tokens"]
    top = Counter({k: two["ops"].get(k, 0) - one["ops"].get(k, 0) for k in two["ops"]}).most_common(6)
    out.update(
        syncs_per_step=sum(two["syncs"].values()),
        syncs_per_step_packed=None if two["packed_syncs"] is None else sum(two["packed_syncs"].values()),
        sync_ops=two["syncs"],
        nonmatmul_mb_per_token_per_layer=per_layer / 1e6,
        top_ops_mb_per_token_per_layer={k: round(v / two["tokens"] / 1e6, 4) for k, v in top},
        tokens_per_sample=two["tokens"] / samples,
        samples_in_step=samples,
        dtype=str(dtype).removeprefix("torch."),
    )
    return out
